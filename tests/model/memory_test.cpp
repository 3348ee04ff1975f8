// The memory ledger against the closed forms of MODEL.md §3 (ZeRO: Rajbhandari et al. 2020;
// activations: Korthikanti et al. 2022) and the seed document's 7B example.

#include "model/memory.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"

#include "common/specs.hpp"

#include <gtest/gtest.h>

using namespace stepsim;

namespace {

constexpr double GB = 1e9;

/// A 7B dense model (Llama-2-7B's shape: l=32, h=4096, a=32, f=11008, V=32000).
ModelSpec seven_b() {
  ModelSpec m = test::llama2_70b();
  m.layers = 32;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 32;
  m.ffn_hidden = 11008;
  return m;
}

double sbh(const WorkloadSpec& w) {
  return static_cast<double>(w.model.seq_len) * static_cast<double>(w.batch.micro_batch) *
         static_cast<double>(w.model.hidden);
}

} // namespace

// The seed: a 7B model trained with mixed-precision Adam on one GPU needs weights 2 bytes/param
// (~14 GB), gradients 2 (~14 GB), Adam m+v 8 (~56 GB) or with the fp32 master copy 12 (~84 GB),
// and does not fit an 80 GB GPU either way. The seed's figures are 7e9 x bytes/param rounded; a
// real "7B" (Llama-2-7B's shape) has 6.74e9 parameters, so its rounded figures agree within 5 %.
TEST(MemoryLedger, SeedSevenBillionExample) {
  WorkloadSpec w = test::workload(seven_b(), 1, 1, 1, 1);
  const double psi = model::params_on_rank(w, 0);
  ASSERT_NEAR(psi, 6.74e9, 0.01e9); // ~7B
  const GpuSpec gpu = test::a100();
  for (const double k : {8.0, 12.0}) {
    w.training.optimizer_bytes_per_param = k;
    const model::MemoryLedger l = model::static_memory(w, gpu, 0);
    EXPECT_DOUBLE_EQ(l.weights.value(), 2.0 * psi);
    EXPECT_DOUBLE_EQ(l.gradients.value(), 2.0 * psi);
    EXPECT_DOUBLE_EQ(l.optimizer.value(), k * psi);
    EXPECT_NEAR(l.weights.value() / GB, 14.0, 0.05 * 14.0);
    EXPECT_NEAR(l.gradients.value() / GB, 14.0, 0.05 * 14.0);
    EXPECT_NEAR(l.optimizer.value() / GB, 7.0 * k, 0.05 * 7.0 * k);
    EXPECT_GT(l.peak().value(), 80.0 * GB) << "K=" << k;
    EXPECT_GT(l.peak(), gpu.hbm_capacity);
  }
}

// grad_accumulation: fp32_pass holds an fp32 accumulator beside the 16-bit gradients: 2 + 4
// bytes per gradient; with grad_reduce_in_fp32 the reduced (fp32) gradients and the 16-bit ones
// the backward writes: 4 + 2. ZeRO-2 shards both over dp.
TEST(MemoryLedger, Fp32GradAccumulationHoldsAnFp32Accumulator) {
  const GpuSpec gpu = test::a100();
  for (const bool fp32_reduce : {false, true}) {
    for (const int zero : {1, 2}) {
      WorkloadSpec w = test::workload(seven_b(), 1, 1, 4, 4);
      w.parallel.zero_stage = zero;
      w.training.grad_reduce_in_fp32 = fp32_reduce;
      w.training.grad_accumulation = GradAccumulation::FP32_PASS;
      const double psi = model::params_on_rank(w, 0);
      const double held = zero >= 2 ? psi / 4.0 : psi;
      EXPECT_DOUBLE_EQ(model::persistent_memory(w, gpu, 0).gradients.value(), 6.0 * held)
          << "zero " << zero << " fp32 reduce " << fp32_reduce;
    }
  }
}

// ZeRO over dp ranks (Psi = params per GPU, K = optimizer bytes per param):
//   stage 1: 2Psi + 2Psi + K*Psi/dp;  stage 2: 2Psi + (2+K)*Psi/dp;  stage 3: (2+2+K)*Psi/dp.
TEST(MemoryLedger, ZeroStagesMatchPaperFormulas) {
  const GpuSpec gpu = test::a100();
  for (const int dp : {2, 8, 64}) {
    for (const int zero : {0, 1, 2, 3}) {
      WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, dp, 16);
      w.parallel.zero_stage = zero;
      const double psi = model::params_on_rank(w, 3);
      const double k = w.training.optimizer_bytes_per_param;
      const model::MemoryLedger l = model::persistent_memory(w, gpu, 3);
      const double states = (l.weights + l.gradients + l.optimizer).value();
      double expected = 0;
      switch (zero) {
      case 0:
        expected = (4.0 + k) * psi;
        break;
      case 1:
        expected = 2.0 * psi + 2.0 * psi + k * psi / dp;
        break;
      case 2:
        expected = 2.0 * psi + (2.0 + k) * psi / dp;
        break;
      case 3:
        expected = (4.0 + k) * psi / dp;
        break;
      }
      EXPECT_NEAR(states, expected, 1e-9 * expected) << "zero " << zero << " dp " << dp;
    }
  }
}

