// Closed forms of MODEL.md §1 (parameters), §2 (FLOPs), §3 (optimizer bytes), §4 (message sizes)
// against model/transformer.

#include "common/specs.hpp"
#include "model/transformer.hpp"

#include <gtest/gtest.h>

#include <cmath>

using namespace stepsim;
using stepsim::test::gpt3_175b;
using stepsim::test::llama2_70b;

namespace {

double rel(double a, double b) {
  return std::abs(a - b) / std::abs(b);
}

} // namespace

// MODEL.md §1: a GPT layer (MHA, GELU MLP f = 4h, biases, two LayerNorms) has 12h^2 + 13h
// parameters, exactly.
TEST(Params, Gpt3LayerIs12hSquaredPlus13h) {
  const ModelSpec m = gpt3_175b();
  const double h = 12288;
  EXPECT_EQ(model::layer_params(m, 1), 12 * h * h + 13 * h);
}

// MODEL.md §1: GPT-3 175B = l(12h^2+13h) + V h (embedding) + s h (learned positions) + 2h
// (final LayerNorm), output tied to the embedding: 174.6B; exact value 174,615,846,912.
TEST(Params, Gpt3TotalIs174_6B) {
  const ModelSpec m = gpt3_175b();
  const double total = model::total_params(m);
  EXPECT_LT(rel(total, 174.6e9), 1e-3);
  const double h = 12288, l = 96, V = 51200, s = 2048;
  EXPECT_EQ(total, l * (12 * h * h + 13 * h) + V * h + s * h + 2 * h);
  EXPECT_EQ(total, 174615846912.0);
}

// MODEL.md §1, Llama: q h*h, k and v 2*h*(a_kv*d), o h*h, SwiGLU 3*h*f, two RMSNorms h each,
// no biases; rotary (no position table), untied output V*h and a final RMSNorm h.
// Llama-2-70B: 80*855,654,400 + 2*32000*8192 + 8192 = 68,976,648,192 (~69.0B).
TEST(Params, Llama2_70bTotal) {
  const ModelSpec m = llama2_70b();
  const double h = 8192, kv = 8 * (8192 / 64), f = 28672, V = 32000, l = 80;
  const double layer = h * h + 2 * h * kv + h * h + 3 * h * f + 2 * h;
  EXPECT_EQ(layer, 855654400.0);
  EXPECT_EQ(model::layer_params(m, 1), layer);
  const double expected = l * layer + V * h + V * h + h;
  EXPECT_EQ(expected, 68976648192.0);
  EXPECT_EQ(model::total_params(m), expected);
  EXPECT_LT(rel(model::total_params(m), 69.0e9), 1e-3);
}

// Megatron sharding: the t ranks of a TP group together hold the layer once, plus (t-1) extra
// copies of the replicated parts (norms: 4h for GPT LayerNorms, 2h for Llama RMSNorms; the
// row-parallel biases of attention-out and fc2: 2h for GPT).
TEST(Params, TpShardsSumToUnsplitLayer) {
  for (const auto& [m, replicated] :
       {std::pair{gpt3_175b(), 6.0 * 12288}, std::pair{llama2_70b(), 2.0 * 8192}}) {
    for (int t : {1, 2, 4, 8}) {
      const double sum = t * model::layer_params(m, t);
      EXPECT_LT(rel(sum - (t - 1) * replicated, model::layer_params(m, 1)), 1e-14) << m.name << " tp=" << t;
    }
  }
}

// Embedding is vocabulary-split (V h / t) with the learned position table replicated (s h);
// the output side of the last stage holds the final norm and, when untied or pp > 1, V h / t.
TEST(Params, EmbeddingAndOutputSplits) {
  const ModelSpec g = gpt3_175b();
  const double h = 12288, V = 51200, s = 2048;
  EXPECT_EQ(model::embedding_params(g, 4), V * h / 4 + s * h);
  EXPECT_EQ(model::output_params(g, 4, 1), 2 * h);             // tied, one stage: no copy
  EXPECT_EQ(model::output_params(g, 4, 8), 2 * h + V * h / 4); // tied, pp > 1: a copy
  const ModelSpec ll = llama2_70b();
  EXPECT_EQ(model::embedding_params(ll, 8), 32000.0 * 8192 / 8); // rotary: no table
  EXPECT_EQ(model::output_params(ll, 8, 1), 8192 + 32000.0 * 8192 / 8);
}

