#include "model/memory.hpp"

#include "model/transformer.hpp"

#include <algorithm>

namespace stepsim::model {

namespace {

double d(int64_t v) { return static_cast<double>(v); }

} // namespace

LayerActivations stored_layer_activations(const WorkloadSpec& w) {
  const ModelSpec& m = w.model;
  const double s = d(m.seq_len), b = d(w.batch.micro_batch), h = d(m.hidden), a = d(m.heads);
  const double kv = d(m.kv_heads) * d(m.head_dim()), f = d(m.ffn_hidden);
  const double t = w.parallel.tp;
  const double sb = s * b;
  const bool sp = w.parallel.sp && w.parallel.tp > 1;

  if (w.training.recompute == Recompute::FULL) {
    // Only the layer input survives until backward.
    const double input = 2.0 * sb * h;
    return {Bytes(sp ? input / t : input), Bytes(0.0)};
  }

  // Korthikanti's terms (bytes, 16-bit values, 1-byte dropout masks).
  // Replicated across TP ranks without SP: norm inputs, the inputs of QKV and fc1, dropout masks.
  const double attn_replicated = 2.0 * sb * h /*norm*/ + 2.0 * sb * h /*QKV in*/ + sb * h /*mask*/;
  const double mlp_replicated = 2.0 * sb * h /*norm*/ + 2.0 * sb * h /*fc1 in*/ + sb * h /*mask*/;
  // Split by TP: Q, K, V, the projection input, the MLP's inner activations.
  const double attn_split = 2.0 * sb * h /*Q*/ + 2.0 * sb * kv /*K*/ + 2.0 * sb * kv /*V*/ + 2.0 * sb * h /*proj in*/;
  const double mlp_inner = m.mlp == MlpKind::SWIGLU ? 6.0 * sb * f /*gate, up, product*/
                                                    : 4.0 * sb * f /*GeLU in, fc2 in*/;
  // The attention scores: softmax output 2, dropout mask 1, dropout output 2 (bytes per score).
  double scores = 5.0 * a * s * s * b;
  if (w.training.flash_attention || w.training.recompute == Recompute::SELECTIVE)
    scores = 0.0;

  const double rep = sp ? 1.0 / t : 1.0;
  return {Bytes(attn_replicated * rep + (attn_split + scores) / t), Bytes(mlp_replicated * rep + mlp_inner / t)};
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
  const double sb = d(m.seq_len) * d(w.batch.micro_batch);
  return Bytes(2.0 * sb * d(m.hidden) + 4.0 * sb * d(m.vocab) / w.parallel.tp);
}

int64_t in_flight_micro_batches(const WorkloadSpec& w, int stage) {
  const int64_t m = w.micro_batches();
  if (w.parallel.schedule == Schedule::GPIPE)
    return m;
  return std::min<int64_t>(w.parallel.pp - stage, m);
}

Bytes gathered_layer_bytes(const WorkloadSpec& w) {
  return Bytes(layer_params(w.model, w.parallel.tp) * element_bytes(w.precision));
}

Bytes fragmentation_of(const GpuSpec& gpu, Bytes dynamic) {
  return dynamic * std::max(0.0, gpu.allocator_fragmentation - 1.0);
}

MemoryLedger persistent_memory(const WorkloadSpec& w, const GpuSpec& gpu, int stage) {
  const double psi = params_on_rank(w, stage);
  const double dp = w.parallel.dp;
  const int zero = w.parallel.zero_stage;
  const double e = element_bytes(w.precision);
  MemoryLedger l;
  l.weights = Bytes(e * psi / (zero >= 3 ? dp : 1.0));
  l.gradients = Bytes(e * psi / (zero >= 2 ? dp : 1.0));
  l.optimizer = Bytes(w.training.optimizer_bytes_per_param * psi / (zero >= 1 ? dp : 1.0));
  Bytes buffers(0.0);
  if (w.parallel.dp > 1)
    buffers += w.training.dp_bucket;
  if (w.parallel.pp > 1)
    buffers += pp_message_bytes(w) * 2.0;
  if (w.parallel.tp > 1)
    buffers += tp_collective_bytes(w) * 2.0;
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
  const double in_flight = d(in_flight_micro_batches(w, stage));
  const Bytes layers = stored_layer_activations(w).total() * d(layout.num_layers);
  const Bytes logits = layout.has_output ? logits_activations(w) : Bytes(0.0);
  l.activations = layers * in_flight + logits * (in_flight - 1.0) + std::max(logits, recompute_working_set(w).total());
  if (w.parallel.zero_stage >= 3)
    l.zero3_gathered = gathered_layer_bytes(w) * static_cast<double>(w.training.zero3_prefetch + 1);
  l.fragmentation = fragmentation_of(gpu, l.activations + l.zero3_gathered + l.comm_buffers);
  return l;
}

} // namespace stepsim::model
