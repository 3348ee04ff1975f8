#include "graph/step_graph.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace stepsim::graph {

TaskId StepGraph::add_task(const Task& t) {
  if (finalized_)
    throw SimulationError("StepGraph::add_task after finalize()");
  // Durations and payloads come from the cluster's figures; a degenerate one (an efficiency or a
  // peak so small that a kernel takes forever) is bad input, caught here before the engine.
  const bool compute = t.kind == TaskKind::COMPUTE;
  const double v = compute ? t.duration.value() : t.bytes.value();
  if (!std::isfinite(v) || v < 0) {
    const std::string what = compute ? std::string(to_string(t.block)) + " " + std::string(to_string(t.phase))
                                     : std::string(to_string(t.group)) + " " + std::string(to_string(t.op));
    throw ModelError(
        what + " task of GPU " + std::to_string(t.rank) + (compute ? " would take " : " would carry ") +
        std::to_string(v) + (compute ? " s" : " bytes") +
        ", not a finite non-negative amount: check the cluster's gpu.peak_flops, gpu.hbm_bandwidth "
        "and the efficiencies (gpu.compute_efficiency, memory_efficiency, gemm_efficiency, "
        "memory_bound_efficiency)");
  }
  tasks_.push_back(t);
  return static_cast<TaskId>(tasks_.size() - 1);
}

TaskId StepGraph::add_collective(Task t, std::span<const Rank> ranks) {
  t.kind = TaskKind::COLLECTIVE;
  t.ranks_begin = static_cast<uint32_t>(rank_pool_.size());
  t.ranks_count = static_cast<uint32_t>(ranks.size());
  rank_pool_.insert(rank_pool_.end(), ranks.begin(), ranks.end());
  return add_task(t);
}

Task& StepGraph::mutable_task(TaskId id) {
  if (finalized_)
    throw SimulationError("step graph: a task cannot change after finalize()");
  return tasks_.at(id);
}

void StepGraph::add_edge(TaskId before, TaskId after) {
  if (finalized_)
    throw SimulationError("StepGraph::add_edge after finalize()");
  if (before == after)
    throw SimulationError("StepGraph: self edge on task " + std::to_string(before));
  edges_.emplace_back(before, after);
}

void StepGraph::finalize() {
  const size_t n = tasks_.size();
  std::sort(edges_.begin(), edges_.end());
  edges_.erase(std::unique(edges_.begin(), edges_.end()), edges_.end());
  succ_begin_.assign(n + 1, 0);
  pred_begin_.assign(n + 1, 0);
  for (auto [a, b] : edges_) {
    ++succ_begin_[a + 1];
    ++pred_begin_[b + 1];
  }
  for (size_t i = 0; i < n; ++i) {
    succ_begin_[i + 1] += succ_begin_[i];
    pred_begin_[i + 1] += pred_begin_[i];
  }
  succ_.resize(edges_.size());
  pred_.resize(edges_.size());
  std::vector<uint32_t> sfill(succ_begin_.begin(), succ_begin_.end() - 1);
  std::vector<uint32_t> pfill(pred_begin_.begin(), pred_begin_.end() - 1);
  for (auto [a, b] : edges_) {
    succ_[sfill[a]++] = b;
    pred_[pfill[b]++] = a;
  }
  edges_.clear();
  edges_.shrink_to_fit();
  finalized_ = true;

  // Kahn's algorithm: every task must be reachable in a topological order.
  std::vector<uint32_t> indeg(n);
  std::vector<TaskId> ready;
  for (size_t i = 0; i < n; ++i) {
    indeg[i] = pred_begin_[i + 1] - pred_begin_[i];
    if (indeg[i] == 0)
      ready.push_back(static_cast<TaskId>(i));
  }
  size_t seen = 0;
  while (!ready.empty()) {
    const TaskId t = ready.back();
    ready.pop_back();
    ++seen;
    for (TaskId s : successors(t))
      if (--indeg[s] == 0)
        ready.push_back(s);
  }
  if (seen != n)
    throw SimulationError("StepGraph: the task graph has a cycle (" + std::to_string(n - seen) +
                          " tasks can never start)");
}

} // namespace stepsim::graph