// ZeRO-3 hybrid sharding (parallel.dp_shard): the states are sharded over a shard group of
// dp_shard replicas (times cp), (4 + K)·ψ/(dp_shard·cp), whatever dp; the optimizer updates that
// shard. dp_shard = dp is plain ZeRO-3.
TEST(MemoryLedger, HybridShardingShardsOverTheShardGroup) {
  const GpuSpec gpu = test::a100();
  for (const int cp : {1, 2}) {
    for (const int shard : {2, 4, 16}) {
      WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 16, 16);
      w.parallel.cp = cp;
      w.parallel.zero_stage = 3;
      w.parallel.dp_shard = shard;
      const double psi = model::params_on_rank(w, 3);
      const double k = w.training.optimizer_bytes_per_param;
      const model::MemoryLedger l = model::persistent_memory(w, gpu, 3);
      const double expected = (4.0 + k) * psi / (shard * cp);
      EXPECT_NEAR((l.weights + l.gradients + l.optimizer).value(), expected, 1e-9 * expected)
          << "dp_shard " << shard << " cp " << cp;
      EXPECT_NEAR(model::optimizer_params_on_rank(w, 3), psi / (shard * cp), 1e-9 * psi);
    }
  }
}

// FSDP's fp32 shards (training.fp32_shards, zero_stage 3): per sharded parameter 4 bytes of fp32
// weight (the optimizer's master), 4 of fp32 gradient and K - 4 of optimizer state: (4 + K)/dp
// in all, whatever the reductions' dtype; the 16-bit layout holds 2 + e + K (e = 2, or 4 with
// fp32 reductions). Without ZeRO-3 the key changes nothing.
TEST(MemoryLedger, FsdpFp32ShardsHoldTheMasterWeights) {
  const GpuSpec gpu = test::a100();
  for (const bool fp32_reduce : {false, true}) {
    WorkloadSpec w = test::workload(seven_b(), 1, 1, 8, 8);
    w.parallel.zero_stage = 3;
    w.training.grad_reduce_in_fp32 = fp32_reduce;
    const double psi = model::params_on_rank(w, 0);
    const double k = w.training.optimizer_bytes_per_param;
    const model::MemoryLedger bf16 = model::persistent_memory(w, gpu, 0);
    EXPECT_DOUBLE_EQ((bf16.weights + bf16.gradients + bf16.optimizer).value(),
                     (2.0 + (fp32_reduce ? 4.0 : 2.0) + k) * psi / 8.0);
    w.training.fp32_shards = true;
    const model::MemoryLedger fsdp = model::persistent_memory(w, gpu, 0);
    EXPECT_DOUBLE_EQ(fsdp.weights.value(), 4.0 * psi / 8.0);
    EXPECT_DOUBLE_EQ(fsdp.gradients.value(), 4.0 * psi / 8.0);
    EXPECT_DOUBLE_EQ(fsdp.optimizer.value(), (k - 4.0) * psi / 8.0);
    EXPECT_DOUBLE_EQ((fsdp.weights + fsdp.gradients + fsdp.optimizer).value(), (4.0 + k) * psi / 8.0);
    // The gathered layers stay 16-bit.
    EXPECT_DOUBLE_EQ(model::static_memory(w, gpu, 0).zero3_gathered.value(), [&] {
      WorkloadSpec plain = w;
      plain.training.fp32_shards = false;
      return model::static_memory(plain, gpu, 0).zero3_gathered.value();
    }());
  }
  WorkloadSpec z1 = test::workload(seven_b(), 1, 1, 8, 8);
  z1.parallel.zero_stage = 1;
  const double before = model::persistent_memory(z1, gpu, 0).peak().value();
  z1.training.fp32_shards = true;
  EXPECT_DOUBLE_EQ(model::persistent_memory(z1, gpu, 0).peak().value(), before);
}

// Without dropout (model.dropout: false) a layer keeps no masks: Korthikanti's 34 becomes 32
// (the two hidden-dropout masks, replicated across TP ranks without SP) and the 5 bytes per
// attention score become 2 (the softmax output, without the dropout mask and output).
TEST(MemoryLedger, NoDropoutKeepsNoMasks) {
  const ModelSpec m = test::gpt3_175b();
  const double a = static_cast<double>(m.heads), s = static_cast<double>(m.seq_len),
               h = static_cast<double>(m.hidden);
  WorkloadSpec w = test::workload(m, 1, 8, 1, 8, 2);
  w.model.dropout = false;
  const double x = sbh(w);
  EXPECT_NEAR(model::stored_layer_activations(w).total().value(), x * (32.0 + 2.0 * a * s / h), 1e-6 * x);
  for (const int t : {2, 8}) {
    w.parallel.tp = t;
    w.parallel.sp = false;
    EXPECT_NEAR(model::stored_layer_activations(w).total().value(),
                x * (8.0 + 24.0 / t + 2.0 * a * s / (h * t)), 1e-6 * x);
    w.parallel.sp = true;
    w.training.flash_attention = true; // no scores kept at all
    EXPECT_NEAR(model::stored_layer_activations(w).total().value(), x * 32.0 / t, 1e-6 * x);
    w.training.flash_attention = false;
  }
}

