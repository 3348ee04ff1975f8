#pragma once
// Transformer arithmetic: parameters, FLOPs and bytes of the tasks of one training step, per
// tensor-parallel rank. Formulas: docs/model.md (after MODEL.md §1, §2, §4). No SimGrid here.

#include "config/spec.hpp"
#include "core/units.hpp"

#include <cstdint>
#include <vector>

namespace stepsim::model {

/// Bytes per element of activations, gradients and communication (bf16 and fp16: 2; fp8 training
/// keeps them bf16: 2).
double element_bytes(Precision p);

/// Parameters of one transformer layer held by one rank of a TP group of size `tp`.
/// Megatron sharding: QKV and fc1 (and their biases) column-split, attention-out and fc2
/// row-split (their biases replicated), norms replicated. With tp = 1 a GPT layer is
/// 12h^2 + 13h.
double layer_params(const ModelSpec& m, int tp);

/// The attention block's GEMM weights on one TP rank: Q, K, V and the output projection split by
/// heads; with multi-head latent attention (model.mla) the query and key/value down-projections,
/// replicated on every rank, plus the per-head up-projections and the output projection, split.
double attention_gemm_weights(const ModelSpec& m, int tp);

/// Input embedding held by one TP rank: V*h/tp (vocabulary-split) plus learned positions s*h.
double embedding_params(const ModelSpec& m, int tp);

/// Output side held by one TP rank of the last stage: final norm plus the output projection
/// V*h/tp (a tied output layer is a copy of the embedding when pp > 1, absent when pp == 1).
double output_params(const ModelSpec& m, int tp, int pp);

/// The multi-token-prediction modules' own parameters on the last stage's TP rank (part of
/// output_params): per depth the 2h x h projection / tp and three norms, plus an input-embedding
/// copy V*h/tp when pp > 1 and the output layer is not tied. Their transformer layers (global
/// indices layers .. layers + mtp_layers - 1) count in the stage's layers (stage_layout).
double mtp_params(const ModelSpec& m, int tp, int pp);

/// Weights replicated on every TP rank of `stage` whose gradients sequence parallelism leaves
/// partial (each rank computes them on its share of the sequence): the norms (the layers', MLA's
/// latent norms and the final norm), the row-parallel biases and the MoE routers. Megatron
/// all-reduces their gradients over the TP group before the optimizer.
double sequence_parallel_grad_params(const WorkloadSpec& w, int stage);

/// Whole model, no parallelism, tied weights counted once, without the multi-token-prediction
/// modules (the published count).
double total_params(const ModelSpec& m);

/// Layers [first, first + count) on pipeline stage `stage`, and what else it holds.
struct StageLayout {
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  bool has_embedding = false; ///< stage 0
  bool has_output = false;    ///< stage pp-1 (final norm, logits, loss)
};

/// Layers of each of the pp*vp model chunks in global order: parallel.chunk_layers, or
/// model.layers split evenly (validated: divisible).
std::vector<int64_t> chunk_layer_counts(const WorkloadSpec& w);

/// Global model chunk `chunk` (0..pp*vp-1): its first layer, its layers, and whether it holds the
/// embedding (chunk 0) or the output (the last, which also runs the model.mtp_layers
/// multi-token-prediction layers after its own).
StageLayout chunk_span(const WorkloadSpec& w, int chunk);

/// The layers of pipeline stage `stage`: with vp = 1 its one chunk (chunk_span); with vp > 1 all
/// its chunks' layers counted from its first chunk's first layer (the layers themselves are not
/// contiguous: stage_params counts them exactly), the last stage's including the MTP layers.
/// DualPipe and DualPipeV: its two chunks (ParallelSpec::global_chunk) likewise; the embedding and
/// the output wherever either chunk holds them (DualPipe: stages 0 and pp-1 hold both,
/// DualPipeV: stage 0).
StageLayout stage_layout(const WorkloadSpec& w, int stage);

/// The largest model chunk of `stage`, in layers (the MTP layers included on the last stage's
/// last chunk): what one of its pipeline passes keeps.
int64_t largest_chunk_layers(const WorkloadSpec& w, int stage);

/// Parameters held by one GPU of `stage` before any ZeRO sharding (Psi in MODEL.md §3).
double params_on_rank(const WorkloadSpec& w, int stage);

/// Forward FLOPs of one full-attention layer for one micro-batch on one TP rank:
/// 2*b*s*(2h^2 + 2h*kv_dim + n_mlp*h*f)/tp + 4*b*s^2*h/tp (no causal saving), n_mlp = 2 for
/// GELU, 3 for SwiGLU. For GPT this is (24*b*s*h^2 + 4*b*s^2*h)/tp.
Flops layer_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp);

