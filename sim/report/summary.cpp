#include "report/summary.hpp"

#include "model/moe.hpp"
#include "model/transformer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace stepsim::report {

namespace {

using graph::TaskId;

constexpr double EPS = 1e-12;

/// The member of per-group values (GroupTimes, GroupBytes) that counts `group`'s collectives.
template <class Groups> auto& slot(Groups& g, graph::CommGroup group) {
  switch (group) {
  case graph::CommGroup::TP:
    return g.tp;
  case graph::CommGroup::PP:
    return g.pp;
  case graph::CommGroup::EP:
    return g.ep;
  case graph::CommGroup::CP:
    return g.cp;
  default:
    return g.dp;
  }
}

/// Per-group values as summary.json writes them, keyed by group name: tp, pp, dp, ep, cp.
template <class Groups> nlohmann::ordered_json per_group_json(const Groups& g) {
  nlohmann::ordered_json j;
  for (graph::CommGroup group : {graph::CommGroup::TP, graph::CommGroup::PP, graph::CommGroup::DP,
                                 graph::CommGroup::EP, graph::CommGroup::CP})
    j[std::string(to_string(group))] = slot(g, group).value();
  return j;
}

/// Per-GPU idle accounting.
struct Ledger {
  Seconds compute, bubble, other;
  GroupTimes exposed;
};

class Attributor {
public:
  Attributor(const graph::StepGraph& g, const std::vector<Seconds>& start, const std::vector<Seconds>& end)
      : g_(g), start_(start), end_(end) {}

  /// Explains the idle interval [a, b) that ended when task x started.
  void explain(double a, double b, TaskId x, Ledger& ledger, graph::Rank waiter = -1) const {
    if (waiter < 0)
      waiter = g_.task(x).rank;
    while (b - a > EPS) {
      const auto preds = g_.predecessors(x);
      bool found = false;
      TaskId y = 0;
      for (TaskId p : preds) {
        if (!found || end_[p].value() > end_[y].value() + EPS ||
            (std::abs(end_[p].value() - end_[y].value()) <= EPS && prefer(p, y))) {
          y = p;
          found = true;
        }
      }
      const graph::Task& ty = found ? g_.task(y) : g_.task(x);
      if (!found || ty.kind == graph::TaskKind::COMPUTE) {
        // Waiting for compute elsewhere (an upstream stage) or for nothing: the pipeline.
        if (found && ty.rank == waiter) {
          ledger.other += Seconds(b - a);
        } else {
          ledger.bubble += Seconds(b - a);
        }
        return;
      }
      const double active_from = std::max(a, start_[y].value());
      if (b > active_from)
        slot(ledger.exposed, ty.group) += Seconds(b - active_from);
      b = std::min(b, start_[y].value());
      x = y;
    }
  }

  /// Explains [a, b) during which the GPU waits for collective c (which ends at b): the part
  /// while c runs is exposed communication of its group, the part before is what c waited for.
  void explain_collective(double a, double b, TaskId c, graph::Rank waiter, Ledger& ledger) const {
    const graph::Task& t = g_.task(c);
    const double active_from = std::max(a, start_[c].value());
    if (b > active_from)
      slot(ledger.exposed, t.group) += Seconds(b - active_from);
    if (start_[c].value() - a > EPS)
      explain(a, start_[c].value(), c, ledger, waiter);
  }

private:
  /// Among predecessors finishing together, prefer communication, then the lower id.
  bool prefer(TaskId p, TaskId y) const {
    const bool pc = g_.task(p).kind == graph::TaskKind::COLLECTIVE;
    const bool yc = g_.task(y).kind == graph::TaskKind::COLLECTIVE;
    if (pc != yc)
      return pc;
    return p < y;
  }