// Korthikanti et al. 2022, activations of one GPT layer per micro-batch (bytes):
//   no parallelism s*b*h*(34 + 5*a*s/h); TP s*b*h*(10 + 24/t + 5*a*s/(h*t));
//   TP+SP s*b*h*(34/t + 5*a*s/(h*t)); selective + SP 34*s*b*h/t; selective without SP
//   s*b*h*(10 + 24/t); full recompute 2*s*b*h (/t with SP).
TEST(MemoryLedger, KorthikantiActivationFormulas) {
  const ModelSpec m = test::gpt3_175b();
  const double a = static_cast<double>(m.heads), s = static_cast<double>(m.seq_len),
               h = static_cast<double>(m.hidden);
  for (const int64_t b : {1, 2}) {
    WorkloadSpec w = test::workload(m, 1, 8, 1, 8, b);
    const double x = sbh(w);
    EXPECT_NEAR(model::stored_layer_activations(w).total().value(), x * (34.0 + 5.0 * a * s / h), 1e-6 * x);
    for (const int t : {2, 4, 8}) {
      w.parallel.tp = t;
      w.parallel.sp = false;
      w.training.recompute = Recompute::NONE;
      EXPECT_NEAR(model::stored_layer_activations(w).total().value(),
                  x * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)), 1e-6 * x);
      w.parallel.sp = true;
      EXPECT_NEAR(model::stored_layer_activations(w).total().value(), x * (34.0 / t + 5.0 * a * s / (h * t)),
                  1e-6 * x);
      w.training.recompute = Recompute::SELECTIVE;
      EXPECT_NEAR(model::stored_layer_activations(w).total().value(), 34.0 * x / t, 1e-6 * x);
      w.parallel.sp = false;
      EXPECT_NEAR(model::stored_layer_activations(w).total().value(), x * (10.0 + 24.0 / t), 1e-6 * x);
      w.training.recompute = Recompute::FULL;
      EXPECT_NEAR(model::stored_layer_activations(w).total().value(), 2.0 * x, 1e-6 * x);
      w.parallel.sp = true;
      EXPECT_NEAR(model::stored_layer_activations(w).total().value(), 2.0 * x / t, 1e-6 * x);
      // Full recomputation re-materialises one whole layer (as without recomputation) at a time.
      w.parallel.sp = false;
      EXPECT_NEAR(model::recompute_working_set(w).total().value(),
                  x * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)), 1e-6 * x);
    }
  }
}

// fp8 training keeps the inputs of the four linear GEMMs as fp8 (1 byte instead of 2): QKV and
// fc1 inputs (s*b*h each, replicated without SP), the out-projection input (s*b*h/t) and the fc2
// input (s*b*f/t) shrink by half; the weights gain an fp8 copy and its transpose (2 bytes per
// layer parameter). Full recomputation stores only the 16-bit layer input: unchanged.
TEST(MemoryLedger, Fp8TrainingStoresFp8GemmInputsAndFp8WeightCopies) {
  const GpuSpec gpu = test::a100(); // the ledger does not depend on the peaks
  for (const int t : {1, 4, 8}) {
    WorkloadSpec w = test::workload(test::gpt3_175b(), t, 8, 1, 8);
    w.training.flash_attention = true;
    const double x = sbh(w);
    const double f = static_cast<double>(w.model.ffn_hidden) / static_cast<double>(w.model.hidden);
    WorkloadSpec e = w;
    e.precision = Precision::FP8;
    const double saved = x * (2.0 + 1.0 / t + f / t);
    EXPECT_NEAR(model::stored_layer_activations(w).total().value() -
                    model::stored_layer_activations(e).total().value(),
                saved, 1e-6 * x)
        << "tp " << t;
    const double layers = static_cast<double>(model::stage_layout(w, 3).num_layers);
    EXPECT_NEAR(
        (model::persistent_memory(e, gpu, 3).weights - model::persistent_memory(w, gpu, 3).weights).value(),
        2.0 * model::layer_params(w.model, t) * layers, 1.0);
    w.training.recompute = Recompute::FULL;
    e.training.recompute = Recompute::FULL;
    EXPECT_DOUBLE_EQ(model::stored_layer_activations(e).total().value(),
                     model::stored_layer_activations(w).total().value());
  }
}

