#pragma once
// Private to graph/: what the step's emitters share: the facts of the step they all read, the
// compute blocks they are asked to emit, and the shape of a collective task.

#include "config/spec.hpp"
#include "graph/rank_streams.hpp"
#include "graph/step_builder.hpp"
#include "graph/step_graph.hpp"

#include <vector>

namespace stepsim::graph::detail {

/// The facts of the step every emitter reads, set once by the builder.
struct StepShape {
  const WorkloadSpec& workload;
  RankGrid grid{};
  int micro_batches = 0;       ///< per pipeline per step
  int vp = 1;                  ///< model chunks per stage (ParallelSpec::chunks_per_stage)
  std::vector<int> replicas{}; ///< simulated DP replicas' d indices, ascending
  int unit = 1;                ///< consecutive d indices folded as one unit
  bool fold_cp = false;        ///< only CP index 0 simulated (dense models, fold_dp)
  bool fold_tp = false; ///< one rank per TP group simulated (BuildOptions::fold_tp), except `whole_tp`'s
  /// Per replica d, with fold_tp: the replicas with a TP group only partly distinct (some of its
  /// ranks on a slow GPU, the others not), every rank of which is simulated (a replica's TP ranks
  /// share its pipeline sends' and DP traffic's NICs with the other stages' same TP rank, so a
  /// replica is folded whole or not at all). A group whose ranks are all distinct alike folds.
  std::vector<bool> whole_tp{};
  /// TP ranks simulated of each TP group of replica d: 1 where folded, else every one.
  [[nodiscard]] int tp_simulated(int d) const {
    return fold_tp && !whole_tp[static_cast<size_t>(d)] ? 1 : grid.tp;
  }
  /// Per simulated replica d (empty, or grid.dp entries): the replicas whose pipeline sends and
  /// tied-embedding and gradient-norm all-reduces copy its own (folded CP ranks, or the other
  /// replicas of its class, BuildOptions::replica_class).
  std::vector<std::vector<int>> copied{};
  bool split = false; ///< backward split into B and W passes (zero-bubble schedules)
  bool sp = false;    ///< sequence parallelism over a TP group of more than one GPU
  int zero = 0;       ///< ZeRO stage
};

/// ZeRO-3 for an MoE block: per rank of the TP group, the all-gather of its local experts
/// (MoeCpEmitter::expert_gather) that the experts' compute waits for, and the gathered bytes that
/// compute frees (0: kept for a later pass, as the recompute keeps them for the backward).
struct ExpertShards {
  std::vector<TaskId> gather{};
  Bytes free{0.0};
};

/// One compute block (one task per rank, or the tasks replacing it) on every rank of a TP group.
struct BlockCall {
  Block block = Block::NONE;
  Phase phase = Phase::FORWARD;
  int stage = 0;
  int layer = -1; ///< global layer; -1 for the output layer
  int mb = -1;
  Bytes alloc{0.0};                ///< activations it allocates
  Bytes free{0.0};                 ///< activations it frees
  std::vector<TaskId> extra_dep{}; ///< per rank, a further task to wait for (NO_TASK: none); or empty
  Bytes param_free{0.0};           ///< ZeRO-3 dense parameters its last compute task frees
  ExpertShards shards{};           ///< the experts' ZeRO-3 gathers (empty without ZeRO-3)
};

/// Where a collective task sits in the step.
struct TaskSite {
  Phase phase = Phase::FORWARD;
  int stage = 0;
  int layer = -1;
  int mb = -1;
};

/// A collective task of `group` on `stream` at `site` moving `bytes` per GPU.
inline Task collective_task(CommGroup group, CollectiveOp op, Stream stream, const TaskSite& site,
                            Bytes bytes) {
  Task task;
  task.phase = site.phase;
  task.group = group;
  task.op = op;
  task.stream = stream;
  task.stage = site.stage;
  task.layer = site.layer;
  task.micro_batch = site.mb;
  task.bytes = bytes;
  return task;
}

} // namespace stepsim::graph::detail
