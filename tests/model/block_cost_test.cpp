// Closed forms of one GPU's block work (model/block_cost): MODEL.md §2's FLOPs per layer with
// tensor and context parallelism, the backward's factor and what selective recomputation adds.

#include "model/block_cost.hpp"

#include "common/specs.hpp"
#include "model/transformer.hpp"

#include <gtest/gtest.h>

#include <cmath>

using namespace stepsim;

namespace {

double rel(double a, double b) {
  return std::abs(a - b) / std::abs(b);
}

/// A GPT model (h = 1024, 16 heads, f = 4h, s = 512) at micro-batch 2 on tp 2.
WorkloadSpec gpt(int cp = 1) {
  WorkloadSpec w = test::workload(test::small_gpt(4), 2, 1, 1, 4, 2);
  w.parallel.cp = cp;
  return w;
}

} // namespace

// A GPT layer's forward on one TP rank is (24 b s h^2 + 4 b s^2 h) / tp: attention 8 b s h^2
// (QKV and output projections) plus the 4 b s^2 h core, the MLP 16 b s h^2. The backward is
// twice the forward, and the W pass's GEMMs are the forward's projections.
TEST(BlockCost, GptLayerForwardAndBackward) {
  const WorkloadSpec w = gpt();
  const double b = 2, s = 512, h = 1024, tp = 2;
  const model::BlockWork attn = model::attention_work(w);
  const model::BlockWork mlp = model::mlp_work(w);
  EXPECT_LT(rel(attn.forward.flops.value() + mlp.forward.flops.value(),
                (24 * b * s * h * h + 4 * b * s * s * h) / tp),
            1e-12);
  EXPECT_LT(rel(attn.forward.flops.value(), (8 * b * s * h * h + 4 * b * s * s * h) / tp), 1e-12);
  EXPECT_LT(rel(attn.backward.flops.value(), 2 * (8 * b * s * h * h + 4 * b * s * s * h) / tp), 1e-12);
  EXPECT_LT(rel(mlp.backward.flops.value(), 2 * 16 * b * s * h * h / tp), 1e-12);
  EXPECT_LT(rel(attn.weight_gemms.value(), 8 * b * s * h * h / tp), 1e-12);
  EXPECT_LT(rel(mlp.weight_grad_share(), 0.5), 1e-12);
  // The input linears: QKV (2 b s h 3h) and fc1 (2 b s h 4h).
  EXPECT_LT(rel(attn.input_linear.value(), 6 * b * s * h * h / tp), 1e-12);
  EXPECT_LT(rel(mlp.input_linear.value(), 8 * b * s * h * h / tp), 1e-12);
}

// Selective recomputation repeats the attention core before the backward (+4 b s^2 h / tp) and,
// with recompute_modules.mlp, the dense MLP (+16 b s h^2 / tp); the forward is unchanged.
TEST(BlockCost, SelectiveRecomputationAddsToTheBackward) {
  WorkloadSpec w = gpt();
  w.training.recompute = Recompute::SELECTIVE;
  w.training.recompute_modules = {.core_attn = true, .mlp = true};
  const double b = 2, s = 512, h = 1024, tp = 2;
  const model::BlockWork attn = model::attention_work(w);
  const model::BlockWork mlp = model::mlp_work(w);
  EXPECT_LT(rel(attn.forward.flops.value(), (8 * b * s * h * h + 4 * b * s * s * h) / tp), 1e-12);
  EXPECT_LT(rel(attn.backward.flops.value(), (16 * b * s * h * h + 12 * b * s * s * h) / tp), 1e-12);
  EXPECT_LT(rel(mlp.backward.flops.value(), 3 * 16 * b * s * h * h / tp), 1e-12);
}

// Context parallelism: one GPU holds s' = s / cp tokens of each sequence (and b s' of a
// micro-batch) whose queries meet all s keys: attention 8 b s' h^2 + 4 b s' s h (per TP rank),
// the MLP 16 b s' h^2; its ring splits the core into cp chunks of 4 b s'^2 h.
TEST(BlockCost, ContextParallelismSplitsTheSequence) {
  const WorkloadSpec w = gpt(4);
  const double b = 2, s = 512, sl = 128, h = 1024, tp = 2;
  EXPECT_EQ(model::gpu_seq_len(w), 128);
  EXPECT_EQ(model::gpu_model(w).seq_len, 128);
  EXPECT_EQ(model::gpu_tokens(w), b * sl);
  EXPECT_LT(
      rel(model::attention_work(w).forward.flops.value(), (8 * b * sl * h * h + 4 * b * sl * s * h) / tp),
      1e-12);
  EXPECT_LT(rel(model::mlp_work(w).forward.flops.value(), 16 * b * sl * h * h / tp), 1e-12);
  const model::RingAttentionWork ring = model::ring_attention_work(w);
  EXPECT_LT(rel(ring.chunk.value(), 4 * b * sl * sl * h / tp), 1e-12);
  EXPECT_LT(rel(ring.projections.value(), 8 * b * sl * h * h / tp), 1e-12);
  // The default selective recomputation repeats the core chunk in the backward.
  WorkloadSpec sel = w;
  sel.training.recompute = Recompute::SELECTIVE;
  EXPECT_LT(rel(model::ring_attention_work(sel).chunk_backward.value(), 3 * 4 * b * sl * sl * h / tp), 1e-12);
}