  const graph::StepGraph& g_;
  const std::vector<Seconds>& start_;
  const std::vector<Seconds>& end_;
};

std::string fmt_double(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// Seconds with a unit and four significant digits, trailing zeros kept so that a column lines
/// up: "19.03 s", "24.00 s", "412.5 ms", "8.300 us"; zero is "0 s", a thousand seconds and more
/// whole seconds ("1235 s").
std::string human_time(double s) {
  const double a = std::abs(s);
  if (a == 0.0)
    return "0 s";
  if (a >= 999.95)
    return fmt_double("%.0f s", s);
  if (a >= 1.0)
    return fmt_double("%#.4g s", s);
  if (a >= 1e-3)
    return fmt_double("%#.4g ms", s * 1e3);
  return fmt_double("%#.4g us", s * 1e6);
}

} // namespace

namespace {

/// The replay summarize reads: the graph, its task times and the simulated ranks (ascending).
struct Replay {
  const graph::StepGraph& g;
  const std::vector<Seconds>& start;
  const std::vector<Seconds>& end;
  const std::vector<graph::Rank>& ranks;
};

/// Position of rank r among the simulated ranks, -1 when it is not simulated.
int index_of(const std::vector<graph::Rank>& ranks, graph::Rank r) {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), r);
  return (it != ranks.end() && *it == r) ? static_cast<int>(it - ranks.begin()) : -1;
}

/// What summarize accumulates per simulated rank (indexed by position among simulated ranks).
struct RankTally {
  explicit RankTally(size_t n)
      : ledgers(n), last_end(n, 0.0), bytes(n), volume(n), last_comm_end(n, -1.0), last_comm(n, 0),
        computes(n) {}

  std::vector<Ledger> ledgers;
  std::vector<double> last_end;
  std::vector<GroupBytes> bytes, volume;
  std::vector<double> last_comm_end;
  std::vector<TaskId> last_comm;
  std::vector<std::vector<TaskId>> computes;
  graph::TimeSources source_time; // seconds per source, over all simulated compute tasks
};

/// Step time, throughput, FLOP rates and the identification of the run.
void fill_throughput(Summary& s, const graph::StepProgram& program, const std::vector<Seconds>& end,
                     const ClusterSpec& cluster, const WorkloadSpec& w) {
  s.cluster = cluster.name;
  s.workload = w.name;
  s.num_gpus = w.num_gpus();
  s.simulated_gpus = static_cast<int>(program.simulated_ranks.size());
  s.micro_batches = program.micro_batches;
  s.tasks = program.graph.size();
  for (const Seconds& e : end)
    s.step_time = std::max(s.step_time, e);
  const double T = s.step_time.value();

  const double tokens = static_cast<double>(w.batch.global_batch) * static_cast<double>(w.model.seq_len);
  const double model_flops = model::model_flops_per_step(w).value();
  const double hw_flops = model::hardware_flops_per_step(w).value();
  const double peak = peak_flops(cluster.gpu, w.precision).value();
  if (T > 0) {
    s.tokens_per_s = tokens / T;
    s.tflops_per_gpu = model_flops / (T * s.num_gpus) / 1e12;
    s.mfu = model_flops / (T * s.num_gpus * peak);
    s.hfu = hw_flops / (T * s.num_gpus * peak);
  }
  s.flops_formula =
      "korthikanti2022: model FLOPs = 3 x forward FLOPs of all layers and logits per sequence x global_batch "
      "(= 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) for a GPT layer); HFU adds recomputed FLOPs";
}

/// Bytes and volume per group of every simulated participant of each collective, the last
/// collective of each, and the compute tasks of each simulated rank (in id order).
void tally_tasks(const Replay& r, RankTally& tally) {
  const graph::StepGraph& g = r.g;
  for (TaskId id = 0; id < g.size(); ++id) {
    const graph::Task& t = g.task(id);
    if (t.kind == graph::TaskKind::COLLECTIVE) {
      const auto parts = g.participants(t);
      const double n = static_cast<double>(parts.size());
      double sent = t.bytes.value();
      if (t.op == graph::CollectiveOp::ALL_REDUCE)
        sent *= 2.0 * (n - 1.0) / n;
      else if (t.op != graph::CollectiveOp::SEND)
        sent *= (n - 1.0) / n;
      for (graph::Rank p : parts)
        if (const int i = index_of(r.ranks, p); i >= 0) {
          slot(tally.bytes[static_cast<size_t>(i)], t.group) += t.bytes;
          slot(tally.volume[static_cast<size_t>(i)], t.group) += Bytes(sent);
          if (r.end[id].value() > tally.last_comm_end[static_cast<size_t>(i)]) {
            tally.last_comm_end[static_cast<size_t>(i)] = r.end[id].value();
            tally.last_comm[static_cast<size_t>(i)] = id;
          }
        }
      continue;
    }
    if (const int i = index_of(r.ranks, t.rank); i >= 0)
      tally.computes[static_cast<size_t>(i)].push_back(id);
  }
}