// Stages split layers uniformly; params_on_rank(stage) = (l/p) * layer_params(t) plus the
// embedding on stage 0 and the output side on stage p-1. Over all stages and t ranks the
// model is held once plus the replicated parts (and the tied-output copy).
TEST(Params, StageLayoutAndParamsOnRank) {
  WorkloadSpec w = stepsim::test::workload(gpt3_175b(), 8, 8, 1, 8);
  for (int p = 0; p < 8; ++p) {
    const model::StageLayout s = model::stage_layout(w, p);
    EXPECT_EQ(s.num_layers, 12);
    EXPECT_EQ(s.first_layer, 12 * p);
    EXPECT_EQ(s.has_embedding, p == 0);
    EXPECT_EQ(s.has_output, p == 7);
    double expected = 12 * model::layer_params(w.model, 8);
    if (p == 0)
      expected += model::embedding_params(w.model, 8);
    if (p == 7)
      expected += model::output_params(w.model, 8, 8);
    EXPECT_EQ(model::params_on_rank(w, p), expected);
  }
  // 1 stage, 1 TP rank: the whole model.
  WorkloadSpec one = stepsim::test::workload(gpt3_175b(), 1, 1, 1, 8);
  EXPECT_EQ(model::params_on_rank(one, 0), model::total_params(one.model));
}

// MODEL.md §2: forward of one GPT layer for b*s tokens = 24 b s h^2 + 4 b s^2 h, divided by t
// per TP rank; attention block 8 b s h^2 + 4 b s^2 h, MLP 16 b s h^2; logits 2 b s h V.
TEST(Flops, GptLayerForward) {
  const ModelSpec m = gpt3_175b();
  const double h = 12288, s = 2048, V = 51200;
  for (int64_t b : {1, 4}) {
    for (int t : {1, 8}) {
      const double bd = static_cast<double>(b);
      EXPECT_LT(
          rel(model::layer_forward_flops(m, b, t).value(), (24 * bd * s * h * h + 4 * bd * s * s * h) / t),
          1e-15);
      EXPECT_LT(rel(model::attention_block_forward_flops(m, b, t).value(),
                    (8 * bd * s * h * h + 4 * bd * s * s * h) / t),
                1e-15);
      EXPECT_LT(rel(model::mlp_block_forward_flops(m, b, t).value(), 16 * bd * s * h * h / t), 1e-15);
      EXPECT_LT(rel(model::attention_core_flops(m, b, t).value(), 4 * bd * s * s * h / t), 1e-15);
      EXPECT_LT(rel(model::logits_forward_flops(m, b, t).value(), 2 * bd * s * h * V / t), 1e-15);
    }
  }
}

// Llama (GQA, SwiGLU): 2 b s (2h^2 + 2 h kv_dim + 3 h f) + 4 b s^2 h.
TEST(Flops, LlamaLayerForward) {
  const ModelSpec m = llama2_70b();
  const double h = 8192, kv = 1024, f = 28672, s = 4096;
  EXPECT_LT(rel(model::layer_forward_flops(m, 2, 4).value(),
                (2 * 2 * s * (2 * h * h + 2 * h * kv + 3 * h * f) + 4 * 2 * s * s * h) / 4),
            1e-15);
}

// Korthikanti et al. 2022: model FLOPs per step = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
TEST(Flops, ModelFlopsPerStepGpt3) {
  WorkloadSpec w = stepsim::test::workload(gpt3_175b(), 8, 8, 24, 64);
  w.batch.global_batch = 1536;
  const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  const double expected = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  EXPECT_LT(rel(model::model_flops_per_step(w).value(), expected), 1e-9);
}

