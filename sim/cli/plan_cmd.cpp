// `stepsim plan`: search the parallel layouts of a workload on a cluster (docs/planner.md).

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/json_output.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "planner/planner.hpp"
#include "runner/simulate.hpp"

#include <cstdio>
#include <string>

namespace stepsim::cli {

namespace {

/// Parses an integer in [min, max] (a --micro-batches entry). Throws ConfigError naming the option.
int positive(const std::string& option, const std::string& text, int min, int max = 1 << 20) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v >= min && v <= max)
      return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(option + ": expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                    "], got '" + text + "'");
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// "5%" or "5": a percentage in [0, max) as a share, or ConfigError naming `option` and `what`.
double parse_percentage(const std::string& option, const std::string& text, double max,
                        const std::string& what = "a percentage") {
  std::string number = text;
  if (!number.empty() && number.back() == '%')
    number.pop_back();
  try {
    size_t used = 0;
    const double v = std::stod(number, &used);
    if (used == number.size() && v >= 0 && v < max)
      return v / 100.0;
  } catch (const std::exception&) {
  }
  throw ConfigError(option + ": expected " + what + " in [0, " + fmt("%g", max) + "), e.g. 5%, got '" + text +
                    "'");
}

/// --headroom: "5%" or "5", a percentage of GPU memory in [0, 100), as a share.
double parse_headroom(const std::string& text) {
  return parse_percentage("--headroom", text, 100, "a percentage of GPU memory");
}

std::string gib(double bytes) {
  return fmt("%.1f", bytes / (1024.0 * 1024.0 * 1024.0));
}

std::string pad(std::string s, size_t n) {
  if (s.size() < n)
    s.append(n - s.size(), ' ');
  return s;
}

/// What the command line asks of `stepsim plan`: its options, declared and bound.
struct PlanArgs {
  std::string cluster_file;
  std::string workload_file;
  std::string degrade_file;
  std::vector<std::string> sets;
  int gpus = 0;
  std::string micro_batches;
  std::string headroom;
  std::string margin;
  std::string which;
  std::string out_dir;
  std::string steps = "1";
  bool json = false;
  bool exact = false; ///< --exact: no extrapolation in the micro-batches
  bool progress = false;
  planner::PlanOptions options;
  int show = 10;

  explicit PlanArgs(Options& o) {
    o.describe(R"(usage: stepsim plan --cluster FILE --workload FILE [options]

Enumerates every valid layout (tp, pp, dp, vp, micro-batch, ZeRO stage, recomputation, sequence
parallelism, schedule) for the cluster's GPUs, drops those the static memory ledger says do not
fit, ranks the rest with an analytical step-time estimate, simulates the best K (each in its own
process) and prints them ranked by simulated step time, with why the best wins (docs/planner.md).)");
    constexpr int MANY = 1 << 20;
    o.required("--cluster", cluster_file, "FILE", "cluster description (topologies/*.yaml)");
    o.required("--workload", workload_file, "FILE",
               "training job: model, global batch and training keys; its own layout is simulated too as "
               "a reference when it is valid and fits");
    o.integer("--gpus", gpus, 1, MANY, "N",
              "plan for N GPUs (a multiple of the cluster's gpus_per_node; default: all)");
    o.integer("--top", options.top, 0, MANY, "K", "simulate the K best estimates (0: estimates only)");
    o.value("--margin", margin, "PCT",
            "also simulate every layout whose estimate is within PCT of the best estimate, e.g. 2% "
            "(default 0)");
    o.value("--simulate", which, "WHAT",
            "leaders (default: the --top best estimates and those within --margin) or all (every "
            "layout that fits; slow, to check what the leaders leave out)");
    o.integer("--jobs", options.jobs, 1, 4096, "N", "simulations at once");
    o.value("--steps", steps, "N",
            "simulate N consecutive steps of each layout and rank by their mean step time (with "
            "training.variability's kernel noise; docs/variability.md)");
    o.flag("--exact", exact,
           "simulate every step whole; by default a layout of at least 8 pp micro-batches per pipeline "
           "(1F1B, interleaved, ZB-H1) is simulated at 2 pp and 3 pp and extrapolated "
           "(docs/planner.md)");
    o.value("--micro-batches", micro_batches, "LIST",
            "comma-separated micro-batch sizes to try (default 1,2,4,8)");
    // Enumeration grows with the interleaving degree: 128 chunks per stage is beyond any recipe.
    o.integer("--max-vp", options.space.max_vp, 1, 128, "N", "largest interleaving degree to try");
    o.integer("--max-tp", options.space.max_tp, 1, MANY, "N",
              "largest TP degree (default 2 x gpus_per_node)");
    o.integer("--estimates", show, 0, MANY, "N", "also list the N best estimates");
    o.values("--set", sets, "PATH=VALUE", "override a key, as for `stepsim run`");
    o.value("--degrade", degrade_file, "FILE", DEGRADE_HELP);
    o.value("--headroom", headroom, "PCT",
            "share of each GPU's memory a layout must leave free, e.g. 5% (default 0)");
    o.flag("--json", json,
           "print the plan as JSON (schema stepsim.plan/1, docs/output.md) instead of the tables");
    o.value("--out", out_dir, "DIR", "also write DIR/plan.json");
    o.flag("--progress", progress,
           "show layouts simulated / total and an ETA on stderr (the default when stderr is a terminal and "
           "the simulations take more than 2 s)");
  }

