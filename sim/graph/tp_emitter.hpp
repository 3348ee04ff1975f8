#pragma once
// Private to graph/: the tensor-parallel collectives of a TP group: after each block an
// all-reduce (with sequence parallelism a reduce-scatter and an all-gather), in the backward
// taken apart around the block's input linear (docs/model.md, "TP in the backward"), and the
// cross-entropy's all-reduces.

#include "graph/block_costs.hpp"
#include "graph/emit.hpp"
#include "graph/moe_cp_emitter.hpp"
#include "graph/rank_streams.hpp"

#include <vector>

namespace stepsim::graph::detail {

/// The ranks of a TP group and its TP stream's tail.
struct TpGroup {
  std::vector<Rank> ranks;   ///< the simulated ranks (the first, when TP is folded)
  std::vector<Rank> members; ///< every rank of the group: the TP collectives' participants
  TaskId chain = NO_TASK;    ///< the group's last TP collective
};

/// The TP collective(s) after one block: at `site`, their payload scaled by `rs_scale` (the
/// reduce-scatter) and `ag_scale` (the all-gather; an MoE layer's experts gather and scatter the
/// routed copies, TpEmitter::moe_copies; a scale of 0 leaves that collective out).
struct TpCollectives {
  TaskSite site{};
  double rs_scale = 1.0;
  double ag_scale = 1.0;
  CommRole role = CommRole::NONE;
  /// The dense block (ATTENTION or MLP) whose forward the collectives follow: with
  /// parallel.tp_comm_overlap they are pipelined with its linear GEMMs. NONE: not pipelined.
  Block block = Block::NONE;
};

/// What the TP emitter emits into and reads.
struct TpOptions {
  const StepShape& shape;
  StepGraph& graph;
  RankStreams& streams;
  BlockCosts& costs;
  const MoeCpEmitter& moe_cp; ///< which blocks it emits (their backward has no input linear to split)
};

class TpEmitter {
public:
  explicit TpEmitter(const TpOptions& o) : o_(o), w_(o.shape.workload), grid_(o.shape.grid), g_(o.graph) {}

  /// A TP-group collective `op` of the full b*s*h activation at `site`, issued by `rank` (the
  /// group's first).
  [[nodiscard]] Task task(CollectiveOp op, const TaskSite& site, Rank rank) const;

  /// The collective(s) `c` after a block whose tasks (per rank) are `producers`; the next compute
  /// of each rank waits for the last. With parallel.tp_comm_overlap and sp, after a dense forward
  /// block (`c.block`): each collective's first (tp - 1)/tp chunks run beside the block's linear
  /// GEMMs, carved off the end of each rank's task (the kernel profile's GEMM time, else the
  /// linears' share of the block's forward FLOPs, model::BlockWork::weight_gemms), and its last
  /// chunk after them (docs/model.md, "TP
  /// communication overlap"). Returns each rank's last compute task of the block (`producers`, or
  /// the carved pieces).
  std::vector<TaskId> after_block(TpGroup& group, const std::vector<TaskId>& producers,
                                  const TpCollectives& c);

  /// after_block's collectives after a backward block, where the block ends in a column-parallel
  /// input linear (QKV, fc1, the logits): the collective summing its input gradient is issued
  /// after its data-gradient GEMM and, with `parallel.tp_grad_overlap`, runs beside its
  /// weight-gradient GEMM; with SP the linear's input, kept split over the TP ranks, is
  /// all-gathered again for that GEMM (beside the data-gradient GEMM with the overlap, before the
  /// weight gradient without it), and the all-gather of the gradient into the block below follows
  /// both. Returns each rank's last compute task of the block (its weight gradient).
  std::vector<TaskId> after_backward_block(TpGroup& group, std::vector<TaskId> block_tasks, Block block,
                                           const TpCollectives& c);

  /// The vocabulary-parallel cross-entropy of each output head (the model's, and one per
  /// multi-token-prediction depth) sums three per-token fp32 values over the TP ranks: the logits'
  /// maximum, the exponentials' sum and the target's logit. Three small all-reduces after the
  /// logits' forward; latency-bound. The next compute waits for the last.
  void loss_all_reduces(TpGroup& group, const std::vector<TaskId>& producers, int stage, int mb);

  /// With sequence parallelism, the factor on the TP all-gather into and the reduce-scatter out
  /// of an MoE layer's experts: Megatron's all-to-all dispatcher gathers the routed copies of the
  /// TP group's tokens (top_k per token) for the TP-split experts, not the tokens. 0 when the
  /// expert groups fold over the TP ranks (etp = 1): each GPU routes its own sequence share, so
  /// neither collective exists. 1 otherwise (and for a layer index below 0).
  [[nodiscard]] double moe_copies(int layer) const;

private:
  /// Whether `block`'s backward ends in a column-parallel input linear whose gradient collective
  /// after_backward_block can take apart: attention with per-head projections (not MLA, whose
  /// down-projections are replicated), a dense MLP, the output layer.
  [[nodiscard]] bool has_input_linear(Block block, int layer) const;
  /// Whether after_block pipelines `c` with its block's linears (tp_comm_overlap, sp, a dense
  /// forward or recomputed block of plain attention or a dense MLP).
  [[nodiscard]] bool pipelines(const TpCollectives& c) const;
  /// The pipelined collectives of `c` after `producers` (after_block).
  std::vector<TaskId> pipelined_after_block(TpGroup& group, const std::vector<TaskId>& producers,
                                            const TpCollectives& c);
  /// A piece of compute task `from` (its rank, block, pass) of `duration`, after `from`
  /// (Task::piece `piece`).
  TaskId carve(TaskId from, Seconds duration, uint8_t piece);
  /// A block split into pieces ends with `last` on `rank`: its activations and gathered weights
  /// are freed there (moved from `first`), and the rank's next compute follows it.
  void end_block_with(TaskId first, TaskId last, Rank rank);
  /// Adds TP collective `t` over the group after `deps` and the group's previous TP collective.
  TaskId chain(const Task& t, TpGroup& group, const std::vector<TaskId>& deps);
  /// One collective `op` of `c` (its payload scaled by `scale`) after `deps`.
  TaskId collective(CollectiveOp op, double scale, TpGroup& group, const TpCollectives& c,
                    const std::vector<TaskId>& deps);
  /// The next compute task of every rank of the group waits for `last`.
  void wait_for(const TpGroup& group, TaskId last);

  TpOptions o_;
  const WorkloadSpec& w_;
  const RankGrid& grid_;
  StepGraph& g_;
};

} // namespace stepsim::graph::detail
