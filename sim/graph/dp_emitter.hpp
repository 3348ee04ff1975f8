#pragma once
// Private to graph/: data parallelism and ZeRO: the DP collectives shared by the simulated
// replicas (gradient buckets, ZeRO-3's per-layer gathers and reduce-scatters, ZeRO-1/2's
// parameter gathers after the optimizer or under the forward), the end of step's gradient
// synchronization and the optimizer step.

#include "graph/collective_key.hpp"
#include "graph/emit.hpp"
#include "graph/moe_cp_emitter.hpp"
#include "graph/rank_streams.hpp"
#include "model/transformer.hpp"

#include <map>
#include <utility>
#include <vector>

namespace stepsim::graph::detail {

/// One rank's issue of a shared DP collective: the first replica to issue `key` creates the task
/// (`op` of `bytes` per GPU at `key`'s stage and layer); each issuing rank chains it on its DP
/// stream after `producer`.
struct DpCollective {
  Rank rank = 0;
  CollectiveKey key{};
  CollectiveOp op = CollectiveOp::ALL_REDUCE;
  Bytes bytes{0.0};
  Phase phase = Phase::BACKWARD;
  int mb = -1;
  TaskId producer = NO_TASK;
  Bytes alloc{0.0}; ///< parameters it gathers into memory, per GPU
};

/// A stage's (or chunk's) gradient items in the order backward produces them: output layer,
/// layers last to first, embedding. `layer_of[i]` is the chunk-local layer (-1 output, -2
/// embedding).
struct GradientItems {
  std::vector<double> params;
  std::vector<int> layer_of;
};

/// Per bucket: its last item and its parameters.
using Buckets = std::vector<std::pair<size_t, double>>;

/// Per model chunk, its DP buckets' parameter all-gathers (per TP rank) and which bucket holds
/// each gradient item (ZeRO-1/2 with training.overlap_param_gather).
struct ParamGathers {
  std::vector<std::vector<std::vector<TaskId>>> gather; ///< [chunk][bucket][tp rank]
  std::vector<std::vector<size_t>> bucket_of;           ///< [chunk][item]
  /// [chunk] local layer -> its routed experts' gather over their expert-data-parallel group,
  /// per TP rank (MoE layers whose experts have one).
  std::vector<std::map<int, std::vector<TaskId>>> experts;
  /// What the first forward of `chunk`'s local layer `l` passes to its experts' compute.
  [[nodiscard]] ExpertShards experts_of(int chunk, int l) const;
  /// What the forward of item `item` of `chunk` waits for (none without the overlap).
  [[nodiscard]] std::vector<TaskId> of(int chunk, size_t item) const;
};

/// What the DP emitter emits into and reads.
struct DpOptions {
  const StepShape& shape;
  StepGraph& graph;
  RankStreams& streams;
  MoeCpEmitter& moe_cp; ///< the routed experts' gathers over their expert-data-parallel groups
};

class DpEmitter {
public:
  explicit DpEmitter(const DpOptions& o) : o_(o), w_(o.shape.workload), grid_(o.shape.grid), g_(o.graph) {}

  /// Issues `c` (creating the shared task on its first issue); returns the task.
  TaskId collective(const DpCollective& c);

  /// ZeRO-3 hybrid sharding (parallel.dp_shard below dp): the GPUs of a shard group in the grid's
  /// DP index (dp_shard * cp), else 0.
  [[nodiscard]] int hybrid_shard() const;
  /// Rank r's ZeRO-3 DP group at stage p with TP index t: all of DP, or under hybrid sharding its
  /// shard group (`replicas` false) or the replicas of its shard position (true).
  [[nodiscard]] DpGroup zero3_group(int p, int t, Rank r, bool replicas) const;

  /// Layers of local model chunk `chunk` of stage `p`: global chunk chunk*pp + p
  /// (model::chunk_span: even, or parallel.chunk_layers); the embedding sits in global chunk 0,
  /// the output (and the MTP layers) in the last one.
  [[nodiscard]] model::StageLayout chunk_layout(int p, int chunk) const;
  [[nodiscard]] GradientItems gradient_items(const model::StageLayout& layout) const;
  /// Bucket boundaries over the gradient items: each bucket closes at the first item that makes
  /// it reach `dp_bucket`, and at the last item.
  [[nodiscard]] Buckets buckets(const std::vector<double>& params) const;

  /// Megatron's distributed optimizer with overlap_param_gather: the parameters the previous
  /// step's optimizer updated are all-gathered bucket by bucket as the forward reaches them, so a
  /// step starts with the gathers on the DP stream, chunk by chunk in forward order (a chunk's
  /// buckets from its first layers to its output layer, each followed by its MoE layers' routed
  /// experts over their expert-data-parallel group), and a chunk's first forward waits, layer by
  /// layer, for its bucket (and the experts' compute for theirs). The step then ends with the
  /// optimizer: the same period as the steady state of consecutive steps.
  ParamGathers overlapped_param_gathers(const std::vector<Rank>& group, int p);

  /// After the DP reduction and before the optimizer (Megatron's finalize_model_grads and the
  /// gradient clipping): with SP, the gradients of the replicated weights computed on sequence
  /// shards all-reduce over the TP group; with pp > 1 and a copy of the input embedding on the
  /// last stage (a tied output layer, or the multi-token-prediction modules' embedding), the two
  /// copies' gradients all-reduce between the first and the last stage; then the gradient norm
  /// (and with fp16 the overflow check) all-reduces over the replica's tp*pp GPUs (Megatron's
  /// model-parallel group; its distributed optimizer also spans the DP replicas, whose latency
  /// this leaves out), so every optimizer waits for the slowest stage's gradients. Each waits for
  /// its GPUs' compute, DP stream and pending collective; the next one on a GPU waits for it.
  void grad_sync();

  /// The optimizer step of the simulated ranks of (stage p, TP index t), costed by `time`, and
  /// ZeRO-1/2's gathers of the updated parameters after it (unless the next step's forward does).
  void optimizer(int p, int t, const ComputeTimeFn& time);

private:
  /// The ranks of DP group `g` (DpGroup): all dp of (stage, TP index), or its shard group, or the
  /// replicas of its shard position.
  [[nodiscard]] std::vector<Rank> group(const DpGroup& g) const;
  /// One gradient-synchronization all-reduce (grad_sync).
  struct Sync {
    CommGroup group = CommGroup::DP;
    Stream stream = Stream::DP_COMM;
    int stage = -1;
    Bytes bytes{0.0};
    CommRole role = CommRole::NONE;
  };
  /// An all-reduce on `ranks` after their work; with `copies`, the same all-reduce on each of those
  /// rank lists (the replicas d stands for, StepShape::copied) after the same tasks: they load
  /// their links, nothing waits for them.
  void sync(const Sync& s, const std::vector<Rank>& ranks, const std::vector<std::vector<Rank>>& copies = {});
  /// `ranks` of replica d moved to each replica that d stands for (StepShape::copied).
  [[nodiscard]] std::vector<std::vector<Rank>> copies_of(int d, const std::vector<Rank>& ranks) const;

  DpOptions o_;
  const WorkloadSpec& w_;
  const RankGrid& grid_;
  StepGraph& g_;
  std::map<CollectiveKey, TaskId> tasks_;
};

} // namespace stepsim::graph::detail
