#pragma once
// The work of one compute block on one GPU of a workload, for one micro-batch: the FLOPs and HBM
// bytes of the attention, MLP, output, router, experts and optimizer blocks in each pass, with
// tensor parallelism's 1/tp, context parallelism's seq_len / cp tokens, sliding windows, MLA and
// selective recomputation applied. The step builder's compute tasks and the planner's estimate
// both cost their blocks here (docs/model.md, "Compute blocks").

#include "config/spec.hpp"
#include "core/units.hpp"

#include <cstdint>

namespace stepsim::model {

/// The tokens of a sequence on one GPU: seq_len / cp (context parallelism splits the sequence;
/// check_layout makes it divisible).
int64_t gpu_seq_len(const WorkloadSpec& w);

/// The model as one GPU of `w` sees it: `w.model` with gpu_seq_len tokens per sequence.
ModelSpec gpu_model(const WorkloadSpec& w);

/// Tokens of one micro-batch on one GPU: micro_batch * gpu_seq_len.
double gpu_tokens(const WorkloadSpec& w);

/// FLOPs and HBM bytes of one task.
struct Work {
  Flops flops;
  Bytes bytes; ///< roofline traffic estimate
};

/// A block's work in each pass on one GPU, for one micro-batch. A recomputation repeats the
/// forward.
struct BlockWork {
  Work forward;
  /// Twice the forward (the data- and the weight-gradient GEMMs, bytes likewise), plus the
  /// selective recomputation that runs first (recompute_modules: the attention core, a dense
  /// MLP, MLA's up-projections).
  Work backward;
  /// The weight-gradient GEMMs within `backward`: as many FLOPs as the forward's GEMMs (the
  /// zero-bubble schedules' W pass; the rest is B).
  Flops weight_gemms;
  /// The forward GEMM of the block's column-parallel input linear (QKV, fc1, the logits); its data
  /// and weight gradients take as many. 0 when the block has none (MLA's attention, the router).
  Flops input_linear;

  /// The share of `backward`'s FLOPs the W pass takes, clamped to [0, 1]; 0.5 without FLOPs.
  [[nodiscard]] double weight_grad_share() const;
};

/// The attention block of one layer: QKV, output projection and core, the core of a `windowed`
/// layer (ModelSpec::windowed_layer) over its window. With cp > 1 the GPU's s/cp queries meet all
/// s keys: cp chunks of its local core. Bytes: the layer's share by full-attention FLOPs.
BlockWork attention_work(const WorkloadSpec& w, bool windowed = false);

/// A dense MLP block of one layer. Bytes: the layer's share by FLOPs.
BlockWork mlp_work(const WorkloadSpec& w);

/// The output side of the last stage: the logits, and per multi-token-prediction depth its
/// projection and the logits again.
BlockWork output_work(const WorkloadSpec& w);

/// An MoE layer's router GEMM of the GPU's tokens; bytes: the two permutations of the routed
/// copies around the experts, each read and written (docs/moe.md).
BlockWork router_work(const WorkloadSpec& w);

/// An MoE layer's routed experts on one EP rank under balanced routing (the pairs of
/// ep_rank_balanced_assignments), the base the builder scales each rank's routed experts from by
/// FLOPs; bytes: the dense MLP block's per FLOP (the roofline prices both alike).
BlockWork experts_work(const WorkloadSpec& w);

/// Context parallelism's ring attention on one GPU: the attention block of attention_work split
/// into its projections and cp chunks of the core (the local queries against one K,V block).
struct RingAttentionWork {
  Flops projections;    ///< forward; the backward twice (or once in a split backward's B pass)
  Flops chunk;          ///< forward and recomputation, per chunk
  Flops chunk_backward; ///< twice a chunk, plus the chunk again when core_attn is recomputed
};
RingAttentionWork ring_attention_work(const WorkloadSpec& w);

/// Forward FLOPs of an MoE layer's parts on one GPU: the router, the shared experts, and the
/// routed experts of `assignments` token-expert pairs (model::ep_rank_assignments) split over
/// the expert tensor-parallel group.
struct MoeWork {
  Flops router;
  Flops shared;
  Flops routed;
};
MoeWork moe_forward_work(const WorkloadSpec& w, double assignments);

/// The FLOPs factor of a pass over the forward: a backward twice the forward, once when the
/// zero-bubble schedules `split` it into B and W; a forward, recomputation or W pass once.
double pass_flops_factor(bool backward, bool split);

/// The optimizer step of one GPU of `stage`: 12 FLOPs per parameter it updates
/// (optimizer_params_on_rank) and optimizer_step_bytes.
Work optimizer_work(const WorkloadSpec& w, int stage);

/// HBM bytes per gradient of training.grad_accumulation: fp32_pass, per micro-batch: the 16-bit
/// gradient read and cleared (2 + 2), the fp32 accumulator read and written (4 + 4).
inline constexpr double FP32_PASS_BYTES_PER_GRADIENT = 12.0;

/// The gradient accumulation pass of one micro-batch on one GPU of `stage`, over every gradient
/// the rank holds (gradients_held_on_rank): one add per gradient and
/// FP32_PASS_BYTES_PER_GRADIENT bytes each under training.grad_accumulation: fp32_pass; nothing
/// when the weight-gradient GEMMs accumulate (fused).
Work grad_accumulation_work(const WorkloadSpec& w, int stage);

} // namespace stepsim::model
