// The workload file (docs/schema.md, "Workload file").

#include "config/fields.hpp"

#include "config/workload_checks.hpp"
#include "config/workload_names.hpp"

#include "config/hf_config.hpp"
#include "config/stacks.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace stepsim::config::detail {

namespace {

/// `model.moe` over `moe` (defaults, or what a Hugging Face config gave). docs/moe.md.
void read_moe(const Field& field, const ModelSpec& model, MoeSpec& moe) {
  const auto m = field.map(keys_of(File::WORKLOAD, "model.moe"));
  if (auto f = m.find("experts"))
    moe.experts = read_integer(*f);
  else if (!moe.enabled())
    (void)m.require("experts");
  if (auto f = m.find("top_k")) {
    moe.top_k = read_integer(*f);
    if (moe.top_k > moe.experts)
      f->fail("expected at most model.moe.experts = " + std::to_string(moe.experts) + ", found " +
              std::to_string(moe.top_k));
  }
  if (const std::string why = moe_top_k_problem(moe); !why.empty())
    m.fail(why);
  if (auto f = m.find("expert_ffn_hidden"))
    moe.expert_ffn_hidden = read_integer(*f);
  if (moe.expert_ffn_hidden == 0)
    moe.expert_ffn_hidden = model.ffn_hidden;
  if (auto f = m.find("shared_experts"))
    moe.shared_experts = read_integer(*f);
  if (auto f = m.find("capacity_factor"))
    moe.capacity_factor = read_number(*f);
  if (auto f = m.find("moe_layer_freq"))
    moe.layer_freq = read_integer(*f);
  if (auto f = m.find("first_dense_layers"))
    moe.first_dense_layers = read_integer(*f);
  if (const std::string why = moe_dense_problem(model); !why.empty())
    m.fail(why);
  if (auto f = m.find("routing")) {
    const auto r = f->map(keys_of(File::WORKLOAD, "model.moe.routing"));
    if (auto d = r.find("distribution"))
      moe.routing.distribution = read_choice<RoutingDistribution>(
          *d, {{"uniform", RoutingDistribution::UNIFORM}, {"zipf", RoutingDistribution::ZIPF}});
    if (auto z = r.find("zipf_exponent"))
      moe.routing.zipf_exponent = read_number(*z);
    if (auto sd = r.find("seed"))
      moe.routing.seed = static_cast<uint64_t>(read_integer(*sd));
    if (auto g = r.find("groups"))
      moe.routing.groups = read_integer(*g);
    if (auto g = r.find("group_top_k"))
      moe.routing.group_top_k = read_integer(*g);
  }
  if (const std::string why = routing_problem(moe); !why.empty())
    m.fail(why);
}

/// model.sliding_window and model.full_attention_every (docs/schema.md), over what a Hugging Face
/// config gave.
void read_sliding_window(const MapReader& m, ModelSpec& model) {
  if (auto f = m.find("sliding_window")) {
    model.sliding_window = read_integer(*f);
    if (model.sliding_window == 0)
      model.full_attention_every = 0;
  }
  if (auto f = m.find("full_attention_every")) {
    model.full_attention_every = read_integer(*f);
    if (const std::string why = window_problem(model); !why.empty())
      f->fail(why);
  }
}

/// model.mla (docs/schema.md): the latent ranks and head widths of multi-head latent attention.
/// Over an MLA a Hugging Face config gave, each key is optional and overrides its one value.
void read_mla(const Field& f, MlaSpec& mla) {
  const auto m = f.map(keys_of(File::WORKLOAD, "model.mla"));
  const bool over_config = mla.enabled();
  if (!over_config)
    mla = MlaSpec{};
  const auto size = [&](std::string_view key, int64_t& out) {
    if (auto v = m.find(key))
      out = read_integer(*v);
    else if (!over_config)
      out = read_integer(m.require(key));
  };
  if (auto q = m.find("q_lora_rank")) // 0: queries through one full projection (DeepSeek-V2-Lite)
    mla.q_lora_rank = read_integer(*q);
  size("kv_lora_rank", mla.kv_lora_rank);
  size("qk_nope_head_dim", mla.qk_nope_head_dim);
  if (auto r = m.find("qk_rope_head_dim"))
    mla.qk_rope_head_dim = read_integer(*r);
  size("v_head_dim", mla.v_head_dim);
}

/// Multi-head latent attention replaces the head layout: no model.head_dim, every head its own
/// keys and values (kv_heads = heads), no linear biases, and heads x widths within the hidden limit.
void check_mla(const MapReader& m, const ModelSpec& model) {
  if (!model.mla.enabled())
    return;
  const auto fail = [&](const std::string& key, const std::string& why) {
    if (auto f = m.find(key))
      f->fail(why);
    if (auto f = m.find("mla"))
      f->fail(why);
    m.require("from_hf").fail("the Hugging Face config gives " + why);
  };
  for (const Finding& found : mla_problems(model))
    fail(found.key, found.why);
}

/// Sizes a Hugging Face config gave and the workload file did not override obey the limits of
/// the workload keys (docs/schema.md, "Size limits") before any product of them is formed: a
/// config is as likely to hold a typo as a workload file.
void check_hf_sizes(const MapReader& m, const ModelSpec& model) {
  for (const Finding& found : size_limit_problems(model))
    m.require("from_hf").fail("the Hugging Face config gives " + found.why);
}

/// The attention heads against the hidden size: heads divide it (unless model.head_dim is given),
/// kv_heads divide the heads, heads x head_dim within the hidden size's limit.
void check_heads(const MapReader& m, const ModelSpec& model) {
  if (const std::string why = heads_problem(model); !why.empty()) {
    if (auto f = m.find("heads"))
      f->fail(why);
    m.fail("heads: " + why);
  }
}

void check_kv_heads(const MapReader& m, const ModelSpec& model) {
  if (const std::string why = kv_heads_problem(model); !why.empty()) {
    if (auto f = m.find("kv_heads"))
      f->fail(why);
    m.fail("kv_heads: " + why);
  }
  // (Sizes a Hugging Face config gave beyond their own limits are refused at the end; the product
  // is only formed within them.)
  if (const std::string why = q_dim_problem(model); !why.empty()) {
    if (auto f = m.find("head_dim"))
      f->fail(why);
    m.require("from_hf").fail("the Hugging Face config gives " + why);
  }
}

/// model.from_hf: a Hugging Face config.json (relative to the workload file) gives the defaults.
void read_from_hf(const Field& f, const std::string& workload_file, ModelSpec& model) {
  std::filesystem::path p(read_string(f));
  if (p.is_relative() && f.where().rfind("--set ", 0) != 0)
    p = std::filesystem::path(workload_file).parent_path() / p;
  if (const std::string why = input_file_problem(p); !why.empty())
    f.fail("Hugging Face config '" + p.lexically_normal().string() + "': " + why);
  try {
    model = read_hf_config(p.lexically_normal());
  } catch (const ConfigError& e) {
    f.fail(std::string("cannot use the Hugging Face config: ") + e.what());
  }
}

/// The `model` mapping. Checks that combine several keys run only while the file is clean.
ModelSpec read_model(const MapReader& m, const std::string& workload_name, const std::string& workload_file) {
  const Document& doc = m.document();
  ModelSpec model;
  // With model.from_hf, keys given here override the config, and the otherwise required keys
  // become optional.
  const bool from_hf = m.has("from_hf");
  optional_key(m, "from_hf", [&](const Field& f) { read_from_hf(f, workload_file, model); });
  model.name = workload_name;
  optional_key(m, "name", [&](const Field& f) { model.name = read_string(f); });
  const auto size = [&](std::string_view key, int64_t& out) {
    doc.attempt([&] {
      if (auto f = m.find(key))
        out = read_integer(*f);
      else if (!from_hf)
        out = read_integer(m.require(key));
    });
  };
  size("layers", model.layers);
  size("hidden", model.hidden);
  size("heads", model.heads);
  optional_key(m, "head_dim", [&](const Field& f) { model.head_dim_set = read_integer(f); });
  if (doc.clean())
    doc.attempt([&] { check_heads(m, model); });
  if (!from_hf)
    model.kv_heads = model.heads;
  optional_key(m, "kv_heads", [&](const Field& f) { model.kv_heads = read_integer(f); });
  if (doc.clean())
    doc.attempt([&] { check_kv_heads(m, model); });
  size("ffn_hidden", model.ffn_hidden);
  size("vocab", model.vocab);
  size("seq_len", model.seq_len);
  doc.attempt([&] {
    if (auto f = from_hf ? m.find("mlp") : std::optional<Field>(m.require("mlp"))) {
      // GPT-style (gelu) and Llama-style (swiglu) families differ in their defaults.
      set_mlp(model, read_choice<MlpKind>(*f, {{"gelu", MlpKind::GELU}, {"swiglu", MlpKind::SWIGLU}}));
    }
  });
  optional_key(m, "norm", [&](const Field& f) {
    model.norm =
        read_choice<NormKind>(f, {{"layernorm", NormKind::LAYERNORM}, {"rmsnorm", NormKind::RMSNORM}});
  });
  optional_key(m, "position_embedding", [&](const Field& f) {
    model.position = read_choice<PositionEmbedding>(
        f, {{"learned", PositionEmbedding::LEARNED}, {"rotary", PositionEmbedding::ROTARY}});
  });
  optional_key(m, "bias", [&](const Field& f) { model.bias = read_bool(f); });
  optional_key(m, "tied_embeddings", [&](const Field& f) { model.tied_embeddings = read_bool(f); });
  optional_key(m, "dropout", [&](const Field& f) { model.dropout = read_bool(f); });
  if (doc.clean()) // over the layers and sizes read above
    optional_key(m, "moe", [&](const Field& f) { read_moe(f, model, model.moe); });
  optional_key(m, "mla", [&](const Field& f) { read_mla(f, model.mla); });
  doc.attempt([&] { read_sliding_window(m, model); });
  optional_key(m, "mtp_layers", [&](const Field& f) { model.mtp_layers = read_integer(f); });
  if (from_hf && doc.clean())
    doc.attempt([&] { check_hf_sizes(m, model); });
  if (doc.clean())
    doc.attempt([&] { check_mla(m, model); });
  return model;
}

ParallelSpec read_parallel(const MapReader& m) {
  ParallelSpec p;
  required_key(m, "tp", [&](const Field& f) { p.tp = read_int(f); });
  required_key(m, "pp", [&](const Field& f) { p.pp = read_int(f); });
  optional_key(m, "dp", [&](const Field& f) { p.dp = read_int(f); }); // omitted: derived
  required_key(m, "schedule", [&](const Field& f) {
    p.schedule = read_choice<Schedule>(f, {{"gpipe", Schedule::GPIPE},
                                           {"1f1b", Schedule::ONE_F_ONE_B},
                                           {"interleaved", Schedule::INTERLEAVED},
                                           {"zb-h1", Schedule::ZB_H1},
                                           {"zb-h2", Schedule::ZB_H2},
                                           {"dualpipe", Schedule::DUALPIPE},
                                           {"dualpipev", Schedule::DUALPIPE_V}});
  });
  optional_key(m, "vp", [&](const Field& f) { p.vp = read_int(f); });
  optional_key(m, "sp", [&](const Field& f) { p.sp = read_bool(f); });
  optional_key(m, "pp_scatter_gather", [&](const Field& f) { p.pp_scatter_gather = read_bool(f); });
  optional_key(m, "pp_p2p_blocking", [&](const Field& f) { p.pp_p2p_blocking = read_bool(f); });
  optional_key(m, "tp_grad_overlap", [&](const Field& f) { p.tp_grad_overlap = read_bool(f); });
  optional_key(m, "tp_comm_overlap", [&](const Field& f) { p.tp_comm_overlap = read_bool(f); });
  optional_key(m, "zero_stage", [&](const Field& f) { p.zero_stage = read_int(f); });
  optional_key(m, "dp_shard", [&](const Field& f) { p.dp_shard = read_int(f); });
  optional_key(m, "cp", [&](const Field& f) { p.cp = read_int(f); });
  optional_key(m, "ep", [&](const Field& f) { p.ep = read_int(f); });
  optional_key(m, "etp", [&](const Field& f) { p.etp = read_int(f); });
  optional_key(m, "ep_overlap", [&](const Field& f) { p.ep_overlap = read_bool(f); });
  optional_key(m, "chunk_layers", [&](const Field& f) {
    const YAML::Node& list = f.value();
    if (!list.IsSequence() || list.size() == 0)
      f.fail("expected a non-empty list of layer counts, one per model chunk (pp*vp of them)");
    for (const YAML::Node& item : list) {
      int64_t n = -1;
      if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, n) || n < 0 ||
          n > limit_of("model.layers"))
        f.fail("expected layer counts in 0.." + std::to_string(limit_of("model.layers")) + ", found '" +
               (item.IsScalar() ? item.Scalar() : std::string("a non-scalar entry")) + "'");
      p.chunk_layers.push_back(n);
    }
  });
  optional_key(m, "ep_dispatch", [&](const Field& f) {
    p.ep_dispatch = read_choice<EpDispatch>(
        f, {{"all_to_all", EpDispatch::ALL_TO_ALL}, {"deduplicated", EpDispatch::DEDUPLICATED}});
  });
  return p;
}

