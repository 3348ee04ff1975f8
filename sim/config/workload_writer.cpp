// config::workload_yaml: a WorkloadSpec as a workload file (docs/schema.md, "Workload file").
// The keys and their nesting come from schema.cpp's declaration, the enum spellings from
// workload_names.hpp; a key is written when the file needs it (a required key) or when its value
// differs from what the loader would take without it.

#include "config/config.hpp"
#include "config/schema.hpp"
#include "config/stacks.hpp"
#include "config/workload_names.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace stepsim::config {

namespace {

using detail::name_of;

/// The shortest text that reads back as `v`.
std::string number(double v) {
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, v);
  if (ec != std::errc())
    throw std::logic_error("workload_yaml: a number that does not print");
  return std::string(text, end);
}

std::string byte_size(Bytes b) {
  constexpr std::pair<const char*, double> UNITS[] = {
      {"GiB", 1024.0 * 1024 * 1024}, {"MiB", 1024.0 * 1024}, {"KiB", 1024.0}};
  for (const auto& [unit, size] : UNITS)
    if (b.value() >= size && std::fmod(b.value(), size) == 0)
      return number(b.value() / size) + unit;
  return number(b.value()) + "B";
}

/// A string as a YAML scalar: plain when it is a simple word, else double-quoted.
std::string text(const std::string& s) {
  const auto simple = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.' || c == '/' ||
           c == '+' || c == '(' || c == ')';
  };
  bool plain = !s.empty() && std::isalnum(static_cast<unsigned char>(s.front())) != 0 && s != "null" &&
               s != "Null" && s != "NULL";
  for (const char c : s)
    plain = plain && simple(c);
  if (plain)
    return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out + "\"";
}

template <class T> std::string list(const std::vector<T>& items) {
  std::string out = "[";
  for (const T& item : items)
    out += (out.size() > 1 ? ", " : "") + std::string(item);
  return out + "]";
}

const char* boolean(bool b) {
  return b ? "true" : "false";
}

/// The values to write, by dotted key.
using Values = std::map<std::string, std::string, std::less<>>;

void model_values(const WorkloadSpec& w, Values& v) {
  const ModelSpec& m = w.model;
  ModelSpec family; // the defaults the loader takes with this model.mlp
  set_mlp(family, m.mlp);
  if (m.name != w.name)
    v["model.name"] = text(m.name);
  v["model.layers"] = std::to_string(m.layers);
  v["model.hidden"] = std::to_string(m.hidden);
  v["model.heads"] = std::to_string(m.heads);
  if (m.kv_heads != m.heads)
    v["model.kv_heads"] = std::to_string(m.kv_heads);
  if (m.head_dim_set > 0)
    v["model.head_dim"] = std::to_string(m.head_dim_set);
  if (m.mla.enabled()) {
    v["model.mla.q_lora_rank"] = std::to_string(m.mla.q_lora_rank);
    v["model.mla.kv_lora_rank"] = std::to_string(m.mla.kv_lora_rank);
    v["model.mla.qk_nope_head_dim"] = std::to_string(m.mla.qk_nope_head_dim);
    v["model.mla.qk_rope_head_dim"] = std::to_string(m.mla.qk_rope_head_dim);
    v["model.mla.v_head_dim"] = std::to_string(m.mla.v_head_dim);
  }
  v["model.ffn_hidden"] = std::to_string(m.ffn_hidden);
  v["model.vocab"] = std::to_string(m.vocab);
  v["model.seq_len"] = std::to_string(m.seq_len);
  v["model.mlp"] = name_of(detail::MLP_NAMES, m.mlp);
  if (m.norm != family.norm)
    v["model.norm"] = name_of(detail::NORM_NAMES, m.norm);
  if (m.position != family.position)
    v["model.position_embedding"] = name_of(detail::POSITION_NAMES, m.position);
  if (m.bias != family.bias)
    v["model.bias"] = boolean(m.bias);
  if (m.tied_embeddings != family.tied_embeddings)
    v["model.tied_embeddings"] = boolean(m.tied_embeddings);
  if (m.dropout != family.dropout)
    v["model.dropout"] = boolean(m.dropout);
  if (m.sliding_window != family.sliding_window)
    v["model.sliding_window"] = std::to_string(m.sliding_window);
  if (m.full_attention_every != family.full_attention_every)
    v["model.full_attention_every"] = std::to_string(m.full_attention_every);
  if (m.mtp_layers != family.mtp_layers)
    v["model.mtp_layers"] = std::to_string(m.mtp_layers);
}

