// The workload file (docs/schema.md, "Workload file").

#include "config/fields.hpp"

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

// Largest sizes accepted (docs/schema.md, "Size limits"): far above any real model, they keep
// every product of sizes the simulator forms inside int64 and a step graph inside memory.
constexpr int64_t MAX_DEGREE = int64_t{1} << 20; // a parallel degree
constexpr int64_t MAX_TOKENS_PER_MICRO_BATCH = int64_t{1} << 32;
constexpr double MAX_SCORE_ELEMENTS = 4.6e18; // micro_batch x heads x seq_len^2 < 2^62

/// Model sizes with their limits, in the order they are read.
struct SizeLimit {
  std::string_view key;
  int64_t ModelSpec::*field;
  int64_t max;
};
constexpr int64_t MAX_LAYERS = 100'000;
constexpr int64_t MAX_HEADS = int64_t{1} << 16;
constexpr int64_t MAX_EXPERTS = int64_t{1} << 16;
constexpr int64_t MAX_FFN = int64_t{1} << 22;
constexpr int64_t MAX_HEAD_DIM = int64_t{1} << 16;
constexpr int64_t MAX_HIDDEN = int64_t{1} << 20;
constexpr int64_t MAX_SEQ_LEN = int64_t{1} << 27;
constexpr SizeLimit MODEL_SIZE_LIMITS[] = {
    {"layers", &ModelSpec::layers, MAX_LAYERS},      {"hidden", &ModelSpec::hidden, MAX_HIDDEN},
    {"heads", &ModelSpec::heads, MAX_HEADS},         {"kv_heads", &ModelSpec::kv_heads, MAX_HEADS},
    {"ffn_hidden", &ModelSpec::ffn_hidden, MAX_FFN}, {"vocab", &ModelSpec::vocab, int64_t{1} << 27},
    {"seq_len", &ModelSpec::seq_len, MAX_SEQ_LEN},   {"head_dim", &ModelSpec::head_dim_set, MAX_HEAD_DIM}};

/// `model.moe` over `moe` (defaults, or what a Hugging Face config gave). docs/moe.md.
void read_moe(const Field& field, const ModelSpec& model, MoeSpec& moe) {
  const auto m = field.map(keys_of(File::WORKLOAD, "model.moe"));
  if (auto f = m.find("experts"))
    moe.experts = limited_int64(*f, MAX_EXPERTS);
  else if (!moe.enabled())
    (void)m.require("experts");
  if (auto f = m.find("top_k")) {
    moe.top_k = positive_int64(*f);
    if (moe.top_k > moe.experts)
      f->fail("expected at most model.moe.experts = " + std::to_string(moe.experts) + ", found " +
              std::to_string(moe.top_k));
  }
  if (moe.top_k > moe.experts)
    m.fail("top_k = " + std::to_string(moe.top_k) + " exceeds experts = " + std::to_string(moe.experts));
  if (auto f = m.find("expert_ffn_hidden"))
    moe.expert_ffn_hidden = limited_int64(*f, MAX_FFN);
  if (moe.expert_ffn_hidden == 0)
    moe.expert_ffn_hidden = model.ffn_hidden;
  if (auto f = m.find("shared_experts"))
    moe.shared_experts = f->integer(0, MAX_EXPERTS, "an integer in 0..65536");
  if (auto f = m.find("capacity_factor"))
    moe.capacity_factor =
        f->number("a number >= 1, or 0 for no capacity limit", [](double v) { return v == 0.0 || v >= 1.0; });
  if (auto f = m.find("moe_layer_freq"))
    moe.layer_freq = limited_int64(*f, MAX_LAYERS);
  if (auto f = m.find("first_dense_layers"))
    moe.first_dense_layers = f->integer(0, INT64_MAX_VALUE, "a non-negative integer");
  if (moe.first_dense_layers >= model.layers)
    m.fail("first_dense_layers = " + std::to_string(moe.first_dense_layers) +
           " leaves no MoE layer among model.layers = " + std::to_string(model.layers));
  if (auto f = m.find("routing")) {
    const auto r = f->map(keys_of(File::WORKLOAD, "model.moe.routing"));
    if (auto d = r.find("distribution"))
      moe.routing.distribution = d->choice<RoutingDistribution>(
          {{"uniform", RoutingDistribution::UNIFORM}, {"zipf", RoutingDistribution::ZIPF}});
    if (auto z = r.find("zipf_exponent"))
      moe.routing.zipf_exponent = z->number("a number >= 0", [](double v) { return v >= 0.0; });
    if (auto sd = r.find("seed"))
      moe.routing.seed = static_cast<uint64_t>(sd->integer(0, INT64_MAX_VALUE, "a non-negative integer"));
    if (auto g = r.find("groups"))
      moe.routing.groups = g->integer(0, 65536, "an integer in 0..65536 (0: no group limit)");
    if (auto g = r.find("group_top_k"))
      moe.routing.group_top_k = g->integer(0, 65536, "an integer in 0..65536");
  }
  const RoutingSpec& rt = moe.routing;
  if (rt.groups > 0 || rt.group_top_k > 0) {
    if (rt.groups < 1 || moe.experts % rt.groups != 0)
      m.fail("routing.groups = " + std::to_string(rt.groups) +
             " must divide moe.experts = " + std::to_string(moe.experts) +
             " (equal expert groups; no group limit is groups = group_top_k = 0, "
             "and group_top_k is " +
             std::to_string(rt.group_top_k) + ")");
    if (rt.group_top_k < 1 || rt.group_top_k > rt.groups ||
        rt.group_top_k * (moe.experts / rt.groups) < moe.top_k)
      m.fail("routing.group_top_k = " + std::to_string(rt.group_top_k) +
             " must be in 1..groups = " + std::to_string(rt.groups) +
             " and its groups must hold top_k = " + std::to_string(moe.top_k) + " experts");
  }
}