// Rowwise fp8 (torchao's axiswise recipe) casts the weight gradient's operands along the tokens,
// so the linear inputs are kept in 16 bits: the activations are bf16 training's, byte for byte.
TEST(MemoryLedger, RowwiseFp8KeepsTheLinearInputsIn16Bits) {
  for (const int t : {1, 8}) {
    WorkloadSpec w = test::workload(test::gpt3_175b(), t, 8, 1, 8);
    w.training.flash_attention = true;
    WorkloadSpec r = w;
    r.precision = Precision::FP8;
    r.training.fp8_weight_cache = false;
    r.training.fp8_scaling = Fp8Scaling::ROWWISE;
    EXPECT_DOUBLE_EQ(model::stored_layer_activations(r).total().value(),
                     model::stored_layer_activations(w).total().value())
        << "tp " << t;
    r.training.fp8_scaling = Fp8Scaling::TENSORWISE;
    EXPECT_LT(model::stored_layer_activations(r).total().value(),
              model::stored_layer_activations(w).total().value());
  }
}

// ZeRO-3's fp8 all-gather (training.fp8_all_gather): a gathered layer holds 1 byte per parameter
// (with no fp8 copies kept: fp8_weight_cache false) against 2; the shards do not change.
TEST(MemoryLedger, Fp8AllGatherHoldsTheGatheredLayerInFp8) {
  const GpuSpec gpu = test::a100();
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 4, 8);
  w.precision = Precision::FP8;
  w.parallel.zero_stage = 3;
  w.training.fp8_weight_cache = false;
  WorkloadSpec g = w;
  g.training.fp8_all_gather = true;
  EXPECT_DOUBLE_EQ(model::gathered_layer_bytes(w).value(), 2.0 * model::gathered_layer_bytes(g).value());
  EXPECT_DOUBLE_EQ(model::gathered_layer_bytes(g).value(), model::layer_params(w.model, 8));
  EXPECT_DOUBLE_EQ(model::persistent_memory(g, gpu, 3).weights.value(),
                   model::persistent_memory(w, gpu, 3).weights.value());
}

// Flash attention never stores the s^2 scores: the 5*a*s^2*b term disappears.
TEST(MemoryLedger, FlashAttentionDropsScores) {
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 1, 8);
  const double x = sbh(w);
  w.training.flash_attention = true;
  EXPECT_NEAR(model::stored_layer_activations(w).total().value(), x * (10.0 + 24.0 / 8), 1e-6 * x);
}

// 1F1B holds min(p - i, m) micro-batches on stage i; GPipe holds all m.
TEST(MemoryLedger, InFlightMicroBatches) {
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 1, 12);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(model::in_flight_micro_batches(w, i), 8 - i);
  w.batch.global_batch = 4; // m = 4 < p
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(model::in_flight_micro_batches(w, i), std::min(8 - i, 4));
  w.parallel.schedule = Schedule::GPIPE;
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(model::in_flight_micro_batches(w, i), 4);
}

// GPT-3 175B, TP8 PP8, micro-batch 1 (Megatron's layout): without recomputation stage 0 holds
// 8 micro-batches x 12 layers x s*b*h*(10 + 24/8 + 5*a*s/(h*8)) ~ 52 GiB of activations and does
// not fit 80 GB; full recomputation keeps 2*s*b*h per layer and fits with room to spare.
TEST(MemoryLedger, Gpt3FullRecomputeUsesFarLessActivationMemory) {
  const GpuSpec gpu = test::a100();
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 16, 96);
  const model::MemoryLedger none = model::static_memory(w, gpu, 0);
  w.training.recompute = Recompute::FULL;
  const model::MemoryLedger full = model::static_memory(w, gpu, 0);
  const double x = sbh(w);
  const double per_layer = x * (10.0 + 24.0 / 8 + 5.0 * 96 * 2048 / (12288.0 * 8));
  EXPECT_NEAR(none.activations.value(), 8 * 12 * per_layer, 1e-6 * none.activations.value());
  EXPECT_LT(full.activations.value(), 0.15 * none.activations.value());
  EXPECT_GT(none.peak(), gpu.hbm_capacity);
  EXPECT_LT(full.peak(), gpu.hbm_capacity);
}

// Blocking fetch holds one gathered layer whatever zero3_prefetch says (nothing is gathered ahead).
TEST(MemoryLedger, Zero3BlockingFetchHoldsOneLayer) {
  const GpuSpec gpu = test::a100();
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 4, 16); // 12 layers per stage
  w.parallel.zero_stage = 3;
  w.training.zero3_prefetch = 3;
  w.training.zero3_fetch = Zero3Fetch::BLOCKING;
  const double layer = model::gathered_layer_bytes(w).value();
  EXPECT_DOUBLE_EQ(model::static_memory(w, gpu, 3).zero3_gathered.value(), layer);
  w.training.zero3_fetch = Zero3Fetch::PREFETCH;
  EXPECT_DOUBLE_EQ(model::static_memory(w, gpu, 3).zero3_gathered.value(), 4.0 * layer);
}

