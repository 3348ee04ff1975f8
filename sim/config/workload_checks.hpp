#pragma once
// Private to config/: the workload's limits and the checks that combine several of its keys,
// each written once. The reader (workload_reader.cpp) runs them after reading the keys they
// combine and reports a finding at the key of the file it is about; config::check_workload runs
// the same checks on a WorkloadSpec built in code (docs/schema.md, "Size limits").

#include "config/spec.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stepsim::config::detail {

// Largest products of sizes accepted (docs/schema.md, "Size limits"): they keep every product
// the simulator forms inside int64 and a step graph inside memory. The limits of single keys are
// their declarations' (schema.cpp), read with limit_of.
constexpr int64_t MAX_TOKENS_PER_MICRO_BATCH = int64_t{1} << 32;
constexpr double MAX_SCORE_ELEMENTS = 4.6e18; // micro_batch x heads x seq_len^2 < 2^62

/// The largest value the workload key `path` accepts: its declared maximum or size limit.
int64_t limit_of(std::string_view path);

/// Model sizes, in the order they are read; each limited as its key declares.
struct SizeLimit {
  std::string_view key; ///< under model.
  int64_t ModelSpec::*field;
};
constexpr SizeLimit MODEL_SIZE_LIMITS[] = {
    {"layers", &ModelSpec::layers},     {"hidden", &ModelSpec::hidden},         {"heads", &ModelSpec::heads},
    {"kv_heads", &ModelSpec::kv_heads}, {"ffn_hidden", &ModelSpec::ffn_hidden}, {"vocab", &ModelSpec::vocab},
    {"seq_len", &ModelSpec::seq_len},   {"head_dim", &ModelSpec::head_dim_set}};

/// One finding: the key it is about, relative to its section ("heads", "moe", "micro_batch"), and
/// what is wrong.
struct Finding {
  std::string key;
  std::string why;
};

// Each check returns "" (or no findings) when the spec passes it.

/// Heads that do not divide model.hidden without a model.head_dim.
std::string heads_problem(const ModelSpec& model);
/// kv_heads that do not divide the heads.
std::string kv_heads_problem(const ModelSpec& model);
/// heads x head_dim above the hidden size's limit.
std::string q_dim_problem(const ModelSpec& model);
/// model.moe: more experts per token than experts.
std::string moe_top_k_problem(const MoeSpec& moe);
/// model.moe: leading dense layers that leave no MoE layer.
std::string moe_dense_problem(const ModelSpec& model);
/// model.moe.routing: groups that do not divide the experts, or too few of them for top_k.
std::string routing_problem(const MoeSpec& moe);
/// model.full_attention_every without a window.
std::string window_problem(const ModelSpec& model);
/// Multi-head latent attention against the head layout (keys "head_dim", "kv_heads", "bias", "mla").
std::vector<Finding> mla_problems(const ModelSpec& model);
/// Model sizes above their limits, as "model.KEY = V, more than the N accepted" (key "model.KEY").
std::vector<Finding> size_limit_problems(const ModelSpec& model);
/// Tokens and attention scores of one micro-batch within their limits (key "micro_batch").
std::vector<Finding> micro_batch_problems(const WorkloadSpec& w);
/// The training keys against the precision and the model (keys "fp8_params", "recompute_modules").
std::vector<Finding> training_problems(const WorkloadSpec& w);
/// "recompute_modules needs training.recompute: selective".
std::string recompute_modules_problem();

} // namespace stepsim::config::detail
