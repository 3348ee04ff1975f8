// block_kernels: the kernels of one compute task (docs/kernels.md, "From kernels to compute
// tasks"). Checks the GEMM FLOPs against the transformer formulas of docs/model.md and the shapes
// against workload_kernels (what the suite measures).

#include "kernels/step_kernels.hpp"

#include "core/error.hpp"
#include "kernels/workload_kernels.hpp"
#include "model/memory.hpp"
#include "model/transformer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>

namespace stepsim::kernels {
namespace {

WorkloadSpec gpt3(int tp, int64_t micro_batch, bool flash = true) {
  WorkloadSpec w;
  w.training.flash_attention = flash;
  w.name = "gpt3";
  w.model = gpt3_175b();
  w.parallel.tp = tp;
  w.parallel.pp = 8;
  w.batch.micro_batch = micro_batch;
  w.batch.global_batch = micro_batch;
  return w;
}

double flops_of(const std::vector<KernelCall>& calls, KernelKind kind) {
  double f = 0;
  for (const KernelCall& c : calls)
    if (c.shape.kind == kind)
      f += kernel_flops(c.shape).value();
  return f;
}

size_t count_of(const std::vector<KernelCall>& calls, KernelKind kind) {
  return static_cast<size_t>(
      std::count_if(calls.begin(), calls.end(), [&](const KernelCall& c) { return c.shape.kind == kind; }));
}

// Forward GEMM FLOPs of a GPT layer on one TP rank: attention 2·T·4h²/t, MLP 2·T·8h²/t (h = 12288,
// T = 2048, t = 8); backward GEMMs (dgrad + wgrad) are exactly twice the forward's.
TEST(BlockKernels, GemmFlopsFollowTheLayerFormulas) {
  const WorkloadSpec w = gpt3(8, 1);
  const double T = 2048, h = 12288, t = 8;
  const auto attn_f = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  const auto mlp_f = block_kernels(w, Block::MLP, Phase::FORWARD);
  EXPECT_DOUBLE_EQ(flops_of(attn_f, KernelKind::GEMM), 2 * T * 4 * h * h / t);
  EXPECT_DOUBLE_EQ(flops_of(mlp_f, KernelKind::GEMM), 2 * T * 8 * h * h / t);
  EXPECT_DOUBLE_EQ(flops_of(block_kernels(w, Block::ATTENTION, Phase::BACKWARD), KernelKind::GEMM),
                   2 * flops_of(attn_f, KernelKind::GEMM));
  EXPECT_DOUBLE_EQ(flops_of(block_kernels(w, Block::MLP, Phase::BACKWARD), KernelKind::GEMM),
                   2 * flops_of(mlp_f, KernelKind::GEMM));
  const auto logits_f = block_kernels(w, Block::LOGITS, Phase::FORWARD);
  EXPECT_DOUBLE_EQ(flops_of(logits_f, KernelKind::GEMM), 2 * T * h * 51200 / t);
  EXPECT_EQ(count_of(logits_f, KernelKind::SOFTMAX_XENT), 1u);
  EXPECT_EQ(count_of(block_kernels(w, Block::LOGITS, Phase::BACKWARD), KernelKind::SOFTMAX_XENT), 1u);
}

// The loss over the T x V/t logits (T = 2048, V/t = 6400). fp32 (the default): the cast to fp32
// (2 + 4 bytes a logit), the log-softmax (4 + 4), its backward (a zeroed gradient, 4, then 12)
// and the cast back (4 + 2): 14 bytes a logit forward, 22 backward. Fused: one 16-bit pass of 4
// bytes forward and nothing backward; the logits kept for the backward shrink from 4 to 2 bytes.
TEST(BlockKernels, LossTrafficPerLogit) {
  WorkloadSpec w = gpt3(8, 1);
  const double logits = 2048.0 * 6400.0;
  auto bytes = [&](Phase p) {
    double b = 0;
    for (const KernelCall& c : block_kernels(w, Block::LOGITS, p))
      if (c.shape.kind != KernelKind::GEMM && c.shape.kind != KernelKind::LAYERNORM)
        b += kernel_bytes(c.shape).value() * c.time_factor;
    return b;
  };
  EXPECT_EQ(w.training.cross_entropy, CrossEntropy::FP32);
  EXPECT_DOUBLE_EQ(bytes(Phase::FORWARD), 14.0 * logits);
  EXPECT_DOUBLE_EQ(bytes(Phase::BACKWARD), 22.0 * logits);
  const double fp32_kept = model::logits_activations(w).value();
  w.training.cross_entropy = CrossEntropy::FUSED;
  EXPECT_DOUBLE_EQ(bytes(Phase::FORWARD), 4.0 * logits);
  EXPECT_DOUBLE_EQ(bytes(Phase::BACKWARD), 0.0);
  EXPECT_DOUBLE_EQ(fp32_kept - model::logits_activations(w).value(), 2.0 * logits);
}

// Issue order and launch count of the attention block: norm, QKV, attention, out-projection,
// residual add; the backward runs the norm at 2x its forward time.
TEST(BlockKernels, AttentionBlockOrderAndFactors) {
  const WorkloadSpec w = gpt3(8, 1);
  const auto fwd = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  ASSERT_EQ(fwd.size(), 5u);
  EXPECT_EQ(fwd[0].shape, rowwise(KernelKind::LAYERNORM, Dtype::BF16, 2048, 12288));
  EXPECT_EQ(fwd[1].shape, gemm(Dtype::BF16, 2048, 4608, 12288));
  EXPECT_EQ(fwd[2].shape.kind, KernelKind::ATTENTION_FWD);
  EXPECT_EQ(fwd[3].shape, gemm(Dtype::BF16, 2048, 12288, 1536));
  EXPECT_EQ(fwd[4].shape, elementwise(KernelKind::MEMCPY, Dtype::BF16, 3 * 2048 * 12288 / 2));
  const auto bwd = block_kernels(w, Block::ATTENTION, Phase::BACKWARD);
  ASSERT_EQ(bwd.size(), 7u); // residual, 2 out-proj GEMMs, attention bwd, 2 QKV GEMMs, norm
  EXPECT_EQ(bwd.back().shape, fwd.front().shape);
  EXPECT_DOUBLE_EQ(bwd.back().time_factor, 2.0);
  EXPECT_EQ(count_of(bwd, KernelKind::ATTENTION_BWD), 1u);
}

// Recomputation: full recomputation repeats the forward; selective puts the attention forward in
// front of the attention backward (the graph builder folds it into that task).
TEST(BlockKernels, Recomputation) {
  WorkloadSpec w = gpt3(8, 1);
  const auto fwd = block_kernels(w, Block::MLP, Phase::FORWARD);
  const auto re = block_kernels(w, Block::MLP, Phase::RECOMPUTE);
  ASSERT_EQ(re.size(), fwd.size());
  for (size_t i = 0; i < re.size(); ++i)
    EXPECT_EQ(re[i].shape, fwd[i].shape);
  const size_t plain = block_kernels(w, Block::ATTENTION, Phase::BACKWARD).size();
  w.training.recompute = Recompute::SELECTIVE;
  const auto sel = block_kernels(w, Block::ATTENTION, Phase::BACKWARD);
  ASSERT_EQ(sel.size(), plain + 1);
  EXPECT_EQ(sel.front().shape.kind, KernelKind::ATTENTION_FWD);
  EXPECT_EQ(block_kernels(w, Block::MLP, Phase::BACKWARD).size(),
            block_kernels(gpt3(8, 1), Block::MLP, Phase::BACKWARD).size());
}

// fp8 training: the four linear GEMMs of a layer run in fp8 (forward, data and weight gradient),
// each after a cast-transpose of its 16-bit input (forward) or output gradient (backward); the
// attention core, norms and the logits stay bf16. FLOPs are unchanged.
TEST(BlockKernels, Fp8TrainingRunsTheLinearGemmsInFp8) {
  const WorkloadSpec bf16 = gpt3(8, 1);
  WorkloadSpec w = bf16;
  w.precision = Precision::FP8;
  const double T = 2048, h = 12288, t = 8;
  for (Block b : {Block::ATTENTION, Block::MLP, Block::LOGITS}) {
    for (Phase p : {Phase::FORWARD, Phase::BACKWARD}) {
      const auto calls = block_kernels(w, b, p);
      EXPECT_DOUBLE_EQ(flops_of(calls, KernelKind::GEMM),
                       flops_of(block_kernels(bf16, b, p), KernelKind::GEMM));
      for (const KernelCall& c : calls) {
        const bool linear = c.shape.kind == KernelKind::GEMM && b != Block::LOGITS;
        const bool fp32_loss = std::string(c.role).find("(fp32)") != std::string::npos;
        EXPECT_EQ(c.shape.dtype, linear ? Dtype::FP8_E4M3 : fp32_loss ? Dtype::FP32 : Dtype::BF16) << c.role;
      }
    }
  }
  // Cast traffic by its own kernels: the forward input of the out-proj (the attention output,
  // h/t elements per token); the backward output gradients of out-proj (h), QKV (3h/t, the
  // attention backward's) and fc2 (h). The norms cast the QKV and fc1 inputs, the activation the
  // fc2 input, and the activation's backward fc1's output gradient (Transformer Engine's fused
  // LayerNormLinear / LayerNormMLP kernels).
  auto cast_elements = [&](Block b, Phase p) {
    double n = 0;
    for (const KernelCall& c : block_kernels(w, b, p))
      if (std::string(c.role).rfind("fp8 cast-transpose", 0) == 0)
        n += static_cast<double>(c.shape.elements);
    return n;
  };
  EXPECT_DOUBLE_EQ(cast_elements(Block::ATTENTION, Phase::FORWARD), T * h / t);
  EXPECT_DOUBLE_EQ(cast_elements(Block::MLP, Phase::FORWARD), 0.0);
  EXPECT_DOUBLE_EQ(cast_elements(Block::ATTENTION, Phase::BACKWARD), T * (h + 3 * h / t));
  EXPECT_DOUBLE_EQ(cast_elements(Block::MLP, Phase::BACKWARD), T * h);
  EXPECT_DOUBLE_EQ(cast_elements(Block::LOGITS, Phase::FORWARD), 0.0);
  // 16-bit training has no casts: the fp8 attention forward has one kernel more, the MLP's none.
  EXPECT_EQ(block_kernels(w, Block::ATTENTION, Phase::FORWARD).size(),
            block_kernels(bf16, Block::ATTENTION, Phase::FORWARD).size() + 1);
  EXPECT_EQ(block_kernels(w, Block::MLP, Phase::FORWARD).size(),
            block_kernels(bf16, Block::MLP, Phase::FORWARD).size());
}

// An MoE layer's routing: the router GEMM over the E experts, softmax/top-k, and the permutation
// and unpermutation of the k routed copies of the tokens the rank routes (T/tp with sequence
// parallelism); backward mirrors them. A dense model has no router.
TEST(BlockKernels, RouterPermutesTheRoutedCopies) {
  WorkloadSpec w = gpt3(4, 1);
  w.model.moe.experts = 64;
  w.model.moe.top_k = 8;
  w.model.moe.expert_ffn_hidden = 2048;
  for (const bool sp : {false, true}) {
    w.parallel.sp = sp;
    const int64_t tokens = sp ? 2048 / 4 : 2048;
    const auto fwd = block_kernels(w, Block::ROUTER, Phase::FORWARD);
    ASSERT_EQ(fwd.size(), 4u);
    EXPECT_EQ(fwd[0].shape, gemm(Dtype::BF16, tokens, 64, 12288));
    EXPECT_EQ(fwd[1].shape, rowwise(KernelKind::SOFTMAX_XENT, Dtype::BF16, tokens, 64));
    EXPECT_EQ(fwd[2].shape, elementwise(KernelKind::MEMCPY, Dtype::BF16, 8 * tokens * 12288));
    EXPECT_EQ(fwd[3].shape, fwd[2].shape);
    const auto bwd = block_kernels(w, Block::ROUTER, Phase::BACKWARD);
    EXPECT_DOUBLE_EQ(flops_of(bwd, KernelKind::GEMM), 2 * flops_of(fwd, KernelKind::GEMM));
    EXPECT_EQ(count_of(bwd, KernelKind::MEMCPY), 2u);
  }
  EXPECT_THROW(block_kernels(gpt3(4, 1), Block::ROUTER, Phase::FORWARD), ModelError);
}

// The routed experts run each local expert's own GEMMs: M = the tokens one expert receives under
// balanced routing (an EP rank's b*s/cp*etp/tp tokens x top_k, over its E/ep experts), N and K the
// expert's width per expert-TP rank and h, E/ep of each (time factor and launches); the
// activation once over all the rank's routed tokens; with ep > 1 and several local experts the
// received tokens sorted by expert and back (a copy of the routed tokens each way); no norm and no
// residual add. GPT-3's h = 12288 with 64 experts of 2048 (GELU), top-8, tp 4.
TEST(BlockKernels, RoutedExpertsRunEachLocalExpertsOwnGemms) {
  WorkloadSpec w = gpt3(4, 1);
  w.model.moe.experts = 64;
  w.model.moe.top_k = 8;
  w.model.moe.expert_ffn_hidden = 2048;
  const int64_t h = 12288, f = 2048;
  struct Case {
    int ep, etp, cp;
    int64_t tokens, width;
  };
  // Folded (etp 1): 2048/4 tokens per EP rank, 512·8 pairs over 8 local experts. Unfolded
  // (etp = tp): the TP group's 2048 tokens, 2048·8 pairs over 8 experts, each a quarter wide.
  // cp 2 halves the tokens; ep 1 holds all 64 experts and sorts nothing.
  for (const Case& k : {Case{8, 1, 1, 512, 2048}, Case{8, 4, 1, 2048, 512}, Case{8, 1, 2, 256, 2048},
                        Case{1, 4, 1, 256, 512}}) {
    w.parallel.ep = k.ep;
    w.parallel.etp = k.etp;
    w.parallel.cp = k.cp;
    const double local = 64.0 / k.ep;
    const int64_t routed = k.tokens * static_cast<int64_t>(local); // the rank's token-expert pairs
    const bool sort = k.ep > 1;
    const auto fwd = block_kernels(w, Block::EXPERTS, Phase::FORWARD);
    ASSERT_EQ(fwd.size(), sort ? 5u : 3u);
    const size_t g = sort ? 1 : 0;
    if (sort) {
      EXPECT_EQ(fwd[0].shape, elementwise(KernelKind::MEMCPY, Dtype::BF16, routed * h));
      EXPECT_EQ(fwd[4].shape, fwd[0].shape);
    }
    EXPECT_EQ(fwd[g].shape, gemm(Dtype::BF16, k.tokens, k.width, h));
    EXPECT_EQ(fwd[g + 1].shape, elementwise(KernelKind::GELU, Dtype::BF16, routed * k.width));
    EXPECT_EQ(fwd[g + 2].shape, gemm(Dtype::BF16, k.tokens, h, k.width));
    for (const KernelCall& c : fwd) {
      const bool gemm_call = c.shape.kind == KernelKind::GEMM;
      EXPECT_DOUBLE_EQ(c.time_factor, gemm_call ? local : 1.0);
      EXPECT_DOUBLE_EQ(c.launches, gemm_call ? local : 1.0);
    }
    // All local experts' forward GEMMs: 2 · pairs · h · 2f/etp, the pairs those the EP rank routes.
    const double pairs = 2048.0 / k.cp * k.etp / 4 * 8;
    EXPECT_DOUBLE_EQ(routed, pairs);
    EXPECT_DOUBLE_EQ(flops_of(fwd, KernelKind::GEMM) * local, 2 * pairs * h * 2 * f / k.etp);
    const auto bwd = block_kernels(w, Block::EXPERTS, Phase::BACKWARD);
    EXPECT_EQ(count_of(bwd, KernelKind::GEMM), 4u);
    EXPECT_DOUBLE_EQ(flops_of(bwd, KernelKind::GEMM), 2 * flops_of(fwd, KernelKind::GEMM));
    EXPECT_EQ(count_of(bwd, KernelKind::MEMCPY), sort ? 2u : 0u);
    EXPECT_EQ(count_of(bwd, KernelKind::RMSNORM) + count_of(bwd, KernelKind::LAYERNORM), 0u);
  }
  // SwiGLU experts: gate and up in one GEMM of 2f.
  w.model.mlp = MlpKind::SWIGLU;
  w.parallel.ep = 8;
  w.parallel.etp = 1;
  w.parallel.cp = 1;
  EXPECT_EQ(block_kernels(w, Block::EXPERTS, Phase::FORWARD)[1].shape, gemm(Dtype::BF16, 512, 2 * f, h));
  // fp8: each expert casts its GEMMs' inputs and, backward, their output gradients (a grouped
  // linear quantizes its own operands): two cast-transposes forward, two backward.
  WorkloadSpec fp8 = w;
  fp8.precision = Precision::FP8;
  EXPECT_EQ(count_of(block_kernels(fp8, Block::EXPERTS, Phase::FORWARD), KernelKind::MEMCPY), 2u + 2u);
  EXPECT_EQ(count_of(block_kernels(fp8, Block::EXPERTS, Phase::BACKWARD), KernelKind::MEMCPY), 2u + 2u);
  // The experts' activation is what selective recomputation's moe_act repeats.
  w.training.recompute = Recompute::SELECTIVE;
  w.training.recompute_modules.moe_act = true;
  const auto recomputed = block_kernels(w, Block::EXPERTS, Phase::BACKWARD);
  EXPECT_EQ(count_of(recomputed, KernelKind::SWIGLU), 2u);
  EXPECT_THROW(block_kernels(gpt3(4, 1), Block::EXPERTS, Phase::FORWARD), ModelError);
  w.parallel.ep = 3; // 64 experts do not divide over 3 EP ranks
  EXPECT_THROW(block_kernels(w, Block::EXPERTS, Phase::FORWARD), ModelError);
}

// Every GEMM, attention, norm, activation and loss shape a task runs is one the suite measures
// (workload_kernels); only the residual adds (memcpy) are extra. Llama: GQA and fused SwiGLU.
TEST(BlockKernels, ShapesAreTheSuitesShapes) {
  WorkloadSpec llama;
  llama.name = "llama";
  llama.model = llama2_70b();
  llama.parallel.tp = 8;
  llama.parallel.pp = 4;
  llama.batch.micro_batch = 1;
  llama.batch.global_batch = 1;
  llama.training.flash_attention = true;
  for (const WorkloadSpec& w : {gpt3(8, 1), gpt3(4, 2), gpt3(8, 1, false), llama}) {
    const auto suite = workload_kernels(w);
    for (const KernelShape& s : block_kernel_shapes(w)) {
      if (s.kind == KernelKind::MEMCPY)
        continue;
      EXPECT_NE(std::find(suite.begin(), suite.end(), s), suite.end()) << w.name << ": " << describe(s);
    }
  }
  const auto mlp = block_kernels(llama, Block::MLP, Phase::FORWARD);
  EXPECT_EQ(mlp[1].shape, gemm(Dtype::BF16, 4096, 2 * 28672 / 8, 8192));
  EXPECT_EQ(mlp[2].shape, elementwise(KernelKind::SWIGLU, Dtype::BF16, 4096 * 28672 / 8));
  const auto attn = block_kernels(llama, Block::ATTENTION, Phase::FORWARD);
  EXPECT_EQ(attn[2].shape.kv_heads, 1);
  EXPECT_EQ(attn[1].shape, gemm(Dtype::BF16, 4096, (8 + 2) * 128, 8192));
}

// Without flash attention the attention core is Megatron's unfused kernels: per TP rank
// B = a/t = 12 score matrices of s × s. Forward: QKᵀ B × (s, s, d), scale-mask-softmax, dropout,
// attention·V B × (s, d, s), all over the full s² (the causal mask skips no work); backward: the
// four gradient GEMMs (twice the forward's FLOPs), dropout and softmax backward (1.5× the
// softmax's traffic). Selective recomputation puts the four forward kernels before the backward.
TEST(BlockKernels, UnfusedAttentionCore) {
  WorkloadSpec w = gpt3(8, 1, false);
  const int64_t b = 12;
  const int64_t s = 2048;
  const int64_t d = 128;
  const auto fwd = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  ASSERT_EQ(fwd.size(), 8u);
  EXPECT_EQ(fwd[2].shape, gemm(Dtype::BF16, s, s, d, b));
  EXPECT_EQ(fwd[3].shape, rowwise(KernelKind::SOFTMAX_XENT, Dtype::BF16, b * s, s));
  EXPECT_EQ(fwd[4].shape, elementwise(KernelKind::MEMCPY, Dtype::BF16, 5 * b * s * s / 4));
  EXPECT_EQ(fwd[5].shape, gemm(Dtype::BF16, s, d, s, b));
  EXPECT_EQ(count_of(fwd, KernelKind::ATTENTION_FWD), 0u);
  const double core = 4.0 * b * s * s * d; // QKᵀ and AV, non-causal
  const auto fused_fwd = block_kernels(gpt3(8, 1), Block::ATTENTION, Phase::FORWARD);
  EXPECT_DOUBLE_EQ(flops_of(fwd, KernelKind::GEMM), flops_of(fused_fwd, KernelKind::GEMM) + core);

  const auto bwd = block_kernels(w, Block::ATTENTION, Phase::BACKWARD);
  ASSERT_EQ(bwd.size(), 12u); // residual, 2 out-proj, 6 core, 2 QKV, norm
  const auto fused_bwd = block_kernels(gpt3(8, 1), Block::ATTENTION, Phase::BACKWARD);
  EXPECT_DOUBLE_EQ(flops_of(bwd, KernelKind::GEMM), flops_of(fused_bwd, KernelKind::GEMM) + 2 * core);
  EXPECT_EQ(count_of(bwd, KernelKind::SOFTMAX_XENT), 1u);
  const auto softmax_bwd = std::find_if(
      bwd.begin(), bwd.end(), [](const KernelCall& c) { return c.shape.kind == KernelKind::SOFTMAX_XENT; });
  EXPECT_DOUBLE_EQ(softmax_bwd->time_factor, 1.5);
  EXPECT_EQ(attention_core_kernels(w, Phase::BACKWARD).size(), 6u);

  w.training.recompute = Recompute::SELECTIVE;
  const auto sel = block_kernels(w, Block::ATTENTION, Phase::BACKWARD);
  ASSERT_EQ(sel.size(), bwd.size() + 4);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(sel[i].shape, fwd[i + 2].shape);

  // Without dropout the core has no dropout pass, forward or backward; nothing else changes.
  w.training.recompute = Recompute::NONE;
  w.model.dropout = false;
  const auto plain_fwd = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  ASSERT_EQ(plain_fwd.size(), fwd.size() - 1);
  EXPECT_EQ(count_of(plain_fwd, KernelKind::MEMCPY), count_of(fwd, KernelKind::MEMCPY) - 1);
  EXPECT_DOUBLE_EQ(flops_of(plain_fwd, KernelKind::GEMM), flops_of(fwd, KernelKind::GEMM));
  EXPECT_EQ(block_kernels(w, Block::ATTENTION, Phase::BACKWARD).size(), bwd.size() - 1);
}

// Sequence parallelism: norms and residual adds see T/tp tokens; GEMMs do not change.
TEST(BlockKernels, SequenceParallelSplitsRowWiseKernels) {
  WorkloadSpec w = gpt3(8, 1);
  w.parallel.sp = true;
  const auto fwd = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  EXPECT_EQ(fwd[0].shape, rowwise(KernelKind::LAYERNORM, Dtype::BF16, 2048 / 8, 12288));
  EXPECT_EQ(fwd[1].shape, gemm(Dtype::BF16, 2048, 4608, 12288));
}

TEST(BlockKernels, RejectsTpThatDoesNotDivide) {
  WorkloadSpec w = gpt3(8, 1);
  w.parallel.tp = 7;
  EXPECT_THROW(block_kernels(w, Block::MLP, Phase::FORWARD), ModelError);
  EXPECT_EQ(optimizer_kernel(1000).shape, elementwise(KernelKind::ADAM, Dtype::FP32, 1000));
}

} // namespace
} // namespace stepsim::kernels

