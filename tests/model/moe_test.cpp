// Mixture-of-experts arithmetic (sim/model/moe.hpp) against closed forms: MODEL.md §1 (MoE
// parameters), §4 (all-to-all payload b*s*k*h*2), and the routing model of docs/moe.md.

#include "model/memory.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"

#include "common/specs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

using namespace stepsim;

namespace {

/// Mixtral 8x7B: Llama-style, 32 layers, h 4096, 32 heads, 8 KV heads, 8 experts of 14336, top-2.
ModelSpec mixtral() {
  ModelSpec m = test::llama2_70b();
  m.name = "mixtral";
  m.layers = 32;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 8;
  m.ffn_hidden = 14336;
  m.vocab = 32000;
  m.moe.experts = 8;
  m.moe.top_k = 2;
  m.moe.expert_ffn_hidden = 14336;
  return m;
}

WorkloadSpec moe_workload(int tp, int ep, int dp, int cp = 1) {
  WorkloadSpec w = test::workload(mixtral(), tp, 1, dp, 1);
  w.parallel.ep = ep;
  w.parallel.cp = cp;
  return w;
}

} // namespace

// Mixtral 8x7B has about 46.7B parameters, 12.9B of them active per token (Jiang et al. 2024):
// per layer 2h^2 + 2h*kv (attention) + 8 * 3*h*f (experts) + h*8 (router) + 2h (norms).
TEST(MoeParams, Mixtral8x7bTotalAndActiveWithinOnePercent) {
  const ModelSpec m = mixtral();
  EXPECT_NEAR(model::total_params(m) / 46.7e9, 1.0, 0.01) << model::total_params(m);
  EXPECT_NEAR(model::active_params(m) / 12.9e9, 1.0, 0.01) << model::active_params(m);
}

// A dense model's parameters are unchanged by the MoE split (all dense, no expert part).
TEST(MoeParams, DenseModelHasNoExpertParameters) {
  const ModelSpec m = test::llama2_70b();
  const model::LayerParams p = model::stack_params(m, 0, m.layers, 8, 1, 8);
  EXPECT_DOUBLE_EQ(p.expert, 0.0);
  EXPECT_DOUBLE_EQ(p.dense, static_cast<double>(m.layers) * model::layer_params(m, 8));
  EXPECT_DOUBLE_EQ(model::active_params(m), model::total_params(m));
}