// ZeRO-3: the gathered window is prefetch + 1 layers; a chunk's first layer brings the embedding
// with it and its last the output layer, both at once only when the window spans the chunk.
TEST(MemoryLedger, Zero3WindowCarriesTheEmbeddingAndOutputLayers) {
  const GpuSpec gpu = test::a100();
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 4, 16); // 12 layers per stage
  w.parallel.zero_stage = 3;
  w.training.zero3_prefetch = 1;
  const double layer = model::gathered_layer_bytes(w).value();
  const double emb = model::embedding_params(w.model, 8) * 2.0;
  const double out = model::output_params(w.model, 8, 8) * 2.0;
  EXPECT_DOUBLE_EQ(model::static_memory(w, gpu, 0).zero3_gathered.value(), 2.0 * layer + emb);
  EXPECT_DOUBLE_EQ(model::static_memory(w, gpu, 3).zero3_gathered.value(), 2.0 * layer);
  EXPECT_DOUBLE_EQ(model::static_memory(w, gpu, 7).zero3_gathered.value(), 2.0 * layer + out);
  WorkloadSpec one = test::workload(test::gpt3_175b(), 8, 1, 4, 16); // one stage of 96 layers
  one.parallel.zero_stage = 3;
  const double out1 = model::output_params(one.model, 8, 1) * 2.0;
  EXPECT_DOUBLE_EQ(model::static_memory(one, gpu, 0).zero3_gathered.value(),
                   2.0 * layer + std::max(emb, out1));
  one.training.zero3_prefetch = 95; // the window spans all 96 layers
  EXPECT_DOUBLE_EQ(model::static_memory(one, gpu, 0).zero3_gathered.value(), 96.0 * layer + emb + out1);
}

// Multi-head latent attention's stored activations (DeepSeek-V3's widths, fused attention, no
// dropout): replicated, the norm input 2sbh and the down-projections' input 2sbh, each latent's
// norm input and up-projection input 4·sb·(1536 + 512), the rotary key 2·sb·64; split by TP, Q
// and K of a·192 and V of a·128 (2 bytes each) and the output projection's input a·128. The CP
// ring's K,V block: b·(s/cp)·a·(192 + 128)/t values.
TEST(MemoryLedger, MlaActivationsAndKvBlock) {
  ModelSpec m = test::llama2_70b();
  m.hidden = 7168;
  m.heads = 128;
  m.kv_heads = 128;
  m.seq_len = 4096;
  m.dropout = false;
  m.mla = test::deepseek_v3_mla();
  for (const int t : {1, 8}) {
    WorkloadSpec w = test::workload(m, t, 1, 1, 1);
    w.training.flash_attention = true;
    const double sb = 4096.0, h = 7168.0, a = 128.0;
    const double replicated = 2 * sb * h + 2 * sb * h + 4 * sb * (1536 + 512) + 2 * sb * 64;
    const double split = (2 * sb * a * 192 + 2 * sb * a * 192 + 2 * sb * a * 128 + 2 * sb * a * 128) / t;
    EXPECT_NEAR(model::stored_layer_activations(w).attention.value(), replicated + split, 1.0) << "tp " << t;
    w.parallel.cp = 2;
    EXPECT_NEAR(model::cp_kv_block_bytes(w).value(), sb / 2 * a * (192 + 128) / t * 2, 1.0) << "tp " << t;
  }
}

