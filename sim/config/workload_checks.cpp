// The checks that combine several keys of a workload (workload_checks.hpp), and
// config::check_workload, which runs them on a spec built in code.

#include "config/workload_checks.hpp"

#include "config/config.hpp"
#include "config/fields.hpp"
#include "config/workload_names.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <iterator>

namespace stepsim::config::detail {

int64_t limit_of(std::string_view path) {
  return upper_bound(File::WORKLOAD, path);
}

std::string heads_problem(const ModelSpec& model) {
  // With model.head_dim the heads need not divide the hidden size (Qwen3, Mistral NeMo).
  if (model.head_dim_set > 0 || model.hidden % model.heads == 0)
    return "";
  return "expected a divisor of model.hidden = " + std::to_string(model.hidden) + ", found " +
         std::to_string(model.heads) + " (hidden % heads = " + std::to_string(model.hidden % model.heads) +
         "; or give model.head_dim)";
}

std::string kv_heads_problem(const ModelSpec& model) {
  if (model.heads % model.kv_heads == 0)
    return "";
  return "expected a divisor of model.heads = " + std::to_string(model.heads) + ", found " +
         std::to_string(model.kv_heads) +
         " (heads % kv_heads = " + std::to_string(model.heads % model.kv_heads) + ")";
}

std::string q_dim_problem(const ModelSpec& model) {
  // The attention widths obey the hidden size's limit: heads x head_dim (and a whole step's
  // tokens times it) must stay far inside 64-bit element counts. The product is only formed
  // within the limits of its factors.
  if (model.head_dim_set <= 0 || model.heads > limit_of("model.heads") ||
      model.head_dim_set > limit_of("model.head_dim") || model.q_dim() <= limit_of("model.hidden"))
    return "";
  return "heads x head_dim = " + std::to_string(model.heads) + " x " + std::to_string(model.head_dim_set) +
         " = " + std::to_string(model.q_dim()) + ", more than the " +
         std::to_string(limit_of("model.hidden")) + " accepted (the limit of model.hidden)";
}

std::string moe_top_k_problem(const MoeSpec& moe) {
  if (moe.top_k <= moe.experts)
    return "";
  return "top_k = " + std::to_string(moe.top_k) + " exceeds experts = " + std::to_string(moe.experts);
}

std::string moe_dense_problem(const ModelSpec& model) {
  if (model.moe.first_dense_layers < model.layers)
    return "";
  return "first_dense_layers = " + std::to_string(model.moe.first_dense_layers) +
         " leaves no MoE layer among model.layers = " + std::to_string(model.layers);
}

std::string routing_problem(const MoeSpec& moe) {
  const RoutingSpec& rt = moe.routing;
  if (rt.groups == 0 && rt.group_top_k == 0)
    return "";
  if (rt.groups < 1 || moe.experts % rt.groups != 0)
    return "routing.groups = " + std::to_string(rt.groups) +
           " must divide moe.experts = " + std::to_string(moe.experts) +
           " (equal expert groups; no group limit is groups = group_top_k = 0, and group_top_k is " +
           std::to_string(rt.group_top_k) + ")";
  if (rt.group_top_k < 1 || rt.group_top_k > rt.groups ||
      rt.group_top_k * (moe.experts / rt.groups) < moe.top_k)
    return "routing.group_top_k = " + std::to_string(rt.group_top_k) +
           " must be in 1..groups = " + std::to_string(rt.groups) +
           " and its groups must hold top_k = " + std::to_string(moe.top_k) + " experts";
  return "";
}

std::string window_problem(const ModelSpec& model) {
  if (model.full_attention_every > 0 && model.sliding_window == 0)
    return "model.full_attention_every needs model.sliding_window > 0 (the other layers' window)";
  return "";
}

std::vector<Finding> mla_problems(const ModelSpec& model) {
  std::vector<Finding> out;
  if (!model.mla.enabled())
    return out;
  if (model.head_dim_set > 0)
    out.push_back({"head_dim", "model.head_dim cannot be combined with model.mla, whose qk_nope_head_dim, "
                               "qk_rope_head_dim and v_head_dim give the head widths"});
  if (model.kv_heads != model.heads)
    out.push_back(
        {"kv_heads", "model.mla gives every head its own keys and values: expected kv_heads = heads = " +
                         std::to_string(model.heads) + ", found " + std::to_string(model.kv_heads)});
  if (model.bias)
    out.push_back({"bias", "linear-layer biases are not modelled with model.mla; expected bias: false"});
  if (std::max(model.mla.q_lora_rank, model.mla.kv_lora_rank) > limit_of("model.hidden"))
    out.push_back({"mla", "an MLA latent rank above the " + std::to_string(limit_of("model.hidden")) +
                              " accepted (the limit of model.hidden)"});
  const int64_t widest = std::max(model.mla.qk_head_dim(), model.mla.v_head_dim);
  if (model.heads * widest > limit_of("model.hidden"))
    out.push_back({"mla", "heads x the widest MLA head (" + std::to_string(model.heads) + " x " +
                              std::to_string(widest) + ") exceeds the " +
                              std::to_string(limit_of("model.hidden")) +
                              " accepted (the limit of model.hidden)"});
  return out;
}

std::vector<Finding> size_limit_problems(const ModelSpec& model) {
  std::vector<Finding> out;
  const auto check = [&out](const std::string& key, int64_t value, int64_t max) {
    if (value > max)
      out.push_back({"model." + key, "model." + key + " = " + std::to_string(value) + ", more than the " +
                                         std::to_string(max) + " accepted"});
  };
  for (const SizeLimit& l : MODEL_SIZE_LIMITS)
    check(std::string(l.key), model.*l.field, limit_of("model." + std::string(l.key)));
  check("moe.experts", model.moe.experts, limit_of("model.moe.experts"));
  check("moe.top_k", model.moe.top_k, limit_of("model.moe.experts"));
  check("moe.expert_ffn_hidden", model.moe.expert_ffn_hidden, limit_of("model.ffn_hidden"));
  check("moe.shared_experts", model.moe.shared_experts, limit_of("model.moe.experts"));
  check("moe.first_dense_layers", model.moe.first_dense_layers, limit_of("model.layers"));
  check("moe.moe_layer_freq", model.moe.layer_freq, limit_of("model.layers"));
  check("moe.routing.groups", model.moe.routing.groups, 65536);
  check("moe.routing.group_top_k", model.moe.routing.group_top_k, 65536);
  check("mla.q_lora_rank", model.mla.q_lora_rank, limit_of("model.hidden"));
  check("mla.kv_lora_rank", model.mla.kv_lora_rank, limit_of("model.hidden"));
  check("mla.qk_nope_head_dim", model.mla.qk_nope_head_dim, limit_of("model.head_dim"));
  check("mla.qk_rope_head_dim", model.mla.qk_rope_head_dim, limit_of("model.head_dim"));
  check("mla.v_head_dim", model.mla.v_head_dim, limit_of("model.head_dim"));
  check("sliding_window", model.sliding_window, limit_of("model.seq_len"));
  check("full_attention_every", model.full_attention_every, limit_of("model.layers"));
  check("mtp_layers", model.mtp_layers, 16);
  return out;
}

std::vector<Finding> micro_batch_problems(const WorkloadSpec& w) {
  std::vector<Finding> out;
  const double mb = static_cast<double>(w.batch.micro_batch), s = static_cast<double>(w.model.seq_len);
  if (mb * s > static_cast<double>(MAX_TOKENS_PER_MICRO_BATCH))
    out.push_back({"micro_batch", "micro_batch x model.seq_len = " + std::to_string(w.batch.micro_batch) +
                                      " x " + std::to_string(w.model.seq_len) +
                                      " tokens per micro-batch, more than the 2^32 accepted"});
  if (mb * static_cast<double>(w.model.heads) * s * s > MAX_SCORE_ELEMENTS)
    out.push_back({"micro_batch",
                   "micro_batch x model.heads x model.seq_len^2 = " + std::to_string(w.batch.micro_batch) +
                       " x " + std::to_string(w.model.heads) + " x " + std::to_string(w.model.seq_len) +
                       "^2 attention scores, more than the 2^62 accepted"});
  return out;
}

std::vector<Finding> training_problems(const WorkloadSpec& w) {
  std::vector<Finding> out;
  if (w.training.fp8_params && w.precision != Precision::FP8)
    out.push_back({"fp8_params", "fp8 primary weights need precision: fp8"});
  if (w.training.fp8_all_gather && (w.precision != Precision::FP8 || w.parallel.zero_stage != 3))
    out.push_back({"fp8_all_gather", "gathering the parameters as fp8 casts needs precision: fp8 and "
                                     "parallel.zero_stage: 3 (the gathers of ZeRO-3 / FSDP)"});
  if (w.training.fp8_all_gather && (w.model.moe.enabled() || w.model.mla.enabled()))
    out.push_back({"fp8_all_gather",
                   "the float8 all-gather is modelled for dense layers with plain attention "
                   "(torchao's Float8Linear weights): no model.moe, no model.mla"});
  if (!w.training.fused_projections && (w.model.moe.enabled() || w.model.mla.enabled()))
    out.push_back({"fused_projections", "separate projections are modelled for dense models with plain "
                                        "attention: no model.moe, no model.mla"});
  if (w.training.fp8_scaling == Fp8Scaling::ROWWISE) {
    if (w.precision != Precision::FP8)
      out.push_back({"fp8_scaling", "rowwise scaling is a scaling of fp8 casts: it needs precision: fp8"});
    if (w.training.fp8_weight_cache)
      out.push_back({"fp8_scaling",
                     "rowwise scaling casts each weight along the axis of every GEMM it feeds and "
                     "keeps none: it needs training.fp8_weight_cache: false"});
    if (w.training.fp8_params)
      out.push_back({"fp8_scaling",
                     "fp8 primary weights (training.fp8_params) are tensorwise-scaled: rowwise "
                     "scaling needs training.fp8_params: false"});
    if (w.model.moe.enabled() || w.model.mla.enabled())
      out.push_back({"fp8_scaling", "rowwise scaling is modelled for dense layers with plain attention "
                                    "(torchao's Float8Linear): no model.moe, no model.mla"});
  }
  if (w.training.fp32_shards && w.training.optimizer_bytes_per_param < 4)
    out.push_back({"fp32_shards", "fp32 shards are the optimizer's fp32 master weights: they need "
                                  "optimizer_bytes_per_param >= 4 (the master's 4 bytes), found " +
                                      std::to_string(w.training.optimizer_bytes_per_param)});
  const RecomputeModules& m = w.training.recompute_modules;
  if (m.mlp && w.model.moe.enabled())
    out.push_back({"recompute_modules",
                   "module 'mlp' (the dense MLP) is not modelled for a mixture-of-experts "
                   "model; its experts take moe_act"});
  if (m.moe_act && !w.model.moe.enabled())
    out.push_back(
        {"recompute_modules", "module 'moe_act' needs a mixture-of-experts model (model.moe.experts)"});
  if (m.mla_up_proj && !w.model.mla.enabled())
    out.push_back(
        {"recompute_modules", "module 'mla_up_proj' needs multi-head latent attention (model.mla)"});
  if (m.alternate_linears && (w.model.moe.enabled() || w.model.mla.enabled()))
    out.push_back({"recompute_modules", "module 'alternate_linears' needs a dense model with plain attention "
                                        "(no model.moe, no model.mla)"});
  if (m.alternate_linears && (m.core_attn || m.layernorm || m.mlp))
    out.push_back({"recompute_modules",
                   "module 'alternate_linears' names the whole layer's policy: it does not "
                   "combine with core_attn, layernorm or mlp"});
  return out;
}

std::string recompute_modules_problem() {
  return "recompute_modules needs training.recompute: selective";
}

namespace {

/// The ranges the reader gives each integer key, for a spec no reader has seen: sizes and
/// degrees positive and within their limits, so that the combined checks divide by none of 0.
std::vector<Finding> range_problems(const WorkloadSpec& w) {
  std::vector<Finding> out;
  const auto within = [&out](const std::string& key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      out.push_back({key, "expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
                              " (the size limit), found " + std::to_string(v)});
  };
  for (const SizeLimit& l : MODEL_SIZE_LIMITS)
    within("model." + std::string(l.key), w.model.*l.field, l.key == "head_dim" ? 0 : 1,
           limit_of("model." + std::string(l.key)));
  within("batch.global_batch", w.batch.global_batch, 1, INT32_MAX);
  within("batch.micro_batch", w.batch.micro_batch, 1, limit_of("batch.micro_batch"));
  const ParallelSpec& p = w.parallel;
  within("parallel.tp", p.tp, 1, limit_of("parallel.tp"));
  within("parallel.pp", p.pp, 1, limit_of("parallel.tp"));
  within("parallel.dp", p.dp, 0, limit_of("parallel.tp")); // 0: derived by check_layout
  within("parallel.vp", p.vp, 1, limit_of("parallel.tp"));
  within("parallel.cp", p.cp, 1, limit_of("parallel.tp"));
  within("parallel.ep", p.ep, 1, limit_of("parallel.tp"));
  within("parallel.etp", p.etp, 0, limit_of("parallel.tp"));           // 0: = tp
  within("parallel.dp_shard", p.dp_shard, 0, limit_of("parallel.tp")); // 0: = dp
  within("parallel.zero_stage", p.zero_stage, 0, 3);
  for (const int64_t n : p.chunk_layers)
    within("parallel.chunk_layers", n, 0, limit_of("model.layers"));
  const ModelSpec& m = w.model;
  within("model.sliding_window", m.sliding_window, 0, limit_of("model.seq_len"));
  within("model.full_attention_every", m.full_attention_every, 0, limit_of("model.layers"));
  within("model.mtp_layers", m.mtp_layers, 0, 16);
  if (m.moe.enabled()) {
    within("model.moe.top_k", m.moe.top_k, 1, limit_of("model.moe.experts"));
    within("model.moe.expert_ffn_hidden", m.moe.expert_ffn_hidden, 1, limit_of("model.ffn_hidden"));
    within("model.moe.shared_experts", m.moe.shared_experts, 0, limit_of("model.moe.experts"));
    within("model.moe.moe_layer_freq", m.moe.layer_freq, 1, limit_of("model.layers"));
    within("model.moe.first_dense_layers", m.moe.first_dense_layers, 0, limit_of("model.layers"));
    within("model.moe.routing.groups", m.moe.routing.groups, 0, 65536);
    within("model.moe.routing.group_top_k", m.moe.routing.group_top_k, 0, 65536);
    if (!(m.moe.capacity_factor == 0.0 || m.moe.capacity_factor >= 1.0))
      out.push_back(
          {"model.moe.capacity_factor", "expected a number >= 1, or 0 for no capacity limit, found " +
                                            std::to_string(m.moe.capacity_factor)});
  }
  if (m.mla.enabled()) {
    within("model.mla.q_lora_rank", m.mla.q_lora_rank, 0, limit_of("model.hidden"));
    within("model.mla.kv_lora_rank", m.mla.kv_lora_rank, 1, limit_of("model.hidden"));
    within("model.mla.qk_nope_head_dim", m.mla.qk_nope_head_dim, 1, limit_of("model.head_dim"));
    within("model.mla.qk_rope_head_dim", m.mla.qk_rope_head_dim, 0, limit_of("model.head_dim"));
    within("model.mla.v_head_dim", m.mla.v_head_dim, 1, limit_of("model.head_dim"));
  }
  const TrainingSpec& t = w.training;
  if (!(t.dp_bucket.value() > 0))
    out.push_back({"training.dp_bucket", "expected a positive byte size"});
  if (!(t.optimizer_bytes_per_param >= 0.0 && t.optimizer_bytes_per_param <= 1024.0))
    out.push_back(
        {"training.optimizer_bytes_per_param", "expected a number in 0..1024 (the sanity limit), found " +
                                                   std::to_string(t.optimizer_bytes_per_param)});
  within("training.zero3_prefetch", t.zero3_prefetch, 0, 64);
  within("training.offload_layers", t.offload_layers, 0, int64_t{1} << 20);
  within("training.recompute_layers", t.recompute_layers, 0, int64_t{1} << 20);
  return out;
}

} // namespace

} // namespace stepsim::config::detail

