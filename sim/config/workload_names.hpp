#pragma once
// Private to config/: the spelling of every enum value of the workload file, named once. The
// reader parses with these tables (Field::choice_in) and the writer (config::workload_yaml)
// prints with them, so a value written is the value read back.

#include "config/spec.hpp"

#include <cstddef>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace stepsim::config::detail {

template <class E> using Name = std::pair<std::string_view, E>;

inline constexpr Name<MlpKind> MLP_NAMES[] = {{"gelu", MlpKind::GELU}, {"swiglu", MlpKind::SWIGLU}};
inline constexpr Name<NormKind> NORM_NAMES[] = {{"layernorm", NormKind::LAYERNORM},
                                                {"rmsnorm", NormKind::RMSNORM}};
inline constexpr Name<PositionEmbedding> POSITION_NAMES[] = {{"learned", PositionEmbedding::LEARNED},
                                                             {"rotary", PositionEmbedding::ROTARY}};
inline constexpr Name<RoutingDistribution> ROUTING_NAMES[] = {{"uniform", RoutingDistribution::UNIFORM},
                                                              {"zipf", RoutingDistribution::ZIPF}};
inline constexpr Name<Schedule> SCHEDULE_NAMES[] = {{"gpipe", Schedule::GPIPE},
                                                    {"1f1b", Schedule::ONE_F_ONE_B},
                                                    {"interleaved", Schedule::INTERLEAVED},
                                                    {"zb-h1", Schedule::ZB_H1},
                                                    {"zb-h2", Schedule::ZB_H2},
                                                    {"dualpipe", Schedule::DUALPIPE},
                                                    {"dualpipev", Schedule::DUALPIPE_V}};
inline constexpr Name<EpDispatch> EP_DISPATCH_NAMES[] = {{"all_to_all", EpDispatch::ALL_TO_ALL},
                                                         {"deduplicated", EpDispatch::DEDUPLICATED}};
inline constexpr Name<Precision> PRECISION_NAMES[] = {
    {"bf16", Precision::BF16}, {"fp16", Precision::FP16}, {"fp8", Precision::FP8}};
inline constexpr Name<Recompute> RECOMPUTE_NAMES[] = {
    {"none", Recompute::NONE}, {"selective", Recompute::SELECTIVE}, {"full", Recompute::FULL}};
inline constexpr Name<Zero3Fetch> ZERO3_FETCH_NAMES[] = {{"prefetch", Zero3Fetch::PREFETCH},
                                                         {"blocking", Zero3Fetch::BLOCKING}};
inline constexpr Name<GradAccumulation> GRAD_ACCUMULATION_NAMES[] = {
    {"fused", GradAccumulation::FUSED}, {"fp32_pass", GradAccumulation::FP32_PASS}};
inline constexpr Name<CrossEntropy> CROSS_ENTROPY_NAMES[] = {{"fp32", CrossEntropy::FP32},
                                                             {"fused", CrossEntropy::FUSED}};
inline constexpr Name<Pointwise> POINTWISE_NAMES[] = {{"fused", Pointwise::FUSED},
                                                      {"eager", Pointwise::EAGER}};
inline constexpr Name<Fp8Scaling> FP8_SCALING_NAMES[] = {{"tensorwise", Fp8Scaling::TENSORWISE},
                                                         {"rowwise", Fp8Scaling::ROWWISE}};
inline constexpr Name<AttentionKernel> ATTENTION_KERNEL_NAMES[] = {{"cudnn", AttentionKernel::CUDNN},
                                                                   {"flash2", AttentionKernel::FLASH2},
                                                                   {"flash3", AttentionKernel::FLASH3}};
inline constexpr Name<CollectiveAlgorithm> ALGORITHM_NAMES[] = {
    {"auto", CollectiveAlgorithm::AUTO}, {"ring", CollectiveAlgorithm::RING},
    {"tree", CollectiveAlgorithm::TREE}, {"hierarchical", CollectiveAlgorithm::HIERARCHICAL},
    {"nvls", CollectiveAlgorithm::NVLS}, {"pairwise", CollectiveAlgorithm::PAIRWISE}};

/// training.recompute_modules: each module's name and its flag.
struct ModuleName {
  std::string_view name;
  bool RecomputeModules::*flag;
};
inline constexpr ModuleName RECOMPUTE_MODULE_NAMES[] = {
    {"core_attn", &RecomputeModules::core_attn},
    {"layernorm", &RecomputeModules::layernorm},
    {"mlp", &RecomputeModules::mlp},
    {"moe_act", &RecomputeModules::moe_act},
    {"mla_up_proj", &RecomputeModules::mla_up_proj},
    {"alternate_linears", &RecomputeModules::alternate_linears}};

/// The spelling of `value` in `names`. Throws std::logic_error for a value the table lacks.
template <class E, std::size_t N> std::string_view name_of(const Name<E> (&names)[N], E value) {
  for (const auto& [name, v] : names)
    if (v == value)
      return name;
  throw std::logic_error("workload_names: an enum value without a name");
}

} // namespace stepsim::config::detail