/// model.sliding_window and model.full_attention_every (docs/schema.md), over what a Hugging Face
/// config gave.
void read_sliding_window(const MapReader& m, ModelSpec& model) {
  if (auto f = m.find("sliding_window")) {
    model.sliding_window = f->integer(0, MAX_SEQ_LEN,
                                      "an integer in 0.." + std::to_string(MAX_SEQ_LEN) +
                                          " (tokens a query attends to; 0: no window)");
    if (model.sliding_window == 0)
      model.full_attention_every = 0;
  }
  if (auto f = m.find("full_attention_every")) {
    model.full_attention_every =
        f->integer(0, MAX_LAYERS,
                   "an integer in 0.." + std::to_string(MAX_LAYERS) +
                       " (every n-th layer attends to the whole sequence; 0: every layer windowed)");
    if (model.full_attention_every > 0 && model.sliding_window == 0)
      f->fail("model.full_attention_every needs model.sliding_window > 0 (the other layers' window)");
  }
}

/// model.mla (docs/schema.md): the latent ranks and head widths of multi-head latent attention.
/// Over an MLA a Hugging Face config gave, each key is optional and overrides its one value.
void read_mla(const Field& f, MlaSpec& mla) {
  const auto m = f.map(keys_of(File::WORKLOAD, "model.mla"));
  const bool over_config = mla.enabled();
  if (!over_config)
    mla = MlaSpec{};
  const auto size = [&](std::string_view key, int64_t& out, int64_t max) {
    if (auto v = m.find(key))
      out = limited_int64(*v, max);
    else if (!over_config)
      out = limited_int64(m.require(key), max);
  };
  if (auto q = m.find("q_lora_rank")) // 0: queries through one full projection (DeepSeek-V2-Lite)
    mla.q_lora_rank = q->integer(0, MAX_HIDDEN, "an integer in 0.." + std::to_string(MAX_HIDDEN));
  size("kv_lora_rank", mla.kv_lora_rank, MAX_HIDDEN);
  size("qk_nope_head_dim", mla.qk_nope_head_dim, MAX_HEAD_DIM);
  if (auto r = m.find("qk_rope_head_dim"))
    mla.qk_rope_head_dim = r->integer(0, MAX_HEAD_DIM, "an integer in 0.." + std::to_string(MAX_HEAD_DIM));
  size("v_head_dim", mla.v_head_dim, MAX_HEAD_DIM);
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
  if (model.head_dim_set > 0)
    fail("head_dim",
         "model.head_dim cannot be combined with model.mla, whose qk_nope_head_dim, qk_rope_head_dim and "
         "v_head_dim give the head widths");
  if (model.kv_heads != model.heads)
    fail("kv_heads", "model.mla gives every head its own keys and values: expected kv_heads = heads = " +
                         std::to_string(model.heads) + ", found " + std::to_string(model.kv_heads));
  if (model.bias)
    fail("bias", "linear-layer biases are not modelled with model.mla; expected bias: false");
  if (std::max(model.mla.q_lora_rank, model.mla.kv_lora_rank) > MAX_HIDDEN)
    fail("mla", "an MLA latent rank above the " + std::to_string(MAX_HIDDEN) +
                    " accepted (the limit of model.hidden)");
  const int64_t widest = std::max(model.mla.qk_head_dim(), model.mla.v_head_dim);
  if (model.heads * widest > MAX_HIDDEN)
    fail("mla", "heads x the widest MLA head (" + std::to_string(model.heads) + " x " +
                    std::to_string(widest) + ") exceeds the " + std::to_string(MAX_HIDDEN) +
                    " accepted (the limit of model.hidden)");
}