namespace stepsim::kernels {
namespace {

/// DeepSeek-V3's attention (h 7168, 128 heads; latents 1536 and 512, widths 128 + 64 and 128).
WorkloadSpec mla_workload(int tp, int64_t q_lora) {
  WorkloadSpec w;
  w.name = "mla";
  w.training.flash_attention = true;
  w.model = llama2_70b();
  w.model.hidden = 7168;
  w.model.heads = 128;
  w.model.kv_heads = 128;
  w.model.seq_len = 4096;
  w.model.mla = MlaSpec{.q_lora_rank = q_lora,
                        .kv_lora_rank = 512,
                        .qk_nope_head_dim = 128,
                        .qk_rope_head_dim = 64,
                        .v_head_dim = 128};
  w.parallel.tp = tp;
  w.parallel.pp = 1;
  w.batch.micro_batch = 1;
  w.batch.global_batch = 1;
  return w;
}

} // namespace

// Multi-head latent attention: the forward GEMMs are the down-projections (T x 1536 x h and
// T x 576 x h, whole on every TP rank), the per-head up-projections (T x a/t·192 x 1536 and
// T x a/t·256 x 512) and the output projection (T x h x a/t·128): their FLOPs are 2·T·the
// weights of model::attention_gemm_weights; the fused core's are 2·T²·(a/t)·(192 + 128), halved
// for causality like every fused core; no QKV GEMM; backward GEMMs twice the forward's.
TEST(BlockKernels, MlaProjectionsAndCore) {
  for (const int t : {1, 8}) {
    for (const int64_t q_lora : {int64_t{1536}, int64_t{0}}) {
      const WorkloadSpec w = mla_workload(t, q_lora);
      const double T = 4096, h = 7168, a = 128.0 / t;
      const auto fwd = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
      const double q = q_lora > 0 ? 2 * T * (1536 * h + a * 192 * 1536) : 2 * T * a * 192 * h;
      const double kv = 2 * T * (576 * h + a * 256 * 512);
      const double out = 2 * T * a * 128 * h;
      EXPECT_DOUBLE_EQ(flops_of(fwd, KernelKind::GEMM), q + kv + out) << "tp " << t << " q_lora " << q_lora;
      EXPECT_DOUBLE_EQ(flops_of(fwd, KernelKind::GEMM), 2 * T * model::attention_gemm_weights(w.model, t));
      EXPECT_DOUBLE_EQ(flops_of(fwd, KernelKind::ATTENTION_FWD), 0.5 * 2 * T * T * a * (192 + 128));
      EXPECT_DOUBLE_EQ(flops_of(fwd, KernelKind::ATTENTION_FWD),
                       0.5 * model::attention_core_flops(w.model, 1, t).value());
      EXPECT_DOUBLE_EQ(flops_of(block_kernels(w, Block::ATTENTION, Phase::BACKWARD), KernelKind::GEMM),
                       2 * flops_of(fwd, KernelKind::GEMM));
      for (const KernelCall& c : fwd)
        EXPECT_NE(std::string(c.role), "qkv fwd");
      // The latents' norms run over all T tokens, one per latent.
      EXPECT_EQ(count_of(fwd, KernelKind::RMSNORM), q_lora > 0 ? 3u : 2u);
    }
  }
}

} // namespace stepsim::kernels