  /// The micro-batch sizes of --micro-batches, --headroom, --steps, --margin and --simulate, into
  /// options (after parsing).
  void read_micro_batches() {
    options.steps = parse_steps(steps);
    options.extrapolate = !exact;
    if (!headroom.empty())
      options.space.headroom = parse_headroom(headroom);
    if (!margin.empty())
      options.margin = parse_percentage("--margin", margin, 1000);
    if (which == "all")
      options.which = planner::Simulate::ALL;
    else if (!which.empty() && which != "leaders")
      throw ConfigError("--simulate: expected leaders or all, got '" + which + "'");
    if (micro_batches.empty())
      return;
    options.space.micro_batches.clear();
    size_t start = 0;
    while (start <= micro_batches.size()) {
      const size_t comma = std::min(micro_batches.find(',', start), micro_batches.size());
      options.space.micro_batches.push_back(
          positive("--micro-batches", micro_batches.substr(start, comma - start), 1));
      start = comma + 1;
    }
  }
};

/// The cluster file, cut down to --gpus when given.
ClusterSpec load_plan_cluster(const PlanArgs& p, const std::vector<config::Override>& overrides) {
  ClusterSpec cluster = config::load_cluster(p.cluster_file, overrides, p.degrade_file);
  if (p.gpus > 0) {
    const int gpus = p.gpus;
    if (gpus % cluster.gpus_per_node != 0 || gpus > cluster.num_gpus())
      throw ConfigError("--gpus " + std::to_string(gpus) +
                        ": must be a multiple of gpus_per_node = " + std::to_string(cluster.gpus_per_node) +
                        " and at most the cluster's " + std::to_string(cluster.num_gpus()) + " GPUs");
    cluster.nodes = gpus / cluster.gpus_per_node;
  }
  return cluster;
}

/// Checks the workload's own layout on the cluster (dp derived), replacing `given` with the
/// checked workload; false, with a note on `err`, when it is not valid there.
bool check_given_layout(const ClusterSpec& cluster, WorkloadSpec& given, std::ostream& err) {
  try {
    WorkloadSpec checked = given;
    checked.parallel.dp = 0;
    checked = config::check_layout(cluster, checked).workload;
    given = checked;
  } catch (const ModelError& e) {
    err << "stepsim plan: the workload's own layout is not valid here (" << e.what()
        << "); planning without it\n";
    return false;
  }
  return true;
}

/// The plan's result and how its tables are laid out.
struct PlanView {
  const planner::PlanResult& r;
  size_t name_width = 42;
  double cap = 0;       ///< GPU memory capacity, bytes
  int steps = 1;        ///< consecutive steps simulated (--steps)
  double kernel_cv = 0; ///< the kernel noise's CV in effect
};

/// Layout names grow with cp and ep: the name column is as wide as the widest shown.
size_t name_column_width(const planner::PlanResult& r, size_t n_show) {
  size_t name_width = 42;
  for (size_t i = 0; i < n_show; ++i)
    name_width = std::max(name_width, planner::describe(r.ranked[i].workload).size());
  for (const planner::Candidate& c : r.simulated)
    name_width = std::max(name_width, planner::describe(c.workload).size() + (c.given ? 2 : 0));
  return name_width;
}

/// How many layouts were simulated and why those: "simulated 4 of 5178 layouts: the 3 best
/// estimates, the workload's own".
std::string simulated_line(const planner::PlanOptions& o, const planner::PlanResult& r) {
  const bool given_extra = r.simulated.size() > r.leaders;
  std::string why;
  if (o.which == planner::Simulate::ALL) {
    why = "every layout that fits (--simulate all)";
  } else {
    const size_t top = r.leaders - r.within_margin;
    why = top == 0   ? std::string()
          : top == 1 ? "the best estimate"
                     : "the " + std::to_string(top) + " best estimates";
    if (o.margin > 0)
      why += ", " + std::to_string(r.within_margin) + " more within " + fmt("%g", 100 * o.margin) +
             "% of the best estimate";
  }
  if (given_extra)
    why += std::string(why.empty() ? "" : ", ") + "the workload's own";
  return "simulated " + std::to_string(r.simulated.size()) + " of " + std::to_string(r.ranked.size()) +
         " layouts: " + why;
}

/// The n_show best estimates with their terms.
void print_estimates(std::ostream& out, const PlanView& v, size_t n_show, bool moe) {
  out << "\n  best estimates (s: step = compute + tp" << (moe ? " + ep" : "")
      << " + bubble + pp + dp + optimizer)\n";
  for (size_t i = 0; i < n_show; ++i) {
    const planner::Candidate& c = v.r.ranked[i];
    const planner::Estimate& e = c.estimate;
    out << "  " << pad(std::to_string(i + 1), 4) << pad(planner::describe(c.workload), v.name_width + 2)
        << fmt("%7.3f", e.step.value()) << " = " << fmt("%.3f", e.compute.value()) << " + "
        << fmt("%.3f", e.tp_comm.value()) << " + "
        << (moe ? fmt("%.3f", e.ep_comm.value()) + " + " : std::string()) << fmt("%.3f", e.bubble.value())
        << " + " << fmt("%.3f", e.pp_comm.value()) << " + " << fmt("%.3f", e.dp_exposed.value()) << " + "
        << fmt("%.3f", e.optimizer.value()) << "   mem " << gib(c.peak_memory.value()) << " GiB"
        << (c.given ? "  (workload's layout)" : "") << '\n';
  }
}

/// Indices of the simulated layouts, those that succeeded first, by simulated step time.
std::vector<size_t> simulated_order(const planner::PlanResult& r) {
  std::vector<size_t> order;
  for (size_t i = 0; i < r.outcomes.size(); ++i)
    order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &x = r.outcomes[a], &y = r.outcomes[b];
    if (x.ok != y.ok)
      return x.ok;
    return x.step_s < y.step_s;
  });
  return order;
}

