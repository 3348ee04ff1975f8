#include "model/transformer.hpp"

#include "model/moe.hpp"

#include <algorithm>

namespace stepsim::model {

namespace {

double d(int64_t v) {
  return static_cast<double>(v);
}

double kv_dim(const ModelSpec& m) {
  return d(m.kv_heads) * d(m.head_dim());
}

double mlp_matrices(const ModelSpec& m) {
  return m.mlp == MlpKind::SWIGLU ? 3.0 : 2.0;
}

/// Weights of a norm: LayerNorm has a scale and a bias, RMSNorm a scale.
double norm_params(const ModelSpec& m) {
  return (m.norm == NormKind::LAYERNORM ? 2.0 : 1.0) * d(m.hidden);
}

/// Multi-head latent attention's norms of the query and key/value latents (replicated).
double mla_norm_params(const ModelSpec& m) {
  if (!m.mla.enabled())
    return 0.0;
  return (m.norm == NormKind::LAYERNORM ? 2.0 : 1.0) * d(m.mla.q_lora_rank + m.mla.kv_lora_rank);
}

} // namespace

double attention_gemm_weights(const ModelSpec& m, int tp) {
  const double h = d(m.hidden), t = tp;
  if (!m.mla.enabled())
    return (2.0 * h * d(m.q_dim()) + 2.0 * h * kv_dim(m)) / t;
  // MLA: the down-projections to the query latent and to the key/value latent (with the shared
  // rotary key) are replicated on every TP rank; the per-head up-projections and the output
  // projection are split by heads.
  const MlaSpec& a = m.mla;
  const double heads = d(m.heads);
  const double qk = d(a.qk_head_dim());
  const double q =
      a.q_lora_rank > 0 ? h * d(a.q_lora_rank) + d(a.q_lora_rank) * heads * qk / t : h * heads * qk / t;
  const double kv = h * d(a.kv_lora_rank + a.qk_rope_head_dim) +
                    d(a.kv_lora_rank) * heads * d(a.qk_nope_head_dim + a.v_head_dim) / t;
  const double out = heads * d(a.v_head_dim) * h / t;
  return q + kv + out;
}

double element_bytes(Precision) {
  return 2.0;
}

double layer_params(const ModelSpec& m, int tp) {
  const double h = d(m.hidden), f = d(m.ffn_hidden), t = tp;
  // Q and the output projection are h x q_dim (q_dim = heads * head_dim, = h by default), K and V
  // h x kv_dim; MLA's projections as attention_gemm_weights.
  const double mlp_w = mlp_matrices(m) * h * f;
  double p = attention_gemm_weights(m, tp) + mlp_w / t + 2.0 * norm_params(m) + mla_norm_params(m);
  if (m.bias) {
    const double col_biases = d(m.q_dim()) + 2.0 * kv_dim(m) + (mlp_matrices(m) - 1.0) * f; // split
    const double row_biases = 2.0 * h;                                                      // replicated
    p += col_biases / t + row_biases;
  }
  return p;
}

double embedding_params(const ModelSpec& m, int tp) {
  double p = d(m.vocab) * d(m.hidden) / tp;
  if (m.position == PositionEmbedding::LEARNED)
    p += d(m.seq_len) * d(m.hidden);
  return p;
}

double output_params(const ModelSpec& m, int tp, int pp) {
  double p = norm_params(m);
  if (!m.tied_embeddings || pp > 1)
    p += d(m.vocab) * d(m.hidden) / tp;
  return p + mtp_params(m, tp, pp);
}

double mtp_params(const ModelSpec& m, int tp, int pp) {
  if (m.mtp_layers <= 0)
    return 0.0;
  // Per depth: the projection of [hidden; next-token embedding] (2h x h, split by TP) and three
  // norms (the two inputs' and the module's output); the layer itself is in stack_params. With
  // pp > 1 the last stage also holds a copy of the input embedding (none more when the output
  // layer already is one, tied).
  const double h = d(m.hidden);
  double p = d(m.mtp_layers) * (2.0 * h * h / tp + 3.0 * norm_params(m));
  if (pp > 1 && !m.tied_embeddings)
    p += d(m.vocab) * h / tp;
  return p;
}

double sequence_parallel_grad_params(const WorkloadSpec& w, int stage) {
  const ModelSpec& m = w.model;
  const int chunks = w.parallel.chunks_per_stage();
  const double per_layer = 2.0 * norm_params(m) + mla_norm_params(m) + (m.bias ? 2.0 * d(m.hidden) : 0.0);
  double p = 0;
  for (int c = 0; c < chunks; ++c) {
    const StageLayout span = chunk_span(w, w.parallel.global_chunk(stage, c));
    p += d(span.num_layers) * per_layer;
    if (m.moe.enabled())
      p += d(moe_layers_in(m, span.first_layer, span.num_layers)) * d(m.hidden) * d(m.moe.experts);
    if (span.has_output)
      p += norm_params(m);
  }
  return p;
}

double total_params(const ModelSpec& m) {
  // The published count: the main model, without the multi-token-prediction modules.
  return stack_params(m, 0, m.layers, 1, 1, 1).total() + embedding_params(m, 1) + output_params(m, 1, 1) -
         mtp_params(m, 1, 1);
}

std::vector<int64_t> chunk_layer_counts(const WorkloadSpec& w) {
  if (!w.parallel.chunk_layers.empty())
    return w.parallel.chunk_layers;
  ParallelSpec par = w.parallel;
  par.pp = std::max(1, par.pp);
  const int64_t chunks = par.model_chunks();
  return std::vector<int64_t>(static_cast<size_t>(chunks), w.model.layers / chunks);
}

StageLayout chunk_span(const WorkloadSpec& w, int chunk) {
  const std::vector<int64_t> counts = chunk_layer_counts(w);
  StageLayout s;
  for (int i = 0; i < chunk; ++i)
    s.first_layer += counts[static_cast<size_t>(i)];
  s.num_layers = counts[static_cast<size_t>(chunk)];
  s.has_embedding = chunk == 0;
  s.has_output = chunk + 1 == static_cast<int>(counts.size());
  if (s.has_output) // the multi-token-prediction layers follow the last layer
    s.num_layers += w.model.mtp_layers;
  return s;
}

StageLayout stage_layout(const WorkloadSpec& w, int stage) {
  const int pp = w.parallel.pp;
  const int vp = std::max(1, w.parallel.vp);
  if (w.parallel.bidirectional()) {
    // Two chunks, not adjacent: counted from the first chunk's first layer (stage_params counts
    // them exactly); the ends of the model wherever either chunk holds them.
    const StageLayout a = chunk_span(w, w.parallel.global_chunk(stage, 0));
    const StageLayout b = chunk_span(w, w.parallel.global_chunk(stage, 1));
    return {.first_layer = a.first_layer,
            .num_layers = a.num_layers + b.num_layers,
            .has_embedding = a.has_embedding || b.has_embedding,
            .has_output = a.has_output || b.has_output};
  }
  if (vp == 1)
    return chunk_span(w, stage);
  StageLayout s;
  if (w.parallel.chunk_layers.empty()) { // even chunks: the stage's share, counted contiguously
    s.num_layers = w.model.layers / pp;
    s.first_layer = s.num_layers * stage;
  } else {
    s.first_layer = chunk_span(w, stage).first_layer;
    for (int v = 0; v < vp; ++v)
      s.num_layers += w.parallel.chunk_layers[static_cast<size_t>(v * pp + stage)];
  }
  s.has_embedding = stage == 0;
  s.has_output = stage == pp - 1;
  if (s.has_output)
    s.num_layers += w.model.mtp_layers;
  return s;
}

int64_t largest_chunk_layers(const WorkloadSpec& w, int stage) {
  int64_t most = 0;
  for (int v = 0; v < w.parallel.chunks_per_stage(); ++v)
    most = std::max(most, chunk_span(w, w.parallel.global_chunk(stage, v)).num_layers);
  return most;
}

LayerParams stage_params(const WorkloadSpec& w, int stage) {
  if (w.parallel.chunk_layers.empty() && !w.parallel.bidirectional()) {
    const StageLayout s = stage_layout(w, stage);
    return stack_params(w.model, s.first_layer, s.num_layers, w.parallel.tp, w.parallel.ep,
                        w.parallel.expert_tp());
  }
  LayerParams sum;
  for (int v = 0; v < w.parallel.chunks_per_stage(); ++v) {
    const StageLayout c = chunk_span(w, w.parallel.global_chunk(stage, v));
    const LayerParams p = stack_params(w.model, c.first_layer, c.num_layers, w.parallel.tp, w.parallel.ep,
                                       w.parallel.expert_tp());
    sum.dense += p.dense;
    sum.expert += p.expert;
  }
  return sum;
}

double params_on_rank(const WorkloadSpec& w, int stage) {
  const StageLayout s = stage_layout(w, stage);
  double p = stage_params(w, stage).total();
  if (s.has_embedding)
    p += embedding_params(w.model, w.parallel.tp);
  if (s.has_output)
    p += output_params(w.model, w.parallel.tp, w.parallel.pp);
  return p;
}

Flops layer_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  return attention_block_forward_flops(m, micro_batch, tp) + mlp_block_forward_flops(m, micro_batch, tp);
}