namespace stepsim::kernels {
namespace {

// Sliding-window attention: a windowed layer's fused core is the causal kernel over 2w positions
// on b·s/(2w) sequences, i.e. b·s·w score products, half of the model-FLOPs count of
// model::attention_core_flops (as every fused core); the rest of the block, the full-attention
// layers and the unfused core (which computes the whole masked s × s) are as without a window;
// a window of s/2 or more is full attention; the suite measures the windowed kernel's shapes.
TEST(BlockKernels, SlidingWindowCore) {
  WorkloadSpec w;
  w.name = "windowed";
  w.model = llama2_70b();
  w.model.seq_len = 8192;
  w.model.sliding_window = 128;
  w.model.full_attention_every = 2;
  w.parallel.tp = 8;
  w.parallel.pp = 4;
  w.batch.micro_batch = 2;
  w.batch.global_batch = 2;
  w.training.flash_attention = true;
  for (Phase pass : {Phase::FORWARD, Phase::BACKWARD}) {
    const KernelKind kind = pass == Phase::FORWARD ? KernelKind::ATTENTION_FWD : KernelKind::ATTENTION_BWD;
    const auto full = block_kernels(w, Block::ATTENTION, pass);
    const auto windowed = block_kernels(w, Block::ATTENTION, pass, true);
    ASSERT_EQ(full.size(), windowed.size());
    for (size_t i = 0; i < full.size(); ++i) {
      if (full[i].shape.kind != kind) {
        EXPECT_EQ(full[i].shape, windowed[i].shape);
        EXPECT_EQ(full[i].time_factor, windowed[i].time_factor);
        continue;
      }
      EXPECT_EQ(full[i].shape.seq, 8192);
      EXPECT_EQ(full[i].time_factor, 1.0);
      EXPECT_EQ(windowed[i].shape.seq, 256);
      EXPECT_EQ(windowed[i].shape.batch, 2 * 32);
      EXPECT_EQ(windowed[i].time_factor, 1.0);
      if (pass == Phase::FORWARD) {
        EXPECT_DOUBLE_EQ(kernel_flops(windowed[i].shape).value() * windowed[i].time_factor,
                         0.5 * model::attention_core_flops(w.model, 2, 8, true).value());
      }
    }
    // The other blocks do not change.
    const auto mlp = block_kernels(w, Block::MLP, pass);
    EXPECT_EQ(mlp.size(), block_kernels(w, Block::MLP, pass, true).size());
  }
  const auto suite = workload_kernels(w);
  for (const KernelShape& s : block_kernel_shapes(w)) {
    if (s.kind == KernelKind::MEMCPY)
      continue;
    EXPECT_NE(std::find(suite.begin(), suite.end(), s), suite.end()) << describe(s);
  }

  // Unfused: the masked s × s either way.
  w.training.flash_attention = false;
  const auto unfused = block_kernels(w, Block::ATTENTION, Phase::FORWARD, true);
  const auto unfused_full = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  ASSERT_EQ(unfused.size(), unfused_full.size());
  for (size_t i = 0; i < unfused.size(); ++i)
    EXPECT_EQ(unfused[i].shape, unfused_full[i].shape);

  // A window that does not divide the sequence: the nearest whole count of sequences, scaled.
  w.training.flash_attention = true;
  w.model.sliding_window = 3000; // 2·8192/6000 = 2.73 sequences of 6000
  for (const KernelCall& c : block_kernels(w, Block::ATTENTION, Phase::FORWARD, true)) {
    if (c.shape.kind != KernelKind::ATTENTION_FWD)
      continue;
    EXPECT_EQ(c.shape.seq, 6000);
    EXPECT_EQ(c.shape.batch, 2);
    EXPECT_DOUBLE_EQ(kernel_flops(c.shape).value() * c.time_factor,
                     0.5 * model::attention_core_flops(w.model, 2, 8, true).value());
  }
  // A window of half the sequence or more: full attention.
  w.model.sliding_window = 4096;
  const auto wide = block_kernels(w, Block::ATTENTION, Phase::FORWARD, true);
  const auto plain = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  for (size_t i = 0; i < wide.size(); ++i) {
    EXPECT_EQ(wide[i].shape, plain[i].shape);
    EXPECT_EQ(wide[i].time_factor, plain[i].time_factor);
  }
}

} // namespace
} // namespace stepsim::kernels

