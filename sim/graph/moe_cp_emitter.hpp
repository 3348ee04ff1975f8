#pragma once
// Private to graph/: emits the tasks of mixture-of-experts MLP blocks (router, shared experts,
// expert-parallel all-to-all dispatch and combine, grouped expert GEMMs, expert-data-parallel
// gradient reduction) and of context-parallel ring attention (attention split into chunks, K,V
// blocks passed around the CP ring by p2p sends). The step builder hands it the compute blocks it
// handles (one call replaces one compute task) and calls finish() once every pass exists.
// docs/moe.md describes the task shapes.

#include "config/spec.hpp"
#include "graph/block_costs.hpp"
#include "graph/emit.hpp"
#include "graph/rank_streams.hpp"
#include "graph/step_builder.hpp"
#include "graph/step_graph.hpp"

#include <map>
#include <tuple>
#include <utility>
#include <vector>

namespace stepsim::graph::detail {

/// What the MoE and CP emitter emits into and reads.
struct MoeCpOptions {
  const StepShape&
      shape; ///< representative CP (shape.fold_cp): only CP index 0 of each CP group is simulated
  /// One rank stands for its EP group (BuildOptions::fold_ep); its routed experts carry the
  /// group's largest load.
  bool representative_ep = false;
  StepGraph& graph;
  RankStreams& streams; ///< orders each rank's tasks
  BlockCosts& costs;    ///< a dense block's cost, which the emitted tasks scale by their FLOPs
};

/// ZeRO-3 (and ZeRO-1/2's gathers of the updated experts): the all-gather of the local experts
/// of `site.layer` (`bytes` per GPU, each expert split by TP) over the expert-data-parallel group
/// of `rank` for (site.mb, site.phase), created by the first member that issues it with `held`
/// gathered bytes per member; `rank` chains it on its DP stream after `after`.
struct ExpertGather {
  Rank rank = 0;
  TaskSite site{};
  TaskId after = NO_TASK;
  Bytes bytes{0.0};
  Bytes held{0.0};
};

class MoeCpEmitter {
public:
  explicit MoeCpEmitter(const MoeCpOptions& o);

  /// True when the compute task (block, layer) is emitted here: the MLP of an MoE layer, and the
  /// attention block when cp > 1.
  [[nodiscard]] bool handles(Block block, int layer) const;

  /// Emits the tasks replacing one compute task `call` on every rank of the TP group `group`.
  /// Returns, per rank, the task that plays the replaced task's role for what follows (its last
  /// task: the next TP collective, the PP send and the gradient bucket wait for it); entry_of()
  /// gives the first ones.
  std::vector<TaskId> emit(const std::vector<Rank>& group, const BlockCall& call);

  /// Issues `x` (ExpertGather). NO_TASK when the group is one GPU (the experts are not sharded).
  TaskId expert_gather(const ExpertGather& x);

  /// The tasks a PP receive into `t` must precede: the first tasks of the block `t` ends, or `t`.
  [[nodiscard]] std::vector<TaskId> entry_of(TaskId t) const;

  /// Adds the CP ring sends between the attention chunks of every simulated CP group (with
  /// `representative_cp`, of every CP group whose index-0 rank is simulated, the other members'
  /// sends copying its own).
  void finish();

private:
  struct Ring {
    std::vector<TaskId> chunk; ///< attention core chunks 0..cp-1 (chunk i >= 1 waits for step i)
    TaskId start = NO_TASK;    ///< forward: the projections (the K,V block exists after them)
    bool backward = false;     ///< backward rings also carry dK,dV and wait for the previous chunk
    Phase phase = Phase::FORWARD;
    int stage = 0, layer = 0, mb = 0;
  };

  /// A compute task replacing part of a block: `flops` of `block`, its time (and bytes) scaled
  /// from the cost of the dense `base` block in the matching phase.
  struct Piece {
    Block block = Block::NONE;
    Flops flops{0.0};
    Block base = Block::NONE;
    Bytes alloc{0.0};
    Bytes free{0.0};
    Bytes param_free{0.0};
  };
  /// One compute task on rank r after its previous compute task and pending collective.
  TaskId add_compute(Rank r, const TaskSite& site, const Piece& piece);
  /// Cost of `flops` scaled from the builder's cost of `base` in the matching phase.
  ComputeCost scaled(Block base, Phase phase, int stage, Flops flops, Bytes& bytes);
  /// The EP all-to-all of rank r's EP group for (layer, mb, phase, which); created by the first
  /// member that issues it; r chains it on its EP stream after `deps`.
  TaskId ep_all_to_all(Rank r, const TaskSite& site, int which, const std::vector<TaskId>& deps);
  /// Expert gradients of `layer` reduced over rank r's expert-data-parallel group after `producer`.
  void expert_gradients(Rank r, const TaskSite& site, TaskId producer);

  /// An MoE block's pass: where its tasks sit, its FLOPs factor over the forward, and the
  /// router's and the shared experts' FLOPs in it.
  struct MoePass {
    TaskSite site{};
    double factor = 1.0;
    Flops router{0.0};
    Flops shared{0.0};
  };
  [[nodiscard]] MoePass moe_pass(const BlockCall& call) const;
  /// Rank r's routed experts' FLOPs in `pass` (the most loaded EP rank's when it stands for its
  /// group).
  [[nodiscard]] Flops routed_flops(const MoePass& pass, Rank r) const;
  /// Task `id` of rank `i` of the group also waits for the call's extra dependency, or for the
  /// experts' ZeRO-3 gather.
  void after_extra(const BlockCall& call, size_t i, TaskId id);
  void after_gather(const BlockCall& call, size_t i, TaskId id);
  std::vector<TaskId> emit_moe(const std::vector<Rank>& group, const BlockCall& call);
  std::vector<TaskId> moe_weight_grad(const std::vector<Rank>& group, const BlockCall& call,
                                      const MoePass& pass);
  std::vector<TaskId> moe_forward(const std::vector<Rank>& group, const BlockCall& call, const MoePass& pass);
  std::vector<TaskId> moe_backward(const std::vector<Rank>& group, const BlockCall& call,
                                   const MoePass& pass);
  std::vector<TaskId> emit_cp_attention(const std::vector<Rank>& group, const BlockCall& call);

  const WorkloadSpec& w_;
  const RankGrid& grid_;
  int m_ = 0;
  bool split_ = false;
  bool representative_ep_ = false;
  bool representative_cp_ = false;
  StepGraph& g_;
  RankStreams& streams_;
  BlockCosts& costs_;
  Bytes param_free_; ///< ZeRO-3 parameters the block's last task frees (emit's argument)
  std::map<TaskId, std::vector<TaskId>> entry_;
  std::map<std::tuple<int, int, int, int, int, int>, TaskId>
      a2a_; ///< (stage, first member, layer, mb, phase, which)
  std::map<std::tuple<int, int, int, int>, TaskId> expert_reduce_; ///< (stage, first member, layer, mb or -1)
  std::map<std::tuple<int, int, int, int, int>, TaskId>
      expert_gather_; ///< (stage, first member, layer, mb, phase)
  std::map<std::pair<Rank, int>, int>
      grad_passes_; ///< (rank, layer) -> passes that finalized expert gradients
  std::map<Rank, std::vector<Ring>> rings_;
};

} // namespace stepsim::graph::detail
