#include "model/block_cost.hpp"

#include "model/moe.hpp"
#include "model/transformer.hpp"

#include <algorithm>

namespace stepsim::model {

namespace {

/// The backward of a block of forward work `f`: twice its FLOPs and bytes, plus `recomputed`.
Work backward_of(const Work& f, Flops recomputed) {
  Work b{.flops = f.flops * 2.0, .bytes = f.bytes * 2.0};
  b.flops += recomputed;
  return b;
}

} // namespace

int64_t gpu_seq_len(const WorkloadSpec& w) {
  return w.model.seq_len / std::max(1, w.parallel.cp);
}

ModelSpec gpu_model(const WorkloadSpec& w) {
  ModelSpec m = w.model;
  m.seq_len = gpu_seq_len(w);
  return m;
}

double gpu_tokens(const WorkloadSpec& w) {
  return static_cast<double>(w.batch.micro_batch) * static_cast<double>(gpu_seq_len(w));
}

double BlockWork::weight_grad_share() const {
  return backward.flops.value() > 0 ? std::clamp(weight_gemms / backward.flops, 0.0, 1.0) : 0.5;
}

BlockWork attention_work(const WorkloadSpec& w, bool windowed) {
  const ModelSpec m = gpu_model(w);
  const int64_t b = w.batch.micro_batch;
  const int tp = w.parallel.tp;
  const double cp = std::max(1, w.parallel.cp);
  const Flops full = attention_block_forward_flops(m, b, tp);
  const Flops core = attention_core_flops(m, b, tp, windowed);
  BlockWork out;
  out.forward.flops = attention_block_forward_flops(m, b, tp, windowed);
  out.forward.bytes = layer_forward_bytes(m, b, tp, w.precision) * (full / layer_forward_flops(m, b, tp));
  out.forward.flops += core * (cp - 1.0);
  out.backward = backward_of(out.forward, Flops(0.0));
  if (w.training.recomputes(&RecomputeModules::core_attn))
    out.backward.flops += core * cp;
  if (w.training.recomputes(&RecomputeModules::mla_up_proj))
    out.backward.flops += mla_up_projection_flops(m, b, tp);
  if (w.training.recomputes(&RecomputeModules::alternate_linears))
    out.backward.flops += attention_alternate_linears_flops(m, b, tp);
  out.weight_gemms = full - attention_core_flops(m, b, tp); // the projections, with or without a window
  out.input_linear = qkv_projection_flops(m, b, tp);
  return out;
}

BlockWork mlp_work(const WorkloadSpec& w) {
  const ModelSpec m = gpu_model(w);
  const int64_t b = w.batch.micro_batch;
  const int tp = w.parallel.tp;
  BlockWork out;
  out.forward.flops = mlp_block_forward_flops(m, b, tp);
  out.forward.bytes =
      layer_forward_bytes(m, b, tp, w.precision) * (out.forward.flops / layer_forward_flops(m, b, tp));
  out.backward = backward_of(out.forward,
                             w.training.recomputes(&RecomputeModules::mlp) ? out.forward.flops : Flops(0.0));
  if (w.training.recomputes(&RecomputeModules::alternate_linears))
    out.backward.flops += mlp_alternate_linears_flops(m, b, tp);
  out.weight_gemms = out.forward.flops;
  out.input_linear = mlp_input_projection_flops(m, b, tp);
  return out;
}

BlockWork output_work(const WorkloadSpec& w) {
  const ModelSpec m = gpu_model(w);
  const int64_t b = w.batch.micro_batch;
  const int tp = w.parallel.tp;
  BlockWork out;
  out.forward = {.flops = output_forward_flops(m, b, tp),
                 .bytes = output_forward_bytes(m, b, tp, w.precision)};
  out.backward = backward_of(out.forward, Flops(0.0));
  out.weight_gemms = out.forward.flops;
  out.input_linear = logits_forward_flops(m, b, tp);
  return out;
}

BlockWork router_work(const WorkloadSpec& w) {
  const ModelSpec m = gpu_model(w);
  const double tokens = gpu_tokens(w);
  BlockWork out;
  out.forward = {.flops = router_forward_flops(m, tokens),
                 .bytes = router_forward_bytes(m, tokens, w.precision)};
  out.backward = backward_of(out.forward, Flops(0.0));
  out.weight_gemms = out.forward.flops;
  return out;
}

BlockWork experts_work(const WorkloadSpec& w) {
  const BlockWork mlp = mlp_work(w);
  BlockWork out;
  out.forward.flops = moe_forward_work(w, ep_rank_balanced_assignments(w)).routed;
  out.forward.bytes = mlp.forward.flops.value() > 0
                          ? mlp.forward.bytes * (out.forward.flops / mlp.forward.flops)
                          : Bytes(0.0);
  out.backward = backward_of(out.forward, Flops(0.0));
  out.weight_gemms = out.forward.flops;
  return out;
}

RingAttentionWork ring_attention_work(const WorkloadSpec& w) {
  const ModelSpec m = gpu_model(w);
  const int64_t b = w.batch.micro_batch;
  const int tp = w.parallel.tp;
  RingAttentionWork out;
  out.chunk = attention_core_flops(m, b, tp);
  out.projections = attention_block_forward_flops(m, b, tp) - out.chunk;
  out.chunk_backward =
      out.chunk * 2.0 + (w.training.recomputes(&RecomputeModules::core_attn) ? out.chunk : Flops(0.0));
  return out;
}

MoeWork moe_forward_work(const WorkloadSpec& w, double assignments) {
  const ModelSpec m = gpu_model(w);
  const double tokens = gpu_tokens(w);
  return {.router = router_forward_flops(m, tokens),
          .shared = shared_experts_forward_flops(m, tokens, w.parallel.tp),
          .routed = routed_experts_forward_flops(m, assignments, w.parallel.expert_tp())};
}

double pass_flops_factor(bool backward, bool split) {
  return backward && !split ? 2.0 : 1.0;
}

Work optimizer_work(const WorkloadSpec& w, int stage) {
  return {.flops = Flops(optimizer_params_on_rank(w, stage) * 12.0), .bytes = optimizer_step_bytes(w, stage)};
}

Work grad_accumulation_work(const WorkloadSpec& w, int stage) {
  if (w.training.grad_accumulation != GradAccumulation::FP32_PASS)
    return {.flops = Flops(0.0), .bytes = Bytes(0.0)};
  const double held = gradients_held_on_rank(w, stage);
  return {.flops = Flops(held), .bytes = Bytes(held * FP32_PASS_BYTES_PER_GRADIENT)};
}

} // namespace stepsim::model