/// Sizes a Hugging Face config gave and the workload file did not override obey the limits of
/// the workload keys (docs/schema.md, "Size limits") before any product of them is formed: a
/// config is as likely to hold a typo as a workload file.
void check_hf_sizes(const MapReader& m, const ModelSpec& model) {
  const auto check = [&](const std::string& key, int64_t value, int64_t max) {
    if (value > max)
      m.require("from_hf").fail("the Hugging Face config gives model." + key + " = " + std::to_string(value) +
                                ", more than the " + std::to_string(max) + " accepted");
  };
  for (const SizeLimit& l : MODEL_SIZE_LIMITS)
    check(std::string(l.key), model.*l.field, l.max);
  check("moe.experts", model.moe.experts, MAX_EXPERTS);
  check("moe.top_k", model.moe.top_k, MAX_EXPERTS);
  check("moe.expert_ffn_hidden", model.moe.expert_ffn_hidden, MAX_FFN);
  check("moe.shared_experts", model.moe.shared_experts, MAX_EXPERTS);
  check("moe.first_dense_layers", model.moe.first_dense_layers, MAX_LAYERS);
  check("moe.moe_layer_freq", model.moe.layer_freq, MAX_LAYERS);
  check("moe.routing.groups", model.moe.routing.groups, 65536);
  check("moe.routing.group_top_k", model.moe.routing.group_top_k, 65536);
  check("mla.q_lora_rank", model.mla.q_lora_rank, MAX_HIDDEN);
  check("mla.kv_lora_rank", model.mla.kv_lora_rank, MAX_HIDDEN);
  check("mla.qk_nope_head_dim", model.mla.qk_nope_head_dim, MAX_HEAD_DIM);
  check("mla.qk_rope_head_dim", model.mla.qk_rope_head_dim, MAX_HEAD_DIM);
  check("mla.v_head_dim", model.mla.v_head_dim, MAX_HEAD_DIM);
  check("sliding_window", model.sliding_window, MAX_SEQ_LEN);
  check("full_attention_every", model.full_attention_every, MAX_LAYERS);
  check("mtp_layers", model.mtp_layers, 16);
}