/// Forward FLOPs of the attention block (QKV and output projections plus the attention core)
/// of one layer, one micro-batch, one TP rank.
Flops attention_block_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp);
/// The same for a layer that attends through the sliding window when `windowed`
/// (ModelSpec::windowed_layer).
Flops attention_block_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp, bool windowed);

/// Forward FLOPs of MLA's per-head up-projections (query latent to queries, key/value latent to
/// keys and values) of one layer, one micro-batch, one TP rank: 2*b*s*(q_lora*a*d_qk +
/// kv_lora*a*(qk_nope + d_v))/tp; 0 without MLA. Selective recomputation (mla_up_proj) repeats it.
Flops mla_up_projection_flops(const ModelSpec& m, int64_t micro_batch, int tp);

/// Forward FLOPs of the MLP block of one layer, one micro-batch, one TP rank:
/// 2*b*s*n_mlp*h*f/tp.
Flops mlp_block_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp);

/// The column-parallel input linears' forward FLOPs (one GEMM each; its data and weight
/// gradients take as many): the fused QKV projection, 2*b*s*h*(q_dim + 2*kv_dim)/tp (0 for MLA,
/// whose down-projections are replicated), and the MLP's fc1 (gate and up for SwiGLU),
/// 2*b*s*(n_mlp - 1)*h*f/tp.
Flops qkv_projection_flops(const ModelSpec& m, int64_t micro_batch, int tp);
Flops mlp_input_projection_flops(const ModelSpec& m, int64_t micro_batch, int tp);

/// The forward FLOPs that recompute_modules: alternate_linears repeats (every second linear of a
/// layer in issue order Q, K, V, out, [gate], up, down): in the attention block K and the
/// out-projection, 2*b*s*h*(kv_dim + q_dim)/tp; in the MLP the up projection (SwiGLU) or fc2
/// (GELU), 2*b*s*h*f/tp. Plain attention only (0 for MLA).
Flops attention_alternate_linears_flops(const ModelSpec& m, int64_t micro_batch, int tp);
Flops mlp_alternate_linears_flops(const ModelSpec& m, int64_t micro_batch, int tp);

/// FLOPs of the attention core (QK^T and attention*V) of one layer, one micro-batch, one TP
/// rank: 2*b*s^2*a*(d_qk + d_v)/tp, = 4*b*s^2*h/tp for plain attention (d_qk = d_v = h/a; MLA:
/// qk_nope + qk_rope and v_head_dim). Selective recomputation repeats these.
Flops attention_core_flops(const ModelSpec& m, int64_t micro_batch, int tp);
/// The same with `windowed`: s^2 becomes s x min(s, 2w) for a sliding window of w
/// (ModelSpec::attention_span: a query of a windowed layer sees w keys, counted twice as the
/// causal s x s is).
Flops attention_core_flops(const ModelSpec& m, int64_t micro_batch, int tp, bool windowed);

/// Forward FLOPs of the output side of the last stage for one micro-batch on one TP rank: the
/// logits, and per multi-token-prediction depth its 2h -> h projection (2*b*s*2h*h/tp) and the
/// logits again.
Flops output_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp);