/// training.recompute_modules (with recompute: selective).
RecomputeModules read_recompute_modules(const Field& f) {
  const YAML::Node& list = f.value();
  if (!list.IsSequence() || list.size() == 0)
    f.fail("expected a non-empty list of core_attn, layernorm, mlp, moe_act, mla_up_proj, alternate_linears");
  std::vector<std::string> names;
  for (const YAML::Node& item : list) {
    if (!item.IsScalar())
      f.fail("expected modules among core_attn, layernorm, mlp, moe_act, mla_up_proj, alternate_linears, "
             "found 'a non-scalar "
             "entry' (Megatron's moe and shared_experts are not modelled)");
    names.push_back(item.Scalar());
  }
  RecomputeModules modules;
  if (const std::string why = recompute_modules_of(names, modules); !why.empty())
    f.fail(why);
  return modules;
}

void read_training(const MapReader& m, TrainingSpec& t) {
  optional_key(m, "dp_bucket", [&](const Field& f) { t.dp_bucket = read_bytes(f); });
  optional_key(m, "optimizer_bytes_per_param",
               [&](const Field& f) { t.optimizer_bytes_per_param = read_number(f); });
  const bool recompute = m.document().attempt([&] {
    if (auto f = m.find("recompute"))
      t.recompute = read_choice<Recompute>(
          *f, {{"none", Recompute::NONE}, {"selective", Recompute::SELECTIVE}, {"full", Recompute::FULL}});
  });
  if (recompute) // the modules need the recompute mode
    optional_key(m, "recompute_modules", [&](const Field& f) {
      if (t.recompute != Recompute::SELECTIVE)
        f.fail(recompute_modules_problem());
      t.recompute_modules = read_recompute_modules(f);
    });
  optional_key(m, "flash_attention", [&](const Field& f) { t.flash_attention = read_bool(f); });
  optional_key(m, "attention_kernel", [&](const Field& f) {
    t.attention_kernel = read_choice<AttentionKernel>(f, {{"cudnn", AttentionKernel::CUDNN},
                                                          {"flash2", AttentionKernel::FLASH2},
                                                          {"flash3", AttentionKernel::FLASH3}});
  });
  optional_key(m, "zero3_prefetch", [&](const Field& f) { t.zero3_prefetch = read_int(f); });
  optional_key(m, "zero3_fetch", [&](const Field& f) {
    t.zero3_fetch =
        read_choice<Zero3Fetch>(f, {{"prefetch", Zero3Fetch::PREFETCH}, {"blocking", Zero3Fetch::BLOCKING}});
  });
  optional_key(m, "reshard_after_forward", [&](const Field& f) { t.reshard_after_forward = read_bool(f); });
  optional_key(m, "overlap_param_gather", [&](const Field& f) { t.overlap_param_gather = read_bool(f); });
  optional_key(m, "grad_reduce_in_fp32", [&](const Field& f) { t.grad_reduce_in_fp32 = read_bool(f); });
  optional_key(m, "grad_accumulation", [&](const Field& f) {
    t.grad_accumulation = read_choice<GradAccumulation>(
        f, {{"fused", GradAccumulation::FUSED}, {"fp32_pass", GradAccumulation::FP32_PASS}});
  });
  optional_key(m, "cross_entropy", [&](const Field& f) {
    t.cross_entropy =
        read_choice<CrossEntropy>(f, {{"fp32", CrossEntropy::FP32}, {"fused", CrossEntropy::FUSED}});
  });
  optional_key(m, "pointwise", [&](const Field& f) {
    t.pointwise = read_choice<Pointwise>(f, {{"fused", Pointwise::FUSED}, {"eager", Pointwise::EAGER}});
  });
  optional_key(m, "fp8_params", [&](const Field& f) { t.fp8_params = read_bool(f); });
  optional_key(m, "fp32_shards", [&](const Field& f) { t.fp32_shards = read_bool(f); });
  optional_key(m, "expandable_segments", [&](const Field& f) { t.expandable_segments = read_bool(f); });
  optional_key(m, "fp8_weight_cache", [&](const Field& f) { t.fp8_weight_cache = read_bool(f); });
  optional_key(m, "fp8_all_gather", [&](const Field& f) { t.fp8_all_gather = read_bool(f); });
  optional_key(m, "fused_projections", [&](const Field& f) { t.fused_projections = read_bool(f); });
  optional_key(m, "fp8_scaling", [&](const Field& f) {
    t.fp8_scaling = read_choice<Fp8Scaling>(
        f, {{"tensorwise", Fp8Scaling::TENSORWISE}, {"rowwise", Fp8Scaling::ROWWISE}});
  });
  // Bounded by the layout, and with recompute: full (check_layout).
  optional_key(m, "offload_layers", [&](const Field& f) { t.offload_layers = read_integer(f); });
  optional_key(m, "recompute_layers", [&](const Field& f) { t.recompute_layers = read_integer(f); });
}