/// The attention heads against the hidden size: heads divide it (unless model.head_dim is given),
/// kv_heads divide the heads, heads x head_dim within the hidden size's limit.
void check_heads(const MapReader& m, const ModelSpec& model) {
  // With model.head_dim the heads need not divide the hidden size (Qwen3, Mistral NeMo).
  if (model.head_dim_set <= 0 && model.hidden % model.heads != 0) {
    const std::string why = "expected a divisor of model.hidden = " + std::to_string(model.hidden) +
                            ", found " + std::to_string(model.heads) +
                            " (hidden % heads = " + std::to_string(model.hidden % model.heads) +
                            "; or give model.head_dim)";
    if (auto f = m.find("heads"))
      f->fail(why);
    m.fail("heads: " + why);
  }
}

void check_kv_heads(const MapReader& m, const ModelSpec& model) {
  if (model.heads % model.kv_heads != 0) {
    const std::string why = "expected a divisor of model.heads = " + std::to_string(model.heads) +
                            ", found " + std::to_string(model.kv_heads) +
                            " (heads % kv_heads = " + std::to_string(model.heads % model.kv_heads) + ")";
    if (auto f = m.find("kv_heads"))
      f->fail(why);
    m.fail("kv_heads: " + why);
  }
  // The attention widths obey the hidden size's limit: heads x head_dim (and a whole step's
  // tokens times it) must stay far inside 64-bit element counts.
  // (Sizes a Hugging Face config gave beyond their own limits are refused at the end; the product
  // is only formed within them.)
  if (model.head_dim_set > 0 && model.heads <= MAX_HEADS && model.head_dim_set <= MAX_HEAD_DIM &&
      model.q_dim() > MAX_HIDDEN) {
    const std::string why = "heads x head_dim = " + std::to_string(model.heads) + " x " +
                            std::to_string(model.head_dim_set) + " = " + std::to_string(model.q_dim()) +
                            ", more than the " + std::to_string(MAX_HIDDEN) +
                            " accepted (the limit of model.hidden)";
    if (auto f = m.find("head_dim"))
      f->fail(why);
    m.require("from_hf").fail("the Hugging Face config gives " + why);
  }
}

/// model.from_hf: a Hugging Face config.json (relative to the workload file) gives the defaults.
void read_from_hf(const Field& f, const std::string& workload_file, ModelSpec& model) {
  std::filesystem::path p(f.string());
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
  optional_key(m, "name", [&](const Field& f) { model.name = f.string(); });
  const auto limit_of = [](std::string_view key) {
    for (const SizeLimit& l : MODEL_SIZE_LIMITS)
      if (l.key == key)
        return l.max;
    return INT64_MAX_VALUE;
  };
  const auto size = [&](std::string_view key, int64_t& out) {
    doc.attempt([&] {
      if (auto f = m.find(key))
        out = limited_int64(*f, limit_of(key));
      else if (!from_hf)
        out = limited_int64(m.require(key), limit_of(key));
    });
  };
  size("layers", model.layers);
  size("hidden", model.hidden);
  size("heads", model.heads);
  optional_key(m, "head_dim", [&](const Field& f) { model.head_dim_set = limited_int64(f, MAX_HEAD_DIM); });
  if (doc.clean())
    doc.attempt([&] { check_heads(m, model); });
  if (!from_hf)
    model.kv_heads = model.heads;
  optional_key(m, "kv_heads",
               [&](const Field& f) { model.kv_heads = limited_int64(f, limit_of("kv_heads")); });
  if (doc.clean())
    doc.attempt([&] { check_kv_heads(m, model); });
  size("ffn_hidden", model.ffn_hidden);
  size("vocab", model.vocab);
  size("seq_len", model.seq_len);
  doc.attempt([&] {
    if (auto f = from_hf ? m.find("mlp") : std::optional<Field>(m.require("mlp"))) {
      model.mlp = f->choice<MlpKind>({{"gelu", MlpKind::GELU}, {"swiglu", MlpKind::SWIGLU}});
      // GPT-style (gelu) and Llama-style (swiglu) families differ in these defaults.
      const bool gpt = model.mlp == MlpKind::GELU;
      model.norm = gpt ? NormKind::LAYERNORM : NormKind::RMSNORM;
      model.position = gpt ? PositionEmbedding::LEARNED : PositionEmbedding::ROTARY;
      model.bias = gpt;
      model.tied_embeddings = gpt;
    }
  });
  optional_key(m, "norm", [&](const Field& f) {
    model.norm = f.choice<NormKind>({{"layernorm", NormKind::LAYERNORM}, {"rmsnorm", NormKind::RMSNORM}});
  });
  optional_key(m, "position_embedding", [&](const Field& f) {
    model.position = f.choice<PositionEmbedding>(
        {{"learned", PositionEmbedding::LEARNED}, {"rotary", PositionEmbedding::ROTARY}});
  });
  optional_key(m, "bias", [&](const Field& f) { model.bias = f.boolean(); });
  optional_key(m, "tied_embeddings", [&](const Field& f) { model.tied_embeddings = f.boolean(); });
  optional_key(m, "dropout", [&](const Field& f) { model.dropout = f.boolean(); });
  if (doc.clean()) // over the layers and sizes read above
    optional_key(m, "moe", [&](const Field& f) { read_moe(f, model, model.moe); });
  optional_key(m, "mla", [&](const Field& f) { read_mla(f, model.mla); });
  doc.attempt([&] { read_sliding_window(m, model); });
  optional_key(m, "mtp_layers", [&](const Field& f) {
    model.mtp_layers = f.integer(0, 16, "an integer in 0..16 (multi-token prediction depth)");
  });
  if (from_hf && doc.clean())
    doc.attempt([&] { check_hf_sizes(m, model); });
  if (doc.clean())
    doc.attempt([&] { check_mla(m, model); });
  return model;
}