// MLA (q_lora 1536, kv_lora 512, qk_nope 128, qk_rope 64, v 128, 16 heads): recomputing the
// up-projections (mla_up_proj) adds 2 b s (q_lora a (nope + rope) + kv_lora a (nope + v)) / tp
// FLOPs to the attention backward, nothing to its forward, and MLA's attention has no fused
// column-parallel QKV input linear.
TEST(BlockCost, MlaUpProjectionRecomputation) {
  WorkloadSpec w = gpt();
  w.model.mla = test::deepseek_v3_mla();
  w.training.recompute = Recompute::SELECTIVE;
  w.training.recompute_modules = {.core_attn = false, .mla_up_proj = false};
  const model::BlockWork kept = model::attention_work(w);
  w.training.recompute_modules.mla_up_proj = true;
  const model::BlockWork again = model::attention_work(w);
  const double b = 2, s = 512, a = 16, tp = 2;
  const double up = 2 * b * s * (1536 * a * (128 + 64) + 512 * a * (128 + 128)) / tp;
  EXPECT_EQ(again.forward.flops.value(), kept.forward.flops.value());
  EXPECT_LT(rel(again.backward.flops.value() - kept.backward.flops.value(), up), 1e-9);
  EXPECT_LT(rel(kept.backward.flops.value(), 2 * kept.forward.flops.value()), 1e-12);
  EXPECT_EQ(again.input_linear.value(), 0.0);
}

// The optimizer step: 12 FLOPs per parameter the GPU updates; without ZeRO, a single stage and
// a single replica, that is every parameter it holds.
TEST(BlockCost, OptimizerTwelveFlopsPerParameter) {
  const WorkloadSpec w = gpt();
  EXPECT_EQ(model::optimizer_work(w, 0).flops.value(), 12 * model::params_on_rank(w, 0));
}

// Gradient accumulation (training.grad_accumulation): fused in the GEMMs costs nothing; the fp32
// pass streams 12 bytes per gradient the rank holds (2 read + 2 cleared of the 16-bit gradient,
// 4 read + 4 written of the fp32 accumulator) and does one add each: all of the stage's
// gradients under ZeRO-0/1, their 1/dp shard under ZeRO-2.
TEST(BlockCost, Fp32GradAccumulationStreamsTwelveBytesPerHeldGradient) {
  WorkloadSpec w = gpt();
  EXPECT_EQ(model::grad_accumulation_work(w, 0).bytes.value(), 0.0);
  EXPECT_EQ(model::grad_accumulation_work(w, 0).flops.value(), 0.0);
  w.training.grad_accumulation = GradAccumulation::FP32_PASS;
  const double psi = model::params_on_rank(w, 0);
  EXPECT_DOUBLE_EQ(model::grad_accumulation_work(w, 0).bytes.value(), 12.0 * psi);
  EXPECT_DOUBLE_EQ(model::grad_accumulation_work(w, 0).flops.value(), psi);
  w.parallel.dp = 4;
  w.parallel.zero_stage = 2;
  EXPECT_DOUBLE_EQ(model::grad_accumulation_work(w, 0).bytes.value(), 12.0 * psi / 4.0);
}

// The pass factor: a backward twice the forward, once when split into B and W.
TEST(BlockCost, PassFactor) {
  EXPECT_EQ(model::pass_flops_factor(true, false), 2.0);
  EXPECT_EQ(model::pass_flops_factor(true, true), 1.0);
  EXPECT_EQ(model::pass_flops_factor(false, false), 1.0);
}

// recompute_modules: alternate_linears on the GPT layer (h = 1024, f = 4h, no GQA: kv = q = h),
// b s = 1024 tokens, tp 2: the attention backward gains the K projection and the out-projection,
// 2 b s h (h + h) / tp; the MLP backward fc2 (the sixth matmul of a GELU MLP), 2 b s h f / tp. The
// forwards do not change; the attention core is not recomputed.
TEST(BlockCost, AlternateLinearsRecomputation) {
  WorkloadSpec w = gpt();
  const model::BlockWork attn = model::attention_work(w);
  const model::BlockWork mlp = model::mlp_work(w);
  w.training.recompute = Recompute::SELECTIVE;
  w.training.recompute_modules = {.core_attn = false, .alternate_linears = true};
  const double bs = 2 * 512, h = 1024, f = 4 * h, tp = 2;
  EXPECT_LT(rel(model::attention_work(w).backward.flops.value() - attn.backward.flops.value(),
                2 * bs * h * 2 * h / tp),
            1e-12);
  EXPECT_LT(rel(model::mlp_work(w).backward.flops.value() - mlp.backward.flops.value(), 2 * bs * h * f / tp),
            1e-12);
  EXPECT_EQ(model::attention_work(w).forward.flops.value(), attn.forward.flops.value());
}