namespace stepsim::config {

void set_mlp(ModelSpec& model, MlpKind mlp) {
  model.mlp = mlp;
  const bool gpt = mlp == MlpKind::GELU;
  model.norm = gpt ? NormKind::LAYERNORM : NormKind::RMSNORM;
  model.position = gpt ? PositionEmbedding::LEARNED : PositionEmbedding::ROTARY;
  model.bias = gpt;
  model.tied_embeddings = gpt;
}

std::string recompute_modules_of(const std::vector<std::string>& names, RecomputeModules& modules) {
  RecomputeModules out{.core_attn = false};
  for (const std::string& name : names) {
    const auto known =
        std::find_if(std::begin(detail::RECOMPUTE_MODULE_NAMES), std::end(detail::RECOMPUTE_MODULE_NAMES),
                     [&](const detail::ModuleName& m) { return m.name == name; });
    if (known == std::end(detail::RECOMPUTE_MODULE_NAMES))
      return "expected modules among core_attn, layernorm, mlp, moe_act, mla_up_proj, alternate_linears, "
             "found '" +
             name + "' (Megatron's moe and shared_experts are not modelled)";
    if (out.*known->flag)
      return "module '" + name + "' listed twice";
    out.*known->flag = true;
  }
  modules = out;
  return "";
}

void check_workload(const WorkloadSpec& w) {
  using namespace detail;
  const std::string where = w.source.empty() ? "workload '" + w.name + "'" : w.source;
  std::vector<std::string> lines;
  const auto keep = [&](const std::string& key, const std::string& why) {
    if (!why.empty())
      lines.push_back(where + ": key '" + key + "': " + why);
  };
  const auto keep_all = [&](const std::string& section, const std::vector<Finding>& found) {
    for (const Finding& f : found)
      keep(section.empty() ? f.key : section + "." + f.key, f.why);
  };
  if (w.name.empty())
    keep("name", "expected a non-empty string");
  keep_all("", range_problems(w));
  keep_all("", size_limit_problems(w.model));
  // As in the reader, the checks that combine keys run only over sizes that passed their own.
  if (lines.empty()) {
    const ModelSpec& m = w.model;
    keep("model.heads", heads_problem(m));
    keep("model.kv_heads", kv_heads_problem(m));
    keep("model.head_dim", q_dim_problem(m));
    if (m.moe.enabled()) {
      keep("model.moe", moe_top_k_problem(m.moe));
      keep("model.moe", moe_dense_problem(m));
      keep("model.moe", routing_problem(m.moe));
    }
    keep("model.full_attention_every", window_problem(m));
    keep_all("model", mla_problems(m));
    keep_all("batch", micro_batch_problems(w));
    if (w.training.recompute != Recompute::SELECTIVE && w.training.recompute_modules != RecomputeModules{})
      keep("training.recompute_modules", recompute_modules_problem());
    keep_all("training", training_problems(w));
  }
  if (lines.empty())
    return;
  std::string all;
  for (const std::string& l : lines)
    all += (all.empty() ? "" : "\n") + l;
  throw ConfigError(all);
}

} // namespace stepsim::config