/// The simulated layouts, ranked by simulated step time.
void print_simulated(std::ostream& out, const PlanView& v, const std::vector<size_t>& order) {
  out << "\n  " << pad("simulated (ranked)", 4 + v.name_width + 6 + 1)
      << "step s  est s  bubble  exp tp  exp pp  exp dp   MFU"
      << "  peak GiB  headroom\n";
  const double cap = v.cap;
  for (size_t k = 0; k < order.size(); ++k) {
    const planner::Candidate& c = v.r.simulated[order[k]];
    const planner::Simulated& s = v.r.outcomes[order[k]];
    out << "  " << pad(std::to_string(k + 1), 4)
        << pad(planner::describe(c.workload) + (c.given ? " *" : ""), v.name_width + 6);
    if (!s.ok) {
      out << "failed: " << s.error << '\n';
      continue;
    }
    out << fmt("%7.3f", s.step_s) << ' ' << fmt("%6.3f", c.estimate.step.value())
        << fmt("%7.1f%%", 100 * s.bubble_fraction) << fmt("%8.3f", s.exposed_tp_s)
        << fmt("%8.3f", s.exposed_pp_s) << fmt("%8.3f", s.exposed_dp_s) << fmt("%6.1f%%", 100 * s.mfu)
        << fmt("%10.1f", s.peak_bytes / (1024.0 * 1024 * 1024))
        << fmt("%9.1f", (cap - s.peak_bytes) / (1024.0 * 1024 * 1024)) << (s.fits ? "" : "  DOES NOT FIT")
        << '\n';
  }
  out << "  (* = the workload file's own layout)\n";
  std::string extrapolated;
  for (size_t k = 0; k < order.size(); ++k) {
    const planner::Simulated& s = v.r.outcomes[order[k]];
    if (s.ok && s.from_micro_batches[0] > 0)
      extrapolated += (extrapolated.empty() ? "" : ", ") + std::to_string(k + 1) + " (" +
                      std::to_string(s.from_micro_batches[0]) + " and " +
                      std::to_string(s.from_micro_batches[1]) + " -> " +
                      std::to_string(v.r.simulated[order[k]].workload.micro_batches()) + ")";
  }
  if (!extrapolated.empty())
    out << "  (extrapolated from two shorter steps, micro-batches per pipeline: " << extrapolated
        << "; --exact simulates them whole)\n";
  if (v.steps > 1 || v.kernel_cv > 0)
    out << "  (step s: " << (v.steps > 1 ? "the mean of " + std::to_string(v.steps) + " steps" : "one step")
        << (v.kernel_cv > 0 ? " with kernel noise, CV " + fmt("%g", v.kernel_cv) : std::string())
        << "; the estimate has no noise)\n";
}