void moe_values(const ModelSpec& m, Values& v) {
  if (!m.moe.enabled())
    return;
  const MoeSpec& e = m.moe;
  const MoeSpec def;
  v["model.moe.experts"] = std::to_string(e.experts);
  if (e.top_k != def.top_k)
    v["model.moe.top_k"] = std::to_string(e.top_k);
  if (e.expert_ffn_hidden != m.ffn_hidden) // the loader's default: the dense MLP's width
    v["model.moe.expert_ffn_hidden"] = std::to_string(e.expert_ffn_hidden);
  if (e.shared_experts != def.shared_experts)
    v["model.moe.shared_experts"] = std::to_string(e.shared_experts);
  if (e.capacity_factor != def.capacity_factor)
    v["model.moe.capacity_factor"] = number(e.capacity_factor);
  if (e.layer_freq != def.layer_freq)
    v["model.moe.moe_layer_freq"] = std::to_string(e.layer_freq);
  if (e.first_dense_layers != def.first_dense_layers)
    v["model.moe.first_dense_layers"] = std::to_string(e.first_dense_layers);
  const RoutingSpec& r = e.routing;
  if (r.distribution != def.routing.distribution)
    v["model.moe.routing.distribution"] = name_of(detail::ROUTING_NAMES, r.distribution);
  if (r.zipf_exponent != def.routing.zipf_exponent)
    v["model.moe.routing.zipf_exponent"] = number(r.zipf_exponent);
  if (r.seed != def.routing.seed)
    v["model.moe.routing.seed"] = std::to_string(r.seed);
  if (r.groups != def.routing.groups)
    v["model.moe.routing.groups"] = std::to_string(r.groups);
  if (r.group_top_k != def.routing.group_top_k)
    v["model.moe.routing.group_top_k"] = std::to_string(r.group_top_k);
}

void parallel_values(const ParallelSpec& p, Values& v) {
  const ParallelSpec def;
  v["parallel.tp"] = std::to_string(p.tp);
  v["parallel.pp"] = std::to_string(p.pp);
  if (p.dp != def.dp)
    v["parallel.dp"] = std::to_string(p.dp);
  v["parallel.schedule"] = name_of(detail::SCHEDULE_NAMES, p.schedule);
  if (p.vp != def.vp)
    v["parallel.vp"] = std::to_string(p.vp);
  if (p.sp != def.sp)
    v["parallel.sp"] = boolean(p.sp);
  if (p.pp_scatter_gather != def.pp_scatter_gather)
    v["parallel.pp_scatter_gather"] = boolean(p.pp_scatter_gather);
  if (p.pp_p2p_blocking != def.pp_p2p_blocking)
    v["parallel.pp_p2p_blocking"] = boolean(p.pp_p2p_blocking);
  if (p.tp_grad_overlap != def.tp_grad_overlap)
    v["parallel.tp_grad_overlap"] = boolean(p.tp_grad_overlap);
  if (p.tp_comm_overlap != def.tp_comm_overlap)
    v["parallel.tp_comm_overlap"] = boolean(p.tp_comm_overlap);
  if (p.zero_stage != def.zero_stage)
    v["parallel.zero_stage"] = std::to_string(p.zero_stage);
  if (p.dp_shard != def.dp_shard)
    v["parallel.dp_shard"] = std::to_string(p.dp_shard);
  if (p.cp != def.cp)
    v["parallel.cp"] = std::to_string(p.cp);
  if (p.ep != def.ep)
    v["parallel.ep"] = std::to_string(p.ep);
  if (p.etp != def.etp)
    v["parallel.etp"] = std::to_string(p.etp);
  if (p.ep_overlap != def.ep_overlap)
    v["parallel.ep_overlap"] = boolean(p.ep_overlap);
  if (p.ep_dispatch != def.ep_dispatch)
    v["parallel.ep_dispatch"] = name_of(detail::EP_DISPATCH_NAMES, p.ep_dispatch);
  if (!p.chunk_layers.empty()) {
    std::vector<std::string> counts;
    for (const int64_t n : p.chunk_layers)
      counts.push_back(std::to_string(n));
    v["parallel.chunk_layers"] = list(counts);
  }
}