/// training.variability (docs/variability.md): the per-kernel noise's CV and seed.
void read_variability(const Field& f, VariabilitySpec& v) {
  const auto m = f.map(keys_of(File::WORKLOAD, "training.variability"));
  optional_key(m, "kernel_cv", [&](const Field& k) { v.kernel_cv = read_number(k); });
  optional_key(m, "seed", [&](const Field& k) { v.seed = read_integer(k); });
  optional_key(m, "replicas", [&](const Field& k) { v.replicas = read_int(k); });
}

/// training.stack (docs/stacks.md): a preset and one of its versions (the newest when not given).
void read_stack(const Field& f, StackSpec& stack) {
  const auto m = f.map(keys_of(File::WORKLOAD, "training.stack"));
  const Field name = m.require("name");
  stack.name = name.string();
  const StackPreset* preset = find_stack(stack.name);
  if (preset == nullptr)
    name.fail("unknown training stack '" + stack.name +
              "'; the presets (and their versions): " + known_stacks());
  stack.version = std::string(preset->versions.back().version);
  if (auto v = m.find("version")) {
    stack.version = v->scalar("a version string, e.g. \"" + stack.version + "\"");
    if (find_version(*preset, stack.version) == nullptr)
      v->fail("training stack '" + stack.name + "' has no version '" + stack.version +
              "'; the presets (and their versions): " + known_stacks());
  }
}