ParallelSpec read_parallel(const MapReader& m) {
  ParallelSpec p;
  required_key(m, "tp", [&](const Field& f) { p.tp = limited_int(f, MAX_DEGREE); });
  required_key(m, "pp", [&](const Field& f) { p.pp = limited_int(f, MAX_DEGREE); });
  optional_key(m, "dp", [&](const Field& f) { p.dp = limited_int(f, MAX_DEGREE); }); // omitted: derived
  required_key(m, "schedule", [&](const Field& f) {
    p.schedule = f.choice<Schedule>({{"gpipe", Schedule::GPIPE},
                                     {"1f1b", Schedule::ONE_F_ONE_B},
                                     {"interleaved", Schedule::INTERLEAVED},
                                     {"zb-h1", Schedule::ZB_H1},
                                     {"zb-h2", Schedule::ZB_H2}});
  });
  optional_key(m, "vp", [&](const Field& f) { p.vp = limited_int(f, MAX_DEGREE); });
  optional_key(m, "sp", [&](const Field& f) { p.sp = f.boolean(); });
  optional_key(m, "pp_scatter_gather", [&](const Field& f) { p.pp_scatter_gather = f.boolean(); });
  optional_key(m, "tp_grad_overlap", [&](const Field& f) { p.tp_grad_overlap = f.boolean(); });
  optional_key(m, "zero_stage", [&](const Field& f) {
    p.zero_stage = static_cast<int>(f.integer(0, 3, "an integer in 0..3"));
  });
  optional_key(m, "cp", [&](const Field& f) { p.cp = limited_int(f, MAX_DEGREE); });
  optional_key(m, "ep", [&](const Field& f) { p.ep = limited_int(f, MAX_DEGREE); });
  optional_key(m, "etp", [&](const Field& f) { p.etp = limited_int(f, MAX_DEGREE); });
  optional_key(m, "ep_overlap", [&](const Field& f) { p.ep_overlap = f.boolean(); });
  optional_key(m, "chunk_layers", [&](const Field& f) {
    const YAML::Node& list = f.value();
    if (!list.IsSequence() || list.size() == 0)
      f.fail("expected a non-empty list of layer counts, one per model chunk (pp*vp of them)");
    for (const YAML::Node& item : list) {
      int64_t n = -1;
      if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, n) || n < 0 || n > 100000)
        f.fail("expected layer counts in 0..100000, found '" +
               (item.IsScalar() ? item.Scalar() : std::string("a non-scalar entry")) + "'");
      p.chunk_layers.push_back(n);
    }
  });
  optional_key(m, "ep_dispatch", [&](const Field& f) {
    p.ep_dispatch = f.choice<EpDispatch>(
        {{"all_to_all", EpDispatch::ALL_TO_ALL}, {"deduplicated", EpDispatch::DEDUPLICATED}});
  });
  return p;
}