// Narayanan et al. 2021 eq. 3: with full recompute, hardware FLOPs per step =
// 96 B s l h^2 (1 + s/(6h) + V/(16 l h)); selective recompute adds 4 B s^2 h l (attention core).
TEST(Flops, HardwareFlopsWithRecompute) {
  WorkloadSpec w = stepsim::test::workload(gpt3_175b(), 8, 8, 24, 64);
  w.batch.global_batch = 1536;
  const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200;
  w.training.recompute = Recompute::NONE;
  EXPECT_EQ(model::hardware_flops_per_step(w).value(), model::model_flops_per_step(w).value());
  w.training.recompute = Recompute::FULL;
  EXPECT_LT(rel(model::hardware_flops_per_step(w).value(),
                96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))),
            1e-9);
  w.training.recompute = Recompute::SELECTIVE;
  EXPECT_LT(rel(model::hardware_flops_per_step(w).value(),
                model::model_flops_per_step(w).value() + 4 * B * s * s * h * l),
            1e-12);
  // Full recomputation of the first 3 of each stage's 12 layers (recompute_layers): a quarter of
  // the layers' forward again, 24 l h^2 (1 + s/(6h)) B s / 4.
  w.training.recompute = Recompute::FULL;
  w.training.recompute_layers = 3;
  EXPECT_LT(rel(model::hardware_flops_per_step(w).value(),
                model::model_flops_per_step(w).value() + 24 * B * s * l * h * h * (1 + s / (6 * h)) / 4),
            1e-9);
}

// MLA's up-projections (DeepSeek-V3: query latent 1536 -> 128 heads x (128 + 64), key/value latent
// 512 -> 128 x (128 + 128)): 2 s (1536 * 128 * 192 + 512 * 128 * 256) per sequence and layer, which
// selective recomputation with mla_up_proj adds to the hardware FLOPs of each of the 61 layers.
TEST(Flops, MlaUpProjectionRecompute) {
  ModelSpec m = gpt3_175b();
  m.layers = 61;
  m.hidden = 7168;
  m.heads = 128;
  m.kv_heads = 128;
  m.mla = test::deepseek_v3_mla();
  const double s = static_cast<double>(m.seq_len);
  const double up = 2.0 * s * (1536.0 * 128 * 192 + 512.0 * 128 * 256);
  EXPECT_DOUBLE_EQ(model::mla_up_projection_flops(m, 1, 1).value(), up);
  EXPECT_DOUBLE_EQ(model::mla_up_projection_flops(m, 2, 4).value(), up * 2 / 4);
  EXPECT_DOUBLE_EQ(model::mla_up_projection_flops(gpt3_175b(), 1, 1).value(), 0.0);
  WorkloadSpec w = stepsim::test::workload(m, 1, 1, 1, 8);
  w.training.recompute = Recompute::SELECTIVE;
  const double core_only = model::hardware_flops_per_step(w).value();
  w.training.recompute_modules.mla_up_proj = true;
  EXPECT_LT(rel(model::hardware_flops_per_step(w).value() - core_only,
                up * 61 * static_cast<double>(w.batch.global_batch)),
            1e-12);
}

// Roofline: time = max(flops / (peak * eff_c), bytes / (hbm * eff_m)).
TEST(Roofline, PicksMaxOfComputeAndMemory) {
  const GpuSpec g = stepsim::test::a100();
  const double peak = 312e12 * 0.7, bw = 2039e9 * 0.85;
  // Compute-bound: 1 TFLOP, 1 MB.
  EXPECT_DOUBLE_EQ(model::roofline_time(Flops(1e12), Bytes(1e6), g, Precision::BF16).value(), 1e12 / peak);
  // Memory-bound: 1 MFLOP, 1 GB.
  EXPECT_DOUBLE_EQ(model::roofline_time(Flops(1e6), Bytes(1e9), g, Precision::BF16).value(), 1e9 / bw);
  // Exactly balanced.
  EXPECT_DOUBLE_EQ(model::roofline_time(Flops(peak), Bytes(bw), g, Precision::FP16).value(), 1.0);
  // fp16 uses the fp16 peak.
  GpuSpec g2 = g;
  g2.peak_fp16 = FlopsPerSec(2 * 312e12);
  EXPECT_DOUBLE_EQ(model::roofline_time(Flops(1e12), Bytes(0), g2, Precision::FP16).value(),
                   1e12 / (2 * peak));
}

