#include "model/moe.hpp"

#include "model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace stepsim::model {

namespace {

double d(int64_t v) {
  return static_cast<double>(v);
}

double mlp_matrices(const ModelSpec& m) {
  return m.mlp == MlpKind::SWIGLU ? 3.0 : 2.0;
}

/// The dense MLP's share of layer_params (weights and, with biases, its column and row biases).
double dense_mlp_params(const ModelSpec& m, int tp) {
  const double h = d(m.hidden), f = d(m.ffn_hidden);
  double p = mlp_matrices(m) * h * f / tp;
  if (m.bias)
    p += (mlp_matrices(m) - 1.0) * f / tp + h;
  return p;
}

} // namespace

uint64_t splitmix64(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

bool is_moe_layer(const ModelSpec& m, int64_t layer) {
  return m.moe.enabled() && layer >= m.moe.first_dense_layers &&
         layer % std::max<int64_t>(1, m.moe.layer_freq) == 0;
}

int64_t moe_layers_in(const ModelSpec& m, int64_t first, int64_t count) {
  int64_t n = 0;
  for (int64_t l = first; l < first + count; ++l)
    n += is_moe_layer(m, l) ? 1 : 0;
  return n;
}

double expert_params(const ModelSpec& m) {
  return mlp_matrices(m) * d(m.hidden) * d(m.moe.expert_ffn_hidden);
}

int64_t dense_weight_tensors(const ModelSpec& m, int64_t layer) {
  const int64_t attention = m.mla.enabled() ? (m.mla.q_lora_rank > 0 ? 5 : 4) : 2;
  if (!is_moe_layer(m, layer))
    return attention + 2;
  return attention + 1 + (m.moe.shared_experts > 0 ? 2 : 0);
}

LayerParams layer_params_at(const ModelSpec& m, int64_t layer, int tp, int ep, int etp) {
  const double dense_layer = layer_params(m, tp);
  if (!is_moe_layer(m, layer))
    return {dense_layer, 0.0};
  const double router = d(m.hidden) * d(m.moe.experts);
  const double shared = d(m.moe.shared_experts) * expert_params(m) / tp;
  const double routed = d(m.moe.experts) / ep * expert_params(m) / etp;
  return {dense_layer - dense_mlp_params(m, tp) + router + shared, routed};
}

LayerParams stack_params(const ModelSpec& m, int64_t first, int64_t count, int tp, int ep, int etp) {
  LayerParams sum;
  if (!m.moe.enabled()) {
    sum.dense = d(count) * layer_params(m, tp);
    return sum;
  }
  for (int64_t l = first; l < first + count; ++l) {
    const LayerParams p = layer_params_at(m, l, tp, ep, etp);
    sum.dense += p.dense;
    sum.expert += p.expert;
  }
  return sum;
}

double active_params(const ModelSpec& m) {
  const double unused = d(moe_layers_in(m, 0, m.layers)) * d(m.moe.experts - m.moe.top_k) * expert_params(m);
  return total_params(m) - (m.moe.enabled() ? unused : 0.0);
}

Flops layer_forward_flops_at(const ModelSpec& m, int64_t layer) {
  const Flops attention = attention_block_forward_flops(m, 1, 1, m.windowed_layer(layer));
  if (!is_moe_layer(m, layer))
    return attention + mlp_block_forward_flops(m, 1, 1);
  const double s = d(m.seq_len);
  return attention + router_forward_flops(m, s) + shared_experts_forward_flops(m, s, 1) +
         routed_experts_forward_flops(m, s * d(m.moe.top_k), 1);
}

Flops router_forward_flops(const ModelSpec& m, double tokens) {
  return Flops(2.0 * tokens * d(m.hidden) * d(m.moe.experts));
}

Bytes router_forward_bytes(const ModelSpec& m, double tokens, Precision p) {
  return Bytes(4.0 * tokens * d(m.moe.top_k) * d(m.hidden) * element_bytes(p));
}

Flops shared_experts_forward_flops(const ModelSpec& m, double tokens, int tp) {
  return Flops(2.0 * tokens * d(m.moe.shared_experts) * expert_params(m) / tp);
}

Flops routed_experts_forward_flops(const ModelSpec& m, double assignments, int etp) {
  return Flops(2.0 * assignments * expert_params(m) / etp);
}

std::vector<double> expert_loads(const ModelSpec& m, int64_t layer, double assignments) {
  const auto e = static_cast<size_t>(std::max<int64_t>(1, m.moe.experts));
  std::vector<double> share(e, 1.0);
  if (m.moe.routing.distribution == RoutingDistribution::ZIPF) {
    // Popularity rank of each expert: a Fisher-Yates shuffle driven by splitmix64.
    std::vector<size_t> rank(e);
    std::iota(rank.begin(), rank.end(), size_t{0});
    uint64_t state = m.moe.routing.seed ^ (0xD1B54A32D192ED03ULL * static_cast<uint64_t>(layer + 1));
    for (size_t i = e; i > 1; --i) {
      const size_t j = static_cast<size_t>(splitmix64(state) % i);
      std::swap(rank[i - 1], rank[j]);
    }
    for (size_t i = 0; i < e; ++i)
      share[i] = std::pow(static_cast<double>(rank[i] + 1), -m.moe.routing.zipf_exponent);
  }
  const double total = std::accumulate(share.begin(), share.end(), 0.0);
  const double cap = m.moe.capacity_factor > 0 ? m.moe.capacity_factor * assignments / static_cast<double>(e)
                                               : std::numeric_limits<double>::infinity();
  std::vector<double> loads(e);
  for (size_t i = 0; i < e; ++i)
    loads[i] = std::min(assignments * share[i] / total, cap);
  return loads;
}

std::vector<double> ep_rank_loads(const std::vector<double>& loads, int ep) {
  const size_t per = loads.size() / static_cast<size_t>(std::max(1, ep));
  std::vector<double> out(static_cast<size_t>(std::max(1, ep)), 0.0);
  for (size_t i = 0; i < loads.size(); ++i)
    out[std::min(i / std::max<size_t>(1, per), out.size() - 1)] += loads[i];
  return out;
}

namespace {

/// Tokens one GPU holds per micro-batch: b*s/cp.
double local_tokens(const WorkloadSpec& w) {
  return d(w.batch.micro_batch) * d(w.model.seq_len) / std::max(1, w.parallel.cp);
}

} // namespace

namespace {

/// Tokens one EP rank contributes per micro-batch (WorkloadSpec::ep_rank_tokens).
double ep_rank_tokens(const WorkloadSpec& w) {
  return w.ep_rank_tokens();
}

/// Every EP rank's assignments in `layer`: the EP group routes the tokens of its ep ranks together.
std::vector<double> ep_group_loads(const WorkloadSpec& w, int64_t layer) {
  const int ep = std::max(1, w.parallel.ep);
  const double assignments = ep_rank_tokens(w) * d(w.model.moe.top_k) * ep;
  return ep_rank_loads(expert_loads(w.model, layer, assignments), ep);
}

} // namespace

double ep_rank_assignments(const WorkloadSpec& w, int64_t layer, int ep_rank) {
  const std::vector<double> ranks = ep_group_loads(w, layer);
  return ranks[static_cast<size_t>(ep_rank) % ranks.size()];
}

double ep_rank_balanced_assignments(const WorkloadSpec& w) {
  return ep_rank_tokens(w) * d(w.model.moe.top_k);
}

double ep_max_rank_assignments(const WorkloadSpec& w, int64_t layer) {
  const std::vector<double> ranks = ep_group_loads(w, layer);
  return *std::max_element(ranks.begin(), ranks.end());
}

double ep_imbalance(const WorkloadSpec& w, int64_t layer) {
  const double mean = ep_rank_tokens(w) * d(w.model.moe.top_k);
  return mean > 0 ? ep_max_rank_assignments(w, layer) / mean : 1.0;
}

Bytes ep_all_to_all_bytes(const WorkloadSpec& w) {
  double tokens = local_tokens(w);
  if (w.parallel.sp && w.parallel.tp > 1)
    tokens /= w.parallel.tp;
  return Bytes(tokens * d(w.model.moe.top_k) * d(w.model.hidden) * element_bytes(w.precision));
}

double expert_params_on_rank(const WorkloadSpec& w, int stage) {
  return stage_params(w, stage).expert;
}

int64_t expert_data_parallel(const ParallelSpec& p) {
  const int64_t gpus = static_cast<int64_t>(std::max(1, p.tp)) * std::max(1, p.cp) * std::max(1, p.dp);
  return std::max<int64_t>(1, gpus / (static_cast<int64_t>(p.expert_tp()) * std::max(1, p.ep)));
}

int64_t dense_shard_gpus(const ParallelSpec& p) {
  return static_cast<int64_t>(p.zero_stage >= 3 ? p.shard_group() : p.dp) * std::max(1, p.cp);
}

double optimizer_params_on_rank(const WorkloadSpec& w, int stage) {
  const double all = params_on_rank(w, stage);
  if (w.parallel.zero_stage < 1)
    return all;
  const double expert = expert_params_on_rank(w, stage);
  return (all - expert) / d(dense_shard_gpus(w.parallel)) + expert / d(expert_data_parallel(w.parallel));
}

Bytes cp_kv_block_bytes(const WorkloadSpec& w) {
  const ModelSpec& m = w.model;
  // K and V: kv_heads of head_dim each; MLA's per-head keys of qk_nope + qk_rope and values of
  // v_head_dim (every head its own).
  const double k = m.mla.enabled() ? d(m.heads) * d(m.mla.qk_head_dim()) : d(m.kv_heads) * d(m.head_dim());
  const double v = m.mla.enabled() ? d(m.heads) * d(m.mla.v_head_dim) : d(m.kv_heads) * d(m.head_dim());
  return Bytes(local_tokens(w) * (k + v) / w.parallel.tp * element_bytes(w.precision));
}

} // namespace stepsim::model