/// training.recompute_modules (with recompute: selective).
RecomputeModules read_recompute_modules(const Field& f) {
  const YAML::Node& list = f.value();
  if (!list.IsSequence() || list.size() == 0)
    f.fail("expected a non-empty list of core_attn, layernorm, mlp, moe_act, mla_up_proj");
  RecomputeModules modules{.core_attn = false};
  for (const YAML::Node& item : list) {
    const std::string name = item.IsScalar() ? item.Scalar() : std::string();
    bool RecomputeModules::*module = nullptr;
    if (name == "core_attn")
      module = &RecomputeModules::core_attn;
    else if (name == "layernorm")
      module = &RecomputeModules::layernorm;
    else if (name == "mlp")
      module = &RecomputeModules::mlp;
    else if (name == "moe_act")
      module = &RecomputeModules::moe_act;
    else if (name == "mla_up_proj")
      module = &RecomputeModules::mla_up_proj;
    else
      f.fail("expected modules among core_attn, layernorm, mlp, moe_act, mla_up_proj, found '" +
             (item.IsScalar() ? name : std::string("a non-scalar entry")) +
             "' (Megatron's moe and shared_experts are not modelled)");
    if (modules.*module)
      f.fail("module '" + name + "' listed twice");
    modules.*module = true;
  }
  return modules;
}

void read_training(const MapReader& m, TrainingSpec& t) {
  optional_key(m, "dp_bucket", [&](const Field& f) { t.dp_bucket = positive_bytes(f); });
  optional_key(m, "optimizer_bytes_per_param", [&](const Field& f) {
    t.optimizer_bytes_per_param = f.number("a number >= 0", [](double v) { return v >= 0.0; });
    at_most(f, t.optimizer_bytes_per_param, 1024, f.scalar("a number"), "1024");
  });
  const bool recompute = m.document().attempt([&] {
    if (auto f = m.find("recompute"))
      t.recompute = f->choice<Recompute>(
          {{"none", Recompute::NONE}, {"selective", Recompute::SELECTIVE}, {"full", Recompute::FULL}});
  });
  if (recompute) // the modules need the recompute mode
    optional_key(m, "recompute_modules", [&](const Field& f) {
      if (t.recompute != Recompute::SELECTIVE)
        f.fail("recompute_modules needs training.recompute: selective");
      t.recompute_modules = read_recompute_modules(f);
    });
  optional_key(m, "flash_attention", [&](const Field& f) { t.flash_attention = f.boolean(); });
  optional_key(m, "zero3_prefetch", [&](const Field& f) {
    t.zero3_prefetch = static_cast<int>(f.integer(0, 64, "an integer in 0..64"));
  });
  optional_key(m, "zero3_fetch", [&](const Field& f) {
    t.zero3_fetch =
        f.choice<Zero3Fetch>({{"prefetch", Zero3Fetch::PREFETCH}, {"blocking", Zero3Fetch::BLOCKING}});
  });
  optional_key(m, "overlap_param_gather", [&](const Field& f) { t.overlap_param_gather = f.boolean(); });
  optional_key(m, "grad_reduce_in_fp32", [&](const Field& f) { t.grad_reduce_in_fp32 = f.boolean(); });
  optional_key(m, "cross_entropy", [&](const Field& f) {
    t.cross_entropy = f.choice<CrossEntropy>({{"fp32", CrossEntropy::FP32}, {"fused", CrossEntropy::FUSED}});
  });
  optional_key(m, "fp8_params", [&](const Field& f) { t.fp8_params = f.boolean(); });
  optional_key(m, "offload_layers", [&](const Field& f) { // bounded by the layout (check_layout)
    t.offload_layers = f.integer(0, 1 << 20, "an integer >= 0");
  });
  optional_key(m, "recompute_layers", [&](const Field& f) { // with recompute: full (check_layout)
    t.recompute_layers = f.integer(0, 1 << 20, "an integer >= 0 (0: every layer)");
  });
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
  const double mb = static_cast<double>(w.batch.micro_batch), s = static_cast<double>(w.model.seq_len);
  if (mb * s > static_cast<double>(MAX_TOKENS_PER_MICRO_BATCH))
    batch.require("micro_batch")
        .fail("micro_batch x model.seq_len = " + std::to_string(w.batch.micro_batch) + " x " +
              std::to_string(w.model.seq_len) + " tokens per micro-batch, more than the 2^32 accepted");
  if (mb * static_cast<double>(w.model.heads) * s * s > MAX_SCORE_ELEMENTS)
    batch.require("micro_batch")
        .fail("micro_batch x model.heads x model.seq_len^2 = " + std::to_string(w.batch.micro_batch) + " x " +
              std::to_string(w.model.heads) + " x " + std::to_string(w.model.seq_len) +
              "^2 attention scores, more than the 2^62 accepted");
}