void training_values(const TrainingSpec& t, Values& v) {
  const TrainingSpec def;
  if (t.dp_bucket != def.dp_bucket)
    v["training.dp_bucket"] = byte_size(t.dp_bucket);
  if (t.optimizer_bytes_per_param != def.optimizer_bytes_per_param)
    v["training.optimizer_bytes_per_param"] = number(t.optimizer_bytes_per_param);
  if (t.recompute != def.recompute)
    v["training.recompute"] = name_of(detail::RECOMPUTE_NAMES, t.recompute);
  if (t.recompute == Recompute::SELECTIVE && t.recompute_modules != def.recompute_modules) {
    std::vector<std::string> modules;
    for (const detail::ModuleName& m : detail::RECOMPUTE_MODULE_NAMES)
      if (t.recompute_modules.*m.flag)
        modules.emplace_back(m.name);
    v["training.recompute_modules"] = list(modules);
  }
  if (t.flash_attention != def.flash_attention)
    v["training.flash_attention"] = boolean(t.flash_attention);
  if (t.attention_kernel != def.attention_kernel)
    v["training.attention_kernel"] = name_of(detail::ATTENTION_KERNEL_NAMES, t.attention_kernel);
  if (t.zero3_prefetch != def.zero3_prefetch)
    v["training.zero3_prefetch"] = std::to_string(t.zero3_prefetch);
  if (t.zero3_fetch != def.zero3_fetch)
    v["training.zero3_fetch"] = name_of(detail::ZERO3_FETCH_NAMES, t.zero3_fetch);
  if (t.reshard_after_forward != def.reshard_after_forward)
    v["training.reshard_after_forward"] = boolean(t.reshard_after_forward);
  if (t.overlap_param_gather != def.overlap_param_gather)
    v["training.overlap_param_gather"] = boolean(t.overlap_param_gather);
  if (t.grad_reduce_in_fp32 != def.grad_reduce_in_fp32)
    v["training.grad_reduce_in_fp32"] = boolean(t.grad_reduce_in_fp32);
  if (t.grad_accumulation != def.grad_accumulation)
    v["training.grad_accumulation"] = name_of(detail::GRAD_ACCUMULATION_NAMES, t.grad_accumulation);
  if (t.cross_entropy != def.cross_entropy)
    v["training.cross_entropy"] = name_of(detail::CROSS_ENTROPY_NAMES, t.cross_entropy);
  if (t.pointwise != def.pointwise)
    v["training.pointwise"] = name_of(detail::POINTWISE_NAMES, t.pointwise);
  if (t.fp8_params != def.fp8_params)
    v["training.fp8_params"] = boolean(t.fp8_params);
  if (t.fp32_shards != def.fp32_shards)
    v["training.fp32_shards"] = boolean(t.fp32_shards);
  if (t.expandable_segments != def.expandable_segments)
    v["training.expandable_segments"] = boolean(t.expandable_segments);
  if (t.fp8_weight_cache != def.fp8_weight_cache)
    v["training.fp8_weight_cache"] = boolean(t.fp8_weight_cache);
  if (t.fp8_all_gather != def.fp8_all_gather)
    v["training.fp8_all_gather"] = boolean(t.fp8_all_gather);
  if (t.fused_projections != def.fused_projections)
    v["training.fused_projections"] = boolean(t.fused_projections);
  if (t.fp8_scaling != def.fp8_scaling)
    v["training.fp8_scaling"] = name_of(detail::FP8_SCALING_NAMES, t.fp8_scaling);
  if (t.offload_layers != def.offload_layers)
    v["training.offload_layers"] = std::to_string(t.offload_layers);
  if (t.recompute_layers != def.recompute_layers)
    v["training.recompute_layers"] = std::to_string(t.recompute_layers);
  if (t.variability.kernel_cv >= 0)
    v["training.variability.kernel_cv"] = number(t.variability.kernel_cv);
  if (t.variability.seed != def.variability.seed)
    v["training.variability.seed"] = std::to_string(t.variability.seed);
  if (t.variability.replicas != def.variability.replicas)
    v["training.variability.replicas"] = std::to_string(t.variability.replicas);
}

