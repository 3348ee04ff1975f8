#include "validate/validate.hpp"

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/csv.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "report/summary.hpp"
#include "runner/simulate.hpp"

#include "process/process.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

namespace stepsim::validate {

namespace {

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const auto& s : parts)
    out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string fmt(double v, int precision) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(precision) << v;
  return o.str();
}

/// Digits that suit a metric's magnitude.
int digits(double v) {
  return std::abs(v) >= 100 ? 1 : (std::abs(v) >= 10 ? 2 : 3);
}

/// In the child: simulate; the figures of the step are its message.
process::Message simulate_run(const RunPlan& plan, const std::filesystem::path& dir) {
  // The plan's workload, which check_plan checked and runs/<id>/workload.yaml writes.
  const ClusterSpec cluster = plan_cluster(plan);
  const WorkloadSpec workload = config::check_layout(cluster, plan.workload).workload;
  const runner::Simulation sim = runner::simulate(cluster, workload);
  write_file_atomically(dir / "summary.json",
                        [&](std::ostream& o) { report::write_summary_json(o, sim.summary); });
  const report::MemoryReport& mem = sim.summary.memory;
  // The step's model and hardware FLOPs as the summary counts them for this architecture.
  const report::Summary& s = sim.summary;
  const double model_flops = s.tflops_per_gpu * 1e12 * s.step_time.value() * s.num_gpus;
  const double hardware_flops = s.mfu > 0 ? model_flops * s.hfu / s.mfu : 0.0;
  return process::Message{{"step_time_s", process::number(s.step_time.value())},
                          {"peak_bytes", process::number(mem.worst.peak().value())},
                          {"capacity_bytes", process::number(mem.capacity.value())},
                          {"peak_stage", mem.worst_stage},
                          {"host_bytes", process::number(mem.host_peak.value())},
                          {"fits", mem.fits_in_memory},
                          {"model_flops", process::number(model_flops)},
                          {"hardware_flops", process::number(hardware_flops)}};
}

/// A finished child's row: its figures, or why there are none.
void record(RunResult& r, const process::Outcome& child, double timeout_s) {
  r.wall_s = child.wall_s;
  if (child.message) {
    const process::Message& m = *child.message;
    r.step_time_s = process::number_of(m.at("step_time_s"));
    r.peak_bytes = process::number_of(m.at("peak_bytes"));
    r.capacity_bytes = process::number_of(m.at("capacity_bytes"));
    m.at("peak_stage").get_to(r.peak_stage);
    r.host_bytes = process::number_of(m.at("host_bytes"));
    r.fits_memory = m.at("fits").get<bool>();
    const StepFlops flops{.model = process::number_of(m.at("model_flops")),
                          .hardware = process::number_of(m.at("hardware_flops"))};
    r.status = RunStatus::OK;
    r.predicted = predicted_metric(r.plan, Seconds(r.step_time_s), flops);
    r.error_pct = (r.predicted - r.plan.measured) / r.plan.measured * 100.0;
    r.reason = r.plan.defaults.empty() ? "" : "defaults: " + join(r.plan.defaults, "; ");
    return;
  }
  r.status = RunStatus::FAILED;
  if (child.timed_out)
    r.reason = "timed out after " + fmt(timeout_s, 0) + " s";
  else if (!child.exception.empty())
    r.reason = one_line(child.exception);
  else if (child.signal != 0)
    r.reason = std::string("simulation died: ") + strsignal(child.signal);
  else
    r.reason = "simulation failed (exit " + std::to_string(child.exit_code) + ")";
}

} // namespace