// MODEL.md §4: a TP all-reduce carries b s h * 2 bytes; a PP message the same (divided by t with
// SP); the DP gradient is 2 bytes per parameter on the rank.
TEST(Bytes, MessageSizes) {
  WorkloadSpec w = stepsim::test::workload(gpt3_175b(), 8, 8, 24, 64, 2);
  const double b = 2, s = 2048, h = 12288;
  EXPECT_EQ(model::element_bytes(Precision::BF16), 2.0);
  EXPECT_EQ(model::element_bytes(Precision::FP16), 2.0);
  EXPECT_EQ(model::tp_collective_bytes(w).value(), b * s * h * 2);
  EXPECT_EQ(model::pp_message_bytes(w).value(), b * s * h * 2);
  w.parallel.pp_scatter_gather = true; // Megatron's scatter/gather: 1/t per TP rank
  EXPECT_EQ(model::pp_message_bytes(w).value(), b * s * h * 2 / 8);
  w.parallel.pp_scatter_gather = false;
  w.parallel.sp = true;
  EXPECT_EQ(model::pp_message_bytes(w).value(), b * s * h * 2 / 8);
  w.parallel.pp_scatter_gather = true; // already split: not divided twice
  EXPECT_EQ(model::pp_message_bytes(w).value(), b * s * h * 2 / 8);
  for (int p : {0, 3, 7})
    EXPECT_EQ(model::dp_gradient_bytes(w, p).value(), 2 * model::params_on_rank(w, p));
}

// Optimizer step (memory-bound): per updated parameter 2 (K + 2) bytes of Adam and 4 of the
// gradient norm's read (+ 8 to unscale fp16 gradients), per held gradient 4 to zero the buffer,
// at hbm * eff_m. ZeRO >= 1 updates 1/dp of them; ZeRO >= 2 holds 1/dp of the gradients too.
TEST(Optimizer, TimeIsMemoryBound) {
  WorkloadSpec w = stepsim::test::workload(gpt3_175b(), 8, 8, 4, 16);
  const GpuSpec g = stepsim::test::a100();
  const double psi = model::params_on_rank(w, 3);
  const double bw = 2039e9 * 0.85;
  EXPECT_LT(rel(model::optimizer_time(w, g, 3).value(), psi * (2 * (12 + 2) + 4 + 4) / bw), 1e-14);
  w.precision = Precision::FP16;
  EXPECT_LT(rel(model::optimizer_time(w, g, 3).value(), psi * (2 * (12 + 2) + 4 + 8 + 4) / bw), 1e-14);
  w.precision = Precision::BF16;
  w.parallel.zero_stage = 1;
  EXPECT_LT(rel(model::optimizer_time(w, g, 3).value(), (psi / 4 * (2 * (12 + 2) + 4) + psi * 4) / bw),
            1e-14);
  w.parallel.zero_stage = 2;
  EXPECT_LT(rel(model::optimizer_time(w, g, 3).value(), psi / 4 * (2 * (12 + 2) + 4 + 4) / bw), 1e-14);
  w.training.optimizer_bytes_per_param = 8;
  EXPECT_LT(rel(model::optimizer_time(w, g, 3).value(), psi / 4 * (2 * (8 + 2) + 4 + 4) / bw), 1e-14);
}

