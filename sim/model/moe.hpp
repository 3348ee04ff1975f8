#pragma once
// Mixture-of-experts arithmetic (docs/moe.md, MODEL.md §1 and §4): which layers are MoE, their
// parameters split into dense (non-expert) and expert parts, FLOPs of the router, the shared and
// the routed experts, the tokens each expert receives under a seeded routing distribution with a
// capacity limit, and the expert-parallel all-to-all payload. No SimGrid here.

#include "config/spec.hpp"
#include "core/units.hpp"

#include <cstdint>
#include <vector>

namespace stepsim::model {

/// True when global layer `layer` (0-based) has an MoE MLP: the model has experts, the layer is
/// past `first_dense_layers` and layer % moe_layer_freq == 0 (Hugging Face DeepSeek's rule).
bool is_moe_layer(const ModelSpec& m, int64_t layer);

/// MoE layers among [first, first + count).
int64_t moe_layers_in(const ModelSpec& m, int64_t first, int64_t count);

/// Weights of one expert MLP without parallelism: 3*h*f_e (SwiGLU) or 2*h*f_e (GELU), no biases.
double expert_params(const ModelSpec& m);

/// Parameters of one layer on one GPU of a TP group of `tp`, an EP group of `ep` and an expert
/// tensor-parallel group of `etp`, by the group their gradients are reduced over: `dense`
/// (attention, norms, router, shared experts, or the whole dense layer) over DP x CP; `expert` (the
/// experts/ep routed experts, each split over etp GPUs) over the expert-data-parallel group.
struct LayerParams {
  double dense = 0;
  double expert = 0;
  [[nodiscard]] double total() const { return dense + expert; }
};
LayerParams layer_params_at(const ModelSpec& m, int64_t layer, int tp, int ep, int etp);

/// Weight matrices of layer `layer`'s dense part in Megatron's fused layout (QKV one tensor, a
/// gated MLP's gate and up one tensor; MLA's down- and up-projections and output; an MoE layer's
/// router and shared experts): the collectives an implementation that gathers ZeRO-3 parameters
/// tensor by tensor issues (training.zero3_fetch: blocking). Norms and biases are not counted:
/// they fall under DeepSpeed's persistence threshold (10^5 elements) and are not gathered alone.
int64_t dense_weight_tensors(const ModelSpec& m, int64_t layer);

/// Sum of layer_params_at over layers [first, first + count).
LayerParams stack_params(const ModelSpec& m, int64_t first, int64_t count, int tp, int ep, int etp);

/// The layer parameters one GPU of pipeline stage `stage` holds: its model chunks' layers (uneven
/// or interleaved chunks counted exactly), the last stage's MTP layers included.
LayerParams stage_params(const WorkloadSpec& w, int stage);

/// Parameters one token uses: all of them except the routed experts it is not sent to (top_k of
/// `experts` per MoE layer). Equals total_params for a dense model.
double active_params(const ModelSpec& m);

/// Forward FLOPs of layer `layer` for one sequence without parallelism, with balanced routing:
/// the attention block (through its sliding window if the layer has one) plus the dense MLP, or
/// the router 2*s*h*E, the shared experts and top_k routed experts per token. Used for model
/// FLOPs (MFU).
Flops layer_forward_flops_at(const ModelSpec& m, int64_t layer);

/// Router forward FLOPs for `tokens` tokens: 2*tokens*h*E (replicated on every TP rank).
Flops router_forward_flops(const ModelSpec& m, double tokens);

/// The router block's HBM traffic for `tokens` tokens (the roofline's bytes): the two permutations
/// of the top_k routed copies around the experts, each read and written.
Bytes router_forward_bytes(const ModelSpec& m, double tokens, Precision p);

/// Shared experts' forward FLOPs for `tokens` tokens on one TP rank: 2*tokens*n*h*f_e*S/tp.
Flops shared_experts_forward_flops(const ModelSpec& m, double tokens, int tp);

/// Routed experts' forward FLOPs for `assignments` token-expert pairs on one GPU of an expert
/// tensor-parallel group of `etp`: 2*assignments*n*h*f_e/etp (a grouped GEMM over the local experts).
Flops routed_experts_forward_flops(const ModelSpec& m, double assignments, int etp);

/// Tokens each of the E experts of layer `layer` receives when `assignments` token-expert pairs
/// are routed (tokens x top_k). UNIFORM: assignments/E each. ZIPF: the expert of popularity rank
/// r gets a share proportional to r^-zipf_exponent; the popularity order is a permutation drawn
/// with splitmix64 from (routing.seed, layer), so it is the same on every platform. With
/// capacity_factor c > 0 an expert keeps at most c*assignments/E tokens; the overflow is dropped.
std::vector<double> expert_loads(const ModelSpec& m, int64_t layer, double assignments);

/// Tokens each EP rank's local experts receive (experts/ep consecutive experts per rank, Megatron's
/// placement) out of the loads of expert_loads.
std::vector<double> ep_rank_loads(const std::vector<double>& loads, int ep);

/// Token-expert pairs one MoE layer processes per micro-batch on EP rank `ep_rank` (all its local
/// experts together). An EP rank stands for etp GPUs that together route b*s/cp*etp/tp tokens (a
/// TP group's b*s/cp when etp = tp; one GPU's sequence share b*s/(cp*tp) when etp = 1) and every
/// one of them processes the same pairs with 1/etp of each expert. Balanced routing gives
/// b*s/cp*etp/tp*top_k.
double ep_rank_assignments(const WorkloadSpec& w, int64_t layer, int ep_rank);

/// Balanced routing (uniform, no capacity limit): the token-expert pairs of an EP rank,
/// b*s/cp*etp/tp*top_k; over its E/ep local experts, WorkloadSpec::tokens_per_local_expert, the M
/// of each expert's GEMMs (docs/moe.md, "Routed experts").
double ep_rank_balanced_assignments(const WorkloadSpec& w);

/// The most loaded EP rank's assignments in `layer` (the pace of the layer's combine).
double ep_max_rank_assignments(const WorkloadSpec& w, int64_t layer);

/// The slowest EP rank's assignments over the mean, for layer `layer` (1 with uniform routing and
/// no capacity limit): the factor by which routing skew slows the MoE block.
double ep_imbalance(const WorkloadSpec& w, int64_t layer);

/// Payload of one expert all-to-all (dispatch or combine) per MoE layer per micro-batch per GPU:
/// b*(s/cp)*top_k*h*bytes (MODEL.md §4: b*s*k*h*2 per direction), /tp with sequence parallelism.
Bytes ep_all_to_all_bytes(const WorkloadSpec& w);

/// The local K,V block one ring-attention step passes to the next CP rank, per micro-batch per TP
/// rank: 2 (K and V) * b*(s/cp) * kv_heads*head_dim/tp * bytes (MLA: b*(s/cp) * heads*(d_qk +
/// d_v)/tp * bytes).
Bytes cp_kv_block_bytes(const WorkloadSpec& w);

/// Expert parameters one GPU of pipeline stage `stage` holds (part of params_on_rank).
double expert_params_on_rank(const WorkloadSpec& w, int stage);

/// GPUs holding the same experts (the expert-data-parallel group): tp*cp*dp / (etp*ep), which is
/// dp*cp/ep when etp = tp.
int64_t expert_data_parallel(const ParallelSpec& p);

/// The GPUs over which ZeRO shards a dense parameter's states: dp*cp, or under ZeRO-3 hybrid
/// sharding (parallel.dp_shard) the shard group's dp_shard*cp.
int64_t dense_shard_gpus(const ParallelSpec& p);

/// Parameters the optimizer of `stage` updates on one GPU: all it holds, or with ZeRO >= 1 the
/// dense ones / dense_shard_gpus plus the expert ones / expert_data_parallel.
double optimizer_params_on_rank(const WorkloadSpec& w, int stage);

/// SplitMix64 (Steele, Lea, Flood 2014): the next value of `state` (which it advances).
uint64_t splitmix64(uint64_t& state);

} // namespace stepsim::model
