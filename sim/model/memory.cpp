#include "model/memory.hpp"

#include "model/moe.hpp"
#include "model/transformer.hpp"

#include <algorithm>

namespace stepsim::model {

namespace {

double d(int64_t v) {
  return static_cast<double>(v);
}

} // namespace

namespace {

bool saves_alternate_linears(const WorkloadSpec& w) {
  return w.training.recomputes(&RecomputeModules::alternate_linears);
}

/// recompute_modules: alternate_linears (16-bit values): the layer's input (split over the TP
/// ranks with SP), Q, V and the attention core's output, the gate's (a GELU MLP's fc1's) output
/// and the down projection's, a whole T x h partial sum on each TP rank; with tp > 1 the
/// reduce-scatters' (all-reduces') outputs after the out-projection and the down projection,
/// which the policy saves as well.
LayerActivations alternate_linears_activations(const WorkloadSpec& w) {
  const ModelSpec& m = w.model;
  const double sb = d(m.seq_len) / std::max(1, w.parallel.cp) * d(w.batch.micro_batch);
  const double h = d(m.hidden), q = d(m.q_dim()), kv = d(m.kv_heads) * d(m.head_dim()), f = d(m.ffn_hidden);
  const double t = w.parallel.tp;
  const double rep = w.parallel.sp && w.parallel.tp > 1 ? 1.0 / t : 1.0;
  const double reduced = t > 1 ? 2.0 * sb * h * rep : 0.0;
  return {Bytes(2.0 * sb * h * rep + 2.0 * sb * (2.0 * q + kv) / t + reduced),
          Bytes(2.0 * sb * f / t + 2.0 * sb * h + reduced)};
}

} // namespace

LayerActivations stored_layer_activations(const WorkloadSpec& w) {
  const ModelSpec& m = w.model;
  // Context parallelism: a GPU holds s/cp tokens; its attention scores are (s/cp) x s.
  const double s_full = d(m.seq_len);
  const double s = s_full / std::max(1, w.parallel.cp), b = d(w.batch.micro_batch), h = d(m.hidden),
               a = d(m.heads);
  // MoE layers (docs/moe.md): the inner activations of top_k routed plus the shared experts per token.
  const double f =
      m.moe.enabled() ? d(m.moe.top_k + m.moe.shared_experts) * d(m.moe.expert_ffn_hidden) : d(m.ffn_hidden);
  const double kv = d(m.kv_heads) * d(m.head_dim());
  const double t = w.parallel.tp;
  const double sb = s * b;
  const bool sp = w.parallel.sp && w.parallel.tp > 1;

  if (w.training.recompute == Recompute::FULL) {
    // Only the layer input survives until backward.
    const double input = 2.0 * sb * h;
    return {Bytes(sp ? input / t : input), Bytes(0.0)};
  }

  if (saves_alternate_linears(w))
    return alternate_linears_activations(w);

  // Korthikanti's terms (bytes, 16-bit values, 1-byte dropout masks). fp8 training keeps the
  // inputs of the linear GEMMs as their fp8 casts (1 byte); with rowwise scaling they are kept in
  // 16 bits, since the weight gradient casts them along the tokens, not the rows the forward used.
  const bool fp8_inputs = w.precision == Precision::FP8 && w.training.fp8_scaling == Fp8Scaling::TENSORWISE;
  const double g = fp8_inputs ? 1.0 : 2.0;
  // Replicated across TP ranks without SP: norm inputs, the inputs of QKV and fc1, dropout masks.
  const double mask = m.dropout ? sb * h : 0.0; // a hidden dropout's 1-byte mask
  // Selective recomputation of the norms (recompute_modules: layernorm) re-derives their outputs,
  // the QKV and fc1 inputs, in the backward; of the dense MLP keeps only its input.
  const TrainingSpec& tr = w.training;
  const double norm_out = tr.recomputes(&RecomputeModules::layernorm) ? 0.0 : g * sb * h;
  const bool mlp_again = tr.recomputes(&RecomputeModules::mlp);
  const double attn_replicated = 2.0 * sb * h /*norm*/ + norm_out /*QKV in*/ + mask;
  double mlp_replicated = 2.0 * sb * h /*norm*/ + (mlp_again ? 0.0 : norm_out) /*fc1 in*/ + mask;
  // MoE: top_k copies of each token, dispatched: the experts' fc1 input, kept as its fp8 cast in
  // fp8 training like every linear input. The routing weights scale the experts' activation
  // (Megatron-Core's weighted SwiGLU), whose stored input gives their gradient, so the experts'
  // outputs are not kept.
  if (m.moe.enabled())
    mlp_replicated += g * d(m.moe.top_k) * sb * h;
  // Split by TP: Q, K, V, the projection input, the MLP's inner activations.
  const double q = d(m.q_dim()); // = h unless model.head_dim sets another head width
  double attn_split = 2.0 * sb * q /*Q*/ + 2.0 * sb * kv /*K*/ + 2.0 * sb * kv /*V*/ + g * sb * q /*proj in*/;
  double latent = 0.0; // MLA's latents, computed whole on every TP rank
  if (m.mla.enabled()) {
    const MlaSpec& mla = m.mla;
    const double qk = a * d(mla.qk_head_dim()), v = a * d(mla.v_head_dim);
    // The up-projections recomputed (mla_up_proj): Q, K and V are not kept, only the latents.
    const double qkv = tr.recomputes(&RecomputeModules::mla_up_proj) ? 0.0 : 2.0 * sb * (qk + qk + v);
    attn_split = qkv + g * sb * v /*proj in*/;
    // Per latent its norm's input and the up-projection's input; the rotary key part.
    latent = (2.0 + g) * sb * d(mla.q_lora_rank + mla.kv_lora_rank) + 2.0 * sb * d(mla.qk_rope_head_dim);
  }
  // The experts' activation recomputed (moe_act): its output, the fc2 input, is not kept.
  const double g_fc2 = tr.recomputes(&RecomputeModules::moe_act) ? 0.0 : g;
  double mlp_inner = m.mlp == MlpKind::SWIGLU ? (4.0 + g_fc2) * sb * f /*gate, up, product (fc2 in)*/
                                              : (2.0 + g_fc2) * sb * f /*GeLU in, fc2 in*/;
  if (mlp_again)
    mlp_inner = 0.0;
  // The attention scores: softmax output 2, dropout mask 1, dropout output 2 (bytes per score);
  // without dropout the softmax output alone.
  double scores = (m.dropout ? 5.0 : 2.0) * a * s * s_full * b;
  if (w.training.flash_attention || tr.recomputes(&RecomputeModules::core_attn))
    scores = 0.0;

  const double rep = sp ? 1.0 / t : 1.0;
  return {Bytes(attn_replicated * rep + latent + (attn_split + scores) / t),
          Bytes(mlp_replicated * rep + mlp_inner / t)};
}

LayerActivations recompute_working_set(const WorkloadSpec& w) {
  if (w.training.recompute != Recompute::FULL)
    return {};
  WorkloadSpec plain = w;
  plain.training.recompute = Recompute::NONE;
  return stored_layer_activations(plain);
}

Bytes logits_activations(const WorkloadSpec& w) {
  const ModelSpec& m = w.model;
  const double sb = d(m.seq_len) / std::max(1, w.parallel.cp) * d(w.batch.micro_batch);
  // The logits kept for the loss's backward: fp32 (the log-softmax output), or 16-bit when one
  // fused kernel writes the gradient in place.
  const double logit_bytes = w.training.cross_entropy == CrossEntropy::FP32 ? 4.0 : 2.0;
  // Multi-token prediction: each depth keeps its logits too, and its projection's input [h; h].
  const double depth = d(m.mtp_layers);
  return Bytes((2.0 * sb * d(m.hidden) + logit_bytes * sb * d(m.vocab) / w.parallel.tp) * (1.0 + depth) +
               depth * 4.0 * sb * d(m.hidden));
}

InFlight in_flight_passes(const WorkloadSpec& w, int stage) {
  const int64_t m = w.micro_batches();
  const int64_t p = w.parallel.pp;
  const int64_t v = std::max(1, w.parallel.vp);
  int64_t n = 0;
  switch (w.parallel.schedule) {
  case Schedule::GPIPE:
    n = m;
    break;
  case Schedule::ONE_F_ONE_B:
    n = std::min<int64_t>(p - stage, m);
    break;
  case Schedule::ZB_H1:
    n = std::min<int64_t>(p, m);
    break;
  case Schedule::ZB_H2:
    n = std::min<int64_t>(2 * p - 1, m);
    break;
  case Schedule::DUALPIPE: // one stage's chunk per pass: pp+1 of them (DeepSeek-V3, Table 2)
    return {p + 1, 1};
  case Schedule::DUALPIPE_V: // chunks of half a stage: 2pp+1 of them, the same pp+1/2 stages
    return {2 * p + 1, 1};
  case Schedule::INTERLEAVED:
    if (m == p)
      return {m * v, m};
    return {std::min<int64_t>(2 * (p - stage - 1) + (v - 1) * p + 1, m * v), 1};
  }
  return {n, n};
}

int64_t in_flight_micro_batches(const WorkloadSpec& w, int stage) {
  // DualPipe: a micro-batch crosses one of a stage's two chunks, so each pass is one.
  const int64_t v = w.parallel.schedule == Schedule::DUALPIPE ? 1 : w.parallel.chunks_per_stage();
  return (in_flight_passes(w, stage).passes + v - 1) / v;
}

Bytes gathered_layer_bytes(const WorkloadSpec& w) {
  const double held = zero3_gather_bytes(w) + fp8_weight_bytes(w);
  if (!w.model.moe.enabled())
    return Bytes(layer_params(w.model, w.parallel.tp) * held);
  // MoE: the largest layer's dense part, plus its local experts when their expert-data-parallel
  // group shards them (expert_data_parallel > 1).
  const int64_t edp = expert_data_parallel(w.parallel);
  double most = 0;
  for (int64_t l = 0; l < w.model.layers; ++l) {
    const LayerParams p = layer_params_at(w.model, l, w.parallel.tp, w.parallel.ep, w.parallel.expert_tp());
    most = std::max(most, p.dense + (edp > 1 ? p.expert : 0.0));
  }
  return Bytes(most * held);
}

double fp8_weight_bytes(const WorkloadSpec& w) {
  if (w.precision != Precision::FP8)
    return 0.0;
  if (w.training.fp8_params)
    return 1.0; // the fp8 transpose of the fp8 weight
  return w.training.fp8_weight_cache ? 2.0 : 0.0;
}

double weight_bytes(const WorkloadSpec& w) {
  return w.training.fp8_params ? 1.0 : element_bytes(w.precision);
}

double zero3_gather_bytes(const WorkloadSpec& w) {
  const bool fp8 = w.precision == Precision::FP8 && w.training.fp8_all_gather;
  return fp8 ? 1.0 : weight_bytes(w);
}

Bytes offloaded_activations(const WorkloadSpec& w, int stage) {
  if (w.training.offload_layers <= 0)
    return Bytes(0.0);
  return stored_layer_activations(w).total() * d(w.training.offload_layers) *
         d(in_flight_passes(w, stage).passes);
}

int64_t allocating_streams(const WorkloadSpec& w) {
  const ParallelSpec& p = w.parallel;
  const int64_t cp = std::max(1, p.cp);
  return 1 + (p.tp > 1 ? 1 : 0) + (p.pp > 1 ? 1 : 0) + (static_cast<int64_t>(p.dp) * cp > 1 ? 1 : 0) +
         (w.model.moe.enabled() && p.ep > 1 ? 1 : 0) + (cp > 1 ? 1 : 0);
}

Bytes fragmentation_of(const WorkloadSpec& w, const GpuSpec& gpu, Bytes dynamic) {
  if (w.training.expandable_segments)
    return Bytes(d(allocating_streams(w)) * (SMALL_POOL_PAGE + LARGE_POOL_PAGE));
  return dynamic * std::max(0.0, gpu.allocator_fragmentation - 1.0);
}

bool zero3_held_for_step(const WorkloadSpec& w) {
  const ParallelSpec& p = w.parallel;
  return p.zero_stage >= 3 && !w.training.reshard_after_forward && p.pp > 1 && p.dp * std::max(1, p.cp) > 1;
}

MemoryLedger persistent_memory(const WorkloadSpec& w, const GpuSpec& gpu, int stage) {
  // Dense parameters are sharded by ZeRO over the dp*cp GPUs holding them (the shard group under
  // hybrid sharding, dense_shard_gpus), expert parameters over their expert-data-parallel group
  // (dp*cp/ep GPUs, tp*cp*dp/(etp*ep) folded; docs/moe.md).
  const double psi = params_on_rank(w, stage);
  const double psi_expert = expert_params_on_rank(w, stage);
  const double psi_dense = psi - psi_expert;
  const double dp = static_cast<double>(dense_shard_gpus(w.parallel));
  const double edp = static_cast<double>(expert_data_parallel(w.parallel));
  const int zero = w.parallel.zero_stage;
  const double e = grad_bytes(w);
  const auto sharded = [&](int from_stage) {
    return zero >= from_stage ? psi_dense / dp + psi_expert / edp : psi;
  };
  MemoryLedger l;
  l.weights = Bytes(weight_bytes(w) * sharded(3));
  // FSDP's fp32 shards (training.fp32_shards): the shard is the fp32 parameter the optimizer
  // updates (its master weight, 4 of its K bytes) and holds an fp32 gradient.
  const bool fp32_shards = zero >= 3 && w.training.fp32_shards;
  if (fp32_shards)
    l.weights = Bytes(4.0 * sharded(3));
  // fp8 training: each layer's fp8 weight and its fp8 transpose, cast once per step (ZeRO-3
  // casts the gathered layers instead: zero3_gathered).
  if (zero < 3)
    l.weights += Bytes(fp8_weight_bytes(w) * stage_params(w, stage).total());
  l.gradients = Bytes((fp32_shards ? 4.0 : e) * sharded(2));
  // grad_accumulation: fp32_pass keeps an fp32 accumulator beside the 16-bit gradients (the
  // reduced ones, when grad_reduce_in_fp32 reduces the accumulator itself).
  if (w.training.grad_accumulation == GradAccumulation::FP32_PASS)
    l.gradients += Bytes((w.training.grad_reduce_in_fp32 ? element_bytes(w.precision) : 4.0) * sharded(2));
  // Held for the step (zero3_held_for_step): the stage's unsharded gradients, at a gradient's bytes
  // (the reduce dtype), from its first backward to the reduce-scatter after its last; held at
  // every steady-state peak of the schedule, so counted whole.
  if (zero3_held_for_step(w))
    l.gradients += Bytes(e * psi_dense);
  l.optimizer = Bytes((w.training.optimizer_bytes_per_param - (fp32_shards ? 4.0 : 0.0)) * sharded(1));
  Bytes buffers(0.0);
  if (w.parallel.dp > 1)
    buffers += w.training.dp_bucket;
  if (w.parallel.pp > 1)
    buffers += pp_message_bytes(w) * 2.0;
  if (w.parallel.tp > 1)
    buffers += tp_collective_bytes(w) * 2.0;
  if (w.model.moe.enabled() && w.parallel.ep > 1)
    buffers += ep_all_to_all_bytes(w) * 2.0; // dispatch and combine
  if (w.parallel.cp > 1)
    buffers += cp_kv_block_bytes(w) * 2.0; // the K,V block in flight and the one in use
  if (w.training.offload_layers > 0)       // one offloaded layer's activations on their way
    buffers += stored_layer_activations(w).total();
  l.comm_buffers = buffers;
  l.runtime = gpu.runtime_overhead;
  return l;
}

MemoryLedger static_memory(const WorkloadSpec& w, const GpuSpec& gpu, int stage) {
  MemoryLedger l = persistent_memory(w, gpu, stage);
  const StageLayout layout = stage_layout(w, stage);
  // In flight: each micro-batch's stored layers (and, on the last stage, its logits). The
  // backward of the oldest frees its logits before it recomputes a layer, so the logits of one
  // micro-batch and the recompute working set are never held together.
  // With interleaving a pass covers one model chunk (num_layers / vp layers) and only the last
  // chunk's passes carry logits.
  const InFlight in_flight = in_flight_passes(w, stage);
  // Uneven chunks (parallel.chunk_layers): every pass is counted at the stage's largest chunk.
  const double pass_layers = w.parallel.chunk_layers.empty() && !w.parallel.bidirectional()
                                 ? d(layout.num_layers) / std::max(1, w.parallel.vp)
                                 : d(largest_chunk_layers(w, stage));
  // Full recomputation of the first recompute_layers layers of each chunk (all when 0): they keep
  // their input only, the others everything. Offloading: the first offload_layers layers of each
  // chunk keep nothing on the GPU.
  const double recomputed = w.training.recompute != Recompute::FULL ? 0.0
                            : w.training.recompute_layers == 0
                                ? pass_layers
                                : std::min(d(w.training.recompute_layers), pass_layers);
  const Bytes plain = w.training.recompute == Recompute::FULL ? recompute_working_set(w).total()
                                                              : stored_layer_activations(w).total();
  const Bytes layers = stored_layer_activations(w).total() * recomputed +
                       plain * (pass_layers - recomputed - d(w.training.offload_layers));
  const Bytes logits = layout.has_output ? logits_activations(w) : Bytes(0.0);
  l.activations = layers * d(in_flight.passes) + logits * (d(in_flight.output_passes) - 1.0) +
                  std::max(logits, recompute_working_set(w).total());
  if (w.parallel.zero_stage >= 3) {
    // The window of prefetch + 1 gathered layers (one under blocking fetch); the chunk's first
    // layer brings the embedding and its last the output layer with it (both at once only when
    // the window spans the chunk). Kept from the forward to the backward
    // (reshard_after_forward false): every layer of the stage, at the turn (one stage) or for the
    // whole step (a pipeline, zero3_held_for_step).
    const int64_t window = !w.training.reshard_after_forward                ? layout.num_layers
                           : w.training.zero3_fetch == Zero3Fetch::BLOCKING ? 1
                                                                            : w.training.zero3_prefetch + 1;
    const double held = weight_bytes(w) + fp8_weight_bytes(w);
    const double emb = layout.has_embedding ? embedding_params(w.model, w.parallel.tp) * held : 0.0;
    const double out = layout.has_output ? output_params(w.model, w.parallel.tp, w.parallel.pp) * held : 0.0;
    const int64_t chunk_layers = w.parallel.chunk_layers.empty() && !w.parallel.bidirectional()
                                     ? layout.num_layers / std::max(1, w.parallel.vp)
                                     : largest_chunk_layers(w, stage);
    const double ends = chunk_layers > window ? std::max(emb, out) : emb + out;
    l.zero3_gathered = gathered_layer_bytes(w) * static_cast<double>(window) + Bytes(ends);
  }
  l.fragmentation = fragmentation_of(w, gpu, l.activations + l.zero3_gathered + l.comm_buffers);
  l.host = offloaded_activations(w, stage);
  return l;
}

Bytes worst_static_peak(const WorkloadSpec& w, const GpuSpec& gpu) {
  Bytes peak(0.0);
  for (int stage = 0; stage < w.parallel.pp; ++stage)
    peak = std::max(peak, static_memory(w, gpu, stage).peak());
  return peak;
}

} // namespace stepsim::model