/// Which of the stack's mechanism keys the file (or --set) writes itself: those win over the preset.
void note_written(const std::optional<MapReader>& parallel, const std::optional<MapReader>& training,
                  StackSpec& stack) {
  for (std::size_t i = 0; i < STACK_KEYS; ++i) {
    const std::string_view path = stack_key_path(static_cast<StackKey>(i));
    const auto dot = path.find('.');
    const std::optional<MapReader>& in = path.substr(0, dot) == "parallel" ? parallel : training;
    stack.written[i] = in && in->has(path.substr(dot + 1));
  }
}

/// micro_batch x seq_len tokens and micro_batch x heads x seq_len^2 scores within their limits.
void check_micro_batch(const MapReader& batch, const WorkloadSpec& w) {
  for (const Finding& found : micro_batch_problems(w))
    batch.require(found.key).fail(found.why);
}

/// The training keys that depend on the precision and the model.
void check_training(const MapReader& training, const WorkloadSpec& w) {
  for (const Finding& found : training_problems(w))
    if (auto f = training.find(found.key))
      f->fail(found.why);
}

void read_collectives(const MapReader& coll, CollectivesSpec& c) {
  const auto algorithm = [](const Field& a) {
    return read_choice<CollectiveAlgorithm>(a, {{"auto", CollectiveAlgorithm::AUTO},
                                                {"ring", CollectiveAlgorithm::RING},
                                                {"tree", CollectiveAlgorithm::TREE},
                                                {"hierarchical", CollectiveAlgorithm::HIERARCHICAL},
                                                {"nvls", CollectiveAlgorithm::NVLS},
                                                {"pairwise", CollectiveAlgorithm::PAIRWISE}});
  };
  optional_key(coll, "tp", [&](const Field& f) { c.tp = algorithm(f); });
  optional_key(coll, "pp", [&](const Field& f) { c.pp = algorithm(f); });
  optional_key(coll, "dp", [&](const Field& f) { c.dp = algorithm(f); });
  optional_key(coll, "ep", [&](const Field& f) { c.ep = algorithm(f); });
  optional_key(coll, "cp", [&](const Field& f) { c.cp = algorithm(f); });
}

} // namespace