Flops attention_block_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  return attention_block_forward_flops(m, micro_batch, tp, false);
}

Flops attention_block_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp, bool windowed) {
  const double tokens = d(micro_batch) * d(m.seq_len);
  return Flops(2.0 * tokens * attention_gemm_weights(m, tp)) +
         attention_core_flops(m, micro_batch, tp, windowed);
}

Flops mla_up_projection_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  if (!m.mla.enabled())
    return Flops(0.0);
  const MlaSpec& a = m.mla;
  const double heads = d(m.heads);
  const double q = d(a.q_lora_rank) * heads * d(a.qk_head_dim()); // 0 with one full query projection
  const double kv = d(a.kv_lora_rank) * heads * d(a.qk_nope_head_dim + a.v_head_dim);
  return Flops(2.0 * d(micro_batch) * d(m.seq_len) * (q + kv) / tp);
}

Flops mlp_block_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  const double tokens = d(micro_batch) * d(m.seq_len);
  return Flops(2.0 * tokens * mlp_matrices(m) * d(m.hidden) * d(m.ffn_hidden) / tp);
}

Flops qkv_projection_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  if (m.mla.enabled())
    return Flops(0.0);
  const double tokens = d(micro_batch) * d(m.seq_len);
  return Flops(2.0 * tokens * d(m.hidden) * (d(m.q_dim()) + 2.0 * kv_dim(m)) / tp);
}