/// Why the best simulated layout wins against `other` (nothing when other failed or is the best).
void print_why(std::ostream& out, const PlanView& v, size_t best, size_t other, const char* label) {
  const planner::Simulated& b = v.r.outcomes[best];
  const planner::Simulated& o = v.r.outcomes[other];
  if (!o.ok || other == best)
    return;
  const double cap = v.cap;
  out << "  vs " << label << " (" << planner::describe(v.r.simulated[other].workload)
      << "): " << fmt("%.3f", o.step_s - b.step_s) << " s faster; bubble "
      << fmt("%.1f", 100 * b.bubble_fraction) << "% vs " << fmt("%.1f", 100 * o.bubble_fraction) << "% ("
      << fmt("%+.3f", b.bubble_fraction * b.step_s - o.bubble_fraction * o.step_s) << " s); exposed comm "
      << fmt("%.3f", b.exposed_tp_s + b.exposed_pp_s + b.exposed_dp_s) << " vs "
      << fmt("%.3f", o.exposed_tp_s + o.exposed_pp_s + o.exposed_dp_s) << " s; memory headroom "
      << gib(cap - b.peak_bytes) << " vs " << gib(cap - o.peak_bytes) << " GiB\n";
}

/// The best simulated layout and why it wins, against the runner-up and the workload's layout;
/// 1 when no simulation succeeded.
int print_best(std::ostream& out, std::ostream& err, const PlanView& v, const std::vector<size_t>& order) {
  const planner::PlanResult& r = v.r;
  const size_t best = order.front();
  const planner::Simulated& b = r.outcomes[best];
  if (!b.ok) {
    err << "stepsim plan: error: no simulated layout succeeded; "
        << planner::describe(r.simulated[best].workload) << ": " << b.error << '\n';
    return 1;
  }
  out << "\n  best: " << planner::describe(r.simulated[best].workload) << ", " << fmt("%.3f", b.step_s)
      << " s per step, MFU " << fmt("%.1f", 100 * b.mfu) << "%\n";
  if (order.size() > 1)
    print_why(out, v, best, order[1], "runner-up");
  for (size_t i = 0; i < r.simulated.size(); ++i)
    if (r.simulated[i].given && i != order[1 % order.size()])
      print_why(out, v, best, i, "the workload's layout");
  return 0;
}

