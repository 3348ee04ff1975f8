#pragma once
// Private to graph/: the passes of one TP group of a pipeline stage, in the stage's schedule
// order: per layer its compute blocks with their TP collectives, ZeRO-3's gathers ahead of them
// and reduce-scatters after them, the gradient buckets as backward finalizes them, activation
// offloading, and combined 1F1B pairs (parallel.ep_overlap).

#include "graph/block_costs.hpp"
#include "graph/dp_emitter.hpp"
#include "graph/emit.hpp"
#include "graph/moe_cp_emitter.hpp"
#include "graph/rank_streams.hpp"
#include "graph/schedule.hpp"
#include "graph/tp_emitter.hpp"
#include "model/memory.hpp"

#include <vector>

namespace stepsim::graph::detail {

/// What a TP group's passes emit into, and the emitters they call.
struct StagePassesOptions {
  const StepShape& shape;
  const BuildOptions& build; ///< pass overhead, host bandwidth, tensor-list collective cost
  StepGraph& graph;
  RankStreams& streams;
  BlockCosts& costs;
  TpEmitter& tp;
  DpEmitter& dp;
  MoeCpEmitter& moe_cp;
};

/// Builds every pass of the TP group of replica `d` on stage `p`.
class StagePasses {
public:
  StagePasses(const StagePassesOptions& o, int d, int p);

  /// Emits the passes, in the stage's order (graph/schedule.hpp).
  void build();

private:
  class Pass; // one pass's emission (stage_passes.cpp)

  /// Per rank: where the current combined 1F1B pair started (its last compute and EP tasks
  /// before it) and the first pass's last compute task.
  struct PairState {
    TaskId start_compute = NO_TASK;
    TaskId start_ep = NO_TASK;
    TaskId first_last = NO_TASK;
  };

  /// One compute task on every rank of the group (or the tasks the MoE and CP emitter replaces it
  /// with), each after its rank's compute stream and `call.extra_dep`.
  std::vector<TaskId> compute(const BlockCall& call);

  /// Whether chunk-local layer `l` keeps its activations in host memory.
  [[nodiscard]] bool offloaded(int l) const;
  /// The activations chunk-local layer `l` keeps on the GPU between its forward and its backward:
  /// none when offloaded (the staging copy in flight is a buffer of the ledger's,
  /// model::persistent_memory); its input when fully recomputed; otherwise all it stores (with
  /// recompute: full and recompute_layers, a layer past the recomputed ones keeps the working set).
  [[nodiscard]] model::LayerActivations kept_activations(int l) const;
  /// An offloaded layer's copy to (forward) or from (backward) host memory runs beside its
  /// compute on a copy engine; when it takes longer than the layer's compute on a rank (the
  /// compute tasks created since `layer_start`), the layer's last compute task waits for the rest.
  void offload_copy(int l, size_t layer_start);

  /// Combined 1F1B pairs of a stage's pass order: 0 alone, 1 the first, 2 the second of a pair.
  /// DualPipe and DualPipeV: the pairs their order marks (PassRef::paired).
  /// Greedy from the start: a forward and a backward next to each other, of different (chunk,
  /// micro-batch), pair up (the interleaved schedule's steady state: forward k + warm-up with
  /// backward k; without a pipeline: each forward with the previous micro-batch's backward).
  [[nodiscard]] std::vector<int> combined_pairs(const std::vector<PassRef>& order) const;
  /// Before the first pass of a pair: where the pair starts.
  void open_pair();
  /// Before the second: its tasks follow the pair's start, not the first pass.
  void second_of_pair();
  /// After the second: the pair ends when both passes have; the second pass's tasks since
  /// `tasks_before` run alongside the first's (trace lane 1).
  void close_pair(size_t tasks_before);

  StagePassesOptions o_;
  const WorkloadSpec& w_;
  const RankGrid& grid_;
  StepGraph& g_;
  RankStreams& streams_;
  int p_;
  TpGroup group_;
  model::LayerActivations stored_, working_;
  int pass_index_ = 0;
  std::vector<int> grad_passes_;      ///< per chunk: passes that finalized gradients so far
  std::vector<int> chunk_passes_;     ///< per chunk: its micro-batches (m/2 per chunk under DualPipe)
  std::vector<char> chunk_forwarded_; ///< per chunk: whether its first forward was emitted
  ParamGathers param_gathers_;
  std::vector<PairState> pair_;
  TaskId pair_start_tp_ = NO_TASK;
};

} // namespace stepsim::graph::detail
