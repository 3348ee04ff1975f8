#include "graph/steps.hpp"

#include "core/error.hpp"

#include <cmath>
#include <map>
#include <numbers>
#include <string>

namespace stepsim::graph {

namespace {

/// SplitMix64's finaliser (Steele, Lea and Flood, OOPSLA 2014): a bijection that mixes every bit.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Copies `one`'s tasks and edges into `out` from id `base` on, with step `step`'s noise.
void append_step(StepGraph& out, const StepGraph& one, const StepsOptions& options, int step) {
  const auto base = static_cast<TaskId>(out.size());
  for (TaskId id = 0; id < one.size(); ++id) {
    Task t = one.task(id);
    if (t.kind == TaskKind::COLLECTIVE) {
      out.add_collective(t, one.participants(t));
      continue;
    }
    if (options.kernel_cv > 0 && t.duration.value() > 0)
      t.duration = Seconds(t.duration.value() *
                           lognormal_factor(options.kernel_cv, {.seed = options.seed,
                                                                .step = static_cast<uint64_t>(step),
                                                                .rank = static_cast<uint64_t>(t.rank),
                                                                .task = id}));
    out.add_task(t);
  }
  for (TaskId id = 0; id < one.size(); ++id)
    for (TaskId s : one.successors(id))
      out.add_edge(base + id, base + s);
}

void check_options(const StepProgram& one, const StepsOptions& options) {
  if (options.steps < 1)
    throw ModelError("steps: expected at least 1, got " + std::to_string(options.steps));
  if (!(options.kernel_cv >= 0) || !std::isfinite(options.kernel_cv))
    throw ModelError("kernel_cv: expected a finite number >= 0, got " + std::to_string(options.kernel_cv));
  if (!one.graph.finalized())
    throw SimulationError("repeat_steps: the step graph is not finalized");
}

} // namespace

double uniform_draw(const NoiseKey& key, uint64_t stream) {
  uint64_t h = mix(key.seed);
  h = mix(h ^ key.step);
  h = mix(h ^ key.rank);
  h = mix(h ^ key.task);
  h = mix(h ^ stream);
  // The top 53 bits, centred in their cell: (k + 0.5) / 2^53 lies strictly inside (0, 1).
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}

double standard_normal(const NoiseKey& key) {
  const double u1 = uniform_draw(key, 0);
  const double u2 = uniform_draw(key, 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double lognormal_factor(double cv, const NoiseKey& key) {
  if (cv <= 0)
    return 1.0;
  const double s2 = std::log1p(cv * cv);
  return std::exp(-0.5 * s2 + std::sqrt(s2) * standard_normal(key));
}

StepProgram noisy_step(const StepProgram& one, const StepsOptions& options, int step) {
  check_options(one, options);
  StepProgram out{.graph = {},
                  .grid = one.grid,
                  .simulated_ranks = one.simulated_ranks,
                  .micro_batches = one.micro_batches};
  append_step(out.graph, one.graph, options, step);
  out.graph.finalize();
  return out;
}

StepProgram repeat_steps(const StepProgram& one, const StepsOptions& options) {
  check_options(one, options);
  if (one.simulated_ranks.empty())
    throw SimulationError("repeat_steps: the step simulates no GPU");
  StepProgram out{.graph = {},
                  .grid = one.grid,
                  .simulated_ranks = one.simulated_ranks,
                  .micro_batches = one.micro_batches};
  const auto n = static_cast<TaskId>(one.graph.size());
  for (int k = 0; k < options.steps; ++k) {
    const auto base = static_cast<TaskId>(out.graph.size());
    append_step(out.graph, one.graph, options, k);
    Task marker = compute_task(one.simulated_ranks.front(), Block::NONE, Phase::OPTIMIZER, -1, -1, -1);
    const TaskId end = out.graph.add_task(marker);
    for (TaskId id = 0; id < n; ++id) {
      if (one.graph.successors(id).empty())
        out.graph.add_edge(base + id, end);
      if (k > 0 && one.graph.predecessors(id).empty())
        out.graph.add_edge(base - 1, base + id);
    }
  }
  out.graph.finalize();
  return out;
}

StepSeries step_series(const StepProgram& one, int steps, const std::vector<Seconds>& end) {
  const size_t n = one.graph.size();
  if (end.size() != static_cast<size_t>(steps) * (n + 1))
    throw SimulationError("step_series: " + std::to_string(end.size()) + " end times for " +
                          std::to_string(steps) + " steps of " + std::to_string(n) + " tasks");
  StepSeries s;
  Seconds previous(0.0);
  for (int k = 0; k < steps; ++k) {
    const size_t base = static_cast<size_t>(k) * (n + 1);
    const Seconds step_end = end[base + n];
    s.step_times.push_back(step_end - previous);
    previous = step_end;
    Rank slowest = -1;
    double latest = -1;
    for (size_t i = 0; i < n; ++i) {
      const Task& t = one.graph.task(static_cast<TaskId>(i));
      if (t.kind != TaskKind::COMPUTE || t.phase == Phase::OPTIMIZER)
        continue;
      const double e = end[base + i].value();
      if (e > latest || (e == latest && t.rank < slowest)) {
        latest = e;
        slowest = t.rank;
      }
    }
    s.slowest_rank.push_back(slowest);
  }
  return s;
}

ReplicaTimes replica_times(const StepProgram& one, int steps, const std::vector<Seconds>& end) {
  const size_t n = one.graph.size();
  if (end.size() != static_cast<size_t>(steps) * (n + 1))
    throw SimulationError("replica_times: " + std::to_string(end.size()) + " end times for " +
                          std::to_string(steps) + " steps of " + std::to_string(n) + " tasks");
  const int unit = std::max(1, one.replica_unit);
  std::map<int, size_t> index; // unit -> its column
  for (const Rank r : one.simulated_ranks)
    index.emplace(one.grid.dp_of(r) / unit, 0);
  size_t column = 0;
  for (auto& [u, i] : index)
    i = column++;
  ReplicaTimes out;
  Seconds start(0.0);
  for (int k = 0; k < steps; ++k) {
    const size_t base = static_cast<size_t>(k) * (n + 1);
    std::vector<double> before(index.size(), 0.0), optimizer(index.size(), 0.0);
    for (size_t i = 0; i < n; ++i) {
      const Task& t = one.graph.task(static_cast<TaskId>(i));
      if (t.kind != TaskKind::COMPUTE || t.rank < 0)
        continue;
      const auto it = index.find(one.grid.dp_of(t.rank) / unit);
      if (it == index.end())
        continue;
      double& at = (t.phase == Phase::OPTIMIZER ? optimizer : before)[it->second];
      at = std::max(at, (end[base + i] - start).value());
    }
    out.before.push_back(std::move(before));
    out.optimizer.push_back(std::move(optimizer));
    start = end[base + n];
  }
  return out;
}

} // namespace stepsim::graph