/// Its HBM traffic: the logits' once per output (1 + mtp_layers).
Bytes output_forward_bytes(const ModelSpec& m, int64_t micro_batch, int tp, Precision p);

/// Forward FLOPs of the logits for one micro-batch on one TP rank: 2*b*s*h*V/tp.
Flops logits_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp);

/// HBM traffic of one layer's forward on one TP rank (roofline input): weights read once plus
/// the activations written (Korthikanti's stored bytes without the s^2 term).
Bytes layer_forward_bytes(const ModelSpec& m, int64_t micro_batch, int tp, Precision p);

/// HBM traffic of the logits forward on one TP rank: output weights plus logits written.
Bytes logits_forward_bytes(const ModelSpec& m, int64_t micro_batch, int tp, Precision p);

/// Model FLOPs of one optimizer step (Korthikanti et al. 2022): 3 x forward FLOPs of all layers
/// and the logits over global_batch sequences (with multi-token prediction its layers, projections
/// and logits too, as Megatron-LM counts them). For GPT it equals
/// 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)).
Flops model_flops_per_step(const WorkloadSpec& w);

/// Hardware FLOPs of one step: model FLOPs plus what recomputation repeats (HFU numerator).
Flops hardware_flops_per_step(const WorkloadSpec& w);

/// Roofline time of a kernel: max(flops / (peak * compute_efficiency),
/// bytes / (hbm_bandwidth * memory_efficiency)).
Seconds roofline_time(Flops flops, Bytes bytes, const GpuSpec& gpu, Precision p);

/// The same at an explicit peak (fp8 training mixes the fp8 and 16-bit peaks within a block).
Seconds roofline_time(Flops flops, Bytes bytes, const GpuSpec& gpu, FlopsPerSec peak);

/// Payload of one TP all-reduce (or of each all-gather/reduce-scatter with SP): b*s*h*bytes.
Bytes tp_collective_bytes(const WorkloadSpec& w);

/// Payload of one pipeline activation (or gradient) message per micro-batch per stage boundary
/// per TP rank: b*s*h*bytes, divided by tp with sequence parallelism or pp_scatter_gather.
Bytes pp_message_bytes(const WorkloadSpec& w);

/// Gradient bytes one rank of `stage` all-reduces over DP per step: params_on_rank * bytes.
Bytes dp_gradient_bytes(const WorkloadSpec& w, int stage);

/// Bytes of one gradient as it is held and reduced over DP: 4 with training.grad_reduce_in_fp32,
/// else the 16-bit element's.
double grad_bytes(const WorkloadSpec& w);

/// Parameters whose gradients one rank of `stage` holds between steps: all it holds, or with
/// ZeRO >= 2 the ones it updates (optimizer_params_on_rank).
double gradients_held_on_rank(const WorkloadSpec& w, int stage);

/// HBM traffic of the optimizer step on one rank of `stage` (docs/model.md, "Optimizer step"). Per
/// parameter it updates (optimizer_params_on_rank: 1/dp of them with ZeRO >= 1): the Adam update,
/// which reads the gradient and the optimizer state and writes the state and the 16-bit weight,
/// 2*(optimizer_bytes_per_param + 2); the global gradient norm's read of the fp32 main gradient,
/// 4; in fp16 training the loss scale's unscaling and inf/NaN check of it, read and written, 8.
/// Per parameter whose gradient it holds (all it holds; the updated ones with ZeRO >= 2): the
/// zeroing of the fp32 gradient buffer for the next step, 4.
Bytes optimizer_step_bytes(const WorkloadSpec& w, int stage);

/// Time of the optimizer step on one rank of `stage` at the roofline: memory-bound,
/// optimizer_step_bytes at hbm_bandwidth * memory_efficiency.
Seconds optimizer_time(const WorkloadSpec& w, const GpuSpec& gpu, int stage);

} // namespace stepsim::model