// Selective recomputation by module (training.recompute_modules, docs/model.md): with GPT-3's
// layer (GELU f = 4h, dropout, tp t without SP) the default core_attn leaves 10 + 24/t sbh;
// layernorm also drops the two norm outputs (the QKV and fc1 inputs, 2 bytes each, replicated):
// 4 sbh; mlp keeps only the dense MLP's input: its fc1 input (2 sbh), GeLU input (8/t sbh) and
// fc2 input (8/t sbh) go; without core_attn the unfused scores (5 a s / (h t) sbh) come back.
// An MoE layer's moe_act drops the experts' activation outputs, 2 top_k f_e sbh / (h t).
TEST(MemoryLedger, SelectiveRecomputeModules) {
  const ModelSpec m = test::gpt3_175b();
  const double a = 96, s = 2048, h = 12288;
  for (const int t : {1, 8}) {
    WorkloadSpec w = test::workload(m, t, 8, 1, 8);
    w.training.recompute = Recompute::SELECTIVE;
    const double x = sbh(w);
    const auto total = [&](RecomputeModules r) {
      w.training.recompute_modules = r;
      return model::stored_layer_activations(w).total().value();
    };
    EXPECT_NEAR(total({}), x * (10.0 + 24.0 / t), 1e-6 * x);
    EXPECT_NEAR(total({.layernorm = true}), x * (6.0 + 24.0 / t), 1e-6 * x);
    EXPECT_NEAR(total({.mlp = true}), x * (8.0 + 8.0 / t), 1e-6 * x);
    EXPECT_NEAR(total({.layernorm = true, .mlp = true}), x * (6.0 + 8.0 / t), 1e-6 * x);
    EXPECT_NEAR(total({.core_attn = false, .layernorm = true}), x * (6.0 + 24.0 / t + 5.0 * a * s / (h * t)),
                1e-6 * x);
  }
  ModelSpec moe = test::llama2_70b();
  moe.moe.experts = 8;
  moe.moe.top_k = 2;
  moe.moe.expert_ffn_hidden = moe.ffn_hidden;
  WorkloadSpec e = test::workload(moe, 1, 4, 1, 8);
  e.training.recompute = Recompute::SELECTIVE;
  const double f = static_cast<double>(e.model.moe.top_k * e.model.moe.expert_ffn_hidden);
  const double before = model::stored_layer_activations(e).total().value();
  e.training.recompute_modules.moe_act = true;
  EXPECT_NEAR(before - model::stored_layer_activations(e).total().value(),
              2.0 * f * static_cast<double>(e.model.seq_len * e.batch.micro_batch), 1e-6 * before);
  // MLA's up-projections recomputed (mla_up_proj): the per-head Q, K (a x (128 + 64) each) and V
  // (a x 128) are not kept, 2 bytes each, split by TP: 2 sb a (192 + 192 + 128) / t; the latents stay.
  ModelSpec mla = test::llama2_70b();
  mla.kv_heads = mla.heads;
  mla.mla = test::deepseek_v3_mla();
  WorkloadSpec l = test::workload(mla, 2, 4, 1, 8);
  l.training.recompute = Recompute::SELECTIVE;
  const double kept = model::stored_layer_activations(l).total().value();
  l.training.recompute_modules.mla_up_proj = true;
  const double sb_l = static_cast<double>(l.model.seq_len * l.batch.micro_batch);
  EXPECT_NEAR(kept - model::stored_layer_activations(l).total().value(),
              2.0 * sb_l * static_cast<double>(mla.heads) * (192.0 + 192.0 + 128.0) / 2.0, 1e-6 * kept);
}

// Multi-token prediction keeps each depth's logits (fp32 log-softmax, 4 bytes per logit / tp, and
// the 16-bit final-norm input) and its projection's input [h; h].
TEST(MemoryLedger, MultiTokenPredictionLogits) {
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 1, 8);
  const double x = sbh(w), sb = x / 12288.0;
  const double one = 2.0 * x + 4.0 * sb * 51200.0 / 8.0;
  EXPECT_NEAR(model::logits_activations(w).value(), one, 1e-6 * one);
  w.model.mtp_layers = 1;
  EXPECT_NEAR(model::logits_activations(w).value(), 2.0 * one + 4.0 * x, 1e-6 * one);
}

// fp8 primary weights (training.fp8_params): the weights are held in fp8 with their transpose, 2
// bytes per parameter instead of the 16-bit weight plus both fp8 copies (4); gradients and
// optimizer states do not change; the gathered-layer bytes of ZeRO-3 halve (4 -> 2).
TEST(MemoryLedger, Fp8PrimaryWeightsHalveTheWeights) {
  const GpuSpec gpu = test::a100();
  for (const int zero : {0, 1, 3}) {
    WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 4, 8);
    w.precision = Precision::FP8;
    w.parallel.zero_stage = zero;
    WorkloadSpec p = w;
    p.training.fp8_params = true;
    const double psi = model::params_on_rank(w, 3);
    const model::MemoryLedger a = model::persistent_memory(w, gpu, 3);
    const model::MemoryLedger b = model::persistent_memory(p, gpu, 3);
    if (zero < 3) {
      EXPECT_NEAR(a.weights.value(), 4.0 * psi, 1.0) << zero;
      EXPECT_NEAR(b.weights.value(), 2.0 * psi, 1.0) << zero;
    } else {
      EXPECT_NEAR(a.weights.value(), 2.0 * psi / 4, 1.0);
      EXPECT_NEAR(b.weights.value(), 1.0 * psi / 4, 1.0);
      EXPECT_NEAR(model::gathered_layer_bytes(p).value() * 2.0, model::gathered_layer_bytes(w).value(), 1.0);
    }
    EXPECT_DOUBLE_EQ(a.gradients.value(), b.gradients.value());
    EXPECT_DOUBLE_EQ(a.optimizer.value(), b.optimizer.value());
    EXPECT_DOUBLE_EQ(model::weight_bytes(p), 1.0);
    EXPECT_DOUBLE_EQ(model::weight_bytes(w), 2.0);
  }
}