namespace stepsim::kernels {
namespace {

size_t count_role(const std::vector<KernelCall>& calls, const std::string& role) {
  return static_cast<size_t>(std::count_if(calls.begin(), calls.end(),
                                           [&](const KernelCall& c) { return std::string(c.role) == role; }));
}

// Selective recomputation by module: before each block's backward, layernorm repeats the block's
// norm, mlp the dense MLP's whole forward (its GEMMs: the backward's FLOPs grow from 2x to 3x the
// forward's), moe_act the experts' activation (MoE models), core_attn the attention core (the
// default); the HFU numerator adds the repeated cores and MLPs.
TEST(BlockKernels, SelectiveRecomputeModules) {
  WorkloadSpec w = gpt3(8, 1);
  w.training.recompute = Recompute::SELECTIVE;
  const auto attn_default = block_kernels(w, Block::ATTENTION, Phase::BACKWARD);
  EXPECT_EQ(count_role(attn_default, "attention fwd (recompute)"), 1u);
  EXPECT_EQ(count_role(attn_default, "input norm (recompute)"), 0u);
  w.training.recompute_modules = {.core_attn = false, .layernorm = true, .mlp = true};
  const auto attn = block_kernels(w, Block::ATTENTION, Phase::BACKWARD);
  EXPECT_EQ(count_role(attn, "attention fwd (recompute)"), 0u);
  EXPECT_EQ(count_role(attn, "input norm (recompute)"), 1u);
  EXPECT_EQ(attn.size(), attn_default.size());
  const double mlp_fwd = flops_of(block_kernels(w, Block::MLP, Phase::FORWARD), KernelKind::GEMM);
  EXPECT_DOUBLE_EQ(flops_of(block_kernels(w, Block::MLP, Phase::BACKWARD), KernelKind::GEMM), 3 * mlp_fwd);
  WorkloadSpec hw = w;
  hw.batch.global_batch = 16;
  WorkloadSpec plain = hw;
  plain.training.recompute = Recompute::NONE;
  EXPECT_NEAR(model::hardware_flops_per_step(hw).value() - model::model_flops_per_step(plain).value(),
              16.0 * 96 * model::mlp_block_forward_flops(w.model, 1, 1).value(),
              1e-9 * model::model_flops_per_step(plain).value());

  WorkloadSpec moe = gpt3(8, 1);
  moe.model.moe.experts = 16;
  moe.model.moe.top_k = 2;
  moe.model.moe.expert_ffn_hidden = moe.model.ffn_hidden;
  moe.training.recompute = Recompute::SELECTIVE;
  EXPECT_EQ(count_role(block_kernels(moe, Block::EXPERTS, Phase::BACKWARD), "experts activation (recompute)"),
            0u);
  moe.training.recompute_modules.moe_act = true;
  // moe_act repeats the routed experts' activation (their own block), not the dense MLP's.
  EXPECT_EQ(count_role(block_kernels(moe, Block::EXPERTS, Phase::BACKWARD), "experts activation (recompute)"),
            1u);
  EXPECT_EQ(count_role(block_kernels(moe, Block::MLP, Phase::BACKWARD), "activation (recompute)"), 0u);

  // mla_up_proj: the attention backward repeats the two up-projection GEMMs, whose FLOPs are
  // model::mla_up_projection_flops.
  WorkloadSpec mla = gpt3(8, 1);
  mla.model.kv_heads = mla.model.heads;
  mla.model.mla = MlaSpec{.q_lora_rank = 1536,
                          .kv_lora_rank = 512,
                          .qk_nope_head_dim = 128,
                          .qk_rope_head_dim = 64,
                          .v_head_dim = 128};
  mla.training.recompute = Recompute::SELECTIVE;
  const double without = flops_of(block_kernels(mla, Block::ATTENTION, Phase::BACKWARD), KernelKind::GEMM);
  mla.training.recompute_modules.mla_up_proj = true;
  const auto with_up = block_kernels(mla, Block::ATTENTION, Phase::BACKWARD);
  EXPECT_EQ(count_role(with_up, "q up-proj (recompute)"), 1u);
  EXPECT_EQ(count_role(with_up, "kv up-proj (recompute)"), 1u);
  EXPECT_NEAR(flops_of(with_up, KernelKind::GEMM) - without,
              model::mla_up_projection_flops(mla.model, mla.batch.micro_batch, 8).value(), 1e-6 * without);
}

// Only attention, MLP, logits and router blocks have kernels here, and only in the forward,
// backward and recomputation (the optimizer's are optimizer_kernels; the experts' GEMMs are
// modelled elsewhere): anything else is a ModelError naming it.
TEST(BlockKernels, RejectsBlocksAndPhasesWithoutKernels) {
  const WorkloadSpec w = gpt3(8, 1);
  for (Block b : {Block::NONE, Block::OPTIMIZER})
    EXPECT_THROW(block_kernels(w, b, Phase::FORWARD), ModelError) << to_string(b);
  for (Phase p : {Phase::OPTIMIZER, Phase::WEIGHT_GRAD})
    EXPECT_THROW(block_kernels(w, Block::MLP, p), ModelError) << to_string(p);
  try {
    (void)block_kernels(w, Block::OPTIMIZER, Phase::FORWARD);
  } catch (const ModelError& e) {
    EXPECT_EQ(std::string(e.what()), "compute model: no kernels for block optimizer");
  }
  // The routed experts have kernels of their own, and need experts.
  try {
    (void)block_kernels(w, Block::EXPERTS, Phase::FORWARD);
    ADD_FAILURE() << "a dense model's experts block was accepted";
  } catch (const ModelError& e) {
    EXPECT_EQ(std::string(e.what()),
              "block kernels: the router and the experts need model.moe.experts and top_k > 0");
  }
}

} // namespace
} // namespace stepsim::kernels