/// Walks each rank's compute tasks in start order (stream order, ascending id, unless a combined
/// 1F1B pair runs two passes at once: parallel.ep_overlap), explaining the idle gaps before them.
void attribute_compute(const Replay& r, const Attributor& attributor, RankTally& tally) {
  const std::vector<Seconds>& start = r.start;
  const std::vector<Seconds>& end = r.end;
  graph::TimeSources& source_time = tally.source_time;
  for (size_t i = 0; i < tally.computes.size(); ++i) {
    std::vector<TaskId>& ids = tally.computes[i];
    std::stable_sort(ids.begin(), ids.end(), [&](TaskId x, TaskId y) { return start[x] < start[y]; });
    Ledger& l = tally.ledgers[i];
    for (const TaskId id : ids) {
      const graph::Task& t = r.g.task(id);
      const double a = tally.last_end[i], b = start[id].value();
      if (b - a > EPS)
        attributor.explain(a, b, id, l);
      // Busy time is the union of the compute intervals: tasks of two passes running at once
      // share the GPU, so their overlap counts once.
      const double from = a - b > EPS ? a : b;
      l.compute += Seconds(std::max(0.0, end[id].value() - from));
      const double busy = (end[id] - start[id]).value();
      source_time.measured += busy * t.sources.measured;
      source_time.interpolated += busy * t.sources.interpolated;
      source_time.modelled += busy * t.sources.modelled;
      source_time.roofline += busy * t.sources.roofline;
      tally.last_end[i] = std::max(a, end[id].value());
    }
  }
}

/// After a GPU's last compute task: communication it still takes part in (e.g. the ZeRO
/// parameter all-gather after the optimizer) is exposed; the rest waits for the others.
void attribute_tail(const Replay& r, const Attributor& attributor, double T, RankTally& tally) {
  for (size_t i = 0; i < tally.ledgers.size(); ++i) {
    double a = tally.last_end[i];
    if (tally.last_comm_end[i] > a + EPS) {
      const TaskId c = tally.last_comm[i];
      attributor.explain_collective(a, tally.last_comm_end[i], c, r.ranks[i], tally.ledgers[i]);
      a = tally.last_comm_end[i];
    }
    if (T - a > EPS)
      tally.ledgers[i].bubble += Seconds(T - a);
  }
}

/// The share of compute time from each source, left as it is when no compute time was counted.
void fill_compute_source(Summary& s, const graph::TimeSources& source_time) {
  const double source_total =
      source_time.measured + source_time.interpolated + source_time.modelled + source_time.roofline;
  if (source_total > 0)
    s.compute_source = graph::TimeSources{.measured = source_time.measured / source_total,
                                          .interpolated = source_time.interpolated / source_total,
                                          .modelled = source_time.modelled / source_total,
                                          .roofline = source_time.roofline / source_total};
}

/// Means over GPUs, overall and per stage.
void fill_means(Summary& s, const graph::StepProgram& program, const RankTally& tally) {
  const auto& ranks = program.simulated_ranks;
  const double T = s.step_time.value();
  const double n = static_cast<double>(ranks.size());
  s.stages.resize(static_cast<size_t>(program.grid.pp));
  std::vector<int> per_stage(static_cast<size_t>(program.grid.pp), 0);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Ledger& l = tally.ledgers[i];
    const GroupBytes& bytes = tally.bytes[i];
    const GroupBytes& volume = tally.volume[i];
    s.compute += l.compute / n;
    s.other_idle += l.other / n;
    s.exposed.tp += l.exposed.tp / n;
    s.exposed.pp += l.exposed.pp / n;
    s.exposed.dp += l.exposed.dp / n;
    s.exposed.ep += l.exposed.ep / n;
    s.exposed.cp += l.exposed.cp / n;
    s.comm_bytes_per_gpu.ep += bytes.ep / n;
    s.comm_bytes_per_gpu.cp += bytes.cp / n;
    s.comm_volume_per_gpu.ep += volume.ep / n;
    s.comm_volume_per_gpu.cp += volume.cp / n;
    s.comm_bytes_per_gpu.tp += bytes.tp / n;
    s.comm_bytes_per_gpu.pp += bytes.pp / n;
    s.comm_bytes_per_gpu.dp += bytes.dp / n;
    s.comm_volume_per_gpu.tp += volume.tp / n;
    s.comm_volume_per_gpu.pp += volume.pp / n;
    s.comm_volume_per_gpu.dp += volume.dp / n;
    if (T > 0)
      s.bubble_fraction += l.bubble.value() / T / n;
    const size_t st = static_cast<size_t>(program.grid.pp_of(ranks[i]));
    ++per_stage[st];
    StageMetrics& sm = s.stages[st];
    sm.stage = static_cast<int>(st);
    sm.compute += l.compute;
    sm.exposed.tp += l.exposed.tp;
    sm.exposed.pp += l.exposed.pp;
    sm.exposed.dp += l.exposed.dp;
    sm.exposed.ep += l.exposed.ep;
    sm.exposed.cp += l.exposed.cp;
    if (T > 0)
      sm.bubble_fraction += l.bubble.value() / T;
  }
  for (size_t st = 0; st < s.stages.size(); ++st) {
    const double k = std::max(1, per_stage[st]);
    StageMetrics& sm = s.stages[st];
    sm.compute = sm.compute / k;
    sm.exposed.tp = sm.exposed.tp / k;
    sm.exposed.pp = sm.exposed.pp / k;
    sm.exposed.dp = sm.exposed.dp / k;
    sm.exposed.ep = sm.exposed.ep / k;
    sm.exposed.cp = sm.exposed.cp / k;
    sm.bubble_fraction /= k;
  }
}

} // namespace