// fp8 weight casts not kept for the step (training.fp8_weight_cache false, torchao's Float8Linear):
// the 16-bit weights alone, 2 bytes per parameter instead of 4 with both fp8 copies; ZeRO-3's
// gathered layer likewise halves; with fp8 primary weights the cache changes nothing.
TEST(MemoryLedger, Fp8WeightsCastPerUseKeepNoCopies) {
  const GpuSpec gpu = test::a100();
  for (const int zero : {0, 3}) {
    WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 4, 8);
    w.precision = Precision::FP8;
    w.parallel.zero_stage = zero;
    WorkloadSpec c = w;
    c.training.fp8_weight_cache = false;
    const double psi = model::params_on_rank(w, 3);
    if (zero < 3) {
      EXPECT_NEAR(model::persistent_memory(w, gpu, 3).weights.value(), 4.0 * psi, 1.0);
      EXPECT_NEAR(model::persistent_memory(c, gpu, 3).weights.value(), 2.0 * psi, 1.0);
    } else {
      EXPECT_NEAR(model::gathered_layer_bytes(c).value() * 2.0, model::gathered_layer_bytes(w).value(), 1.0);
    }
    WorkloadSpec p = w, pc = c;
    p.training.fp8_params = pc.training.fp8_params = true;
    EXPECT_DOUBLE_EQ(model::persistent_memory(p, gpu, 3).weights.value(),
                     model::persistent_memory(pc, gpu, 3).weights.value());
  }
  WorkloadSpec bf16 = test::workload(test::gpt3_175b(), 8, 8, 4, 8);
  bf16.training.fp8_weight_cache = false; // no fp8 training: nothing to keep either way
  EXPECT_DOUBLE_EQ(model::fp8_weight_bytes(bf16), 0.0);
}

// Activation offloading (training.offload_layers = N): each in-flight pass keeps the stored
// activations of its chunk's layers but the first N; one layer's activations, the copy in flight,
// count as a buffer.
TEST(MemoryLedger, OffloadedLayersKeepNoActivations) {
  const GpuSpec gpu = test::a100();
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 1, 8); // 12 layers per stage
  w.training.flash_attention = true;
  WorkloadSpec o = w;
  o.training.offload_layers = 5;
  const double layer = model::stored_layer_activations(w).total().value();
  const double passes = static_cast<double>(model::in_flight_passes(w, 0).passes);
  const model::MemoryLedger a = model::static_memory(w, gpu, 0);
  const model::MemoryLedger b = model::static_memory(o, gpu, 0);
  EXPECT_NEAR(a.activations.value() - b.activations.value(), 5.0 * layer * passes, 1.0);
  EXPECT_NEAR(b.comm_buffers.value() - a.comm_buffers.value(), layer, 1.0);
  // The offloaded layers of every pass in flight wait in host memory.
  EXPECT_NEAR(b.host.value(), 5.0 * layer * passes, 1.0);
  EXPECT_NEAR(model::offloaded_activations(o, 0).value(), 5.0 * layer * passes, 1.0);
  EXPECT_EQ(a.host.value(), 0.0);
}

// Full recomputation of the first N layers of each chunk (training.recompute_layers): a pass in
// flight keeps N layers' inputs and the other layers' whole stored activations, so the ledger
// lies between all and none, N layers' worth from the one and L - N from the other.
TEST(MemoryLedger, RecomputingTheFirstLayersOfEachChunk) {
  const GpuSpec gpu = test::a100();
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 1, 8); // 12 layers per stage
  w.training.flash_attention = true;
  w.training.recompute = Recompute::FULL;
  const double input = model::stored_layer_activations(w).total().value();
  const double plain = model::recompute_working_set(w).total().value();
  const double passes = static_cast<double>(model::in_flight_passes(w, 0).passes);
  const double all = model::static_memory(w, gpu, 0).activations.value();
  WorkloadSpec part = w;
  part.training.recompute_layers = 4;
  EXPECT_NEAR(model::static_memory(part, gpu, 0).activations.value() - all, 8.0 * (plain - input) * passes,
              1e-6 * all);
  part.training.recompute_layers = 12; // every layer of the chunk: the same as all
  EXPECT_NEAR(model::static_memory(part, gpu, 0).activations.value(), all, 1e-6 * all);
}