// Sliding-window attention (docs/model.md): a windowed layer's queries see w keys, counted as
// 2w in the convention that counts a causal layer's whole s x s (so s^2 becomes s x min(s, 2w));
// every n-th layer (full_attention_every) attends to the whole sequence; a window of at least
// s/2 costs as full attention. Model FLOPs sum the layers each at its own span.
TEST(Flops, SlidingWindowAttention) {
  ModelSpec m = llama2_70b();
  m.seq_len = 8192;
  const double b = 2, s = 8192, a = 64, d = 128, t = 8, w = 128;
  const double full = 2 * b * s * s * a * 2 * d / t;
  EXPECT_EQ(model::attention_core_flops(m, 2, 8, true).value(), full); // no window: full
  m.sliding_window = 128;
  EXPECT_EQ(model::attention_core_flops(m, 2, 8, false).value(), full);
  EXPECT_EQ(model::attention_core_flops(m, 2, 8, true).value(), 2 * b * s * (2 * w) * a * 2 * d / t);
  EXPECT_EQ(model::attention_core_flops(m, 2, 8).value(), full);
  EXPECT_EQ((model::attention_block_forward_flops(m, 2, 8, false) -
             model::attention_block_forward_flops(m, 2, 8, true))
                .value(),
            full - 2 * b * s * (2 * w) * a * 2 * d / t);
  m.sliding_window = 4096; // 2w = s: the window covers what causal attention sees on average
  EXPECT_EQ(model::attention_core_flops(m, 2, 8, true).value(), full);

  // Which layers are windowed.
  m.sliding_window = 128;
  for (int64_t l = 0; l < 12; ++l)
    EXPECT_TRUE(m.windowed_layer(l)) << l;
  m.full_attention_every = 6; // Gemma 3: five local layers, then a global one
  for (int64_t l = 0; l < 12; ++l)
    EXPECT_EQ(m.windowed_layer(l), l != 5 && l != 11) << l;

  // Model FLOPs: 80 layers, every other one windowed (40 of each).
  m.full_attention_every = 2;
  WorkloadSpec work = stepsim::test::workload(m, 8, 8, 1, 1);
  work.batch.global_batch = 16;
  ModelSpec plain = m;
  plain.sliding_window = 0;
  plain.full_attention_every = 0;
  WorkloadSpec dense = work;
  dense.model = plain;
  const double core_saving = 40 * 2 * s * (s - 2 * w) * a * 2 * d; // per sequence
  EXPECT_LT(rel(model::model_flops_per_step(dense).value() - model::model_flops_per_step(work).value(),
                3 * 16 * core_saving),
            1e-9);
  // Selective recomputation repeats each layer's core at its own span.
  work.training.recompute = Recompute::SELECTIVE;
  const double cores = 40 * 2 * s * s * a * 2 * d + 40 * 2 * s * (2 * w) * a * 2 * d;
  EXPECT_LT(rel(model::hardware_flops_per_step(work).value() - model::model_flops_per_step(work).value(),
                16 * cores),
            1e-9);
}

// Multi-token prediction (model.mtp_layers, docs/model.md): per depth one more layer on the last
// stage (stage_layout), its 2h x h projection, and the logits again; model FLOPs count them
// (3 x forward per sequence): layer + 2*s*2h*h + 2*s*h*V per depth.
TEST(Flops, MultiTokenPrediction) {
  ModelSpec m = gpt3_175b();
  WorkloadSpec w = stepsim::test::workload(m, 8, 8, 1, 8);
  w.batch.global_batch = 8;
  const double base = model::model_flops_per_step(w).value();
  w.model.mtp_layers = 2;
  const double s = 2048, h = 12288, V = 51200;
  const double per_depth = model::layer_forward_flops(m, 1, 1).value() + 2 * s * 2 * h * h + 2 * s * h * V;
  EXPECT_LT(rel(model::model_flops_per_step(w).value() - base, 3 * 8 * 2 * per_depth), 1e-9);
  EXPECT_EQ(model::stage_layout(w, 7).num_layers, 12 + 2);
  EXPECT_EQ(model::stage_layout(w, 6).num_layers, 12);
  EXPECT_EQ(model::total_params(w.model), model::total_params(m));
  // The last stage holds the two layers, two projections / tp and their norms (GPT-3's output
  // layer is tied: with pp > 1 the last stage already holds the embedding's copy).
  EXPECT_NEAR(model::params_on_rank(w, 7) - model::params_on_rank(stepsim::test::workload(m, 8, 8, 1, 8), 7),
              2 * model::layer_params(m, 8) + 2 * (2 * h * h / 8 + 3 * 2 * h), 1.0);
  EXPECT_DOUBLE_EQ(model::output_forward_flops(w.model, 1, 8).value(),
                   3 * model::logits_forward_flops(m, 1, 8).value() + 2 * (2 * s * 2 * h * h / 8));
}