// EP divides the routed experts over ep GPUs, TP splits each expert: expert part = E/ep*3hf/tp.
TEST(MoeParams, ExpertsSplitByEpAndTp) {
  const ModelSpec m = mixtral();
  const model::LayerParams one = model::layer_params_at(m, 0, 1, 1, 1);
  const model::LayerParams split = model::layer_params_at(m, 0, 2, 4, 2);
  EXPECT_DOUBLE_EQ(one.expert, 8.0 * 3.0 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(split.expert, one.expert / 8.0);
}

// Folded expert groups (etp = 1 < tp): every expert whole on its GPU, E/ep of them; they are
// sharded by ZeRO over tp*cp*dp/ep GPUs (the dense parameters still over dp*cp).
TEST(MoeParams, FoldedExpertsAreWholeAndShardedOverTheFoldedGroup) {
  const ModelSpec m = mixtral();
  EXPECT_DOUBLE_EQ(model::layer_params_at(m, 0, 2, 4, 1).expert, 2.0 * 3.0 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(model::layer_params_at(m, 0, 2, 4, 1).dense, model::layer_params_at(m, 0, 2, 4, 2).dense);
  WorkloadSpec w;
  w.model = m;
  w.parallel.tp = 2;
  w.parallel.dp = 4;
  w.parallel.cp = 2;
  w.parallel.ep = 8;
  w.parallel.sp = true;
  EXPECT_EQ(model::expert_data_parallel(w.parallel), 1); // legacy: dp*cp/ep = 8/8
  w.parallel.etp = 1;
  EXPECT_EQ(model::expert_data_parallel(w.parallel), 2); // folded: 2*2*4/8
  w.parallel.zero_stage = 1;
  const double expert = model::expert_params_on_rank(w, 0);
  EXPECT_DOUBLE_EQ(expert, 32.0 * 8.0 / 8.0 * 3.0 * 4096 * 14336); // 32 layers, 1 whole expert each
  EXPECT_DOUBLE_EQ(model::optimizer_params_on_rank(w, 0),
                   (model::params_on_rank(w, 0) - expert) / 8.0 + expert / 2.0);
}

// DeepSeek-V3 style: the first k layers are dense, then every layer % freq == 0 is MoE.
TEST(MoeLayers, FirstDenseLayersAndFrequency) {
  ModelSpec m = mixtral();
  m.moe.first_dense_layers = 3;
  EXPECT_FALSE(model::is_moe_layer(m, 2));
  EXPECT_TRUE(model::is_moe_layer(m, 3));
  m.moe.layer_freq = 2;
  EXPECT_FALSE(model::is_moe_layer(m, 3));
  EXPECT_TRUE(model::is_moe_layer(m, 4));
  EXPECT_EQ(model::moe_layers_in(m, 0, 8), 2); // layers 4 and 6
}

// Uniform routing with unlimited capacity gives every expert exactly the same number of tokens.
TEST(MoeRouting, UniformInfiniteCapacityGivesEqualTokens) {
  ModelSpec m = mixtral();
  m.moe.experts = 64;
  const auto loads = model::expert_loads(m, 5, 8192.0 * 2);
  ASSERT_EQ(loads.size(), 64u);
  for (double l : loads)
    EXPECT_DOUBLE_EQ(l, 8192.0 * 2 / 64);
}

// Zipf routing keeps every token (no capacity limit), is skewed, and is the same for the same seed.
TEST(MoeRouting, ZipfIsSkewedDeterministicAndConservesTokens) {
  ModelSpec m = mixtral();
  m.moe.experts = 16;
  m.moe.routing.distribution = RoutingDistribution::ZIPF;
  m.moe.routing.zipf_exponent = 1.0;
  m.moe.routing.seed = 42;
  const auto a = model::expert_loads(m, 3, 1000.0);
  const auto b = model::expert_loads(m, 3, 1000.0);
  EXPECT_EQ(a, b);
  EXPECT_NEAR(std::accumulate(a.begin(), a.end(), 0.0), 1000.0, 1e-9);
  // The most popular expert has 1 / H_16 of the tokens (H_16 = 3.3807...).
  EXPECT_NEAR(*std::max_element(a.begin(), a.end()), 1000.0 / 3.380728993, 1e-6);
  m.moe.routing.seed = 43;
  EXPECT_NE(model::expert_loads(m, 3, 1000.0), a); // another seed places the hot experts elsewhere
}

// A capacity factor c caps every expert at c * fair share and drops the overflow.
TEST(MoeRouting, CapacityFactorDropsOverflow) {
  ModelSpec m = mixtral();
  m.moe.experts = 16;
  m.moe.routing.distribution = RoutingDistribution::ZIPF;
  m.moe.capacity_factor = 1.25;
  const auto loads = model::expert_loads(m, 0, 1600.0);
  for (double l : loads)
    EXPECT_LE(l, 1.25 * 100.0 + 1e-9);
  EXPECT_LT(std::accumulate(loads.begin(), loads.end(), 0.0), 1600.0);
}

// The MoE block's pace is its most loaded EP rank: imbalance = max / mean of the EP ranks'
// loads; 1 with uniform routing.
TEST(MoeRouting, EpImbalanceIsMaxOverMeanOfRankLoads) {
  WorkloadSpec w = moe_workload(1, 8, 8);
  EXPECT_DOUBLE_EQ(model::ep_imbalance(w, 0), 1.0);
  w.model.moe.routing.distribution = RoutingDistribution::ZIPF;
  w.model.moe.routing.zipf_exponent = 1.2;
  const double tokens = 4096.0 * 2 * 8; // b*s*k per GPU, 8 GPUs
  const auto loads = model::expert_loads(w.model, 0, tokens);
  const double expected = *std::max_element(loads.begin(), loads.end()) / (tokens / 8);
  EXPECT_NEAR(model::ep_imbalance(w, 0), expected, 1e-12);
  EXPECT_GT(model::ep_imbalance(w, 0), 1.5);
}

// MODEL.md §4: each all-to-all (dispatch or combine) moves b*s*k*h*2 bytes per GPU and direction;
// context parallelism leaves s/cp tokens per GPU, sequence parallelism /tp.
TEST(MoeComm, AllToAllBytesAreBSKH2) {
  WorkloadSpec w = moe_workload(1, 8, 8);
  w.batch.micro_batch = 2;
  EXPECT_DOUBLE_EQ(model::ep_all_to_all_bytes(w).value(), 2.0 * 4096 * 2 * 4096 * 2);
  w.parallel.cp = 2;
  EXPECT_DOUBLE_EQ(model::ep_all_to_all_bytes(w).value(), 2.0 * 2048 * 2 * 4096 * 2);
}

// Context parallelism divides the activation memory of a layer by cp (flash attention: no s^2
// term), the TP payload and the K,V block are per s/cp tokens.
TEST(ContextParallel, HalvesActivationsAndPerTokenPayloads) {
  WorkloadSpec w = test::workload(test::llama2_70b(), 8, 1, 2, 1);
  w.training.flash_attention = true;
  const double one = model::stored_layer_activations(w).total().value();
  const double tp_bytes = model::tp_collective_bytes(w).value();
  w.parallel.cp = 2;
  EXPECT_DOUBLE_EQ(model::stored_layer_activations(w).total().value(), one / 2);
  EXPECT_DOUBLE_EQ(model::tp_collective_bytes(w).value(), tp_bytes / 2);
  // K and V of 2048 tokens, 8 KV heads of 128 split over tp = 8: 2 * 2048 * 128 * 2 bytes.
  EXPECT_DOUBLE_EQ(model::cp_kv_block_bytes(w).value(), 2.0 * 2048 * 128 * 2);
}

// The memory ledger holds experts/ep experts per GPU; ZeRO-1 shards expert optimizer states over
// dp*cp/ep GPUs and dense ones over dp*cp.
TEST(MoeMemory, ExpertStatesPerRankAndSharding) {
  WorkloadSpec w = moe_workload(1, 4, 8);
  const GpuSpec gpu = test::a100();
  const double psi = model::params_on_rank(w, 0);
  const double experts = model::expert_params_on_rank(w, 0);
  EXPECT_DOUBLE_EQ(experts, 32.0 * 2.0 * 3.0 * 4096 * 14336); // 32 layers x 2 local experts
  const model::MemoryLedger plain = model::persistent_memory(w, gpu, 0);
  EXPECT_DOUBLE_EQ(plain.weights.value(), 2.0 * psi);
  w.parallel.zero_stage = 1;
  const model::MemoryLedger z1 = model::persistent_memory(w, gpu, 0);
  EXPECT_DOUBLE_EQ(z1.optimizer.value(), 12.0 * ((psi - experts) / 8.0 + experts / 2.0));
}

// An MoE layer's stored activations beyond a dense layer's norms and attention: the experts' inner
// activations of top_k tokens ((4 + g)·k·f_e per token with SwiGLU: gate, up, and the fc2 input as
// g bytes) and the k dispatched copies of each token, the experts' fc1 input, g bytes per value
// (2 in bf16, 1 as the fp8 cast); the routing weights scale the activation (weighted SwiGLU), so
// the experts' outputs are not kept. Both terms halve the fc1-input bytes in fp8.
TEST(MoeMemory, DispatchedTokensAreKeptAsTheExpertsFc1Input) {
  WorkloadSpec w = moe_workload(1, 4, 8);
  w.training.flash_attention = true;
  w.model.dropout = false;
  WorkloadSpec dense = w;
  dense.model.moe = MoeSpec{};
  dense.model.ffn_hidden = 2 * 14336; // the same (top_k + S)·f_e inner width as the MoE layer
  const double sbh = 4096.0 * 1 * 4096;
  const double k = 2;
  const double mlp_moe = model::stored_layer_activations(w).mlp.value();
  const double mlp_dense = model::stored_layer_activations(dense).mlp.value();
  EXPECT_NEAR(mlp_moe - mlp_dense, 2.0 * k * sbh, 1.0);
  w.precision = Precision::FP8;
  dense.precision = Precision::FP8;
  EXPECT_NEAR(model::stored_layer_activations(w).mlp.value() -
                  model::stored_layer_activations(dense).mlp.value(),
              1.0 * k * sbh, 1.0);
}
