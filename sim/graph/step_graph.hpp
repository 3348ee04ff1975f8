#pragma once
// The training step as a DAG of tasks, kept in our own arrays (never pre-built inside SimGrid).
// Stream order (CUDA-stream semantics: a stream runs its tasks one at a time, in issue order) is
// expressed as ordinary edges, so the engine only has to honour edges.

#include "core/huge_page_allocator.hpp"
#include "core/units.hpp"
#include "core/vocabulary.hpp"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace stepsim::graph {

using TaskId = uint32_t;
using Rank = int32_t;

// The step's vocabulary lives in core/vocabulary.hpp; graph code names it as graph::Block etc.
using stepsim::Block;
using stepsim::CollectiveOp;
using stepsim::CommGroup;
using stepsim::CommRole;
using stepsim::Phase;
using stepsim::Stream;
using stepsim::STREAM_COUNT;
using stepsim::TaskKind;
using stepsim::to_string;

/// Where a compute task's duration came from, as shares of it that sum to 1 (kernel-profile
/// lookups: measured rows, interpolation between rows, the calibrated model; or the plain
/// roofline when the cluster has no profile). See docs/kernels.md.
struct TimeSources {
  double measured = 0;
  double interpolated = 0;
  double modelled = 0;
  double roofline = 0;
};

struct Task {
  TaskKind kind = TaskKind::COMPUTE;
  Phase phase = Phase::FORWARD;
  Block block = Block::NONE;
  CommGroup group = CommGroup::NONE;
  CollectiveOp op = CollectiveOp::ALL_REDUCE;
  Stream stream = Stream::COMPUTE;
  /// 1 for the second pass of a combined 1F1B pair (parallel.ep_overlap): it runs alongside the
  /// first, so traces draw its compute, TP and EP tasks on threads of their own. 0 otherwise.
  uint8_t lane = 0;
  /// Compute: a piece of a block's backward split around its TP collective (docs/model.md, "TP in
  /// the backward"): 1 its input linear's data gradient, 2 that linear's weight gradient; 3 a
  /// forward block's linear GEMMs beside its pipelined TP collectives (tp_comm_overlap); else 0.
  uint8_t piece = 0;
  CommRole role = CommRole::NONE; ///< collectives only
  Rank rank = -1;                 ///< compute: the GPU; collective: the first simulated participant
  int32_t stage = -1;             ///< pipeline stage (PP send: the sending stage)
  int32_t layer = -1;             ///< global layer index, -1 when not a layer task
  int32_t micro_batch = -1;
  int32_t bucket = -1; ///< DP gradient/parameter bucket index, -1 when not a bucket
  /// Compute: its time. Collective: the host's part between the task becoming ready and its
  /// transfer starting (a tensor-list collective's per-rank views and copies,
  /// gpu.list_collective_per_rank), 0 for most.
  Seconds duration;
  Flops flops;              ///< compute only
  TimeSources sources;      ///< compute only: where `duration` came from
  Bytes bytes;              ///< collective payload S (per rank; nccl-tests "size"); p2p message size
  uint32_t ranks_begin = 0; ///< participants, in ring order: StepGraph::participants()
  uint32_t ranks_count = 0;
  /// Memory ledger: bytes this task allocates when it starts and frees when it ends, on its
  /// rank (compute) or on every participant (collective): stored activations, and parameters
  /// gathered by ZeRO-3.
  Bytes act_alloc;
  Bytes act_free;
  Bytes param_alloc;
  Bytes param_free;
};

/// A compute task of `rank` on its compute stream (duration, FLOPs and memory left to the caller).
inline Task compute_task(Rank rank, Block block, Phase phase, int32_t stage, int32_t layer,
                         int32_t micro_batch) {
  Task t;
  t.kind = TaskKind::COMPUTE;
  t.phase = phase;
  t.block = block;
  t.stream = Stream::COMPUTE;
  t.rank = rank;
  t.stage = stage;
  t.layer = layer;
  t.micro_batch = micro_batch;
  return t;
}

/// A DAG of tasks with compressed adjacency. Build with add_task/add_edge, then finalize().
class StepGraph {
public:
  TaskId add_task(const Task& t);
  /// Adds a collective over `ranks` (ring order); sets ranks_begin/ranks_count.
  TaskId add_collective(Task t, std::span<const Rank> ranks);
  /// `before` must finish before `after` starts. Duplicate edges are harmless.
  void add_edge(TaskId before, TaskId after);
  /// Compresses adjacency; no add_* afterwards. Throws SimulationError on a cycle.
  void finalize();

  [[nodiscard]] size_t size() const { return tasks_.size(); }
  [[nodiscard]] const Task& task(TaskId id) const { return tasks_[id]; }
  /// A task to amend while building (not after finalize()).
  [[nodiscard]] Task& mutable_task(TaskId id);
  [[nodiscard]] std::span<const Task> tasks() const { return tasks_; }
  [[nodiscard]] std::span<const Rank> participants(const Task& t) const {
    return {rank_pool_.data() + t.ranks_begin, t.ranks_count};
  }
  [[nodiscard]] std::span<const TaskId> successors(TaskId id) const {
    return {succ_.data() + succ_begin_[id], succ_begin_[id + 1] - succ_begin_[id]};
  }
  [[nodiscard]] std::span<const TaskId> predecessors(TaskId id) const {
    return {pred_.data() + pred_begin_[id], pred_begin_[id + 1] - pred_begin_[id]};
  }
  [[nodiscard]] bool finalized() const { return finalized_; }

private:
  // A step's arrays reach hundreds of MB: huge pages spare most of the page faults of filling them.
  template <class T> using Array = std::vector<T, HugePageAllocator<T>>;
  Array<Task> tasks_;
  Array<Rank> rank_pool_;
  Array<std::pair<TaskId, TaskId>> edges_;
  Array<uint32_t> succ_begin_, pred_begin_;
  Array<TaskId> succ_, pred_;
  bool finalized_ = false;
};

} // namespace stepsim::graph