WorkloadSpec read_workload(const Document& doc) {
  const auto top = MapReader::root(doc, keys_of(File::WORKLOAD, ""));
  WorkloadSpec w;
  w.source = doc.file();
  required_key(top, "name", [&](const Field& f) { w.name = read_string(f); });
  if (auto model = section(top, "model", File::WORKLOAD))
    w.model = read_model(*model, w.name, doc.file());
  if (auto batch = section(top, "batch", File::WORKLOAD)) {
    required_key(*batch, "global_batch", [&](const Field& f) { w.batch.global_batch = read_integer(f); });
    required_key(*batch, "micro_batch", [&](const Field& f) { w.batch.micro_batch = read_integer(f); });
    if (doc.clean())
      doc.attempt([&] { check_micro_batch(*batch, w); });
  }
  const auto parallel = section(top, "parallel", File::WORKLOAD);
  if (parallel)
    w.parallel = read_parallel(*parallel);
  required_key(top, "precision", [&](const Field& f) {
    w.precision = read_choice<Precision>(
        f, {{"bf16", Precision::BF16}, {"fp16", Precision::FP16}, {"fp8", Precision::FP8}});
  });
  const auto training = section(top, "training", File::WORKLOAD, false);
  if (training) {
    read_training(*training, w.training);
    optional_key(*training, "stack", [&](const Field& f) { read_stack(f, w.stack); });
    optional_key(*training, "variability",
                 [&](const Field& f) { read_variability(f, w.training.variability); });
    if (doc.clean())
      doc.attempt([&] { check_training(*training, w); });
  }
  note_written(parallel, training, w.stack);
  if (auto coll = section(top, "collectives", File::WORKLOAD, false))
    read_collectives(*coll, w.collectives);
  return w;
}

} // namespace stepsim::config::detail