Summary summarize(const graph::StepProgram& program, const std::vector<Seconds>& start,
                  const std::vector<Seconds>& end, const ClusterSpec& cluster, const WorkloadSpec& w) {
  const graph::StepGraph& g = program.graph;
  Summary s;
  fill_throughput(s, program, end, cluster, w);
  s.memory = memory_timeline(program, start, end, cluster, w, false);
  s.critical_path = critical_path(g, start, end, s.step_time);

  const Replay replay{.g = g, .start = start, .end = end, .ranks = program.simulated_ranks};
  RankTally tally(program.simulated_ranks.size());
  const Attributor attributor(g, start, end);
  tally_tasks(replay, tally);
  attribute_compute(replay, attributor, tally);
  attribute_tail(replay, attributor, s.step_time.value(), tally);
  fill_compute_source(s, tally.source_time);
  fill_means(s, program, tally);
  s.parameters = parameter_counts(w);
  s.degraded = straggler_report(program, start, end, cluster);
  return s;
}

ParameterCounts parameter_counts(const WorkloadSpec& w) {
  ParameterCounts c{.total = std::llround(model::total_params(w.model)),
                    .active = std::llround(model::active_params(w.model)),
                    .per_gpu_by_stage = {}};
  for (int p = 0; p < w.parallel.pp; ++p)
    c.per_gpu_by_stage.push_back(std::llround(model::params_on_rank(w, p)));
  return c;
}
namespace {

/// summary.json's `critical_path`: its length and busy time per kind (every block and group,
/// zeros included, so the keys are the same for every step).
nlohmann::ordered_json critical_path_json(const CriticalPath& p) {
  using nlohmann::ordered_json;
  constexpr graph::Block BLOCKS[] = {graph::Block::ATTENTION, graph::Block::MLP,    graph::Block::LOGITS,
                                     graph::Block::OPTIMIZER, graph::Block::ROUTER, graph::Block::EXPERTS};
  constexpr graph::CommGroup GROUPS[] = {graph::CommGroup::TP, graph::CommGroup::PP, graph::CommGroup::DP,
                                         graph::CommGroup::EP, graph::CommGroup::CP};
  const auto per = [](const auto& keys, const auto& times) {
    ordered_json j = ordered_json::object();
    for (const auto k : keys) {
      const auto it = times.find(k);
      j[std::string(graph::to_string(k))] = it == times.end() ? 0.0 : it->second.value();
    }
    return j;
  };
  return ordered_json{{"length_s", p.length.value()},        {"tasks", p.tasks.size()},
                      {"compute_s", per(BLOCKS, p.compute)}, {"collectives_s", per(GROUPS, p.collectives)},
                      {"p2p_s", per(GROUPS, p.p2p)},         {"wait_s", p.wait.value()}};
}

} // namespace

