#include "report/memory_timeline.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstdio>

namespace stepsim::report {

namespace {

struct Event {
  double time;
  double activations; ///< delta of activation bytes
  double gathered;    ///< delta of gathered-parameter bytes
  graph::TaskId task;
};

} // namespace

std::string gib(Bytes b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", b.value() / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

MemoryReport memory_timeline(const graph::StepProgram& program, const std::vector<Seconds>& start,
                             const std::vector<Seconds>& end, const ClusterSpec& cluster,
                             const WorkloadSpec& workload, bool keep_tracks) {
  const graph::StepGraph& g = program.graph;
  const auto& ranks = program.simulated_ranks;
  auto index_of = [&](graph::Rank r) -> int {
    auto it = std::lower_bound(ranks.begin(), ranks.end(), r);
    return (it != ranks.end() && *it == r) ? static_cast<int>(it - ranks.begin()) : -1;
  };
  std::vector<std::vector<Event>> events(ranks.size());
  for (graph::TaskId id = 0; id < g.size(); ++id) {
    const graph::Task& t = g.task(id);
    if (t.act_alloc.value() == 0 && t.act_free.value() == 0 && t.param_alloc.value() == 0 &&
        t.param_free.value() == 0)
      continue;
    auto add = [&](graph::Rank r) {
      const int i = index_of(r);
      if (i < 0)
        return;
      auto& ev = events[static_cast<size_t>(i)];
      if (t.act_alloc.value() != 0 || t.param_alloc.value() != 0)
        ev.push_back(Event{start[id].value(), t.act_alloc.value(), t.param_alloc.value(), id});
      if (t.act_free.value() != 0 || t.param_free.value() != 0)
        ev.push_back(Event{end[id].value(), -t.act_free.value(), -t.param_free.value(), id});
    };
    if (t.kind == graph::TaskKind::COMPUTE)
      add(t.rank);
    else
      for (graph::Rank r : g.participants(t))
        add(r);
  }

  MemoryReport rep;
  rep.capacity = cluster.gpu.hbm_capacity;
  rep.stage_peaks.assign(static_cast<size_t>(program.grid.pp), Bytes(0.0));
  double worst_peak = -1;
  double step_end = 0;
  for (const Seconds& e : end)
    step_end = std::max(step_end, e.value());

  for (size_t i = 0; i < ranks.size(); ++i) {
    auto& ev = events[i];
    std::stable_sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) {
      if (a.time != b.time)
        return a.time < b.time;
      const bool af = a.activations + a.gathered < 0, bf = b.activations + b.gathered < 0;
      if (af != bf)
        return af; // frees first
      return a.task < b.task;
    });
    const int stage = program.grid.pp_of(ranks[i]);
    const model::MemoryLedger base = model::persistent_memory(workload, cluster.gpu, stage);
    const double persistent =
        (base.weights + base.gradients + base.optimizer + base.comm_buffers + base.runtime).value();
    // The allocator's reserve at `dynamic` bytes of activations and gathered parameters.
    const auto held = [&](double dynamic) {
      return persistent + dynamic +
             model::fragmentation_of(workload, cluster.gpu, Bytes(dynamic) + base.comm_buffers).value();
    };
    double dynamic = 0, gathered = 0, peak_dynamic = 0, peak_gathered = 0;
    CounterSeries track;
    track.gpu = ranks[i];
    if (keep_tracks)
      track.samples.emplace_back(0.0, held(0.0));
    for (size_t k = 0; k < ev.size(); ++k) {
      dynamic += ev[k].activations + ev[k].gathered;
      gathered += ev[k].gathered;
      if (dynamic < -1.0)
        throw SimulationError("memory ledger of GPU " + std::to_string(ranks[i]) + " went negative at t = " +
                              std::to_string(ev[k].time) + " s (task #" + std::to_string(ev[k].task) + ")");
      if (dynamic > peak_dynamic) {
        peak_dynamic = dynamic;
        peak_gathered = gathered;
      }
      if (keep_tracks && (k + 1 == ev.size() || ev[k + 1].time != ev[k].time))
        track.samples.emplace_back(ev[k].time, held(dynamic));
    }
    if (keep_tracks) {
      track.samples.emplace_back(step_end, held(dynamic));
      rep.tracks.push_back(std::move(track));
    }
    model::MemoryLedger l = base;
    l.host = model::offloaded_activations(workload, stage);
    rep.host_peak = std::max(rep.host_peak, l.host);
    l.zero3_gathered = Bytes(std::max(0.0, peak_gathered));
    l.activations = Bytes(peak_dynamic) - l.zero3_gathered;
    l.fragmentation = model::fragmentation_of(workload, cluster.gpu, Bytes(peak_dynamic) + base.comm_buffers);
    const double peak = l.peak().value();
    Bytes& sp = rep.stage_peaks[static_cast<size_t>(stage)];
    sp = std::max(sp, l.peak());
    if (peak > worst_peak) {
      worst_peak = peak;
      rep.worst = l;
      rep.worst_rank = ranks[i];
      rep.worst_stage = stage;
    }
  }
  rep.host_capacity = cluster.gpu.host_memory;
  const bool host_fits = rep.host_capacity.value() <= 0 || rep.host_peak <= rep.host_capacity;
  rep.fits_in_memory = worst_peak <= rep.capacity.value() && host_fits;
  if (worst_peak > rep.capacity.value()) {
    const model::MemoryLedger& l = rep.worst;
    rep.reason = "GPU " + std::to_string(rep.worst_rank) + " (pipeline stage " +
                 std::to_string(rep.worst_stage) + ") needs " + gib(l.peak()) + " but has " +
                 gib(rep.capacity) + ": over by " + gib(l.peak() - rep.capacity) + "; weights " +
                 gib(l.weights) + ", gradients " + gib(l.gradients) + ", optimizer states " +
                 gib(l.optimizer) + ", activations " + gib(l.activations) + " (" +
                 std::to_string(model::in_flight_micro_batches(workload, rep.worst_stage)) +
                 " micro-batches in flight), other " + gib(l.other());
  }
  if (!host_fits)
    rep.reason += std::string(rep.reason.empty() ? "" : "; ") + "the offloaded activations need " +
                  gib(rep.host_peak) + " of host memory per GPU, which has " + gib(rep.host_capacity) +
                  " (gpu.host_memory)";
  return rep;
}

} // namespace stepsim::report