Flops mlp_input_projection_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  const double tokens = d(micro_batch) * d(m.seq_len);
  return Flops(2.0 * tokens * (mlp_matrices(m) - 1.0) * d(m.hidden) * d(m.ffn_hidden) / tp);
}

Flops attention_alternate_linears_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  if (m.mla.enabled())
    return Flops(0.0);
  const double tokens = d(micro_batch) * d(m.seq_len);
  return Flops(2.0 * tokens * d(m.hidden) * (kv_dim(m) + d(m.q_dim())) / tp);
}

Flops mlp_alternate_linears_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  const double tokens = d(micro_batch) * d(m.seq_len);
  return Flops(2.0 * tokens * d(m.hidden) * d(m.ffn_hidden) / tp);
}

Flops attention_core_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  return attention_core_flops(m, micro_batch, tp, false);
}

Flops attention_core_flops(const ModelSpec& m, int64_t micro_batch, int tp, bool windowed) {
  // Q·Kᵀ over the query/key width and P·V over the value width, per head (4·b·s²·q_dim for
  // plain attention, whose widths are both head_dim); a windowed layer's queries see
  // attention_span keys instead of s.
  return Flops(2.0 * d(micro_batch) * d(m.seq_len) * d(m.attention_span(windowed)) * d(m.heads) *
               d(m.qk_head_dim() + m.v_head_dim()) / tp);
}

Flops logits_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  return Flops(2.0 * d(micro_batch) * d(m.seq_len) * d(m.hidden) * d(m.vocab) / tp);
}

Bytes layer_forward_bytes(const ModelSpec& m, int64_t micro_batch, int tp, Precision p) {
  const double sbh = d(micro_batch) * d(m.seq_len) * d(m.hidden);
  const double weights = layer_params(m, tp) * element_bytes(p);
  const double activations = sbh * (10.0 + 24.0 / tp); // Korthikanti, TP without the s^2 term
  return Bytes(weights + activations);
}

Bytes logits_forward_bytes(const ModelSpec& m, int64_t micro_batch, int tp, Precision p) {
  const double tokens = d(micro_batch) * d(m.seq_len);
  const double weights = d(m.vocab) * d(m.hidden) / tp;
  const double io = tokens * (d(m.hidden) + d(m.vocab) / tp);
  return Bytes((weights + io) * element_bytes(p));
}

Flops model_flops_per_step(const WorkloadSpec& w) {
  const ModelSpec& m = w.model;
  // The logits (and, per multi-token-prediction depth, its projection and logits again).
  Flops per_sequence = output_forward_flops(m, 1, 1);
  for (int64_t l = 0; l < m.layers + m.mtp_layers; ++l)
    per_sequence += layer_forward_flops_at(m, l);
  return per_sequence * (3.0 * d(w.batch.global_batch));
}

