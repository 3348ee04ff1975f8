#include "graph/step_graph.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace stepsim::graph {

std::string_view to_string(CollectiveOp op) {
  switch (op) {
  case CollectiveOp::ALL_REDUCE: return "all_reduce";
  case CollectiveOp::ALL_GATHER: return "all_gather";
  case CollectiveOp::REDUCE_SCATTER: return "reduce_scatter";
  case CollectiveOp::SEND: return "send";
  case CollectiveOp::BROADCAST: return "broadcast";
  case CollectiveOp::REDUCE: return "reduce";
  case CollectiveOp::ALL_TO_ALL: return "all_to_all";
  }
  return "?";
}

std::string_view to_string(CommGroup g) {
  switch (g) {
  case CommGroup::NONE: return "none";
  case CommGroup::TP: return "tp";
  case CommGroup::PP: return "pp";
  case CommGroup::DP: return "dp";
  case CommGroup::EP: return "ep";
  case CommGroup::CP: return "cp";
  }
  return "?";
}

std::string_view to_string(CommRole r) {
  switch (r) {
  case CommRole::NONE: return "";
  case CommRole::EMBEDDING: return "embedding";
  case CommRole::LOGITS: return "logits";
  case CommRole::LOSS: return "loss";
  case CommRole::NORM_GRADS: return "norm grads";
  case CommRole::TIED_EMBEDDING: return "embedding grads";
  case CommRole::GRAD_NORM: return "grad norm";
  }
  return "?";
}

std::string_view to_string(Phase p) {
  switch (p) {
  case Phase::FORWARD: return "forward";
  case Phase::BACKWARD: return "backward";
  case Phase::RECOMPUTE: return "recompute";
  case Phase::OPTIMIZER: return "optimizer";
  case Phase::WEIGHT_GRAD: return "weight_grad";
  }
  return "?";
}

std::string_view to_string(Block b) {
  switch (b) {
  case Block::NONE: return "none";
  case Block::ATTENTION: return "attention";
  case Block::MLP: return "mlp";
  case Block::LOGITS: return "logits";
  case Block::OPTIMIZER: return "optimizer";
  case Block::ROUTER: return "router";
  case Block::EXPERTS: return "experts";
  }
  return "?";
}

std::string_view to_string(Stream s) {
  switch (s) {
  case Stream::COMPUTE: return "compute";
  case Stream::TP_COMM: return "tp comm";
  case Stream::PP_COMM: return "pp comm";
  case Stream::DP_COMM: return "dp comm";
  case Stream::EP_COMM: return "ep comm";
  case Stream::CP_COMM: return "cp comm";
  }
  return "?";
}

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
    throw ModelError(what + " task of GPU " + std::to_string(t.rank) + (compute ? " would take " : " would carry ") +
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