/// An estimate's terms, in seconds.
nlohmann::ordered_json estimate_json(const planner::Estimate& e) {
  return nlohmann::ordered_json{{"step_s", e.step.value()},     {"compute_s", e.compute.value()},
                                {"tp_s", e.tp_comm.value()},    {"ep_s", e.ep_comm.value()},
                                {"bubble_s", e.bubble.value()}, {"pp_s", e.pp_comm.value()},
                                {"dp_s", e.dp_exposed.value()}, {"optimizer_s", e.optimizer.value()}};
}

/// The `stepsim.plan/1` document (docs/output.md). No wall times: same input, same bytes.
nlohmann::ordered_json plan_json(const ClusterSpec& cluster, const WorkloadSpec& given, const PlanArgs& p,
                                 const planner::PlanResult& r) {
  using nlohmann::ordered_json;
  ordered_json j = document_head("stepsim.plan/1", cluster, given.name);
  j["capacity_bytes"] = cluster.gpu.hbm_capacity.value();
  j["headroom"] = p.options.space.headroom;
  j["budget_bytes"] = planner::memory_budget(cluster, p.options.space).value();
  if (p.options.steps > 1)
    j["steps"] = p.options.steps; // each simulated step_time_s is the mean of that many
  j["enumerated"] = r.enumerated;
  j["fit"] = r.fit;
  j["simulate"] = p.options.which == planner::Simulate::ALL ? "all" : "leaders";
  j["top"] = p.options.top;
  j["margin"] = p.options.margin;
  j["leaders"] = r.leaders;
  ordered_json estimates = ordered_json::array();
  const size_t n_show = std::min(r.ranked.size(), static_cast<size_t>(p.show));
  for (size_t i = 0; i < n_show; ++i) {
    const planner::Candidate& c = r.ranked[i];
    estimates.push_back(ordered_json{{"rank", i + 1},
                                     {"name", planner::describe(c.workload)},
                                     {"layout", layout_json(c.workload)},
                                     {"given", c.given},
                                     {"estimate", estimate_json(c.estimate)},
                                     {"peak_bytes", c.peak_memory.value()}});
  }
  j["estimates"] = estimates;
  ordered_json simulated = ordered_json::array();
  const std::vector<size_t> order = simulated_order(r);
  for (size_t k = 0; k < order.size(); ++k) {
    const planner::Candidate& c = r.simulated[order[k]];
    const planner::Simulated& s = r.outcomes[order[k]];
    ordered_json row{{"rank", k + 1},
                     {"name", planner::describe(c.workload)},
                     {"layout", layout_json(c.workload)},
                     {"given", c.given},
                     {"ok", s.ok},
                     {"estimate", estimate_json(c.estimate)}};
    if (s.ok) {
      row["step_time_s"] = s.step_s;
      row["bubble_fraction"] = s.bubble_fraction;
      row["exposed_comm_s"] =
          ordered_json{{"tp", s.exposed_tp_s}, {"pp", s.exposed_pp_s}, {"dp", s.exposed_dp_s}};
      row["mfu"] = s.mfu;
      row["peak_bytes"] = s.peak_bytes;
      row["headroom_bytes"] = cluster.gpu.hbm_capacity.value() - s.peak_bytes;
      row["fits_in_memory"] = s.fits;
      if (s.from_micro_batches[0] > 0)
        row["extrapolated_from_micro_batches"] = {s.from_micro_batches[0], s.from_micro_batches[1]};
    } else {
      row["error"] = s.error;
    }
    simulated.push_back(row);
  }
  j["simulated"] = simulated;
  const bool best = !order.empty() && r.outcomes[order.front()].ok;
  j["best"] =
      best ? ordered_json(planner::describe(r.simulated[order.front()].workload)) : ordered_json(nullptr);
  return j;
}