void write_summary_json(std::ostream& out, const Summary& s) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["schema"] = SUMMARY_SCHEMA;
  j["cluster"] = s.cluster;
  j["workload"] = s.workload;
  j["num_gpus"] = s.num_gpus;
  j["simulated_gpus"] = s.simulated_gpus;
  j["micro_batches"] = s.micro_batches;
  j["parameters"] = ordered_json{{"total", s.parameters.total},
                                 {"active", s.parameters.active},
                                 {"per_gpu_by_stage", s.parameters.per_gpu_by_stage}};
  j["step_time_s"] = s.step_time.value();
  j["tokens_per_s"] = s.tokens_per_s;
  j["tflops_per_gpu"] = s.tflops_per_gpu;
  j["mfu"] = s.mfu;
  j["hfu"] = s.hfu;
  j["flops_formula"] = s.flops_formula;
  j["bubble_fraction"] = s.bubble_fraction;
  j["compute_s"] = s.compute.value();
  j["compute_source"] = ordered_json{{"measured", s.compute_source.measured},
                                     {"interpolated", s.compute_source.interpolated},
                                     {"modelled", s.compute_source.modelled},
                                     {"roofline", s.compute_source.roofline}};
  j["exposed_comm_s"] = per_group_json(s.exposed);
  j["other_idle_s"] = s.other_idle.value();
  j["comm_bytes_per_gpu"] = per_group_json(s.comm_bytes_per_gpu);
  ordered_json stages = ordered_json::array();
  for (const StageMetrics& st : s.stages)
    stages.push_back(ordered_json{{"stage", st.stage},
                                  {"bubble_fraction", st.bubble_fraction},
                                  {"compute_s", st.compute.value()},
                                  {"exposed_comm_s", per_group_json(st.exposed)}});
  j["stages"] = stages;
  j["comm_volume_per_gpu"] = per_group_json(s.comm_volume_per_gpu);
  const MemoryReport& mem = s.memory;
  j["fits_in_memory"] = mem.fits_in_memory;
  ordered_json m;
  m["gpu"] = mem.worst_rank;
  m["stage"] = mem.worst_stage;
  m["weights_bytes"] = mem.worst.weights.value();
  m["gradients_bytes"] = mem.worst.gradients.value();
  m["optimizer_bytes"] = mem.worst.optimizer.value();
  m["activations_bytes"] = mem.worst.activations.value();
  m["other_bytes"] = mem.worst.other().value();
  m["other"] = ordered_json{{"zero3_gathered_bytes", mem.worst.zero3_gathered.value()},
                            {"comm_buffers_bytes", mem.worst.comm_buffers.value()},
                            {"runtime_bytes", mem.worst.runtime.value()},
                            {"fragmentation_bytes", mem.worst.fragmentation.value()}};
  m["peak_bytes"] = mem.worst.peak().value();
  m["capacity_bytes"] = mem.capacity.value();
  // By how much the verdict holds: the worst GPU's memory left at its peak, negative when over.
  m["headroom_bytes"] = (mem.capacity - mem.worst.peak()).value();
  m["host_offload_bytes"] = mem.host_peak.value();
  ordered_json peaks = ordered_json::array();
  for (const Bytes& b : mem.stage_peaks)
    peaks.push_back(b.value());
  m["stage_peak_bytes"] = peaks;
  if (!mem.fits_in_memory)
    m["oom"] = ordered_json{
        {"gpu", mem.worst_rank},
        {"over_by_bytes", std::max(0.0, (mem.worst.peak() - mem.capacity).value())},
        {"host_over_by_bytes",
         mem.host_capacity.value() > 0 ? std::max(0.0, (mem.host_peak - mem.host_capacity).value()) : 0.0},
        {"reason", mem.reason}};
  j["memory"] = m;
  if (s.trace) {
    const TraceNote& t = *s.trace;
    j["trace"] = ordered_json{
        {"file", t.file},
        {"gpus", t.gpus.size()},
        {"ranks", t.gpu_ranges},
        {"of_simulated_gpus", s.simulated_gpus},
        {"window_s",
         ordered_json::array(
             {t.window_start_s, t.window_end_s < 0 ? ordered_json(nullptr) : ordered_json(t.window_end_s)})}};
  }
  j["tasks"] = s.tasks;
  j["critical_path"] = critical_path_json(s.critical_path);
  if (s.degraded) { // a degraded cluster only (docs/degraded.md): a perfect one's bytes stay
    ordered_json slow = ordered_json::array();
    for (const SlowGpu& g : s.degraded->slow_gpus)
      slow.push_back(ordered_json{{"rank", g.rank}, {"node", g.node}, {"gpu", g.gpu}, {"speed", g.speed}});
    const auto groups = [](const std::vector<double>& w) {
      return ordered_json{{"tp", w[0]}, {"pp", w[1]}, {"dp", w[2]}, {"ep", w[3]}, {"cp", w[4]}};
    };
    j["degraded"] = ordered_json{{"slow_gpus", slow},
                                 {"degraded_nics", s.degraded->degraded_nics},
                                 {"paced_tp_groups", s.degraded->paced_tp_groups},
                                 {"straggler_wait_s", groups(s.degraded->wait_s)},
                                 {"degraded_link_exposed_s", groups(s.degraded->link_exposed_s)}};
  }
  if (s.variability) {
    const Variability& v = *s.variability;
    ordered_json times = ordered_json::array();
    for (const Seconds& t : v.step_times)
      times.push_back(t.value());
    ordered_json slowest = ordered_json::array();
    for (const auto& [rank, count] : v.slowest_ranks)
      slowest.push_back(ordered_json{{"gpu", rank}, {"steps", count}});
    j["variability"] = ordered_json{{"steps", v.steps},
                                    {"kernel_cv", v.kernel_cv},
                                    {"seed", v.seed},
                                    {"step_time_s", ordered_json{{"mean", v.mean.value()},
                                                                 {"p50", v.p50.value()},
                                                                 {"p90", v.p90.value()},
                                                                 {"p99", v.p99.value()},
                                                                 {"max", v.max.value()}}},
                                    {"step_times_s", times},
                                    {"slowest_gpus", slowest}};
    if (v.sampled)
      j["variability"]["sampled_replicas"] =
          ordered_json{{"replicas", v.sampled->replicas},
                       {"simulated", v.sampled->simulated},
                       {"sd_before_optimizer_s", v.sampled->sd_before.value()},
                       {"sd_optimizer_s", v.sampled->sd_optimizer.value()},
                       {"wait_s", v.sampled->wait.value()}};
  }
  out << j.dump(2) << '\n';
}