/// The stack (training.stack) and every mechanism key the spec marks as its own (StackSpec::
/// written): written even at the loader's default, so that a rerun keeps it over the preset.
void stack_values(const WorkloadSpec& w, Values& v) {
  if (w.stack.name.empty())
    return;
  v["training.stack.name"] = text(w.stack.name);
  v["training.stack.version"] = "\"" + w.stack.version + "\"";
  const ParallelSpec& p = w.parallel;
  const TrainingSpec& t = w.training;
  for (std::size_t i = 0; i < STACK_KEYS; ++i) {
    const auto k = static_cast<StackKey>(i);
    if (!w.stack.wrote(k))
      continue;
    const std::string path(stack_key_path(k));
    switch (k) {
    case StackKey::FLASH_ATTENTION:
      v[path] = boolean(t.flash_attention);
      break;
    case StackKey::SP:
      v[path] = boolean(p.sp);
      break;
    case StackKey::TP_GRAD_OVERLAP:
      v[path] = boolean(p.tp_grad_overlap);
      break;
    case StackKey::PP_SCATTER_GATHER:
      v[path] = boolean(p.pp_scatter_gather);
      break;
    case StackKey::ZERO_STAGE:
      v[path] = std::to_string(p.zero_stage);
      break;
    case StackKey::OVERLAP_PARAM_GATHER:
      v[path] = boolean(t.overlap_param_gather);
      break;
    case StackKey::GRAD_REDUCE_IN_FP32:
      v[path] = boolean(t.grad_reduce_in_fp32);
      break;
    case StackKey::ZERO3_FETCH:
      v[path] = name_of(detail::ZERO3_FETCH_NAMES, t.zero3_fetch);
      break;
    case StackKey::FP8_PARAMS:
      v[path] = boolean(t.fp8_params);
      break;
    case StackKey::ETP: // 0 is "not written" (etp = tp)
      if (p.etp > 0)
        v[path] = std::to_string(p.etp);
      break;
    case StackKey::POINTWISE:
      v[path] = name_of(detail::POINTWISE_NAMES, t.pointwise);
      break;
    case StackKey::TP_COMM_OVERLAP:
      v[path] = boolean(p.tp_comm_overlap);
      break;
    case StackKey::ATTENTION_KERNEL:
      v[path] = name_of(detail::ATTENTION_KERNEL_NAMES, t.attention_kernel);
      break;
    case StackKey::FP32_SHARDS:
      v[path] = boolean(t.fp32_shards);
      break;
    case StackKey::GRAD_ACCUMULATION:
      v[path] = name_of(detail::GRAD_ACCUMULATION_NAMES, t.grad_accumulation);
      break;
    case StackKey::PP_P2P_BLOCKING:
      v[path] = boolean(p.pp_p2p_blocking);
      break;
    case StackKey::EXPANDABLE_SEGMENTS:
      v[path] = boolean(t.expandable_segments);
      break;
    case StackKey::RESHARD_AFTER_FORWARD:
      v[path] = boolean(t.reshard_after_forward);
      break;
    case StackKey::FP8_WEIGHT_CACHE:
      v[path] = boolean(t.fp8_weight_cache);
      break;
    case StackKey::FUSED_PROJECTIONS:
      v[path] = boolean(t.fused_projections);
      break;
    }
  }
}

void collectives_values(const CollectivesSpec& c, Values& v) {
  const std::pair<const char*, CollectiveAlgorithm> groups[] = {{"collectives.tp", c.tp},
                                                                {"collectives.pp", c.pp},
                                                                {"collectives.dp", c.dp},
                                                                {"collectives.ep", c.ep},
                                                                {"collectives.cp", c.cp}};
  for (const auto& [key, algorithm] : groups)
    if (algorithm != CollectiveAlgorithm::AUTO)
      v[key] = name_of(detail::ALGORITHM_NAMES, algorithm);
}

/// Writes the keys of `mapping` that `values` holds (and the mappings above them), in the
/// schema's order; removes what it writes from `values`.
void write_mapping(std::string_view mapping, int depth, Values& values, std::string& out) {
  for (const std::string_view name : schema::children(schema::File::WORKLOAD, mapping)) {
    const std::string path =
        mapping.empty() ? std::string(name) : std::string(mapping) + "." + std::string(name);
    const std::string indent(static_cast<size_t>(2 * depth), ' ');
    if (const auto it = values.find(path); it != values.end()) {
      out += indent + std::string(name) + ": " + it->second + "\n";
      values.erase(it);
      continue;
    }
    const auto below = values.lower_bound(path + ".");
    if (below != values.end() && below->first.starts_with(path + ".")) {
      out += indent + std::string(name) + ":\n";
      write_mapping(path, depth + 1, values, out);
    }
  }
}

} // namespace

std::string workload_yaml(const WorkloadSpec& w, const std::string& comment) {
  Values values;
  values["name"] = text(w.name);
  model_values(w, values);
  moe_values(w.model, values);
  values["batch.global_batch"] = std::to_string(w.batch.global_batch);
  values["batch.micro_batch"] = std::to_string(w.batch.micro_batch);
  parallel_values(w.parallel, values);
  values["precision"] = name_of(detail::PRECISION_NAMES, w.precision);
  training_values(w.training, values);
  stack_values(w, values);
  collectives_values(w.collectives, values);
  std::string out;
  for (size_t from = 0; !comment.empty() && from <= comment.size();) {
    const size_t end = std::min(comment.find('\n', from), comment.size());
    out += "# " + comment.substr(from, end - from) + "\n";
    from = end + 1;
  }
  write_mapping("", 0, values, out);
  if (!values.empty())
    throw std::logic_error("workload_yaml: key '" + values.begin()->first + "' is not in the schema");
  return out;
}

} // namespace stepsim::config