class PlanCommand final : public Command {
public:
  explicit PlanCommand(Options& o) : p_(o) {}
  int run(std::ostream& out, std::ostream& err) override;

private:
  PlanArgs p_;
};

} // namespace

std::unique_ptr<Command> plan_command(Options& options) {
  return std::make_unique<PlanCommand>(options);
}

int PlanCommand::run(std::ostream& out, std::ostream& err) {
  PlanArgs& p = p_;
  p.read_micro_batches();
  const JsonTargets targets{.to_stdout = p.json, .out_dir = p.out_dir, .file_name = "plan.json"};
  check_json_target(targets);
  const std::vector<config::Override> overrides = overrides_from(p.sets);
  const ClusterSpec cluster = load_plan_cluster(p, overrides);
  WorkloadSpec given = config::load_workload(p.workload_file, overrides);
  // A precision the GPU has no peak for rules out every layout: say so, not "nothing fits".
  config::check_precision(cluster, given);
  p.options.include_given = check_given_layout(cluster, given, err);

  ProgressReporter progress(err, ProgressOptions{.mode = progress_mode(p.progress), .unit = "layouts"});
  if (progress.enabled())
    p.options.progress = progress.callback();
  const planner::PlanResult r = planner::plan(cluster, given, p.options);
  emit_json(out, targets, plan_json(cluster, given, p, r));
  if (p.json) {
    const std::vector<size_t> order = simulated_order(r);
    return order.empty() || r.outcomes[order.front()].ok ? 0 : 1;
  }
  out << "stepsim plan: " << given.name << " on " << cluster.name << " (" << cluster.num_gpus() << " GPUs)\n"
      << "  " << r.enumerated << " valid layouts, " << r.fit << " fit in "
      << gib(cluster.gpu.hbm_capacity.value()) << " GiB"
      << (p.options.space.headroom > 0
              ? " with " + fmt("%g", 100 * p.options.space.headroom) + "% kept free (" +
                    gib(planner::memory_budget(cluster, p.options.space).value()) + " GiB usable)"
              : std::string())
      << "; enumerate " << fmt("%.2f", r.enumerate_s) << " s, estimate " << fmt("%.2f", r.estimate_s)
      << " s, simulate " << fmt("%.1f", r.simulate_s) << " s\n";
  if (r.ranked.empty()) {
    out << "  no layout fits in memory\n";
    return 0;
  }
  if (!r.simulated.empty())
    out << "  " << simulated_line(p.options, r) << '\n';
  const size_t n_show = std::min(r.ranked.size(), static_cast<size_t>(p.show));
  const PlanView view{.r = r,
                      .name_width = name_column_width(r, n_show),
                      .cap = cluster.gpu.hbm_capacity.value(),
                      .steps = p.options.steps,
                      .kernel_cv = runner::kernel_cv(cluster, given)};
  if (n_show > 0)
    print_estimates(out, view, n_show, given.model.moe.enabled());
  if (r.outcomes.empty())
    return 0;
  const std::vector<size_t> order = simulated_order(r);
  print_simulated(out, view, order);
  return print_best(out, err, view, order);
}

} // namespace stepsim::cli