void print_summary_table(std::ostream& out, const Summary& s) {
  auto row = [&](const std::string& k, const std::string& v) {
    out << "  " << k << std::string(k.size() < 28 ? 28 - k.size() : 1, ' ') << v << '\n';
  };
  const double T = s.step_time.value();
  auto pct = [&](double x) { return fmt_double("%.1f %%", 100.0 * x); };
  auto secs = [&](Seconds x) {
    return human_time(x.value()) + (T > 0 ? fmt_double("  (%.1f %% of step)", 100.0 * x.value() / T) : "");
  };
  out << "stepsim: " << s.workload << " on " << s.cluster << " (" << s.num_gpus << " GPUs, "
      << s.micro_batches << " micro-batches per pipeline)\n";
  row("step time", human_time(T));
  row("tokens/s", fmt_double("%.0f", s.tokens_per_s));
  row("model TFLOP/s per GPU", fmt_double("%.1f", s.tflops_per_gpu));
  row("MFU", pct(s.mfu));
  row("HFU", pct(s.hfu));
  row("pipeline bubble", pct(s.bubble_fraction));
  row("compute per GPU", secs(s.compute));
  {
    std::string sources;
    const std::pair<const char*, double> shares[] = {{"measured", s.compute_source.measured},
                                                     {"interpolated", s.compute_source.interpolated},
                                                     {"modelled", s.compute_source.modelled},
                                                     {"roofline", s.compute_source.roofline}};
    for (const auto& [name, share] : shares)
      if (share > 0)
        sources += (sources.empty() ? "" : ", ") + fmt_double("%.1f %% ", 100.0 * share) + name;
    row("compute time from", sources.empty() ? "-" : sources);
  }
  row("exposed comm TP", secs(s.exposed.tp));
  row("exposed comm PP", secs(s.exposed.pp));
  row("exposed comm DP", secs(s.exposed.dp));
  if (s.comm_bytes_per_gpu.ep.value() > 0)
    row("exposed comm EP", secs(s.exposed.ep));
  if (s.comm_bytes_per_gpu.cp.value() > 0)
    row("exposed comm CP", secs(s.exposed.cp));
  if (s.other_idle.value() > 0)
    row("other idle", secs(s.other_idle));
  if (s.degraded) {
    const auto per_group = [&](const std::vector<double>& w) {
      std::string text;
      const char* names[] = {"TP", "PP", "DP", "EP", "CP"};
      for (size_t k = 0; k < w.size(); ++k)
        if (w[k] > 0)
          text += (text.empty() ? "" : ", ") + std::string(names[k]) + " " + secs(Seconds(w[k]));
      return text.empty() ? std::string("-") : text;
    };
    const int paced = s.degraded->paced_tp_groups;
    row("degraded parts",
        "slow GPUs simulated " + std::to_string(s.degraded->slow_gpus.size()) +
            (paced > 0 ? " (" + std::to_string(paced) + (paced == 1 ? " TP group" : " TP groups") +
                             " at a slow GPU's pace)"
                       : "") +
            ", degraded NICs " + std::to_string(s.degraded->degraded_nics) + "; " +
            std::to_string(s.simulated_gpus) + " of " + std::to_string(s.num_gpus) + " GPUs simulated");
    row("waited on slow GPUs", per_group(s.degraded->wait_s));
    row("exposed, degraded links", per_group(s.degraded->link_exposed_s));
  }
  row("peak memory (worst GPU)", gib(s.memory.worst.peak()) + " of " + gib(s.memory.capacity) + " (GPU " +
                                     std::to_string(s.memory.worst_rank) + ", stage " +
                                     std::to_string(s.memory.worst_stage) + ")");
  if (s.memory.host_peak.value() > 0)
    row("host memory (offloaded)",
        gib(s.memory.host_peak) + (s.memory.host_capacity.value() > 0
                                       ? " of " + gib(s.memory.host_capacity) + " per GPU"
                                       : std::string(" per GPU")));
  out << "  per stage:  stage  bubble  peak memory  compute     exposed tp / pp / dp\n";
  for (const StageMetrics& st : s.stages) {
    const size_t k = static_cast<size_t>(st.stage);
    const Bytes peak = k < s.memory.stage_peaks.size() ? s.memory.stage_peaks[k] : Bytes(0.0);
    out << fmt_double("              %5.0f", st.stage) << fmt_double("  %5.1f%%", 100.0 * st.bubble_fraction)
        << "  " << gib(peak) << "  " << human_time(st.compute.value()) << "   "
        << human_time(st.exposed.tp.value()) << " / " << human_time(st.exposed.pp.value()) << " / "
        << human_time(st.exposed.dp.value()) << '\n';
  }
  if (s.variability) {
    const Variability& v = *s.variability;
    out << "  over " << v.steps << " steps" << fmt_double(" (kernel CV %g", v.kernel_cv) << ", seed "
        << v.seed << "; the figures above are the first step's)\n";
    row("step time mean", human_time(v.mean.value()));
    row("step time p50 / p90 / p99",
        human_time(v.p50.value()) + " / " + human_time(v.p90.value()) + " / " + human_time(v.p99.value()));
    row("step time max", human_time(v.max.value()));
    std::string slowest;
    for (size_t i = 0; i < v.slowest_ranks.size() && i < 5; ++i)
      slowest += (i ? ", " : "") + ("GPU " + std::to_string(v.slowest_ranks[i].first)) + " (" +
                 std::to_string(v.slowest_ranks[i].second) + ")";
    if (v.slowest_ranks.size() > 5)
      slowest += ", ...";
    row("last to finish (steps)", slowest.empty() ? "-" : slowest);
    if (v.sampled)
      row("sampled replicas", std::to_string(v.sampled->simulated) + " of " +
                                  std::to_string(v.sampled->replicas) + " simulated; each step above adds " +
                                  human_time(v.sampled->wait.value()) + " for the others");
  }
  if (s.trace) {
    const TraceNote& t = *s.trace;
    out << "  trace: " << t.file << " holds " << t.gpus.size() << " of the " << s.simulated_gpus
        << " simulated GPUs (ranks " << t.gpu_ranges << ")";
    if (t.window_start_s > 0 || t.window_end_s >= 0)
      out << fmt_double(", from %g s", t.window_start_s)
          << (t.window_end_s >= 0 ? fmt_double(" to %g s", t.window_end_s) : std::string(" to the end"));
    out << '\n';
  }
  if (!s.memory.fits_in_memory)
    out << "\n  *** DOES NOT FIT IN MEMORY *** " << s.memory.reason << '\n';
}

} // namespace stepsim::report