namespace stepsim::kernels {
namespace {

WorkloadSpec llama70b(int tp) {
  WorkloadSpec w;
  w.name = "llama2-70b";
  w.model = llama2_70b();
  w.training.flash_attention = true;
  w.parallel.tp = tp;
  w.batch.micro_batch = 1;
  w.batch.global_batch = 1;
  return w;
}

/// Bytes of the block's non-GEMM, non-attention kernels (time factors applied).
double pointwise_bytes(const std::vector<KernelCall>& calls) {
  double b = 0;
  for (const KernelCall& c : calls)
    if (c.shape.kind != KernelKind::GEMM && c.shape.kind != KernelKind::ATTENTION_FWD &&
        c.shape.kind != KernelKind::ATTENTION_BWD)
      b += kernel_bytes(c.shape).value() * c.time_factor;
  return b;
}

// training.pointwise: eager, Llama 2 70B on one TP rank of 8 (T = 4096, h = 8192, q = 8192/8 =
// 1024, kv = 1024/8 = 128 per rank, f/t = 3584; no SP, so the norms see all T tokens). Per token
// the forward of the attention block adds: the RMSNorm's 36 bytes per value against 4 (6 kernels
// for 1), the rotary embedding of Q and K (20 bytes per value over q + kv, 3 kernels), the
// repeat of K and V (2 bytes read per kv value and 2 written per q value, for each of K and V:
// one copy of kv + q values) and the attention output's copy (4 bytes per q value). The MLP adds
// the norm's 32 bytes per value and SwiGLU as silu (4 bytes per output) and product (6) against
// the fused kernel's 6. The backward: the norms and the activation twice, the rest once.
TEST(BlockKernels, EagerPointwiseTraffic) {
  WorkloadSpec w = llama70b(8);
  const double T = 4096, h = 8192, q = 1024, kv = 128, f = 3584;
  const auto fused_attn = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  const auto fused_mlp = block_kernels(w, Block::MLP, Phase::FORWARD);
  const auto fused_attn_b = block_kernels(w, Block::ATTENTION, Phase::BACKWARD);
  const auto fused_mlp_b = block_kernels(w, Block::MLP, Phase::BACKWARD);
  w.training.pointwise = Pointwise::EAGER;
  const auto attn = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  const auto mlp = block_kernels(w, Block::MLP, Phase::FORWARD);
  const double norm_extra = (36.0 - 4.0) * T * h;
  const double rotary = 20.0 * T * (q + kv);
  const double repeat = 4.0 * T * (q + kv);
  const double contiguous = 4.0 * T * q;
  EXPECT_NEAR(pointwise_bytes(attn) - pointwise_bytes(fused_attn), norm_extra + rotary + repeat + contiguous,
              1e-6 * norm_extra);
  EXPECT_NEAR(pointwise_bytes(mlp) - pointwise_bytes(fused_mlp), norm_extra + (4.0 + 6.0 - 6.0) * T * f,
              1e-6 * norm_extra);
  EXPECT_NEAR(pointwise_bytes(block_kernels(w, Block::ATTENTION, Phase::BACKWARD)) -
                  pointwise_bytes(fused_attn_b),
              2 * norm_extra + rotary + repeat + contiguous, 1e-6 * norm_extra);
  EXPECT_NEAR(pointwise_bytes(block_kernels(w, Block::MLP, Phase::BACKWARD)) - pointwise_bytes(fused_mlp_b),
              2 * (norm_extra + 4.0 * T * f), 1e-6 * norm_extra);
  // Launches: the norm's 6 for 1, three rotary kernels, the repeat and the copy; silu and product.
  EXPECT_EQ(attn.size(), fused_attn.size() + 5 + 3 + 1 + 1);
  EXPECT_EQ(mlp.size(), fused_mlp.size() + 5 + 1);
  // GEMMs and the attention core do not change.
  EXPECT_DOUBLE_EQ(flops_of(attn, KernelKind::GEMM), flops_of(fused_attn, KernelKind::GEMM));
  EXPECT_EQ(count_of(attn, KernelKind::ATTENTION_FWD), 1u);
}

// Eager fp8 (torchao's dynamic float8 linears): every operand's cast is its own kernel after an
// amax pass; the fused path casts QKV's and fc1's inputs inside the norms (none of their own).
TEST(BlockKernels, EagerFp8CastsEveryOperand) {
  WorkloadSpec w = llama70b(8);
  w.precision = Precision::FP8;
  EXPECT_EQ(count_role(block_kernels(w, Block::ATTENTION, Phase::FORWARD), "fp8 cast-transpose (input)"), 1u);
  w.training.pointwise = Pointwise::EAGER;
  const auto attn = block_kernels(w, Block::ATTENTION, Phase::FORWARD);
  EXPECT_EQ(count_role(attn, "fp8 cast-transpose (input)"), 2u);
  EXPECT_EQ(count_role(attn, "fp8 amax (eager)"), 2u);
  EXPECT_EQ(count_role(block_kernels(w, Block::MLP, Phase::BACKWARD), "fp8 cast-transpose (output gradient)"),
            2u);
}

/// Bytes of the calls whose role starts with `prefix`.
double role_bytes(const std::vector<KernelCall>& calls, std::string_view prefix) {
  double b = 0;
  for (const KernelCall& c : calls)
    if (std::string_view(c.role).substr(0, prefix.size()) == prefix)
      b += kernel_bytes(c.shape).value() * c.time_factor;
  return b;
}

// Rowwise fp8 (training.fp8_scaling: rowwise, torchao's axiswise recipe), Llama 2 70B on one TP
// rank of 8 (T = 4096, h = 8192, f/t = 3584, SwiGLU: fc1 n = 2f/t; fused pointwise kernels).
// Forward, per linear: the weight cast along k (3 bytes per weight value), the input cast along k
// (3 bytes) only where the tensorwise cast-transpose ran (the fc2 input is cast in the
// activation). Backward, per linear: the weight along n (amax pass 2 + cast 3), the output
// gradient along n (3, where the tensorwise cast ran), the output gradient and the input along
// the tokens (2 + 3 each), and both outputs rescaled (2 read + 2 written per value). The GEMMs'
// FLOPs do not change.
TEST(BlockKernels, RowwiseFp8CastsEachOperandAlongEachGemmsAxis) {
  WorkloadSpec w = llama70b(8);
  w.precision = Precision::FP8;
  w.training.fp8_weight_cache = false;
  const auto tw_f = block_kernels(w, Block::MLP, Phase::FORWARD);
  const auto tw_b = block_kernels(w, Block::MLP, Phase::BACKWARD);
  w.training.fp8_scaling = Fp8Scaling::ROWWISE;
  const auto rw_f = block_kernels(w, Block::MLP, Phase::FORWARD);
  const auto rw_b = block_kernels(w, Block::MLP, Phase::BACKWARD);
  const double T = 4096, h = 8192, f = 3584, up = 2 * f;
  // fc1 (n = up, k = h; its input cast in the norm) and fc2 (n = h, k = f; cast in the activation).
  EXPECT_DOUBLE_EQ(role_bytes(rw_f, "fp8"), 3 * up * h + 3 * h * f);
  const double fc2 = 3 * T * h /*dY row*/ + 5 * h * f /*W column*/ + 4 * T * f /*dX rescale*/ +
                     5 * T * h /*dY column*/ + 5 * T * f /*X column*/ + 4 * h * f /*dW rescale*/;
  const double fc1 =
      5 * up * h + 4 * T * h + 5 * T * up + 5 * T * h + 4 * up * h; // dY cast in the activation
  EXPECT_DOUBLE_EQ(role_bytes(rw_b, "fp8"), fc2 + fc1);
  // Tensorwise: the fc2 output gradient's cast-transpose alone (4 bytes per value).
  EXPECT_DOUBLE_EQ(role_bytes(tw_b, "fp8"), 4 * T * h);
  EXPECT_DOUBLE_EQ(role_bytes(tw_f, "fp8"), 0.0);
  EXPECT_DOUBLE_EQ(flops_of(rw_b, KernelKind::GEMM), flops_of(tw_b, KernelKind::GEMM));
  EXPECT_DOUBLE_EQ(flops_of(rw_f, KernelKind::GEMM), flops_of(tw_f, KernelKind::GEMM));
}

// training.fused_projections: false (torchtitan's Llama: wq, wk, wv; w1, w3). The same FLOPs in
// three attention GEMMs (q = 1024, k = v = 128 outputs per rank of 8) and two gate/up GEMMs (f/t
// = 3584 each) instead of one each; the backward sums the extra input gradients: with fused
// pointwise kernels the norm's backward reads the two (one) further T x h parts, 2 bytes per
// value each; eager, autograd adds each by a kernel (6 bytes per value). In fp8 the casts move
// nothing: the input is cast once for all three, and dQ, dK, dV are the fused output gradient's
// values.
TEST(BlockKernels, SeparateProjectionsSplitTheGemmsAndSumTheirInputGradients) {
  WorkloadSpec w = llama70b(8);
  const double T = 4096, h = 8192;
  for (const Precision p : {Precision::BF16, Precision::FP8}) {
    w.precision = p;
    w.training.fused_projections = true;
    w.training.pointwise = Pointwise::FUSED;
    std::vector<std::vector<KernelCall>> fused, split;
    for (const Block b : {Block::ATTENTION, Block::MLP})
      for (const Phase ph : {Phase::FORWARD, Phase::BACKWARD})
        fused.push_back(block_kernels(w, b, ph));
    w.training.fused_projections = false;
    for (const Block b : {Block::ATTENTION, Block::MLP})
      for (const Phase ph : {Phase::FORWARD, Phase::BACKWARD})
        split.push_back(block_kernels(w, b, ph));
    for (std::size_t i = 0; i < fused.size(); ++i) {
      EXPECT_DOUBLE_EQ(flops_of(split[i], KernelKind::GEMM), flops_of(fused[i], KernelKind::GEMM)) << i;
      EXPECT_DOUBLE_EQ(role_bytes(split[i], "fp8"), role_bytes(fused[i], "fp8")) << i;
    }
    EXPECT_EQ(count_of(split[0], KernelKind::GEMM), count_of(fused[0], KernelKind::GEMM) + 2);
    EXPECT_EQ(count_of(split[1], KernelKind::GEMM), count_of(fused[1], KernelKind::GEMM) + 4);
    EXPECT_EQ(count_of(split[2], KernelKind::GEMM), count_of(fused[2], KernelKind::GEMM) + 1);
    EXPECT_EQ(count_of(split[3], KernelKind::GEMM), count_of(fused[3], KernelKind::GEMM) + 2);
    EXPECT_DOUBLE_EQ(pointwise_bytes(split[0]), pointwise_bytes(fused[0]));
    EXPECT_DOUBLE_EQ(pointwise_bytes(split[1]) - pointwise_bytes(fused[1]), 2 * 2 * T * h);
    EXPECT_DOUBLE_EQ(pointwise_bytes(split[3]) - pointwise_bytes(fused[3]), 1 * 2 * T * h);
    EXPECT_DOUBLE_EQ(role_bytes(split[1], "q, k, v input gradients summed"), 2 * 2 * T * h);
  }
  w.precision = Precision::BF16;
  w.training.pointwise = Pointwise::EAGER;
  EXPECT_DOUBLE_EQ(
      role_bytes(block_kernels(w, Block::ATTENTION, Phase::BACKWARD), "q, k, v input gradients summed"),
      2 * 6 * T * h);
  EXPECT_EQ(count_role(block_kernels(w, Block::MLP, Phase::BACKWARD), "gate, up input gradients summed"), 1u);
}

// recompute_modules: alternate_linears. The attention backward repeats the input norm, the K
// projection and the out-projection (2·T·h·(kv + q) FLOPs on the rank); the MLP backward the
// norm, the up projection and the activation (2·T·h·f/t).
TEST(BlockKernels, AlternateLinearsRecompute) {
  WorkloadSpec w = llama70b(8);
  const double T = 4096, h = 8192, q = 1024, kv = 128, f = 3584;
  const double attn_b = flops_of(block_kernels(w, Block::ATTENTION, Phase::BACKWARD), KernelKind::GEMM);
  const double mlp_b = flops_of(block_kernels(w, Block::MLP, Phase::BACKWARD), KernelKind::GEMM);
  w.training.recompute = Recompute::SELECTIVE;
  w.training.recompute_modules = {.core_attn = false, .alternate_linears = true};
  const auto attn = block_kernels(w, Block::ATTENTION, Phase::BACKWARD);
  const auto mlp = block_kernels(w, Block::MLP, Phase::BACKWARD);
  EXPECT_DOUBLE_EQ(flops_of(attn, KernelKind::GEMM) - attn_b, 2 * T * h * (kv + q));
  EXPECT_DOUBLE_EQ(flops_of(mlp, KernelKind::GEMM) - mlp_b, 2 * T * h * f);
  EXPECT_EQ(count_role(attn, "input norm (recompute)"), 1u);
  EXPECT_EQ(count_role(attn, "attention fwd (recompute)"), 0u);
  EXPECT_EQ(count_role(mlp, "activation (recompute)"), 1u);
  EXPECT_DOUBLE_EQ(model::attention_alternate_linears_flops(w.model, 1, 8).value(), 2 * T * h * (kv + q));
  EXPECT_DOUBLE_EQ(model::mlp_alternate_linears_flops(w.model, 1, 8).value(), 2 * T * h * f);
}

} // namespace
} // namespace stepsim::kernels