/// The training keys that depend on the precision and the model.
void check_training(const MapReader& training, const WorkloadSpec& w) {
  if (auto f = training.find("fp8_params"); f && w.training.fp8_params && w.precision != Precision::FP8)
    f->fail("fp8 primary weights need precision: fp8");
  if (auto f = training.find("recompute_modules")) {
    if (w.training.recompute_modules.mlp && w.model.moe.enabled())
      f->fail("module 'mlp' (the dense MLP) is not modelled for a mixture-of-experts model; its experts take "
              "moe_act");
    if (w.training.recompute_modules.moe_act && !w.model.moe.enabled())
      f->fail("module 'moe_act' needs a mixture-of-experts model (model.moe.experts)");
    if (w.training.recompute_modules.mla_up_proj && !w.model.mla.enabled())
      f->fail("module 'mla_up_proj' needs multi-head latent attention (model.mla)");
  }
}

void read_collectives(const MapReader& coll, CollectivesSpec& c) {
  const auto algorithm = [](const Field& a) {
    return a.choice<CollectiveAlgorithm>({{"auto", CollectiveAlgorithm::AUTO},
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
  required_key(top, "name", [&](const Field& f) { w.name = f.string(); });
  if (auto model = section(top, "model", File::WORKLOAD))
    w.model = read_model(*model, w.name, doc.file());
  if (auto batch = section(top, "batch", File::WORKLOAD)) {
    required_key(*batch, "global_batch",
                 [&](const Field& f) { w.batch.global_batch = limited_int64(f, INT_MAX_VALUE); });
    required_key(*batch, "micro_batch",
                 [&](const Field& f) { w.batch.micro_batch = limited_int64(f, int64_t{1} << 20); });
    if (doc.clean())
      doc.attempt([&] { check_micro_batch(*batch, w); });
  }
  const auto parallel = section(top, "parallel", File::WORKLOAD);
  if (parallel)
    w.parallel = read_parallel(*parallel);
  required_key(top, "precision", [&](const Field& f) {
    w.precision =
        f.choice<Precision>({{"bf16", Precision::BF16}, {"fp16", Precision::FP16}, {"fp8", Precision::FP8}});
  });
  const auto training = section(top, "training", File::WORKLOAD, false);
  if (training) {
    read_training(*training, w.training);
    optional_key(*training, "stack", [&](const Field& f) { read_stack(f, w.stack); });
    if (doc.clean())
      doc.attempt([&] { check_training(*training, w); });
  }
  note_written(parallel, training, w.stack);
  if (auto coll = section(top, "collectives", File::WORKLOAD, false))
    read_collectives(*coll, w.collectives);
  return w;
}

} // namespace stepsim::config::detail