std::vector<RunResult> validate_runs(const config::RunsFile& runs, const ValidateOptions& options,
                                     std::ostream* progress) {
  std::set<std::string> only(options.only.begin(), options.only.end());
  for (const auto& id : options.only) {
    const bool known =
        std::any_of(runs.runs.begin(), runs.runs.end(), [&](const auto& r) { return r.id == id; });
    if (!known)
      throw ConfigError(runs.source + ": no run with id '" + id + "'");
  }
  PlanOptions plan_options{
      .topologies = options.topologies, .calibration = options.calibration, .extra = options.extra};
  std::vector<RunResult> results;
  std::vector<std::filesystem::path> dirs;
  for (const config::MeasuredRun& run : runs.runs) {
    if (!only.empty() && !only.contains(run.id))
      continue;
    RunResult r;
    r.plan = plan_run(run, plan_options);
    const std::filesystem::path dir = options.work_dir / "runs" / run.id;
    if (r.plan.skip_reason.empty()) {
      std::filesystem::create_directories(dir);
      r.plan.workload.source = (dir / "workload.yaml").string(); // as the loader names it
      check_plan(r.plan); // before the files: it may take the distributed optimizer
      write_file_atomically(dir / "workload.yaml", [&](std::ostream& o) {
        o << config::workload_yaml(r.plan.workload, "generated by stepsim validate from " + run.where +
                                                        " (run " + run.id + ")");
      });
      write_file_atomically(dir / "command.txt", [&](std::ostream& cmd) {
        cmd << "stepsim run --cluster " << r.plan.cluster_file.string() << " --workload "
            << (dir / "workload.yaml").string();
        for (const auto& o : set_options(r.plan))
          cmd << " --set " << o.path << "=" << o.value;
        cmd << "\n";
      });
    }
    if (!r.plan.skip_reason.empty()) {
      r.status = RunStatus::SKIPPED;
      r.reason = one_line(r.plan.skip_reason);
    }
    results.push_back(std::move(r));
    dirs.push_back(dir);
  }

  // Simulate the rest, at most `jobs` at a time; the longest (most GPUs) first.
  std::vector<std::size_t> pending;
  for (std::size_t i = 0; i < results.size(); ++i)
    if (results[i].plan.skip_reason.empty())
      pending.push_back(i);
  std::stable_sort(pending.begin(), pending.end(), [&](std::size_t a, std::size_t b) {
    return results[a].plan.num_gpus > results[b].plan.num_gpus;
  });
  const process::PoolOptions pool{
      .jobs = options.jobs,
      .spawn = {.output = process::Output::CAPTURE, .timeout_s = options.timeout_s},
      .name = "validate"};
  std::ostringstream unused;
  ProgressReporter line(progress != nullptr ? *progress : unused,
                        ProgressOptions{.mode = progress != nullptr ? options.progress : ProgressMode::OFF,
                                        .verb = "validate simulated",
                                        .unit = "runs"});
  std::size_t done = 0;
  std::string last; // the run that finished last
  process::run_each(
      pending.size(),
      [&](std::size_t k) {
        const std::size_t i = pending[k];
        return process::Job{.body = [&, i] { return simulate_run(results[i].plan, dirs[i]); }, .argv = {}};
      },
      pool,
      [&](std::size_t k, process::Outcome&& child) {
        RunResult& r = results[pending[k]];
        record(r, child, options.timeout_s);
        if (!child.output.empty()) // what the simulation printed, kept beside its summary
          write_file_atomically(dirs[pending[k]] / "output.log", [&](std::ostream& o) { o << child.output; });
        last = "last " + r.plan.id + " " + std::string(to_string(r.status));
        if (r.status == RunStatus::OK)
          last += " (error " + fmt(r.error_pct, 1) + " %)";
        line.update(++done, pending.size(), last);
      },
      [&] { line.update(done, pending.size(), last); });
  line.finish();
  return results;
}

ErrorStats error_stats(const std::vector<RunResult>& results) {
  ErrorStats s;
  std::vector<double> errs;
  for (const RunResult& r : results) {
    if (r.status == RunStatus::OK) {
      ++s.validated;
      errs.push_back(std::abs(r.error_pct));
    } else {
      ++s.skipped;
    }
  }
  if (!errs.empty()) {
    std::sort(errs.begin(), errs.end());
    const std::size_t n = errs.size();
    s.median_abs = n % 2 == 1 ? errs[n / 2] : 0.5 * (errs[n / 2 - 1] + errs[n / 2]);
    s.max_abs = errs.back();
    for (double e : errs)
      s.mean_abs += e;
    s.mean_abs /= static_cast<double>(n);
  }
  return s;
}

MemoryStats memory_stats(const std::vector<RunResult>& results) {
  MemoryStats m;
  for (const RunResult& r : results) {
    if (r.status != RunStatus::OK)
      continue;
    ++m.checked;
    if (r.fits())
      ++m.fitting;
  }
  return m;
}