Bytes output_forward_bytes(const ModelSpec& m, int64_t micro_batch, int tp, Precision p) {
  return logits_forward_bytes(m, micro_batch, tp, p) * (1.0 + d(m.mtp_layers));
}

Flops output_forward_flops(const ModelSpec& m, int64_t micro_batch, int tp) {
  const double depth = d(m.mtp_layers);
  const Flops projection(2.0 * d(micro_batch) * d(m.seq_len) * 2.0 * d(m.hidden) * d(m.hidden) / tp);
  return logits_forward_flops(m, micro_batch, tp) * (1.0 + depth) + projection * depth;
}

Flops hardware_flops_per_step(const WorkloadSpec& w) {
  const ModelSpec& m = w.model;
  Flops extra_per_sequence(0.0);
  switch (w.training.recompute) {
  case Recompute::NONE:
    break;
  case Recompute::SELECTIVE: // the attention cores and the dense MLPs it repeats (norms, activations: ~0)
    for (int64_t l = 0; l < m.layers + m.mtp_layers; ++l) {
      if (w.training.recompute_modules.core_attn)
        extra_per_sequence += attention_core_flops(m, 1, 1, m.windowed_layer(l));
      if (w.training.recompute_modules.mlp && !is_moe_layer(m, l))
        extra_per_sequence += mlp_block_forward_flops(m, 1, 1);
      if (w.training.recompute_modules.mla_up_proj)
        extra_per_sequence += mla_up_projection_flops(m, 1, 1);
    }
    break;
  case Recompute::FULL: // every layer, or the first recompute_layers of each model chunk
    if (w.training.recompute_layers == 0) {
      for (int64_t l = 0; l < m.layers + m.mtp_layers; ++l)
        extra_per_sequence += layer_forward_flops_at(m, l);
      break;
    }
    for (int c = 0; c < static_cast<int>(chunk_layer_counts(w).size()); ++c) {
      const StageLayout chunk = chunk_span(w, c);
      for (int64_t l = 0; l < chunk.num_layers; ++l)
        if (w.training.recomputes_layer(l))
          extra_per_sequence += layer_forward_flops_at(m, chunk.first_layer + l);
    }
    break;
  }
  return model_flops_per_step(w) + extra_per_sequence * d(w.batch.global_batch);
}

Seconds roofline_time(Flops flops, Bytes bytes, const GpuSpec& gpu, Precision p) {
  return roofline_time(flops, bytes, gpu, peak_flops(gpu, p));
}

Seconds roofline_time(Flops flops, Bytes bytes, const GpuSpec& gpu, FlopsPerSec peak) {
  const Seconds compute = flops / (peak * gpu.compute_efficiency);
  const Seconds memory = bytes / (gpu.hbm_bandwidth * gpu.memory_efficiency);
  return std::max(compute, memory);
}

Bytes tp_collective_bytes(const WorkloadSpec& w) {
  // Context parallelism: each GPU holds seq_len / cp tokens.
  return Bytes(d(w.batch.micro_batch) * d(w.model.seq_len) / std::max(1, w.parallel.cp) * d(w.model.hidden) *
               element_bytes(w.precision));
}

Bytes pp_message_bytes(const WorkloadSpec& w) {
  const Bytes full = tp_collective_bytes(w);
  return w.parallel.sp || w.parallel.pp_scatter_gather ? full / w.parallel.tp : full;
}

Bytes dp_gradient_bytes(const WorkloadSpec& w, int stage) {
  return Bytes(params_on_rank(w, stage) * grad_bytes(w));
}

double grad_bytes(const WorkloadSpec& w) {
  return w.training.grad_reduce_in_fp32 ? 4.0 : element_bytes(w.precision);
}

double gradients_held_on_rank(const WorkloadSpec& w, int stage) {
  return w.parallel.zero_stage >= 2 ? optimizer_params_on_rank(w, stage) : params_on_rank(w, stage);
}

Bytes optimizer_step_bytes(const WorkloadSpec& w, int stage) {
  const double updated = optimizer_params_on_rank(w, stage);
  const double held = gradients_held_on_rank(w, stage);
  const double unscale = w.precision == Precision::FP16 ? 8.0 : 0.0;
  return Bytes(updated * (2.0 * (w.training.optimizer_bytes_per_param + 2.0) + 4.0 + unscale) + held * 4.0);
}

Seconds optimizer_time(const WorkloadSpec& w, const GpuSpec& gpu, int stage) {
  return optimizer_step_bytes(w, stage) / (gpu.hbm_bandwidth * gpu.memory_efficiency);
}

} // namespace stepsim::model