// recompute_modules: alternate_linears (docs/model.md, "Selective recomputation"), Llama 3.1 8B's
// shape (h 4096, q 4096, kv 8·128 = 1024, f 14336) at s·b = 16384 tokens. tp 1: the layer input,
// Q, V and the attention output, 2·(h + 2q + kv) bytes per token; the gate's and the down
// projection's outputs, 2·(f + h). tp 8 with SP: the input and the two reduce-scatters' outputs
// split, Q, V, the attention output and the gate split, the down projection's partial sum whole.
TEST(MemoryLedger, AlternateLinearsKeepEveryOtherMatmul) {
  WorkloadSpec w;
  w.model = test::llama2_70b();
  w.model.layers = 32;
  w.model.hidden = 4096;
  w.model.heads = 32;
  w.model.kv_heads = 8;
  w.model.ffn_hidden = 14336;
  w.model.seq_len = 8192;
  w.model.dropout = false; // Llama: no dropout masks
  w.batch.micro_batch = 2;
  w.training.flash_attention = true;
  w.training.recompute = Recompute::SELECTIVE;
  w.training.recompute_modules = {.core_attn = false, .alternate_linears = true};
  const double sb = 16384, h = 4096, q = 4096, kv = 1024, f = 14336;
  const model::LayerActivations one = model::stored_layer_activations(w);
  EXPECT_DOUBLE_EQ(one.attention.value(), sb * 2 * (h + 2 * q + kv));
  EXPECT_DOUBLE_EQ(one.mlp.value(), sb * 2 * (f + h));
  // Against no recomputation (flash attention): 62 KiB per token and layer against 136 KiB.
  WorkloadSpec none = w;
  none.training.recompute = Recompute::NONE;
  EXPECT_DOUBLE_EQ(one.total().value() / sb / 1024, 62.0);
  EXPECT_DOUBLE_EQ(model::stored_layer_activations(none).total().value() / sb / 1024, 136.0);

  w.parallel.tp = 8;
  w.parallel.sp = true;
  const model::LayerActivations eight = model::stored_layer_activations(w);
  EXPECT_DOUBLE_EQ(eight.attention.value(), sb * 2 * (h / 8 + (2 * q + kv) / 8 + h / 8));
  EXPECT_DOUBLE_EQ(eight.mlp.value(), sb * 2 * (f / 8 + h + h / 8));
}

// The caching allocator's reserve (docs/model.md, "The caching allocator"). Default segments: the
// flat allowance, (gpu.allocator_fragmentation - 1) x (activations + gathered layers + buffers).
// Expandable segments: one segment per pool and allocating stream, each holding at most its last
// partly used page: streams x (2 MiB + 20 MiB), here 4 streams (compute, TP, PP, DP) = 88 MiB,
// whatever the activations.
TEST(MemoryLedger, AllocatorReserveOfDefaultAndExpandableSegments) {
  constexpr double MIB = 1024.0 * 1024.0;
  WorkloadSpec w = test::workload(test::gpt3_175b(), 8, 8, 2, 16);
  GpuSpec gpu = test::a100();
  gpu.allocator_fragmentation = 1.25;
  const model::MemoryLedger flat = model::static_memory(w, gpu, 0);
  const double dynamic = (flat.activations + flat.zero3_gathered + flat.comm_buffers).value();
  EXPECT_GT(dynamic, 10.0 * 1024 * MIB);
  EXPECT_DOUBLE_EQ(flat.fragmentation.value(), 0.25 * dynamic);

  w.training.expandable_segments = true;
  EXPECT_EQ(model::allocating_streams(w), 4);
  const model::MemoryLedger expandable = model::static_memory(w, gpu, 0);
  EXPECT_DOUBLE_EQ(expandable.fragmentation.value(), 4.0 * 22.0 * MIB);
  // Only the reserve changes: the live bytes are the same.
  EXPECT_DOUBLE_EQ(expandable.activations.value(), flat.activations.value());
  EXPECT_DOUBLE_EQ(expandable.comm_buffers.value(), flat.comm_buffers.value());
  EXPECT_DOUBLE_EQ(flat.peak().value() - expandable.peak().value(), 0.25 * dynamic - 88.0 * MIB);
  // Twice the micro-batch doubles the flat allowance's activation part but not the page bound;
  // the allowance factor does not enter it either.
  w.batch.micro_batch = 2;
  w.batch.global_batch *= 2;
  gpu.allocator_fragmentation = 1.0;
  EXPECT_DOUBLE_EQ(model::static_memory(w, gpu, 0).fragmentation.value(), 88.0 * MIB);

  // Streams: compute alone on one GPU; each communication group adds its own.
  WorkloadSpec one = test::workload(test::gpt3_175b(), 1, 1, 1, 1);
  EXPECT_EQ(model::allocating_streams(one), 1);
  one.parallel.cp = 2; // the CP ring and the gradients' reduction over the CP ranks
  EXPECT_EQ(model::allocating_streams(one), 3);
  ModelSpec experts = test::small_gpt(4);
  experts.moe.experts = 8;
  experts.moe.top_k = 2;
  experts.moe.expert_ffn_hidden = 4096;
  WorkloadSpec moe = test::workload(experts, 2, 2, 4, 8);
  moe.parallel.ep = 4; // compute, TP, PP, DP and EP
  EXPECT_EQ(model::allocating_streams(moe), 5);
  moe.model.moe.experts = 0; // a dense model runs no expert all-to-alls
  EXPECT_EQ(model::allocating_streams(moe), 4);
  moe.model.moe.experts = 8;
  EXPECT_EQ(model::allocating_streams(moe), 5);
}