void print_table(std::ostream& out, const std::vector<RunResult>& results) {
  std::size_t w_id = 2;
  std::size_t w_layout = 6;
  for (const RunResult& r : results) {
    w_id = std::max(w_id, r.plan.id.size());
    w_layout = std::max(w_layout, r.plan.layout.size());
  }
  out << std::left << std::setw(static_cast<int>(w_id)) << "id"
      << "  " << std::right << std::setw(5) << "GPUs"
      << "  " << std::left << std::setw(static_cast<int>(w_layout)) << "layout"
      << "  " << std::setw(20) << "metric" << std::right << std::setw(11) << "measured" << std::setw(11)
      << "predicted" << std::setw(9) << "error %" << '\n';
  for (const RunResult& r : results) {
    if (r.status != RunStatus::OK)
      continue;
    out << std::left << std::setw(static_cast<int>(w_id)) << r.plan.id << "  " << std::right << std::setw(5)
        << r.plan.num_gpus << "  " << std::left << std::setw(static_cast<int>(w_layout)) << r.plan.layout
        << "  " << std::setw(20) << to_string(r.plan.metric) << std::right << std::setw(11)
        << fmt(r.plan.measured, digits(r.plan.measured)) << std::setw(11)
        << fmt(r.predicted, digits(r.plan.measured)) << std::setw(9)
        << ((r.error_pct >= 0 ? "+" : "") + fmt(r.error_pct, 1)) << '\n';
  }
  bool any = false;
  for (const RunResult& r : results) {
    if (r.status == RunStatus::OK)
      continue;
    if (!any)
      out << "\nnot validated:\n";
    any = true;
    out << "  " << r.plan.id << " (" << r.plan.num_gpus << " GPUs, " << r.plan.layout
        << "): " << to_string(r.status) << ": " << r.reason << '\n';
  }
  const MemoryStats mem = memory_stats(results);
  if (mem.checked > 0) {
    out << "\nmemory: the ledger fits " << mem.fitting << " of " << mem.checked
        << " simulated runs in GPU memory";
    if (mem.fitting == mem.checked)
      out << '\n';
    else
      out << "; the rest ran, so for each the ledger over-counts or the record lacks a memory setting:\n";
    for (const RunResult& r : results) {
      if (r.status == RunStatus::OK && !r.fits())
        out << "  " << r.plan.id << ": peak " << fmt(r.peak_bytes / 1073741824.0, 1) << " GiB of "
            << fmt(r.capacity_bytes / 1073741824.0, 1) << " (pipeline stage " << r.peak_stage << ")"
            << (r.host_bytes > 0
                    ? ", " + fmt(r.host_bytes / 1073741824.0, 1) + " GiB offloaded to host memory"
                    : "")
            << "\n";
    }
  }
  // The error by GPU family and by model kind, when the runs mix them.
  std::map<std::string, std::vector<RunResult>> groups;
  for (const RunResult& r : results)
    if (r.status == RunStatus::OK) {
      groups["GPU " + (r.plan.gpu_kind.empty() ? std::string("unknown") : r.plan.gpu_kind)].push_back(r);
      groups[r.plan.moe ? "model MoE" : "model dense"].push_back(r);
    }
  const auto kinds = [&](const std::string& prefix) {
    return std::count_if(groups.begin(), groups.end(),
                         [&](const auto& g) { return g.first.starts_with(prefix); });
  };
  if (kinds("GPU ") > 1 || kinds("model ") > 1) {
    out << "\nerror by group (|error %|):\n";
    for (const auto& [name, rows] : groups) {
      const ErrorStats s = error_stats(rows);
      out << "  " << std::left << std::setw(16) << name << std::right << std::setw(4) << s.validated
          << " runs  median " << std::setw(6) << fmt(s.median_abs, 2) << "  mean " << std::setw(6)
          << fmt(s.mean_abs, 2) << "  max " << std::setw(7) << fmt(s.max_abs, 2) << '\n';
    }
  }
  any = false;
  for (const RunResult& r : results) {
    if (r.status != RunStatus::OK || r.plan.defaults.empty())
      continue;
    if (!any)
      out << "\ndefaults used:\n";
    any = true;
    out << "  " << r.plan.id << ": " << join(r.plan.defaults, "; ") << '\n';
  }
}

void write_csv(std::ostream& out, const std::vector<RunResult>& results) {
  out << "id,num_gpus,metric,measured,predicted,error_pct,status,reason\n";
  for (const RunResult& r : results) {
    const bool ok = r.status == RunStatus::OK;
    std::ostringstream meas;
    meas << std::setprecision(10) << r.plan.measured;
    std::ostringstream pred;
    pred << std::setprecision(10) << r.predicted;
    out << csv_cell(r.plan.id) << ',' << r.plan.num_gpus << ',' << to_string(r.plan.metric) << ','
        << (r.plan.measured > 0 ? meas.str() : "") << ',' << (ok ? pred.str() : "") << ','
        << (ok ? fmt(r.error_pct, 3) : "") << ',' << to_string(r.status) << ',' << csv_cell(r.reason) << '\n';
  }
}

std::filesystem::path topologies_dir(const std::string& explicit_dir) {
  namespace fs = std::filesystem;
  if (!explicit_dir.empty()) {
    if (!fs::is_directory(explicit_dir))
      throw ConfigError("--topologies: no such folder '" + explicit_dir + "'");
    return explicit_dir;
  }
  if (fs::is_regular_file("topologies/dgx-a100-superpod.yaml"))
    return "topologies";
  const fs::path built_in(STEPSIM_DEFAULT_TOPOLOGIES);
  if (fs::is_directory(built_in))
    return built_in;
  throw ConfigError("cannot find the bundled topologies (no ./topologies, no " + built_in.string() +
                    "); pass --topologies DIR");
}

std::string summary_line(const ErrorStats& s) {
  return "validated " + std::to_string(s.validated) + " runs, skipped " + std::to_string(s.skipped) +
         ": median_abs_error_pct=" + fmt(s.median_abs, 2) + " max_abs_error_pct=" + fmt(s.max_abs, 2);
}

} // namespace stepsim::validate
