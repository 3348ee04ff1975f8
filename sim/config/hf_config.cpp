#include "config/hf_config.hpp"

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_message.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace stepsim::config {

namespace {

using nlohmann::json;

/// "line:col" (1-based) of byte offset `pos` in `text`.
std::string line_col(const std::string& text, std::size_t pos) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < std::min(pos, text.size()); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

/// Checked reads of one config.json object; every error names the file and the key.
class JsonReader {
public:
  JsonReader(std::string file, const json& root) : file_(std::move(file)), root_(root) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw ConfigError(file_ + ": key '" + key + "': " + what);
  }

  /// A positive integer; nullopt when absent (or null).
  [[nodiscard]] std::optional<int64_t> find_int(const std::string& key, int64_t lo = 1) const {
    const auto it = root_.find(key);
    if (it == root_.end() || it->is_null())
      return std::nullopt;
    if (!it->is_number_integer())
      fail(key, "expected an integer, found " + it->dump());
    const int64_t v = it->get<int64_t>();
    if (v < lo)
      fail(key, "expected an integer >= " + std::to_string(lo) + ", found " + std::to_string(v));
    return v;
  }

  /// A number >= 0; nullopt when absent (or null).
  [[nodiscard]] std::optional<double> find_number(const std::string& key) const {
    const auto it = root_.find(key);
    if (it == root_.end() || it->is_null())
      return std::nullopt;
    if (!it->is_number() || it->get<double>() < 0)
      fail(key, "expected a number >= 0, found " + it->dump());
    return it->get<double>();
  }

  [[nodiscard]] int64_t require_int(const std::string& key, const std::string& needed_for,
                                    int64_t lo = 1) const {
    if (auto v = find_int(key, lo))
      return *v;
    fail(key, "missing (needed for " + needed_for + ")");
  }

  [[nodiscard]] std::optional<bool> find_bool(const std::string& key) const {
    const auto it = root_.find(key);
    if (it == root_.end() || it->is_null())
      return std::nullopt;
    if (!it->is_boolean())
      fail(key, "expected true or false, found " + it->dump());
    return it->get<bool>();
  }

  [[nodiscard]] std::string require_string(const std::string& key) const {
    const auto it = root_.find(key);
    if (it == root_.end() || it->is_null())
      fail(key, "missing");
    if (!it->is_string())
      fail(key, "expected a string, found " + it->dump());
    return it->get<std::string>();
  }

  /// The strings of a list (absent or null: empty).
  [[nodiscard]] std::vector<std::string> string_list(const std::string& key) const {
    std::vector<std::string> out;
    const auto it = root_.find(key);
    if (it == root_.end() || it->is_null())
      return out;
    if (!it->is_array())
      fail(key, "expected a list, found " + it->dump());
    for (const json& v : *it) {
      if (!v.is_string())
        fail(key, "expected a list of strings, found " + v.dump());
      out.push_back(v.get<std::string>());
    }
    return out;
  }

  /// True when the key holds a non-empty list (absent or null: false).
  [[nodiscard]] bool non_empty_list(const std::string& key) const {
    const auto it = root_.find(key);
    if (it == root_.end() || it->is_null())
      return false;
    if (!it->is_array())
      fail(key, "expected a list, found " + it->dump());
    return !it->empty();
  }

private:
  std::string file_;
  const json& root_;
};

/// Sliding-window attention: `layer_types` (newer configs: "sliding_attention" or
/// "full_attention" per layer) when given, else Mistral's `sliding_window` on every layer, or
/// Qwen's `use_sliding_window`, whose per-layer rule (max_window_layers) is not modelled.
void read_sliding_window(const JsonReader& r, const std::string& type, ModelSpec& m) {
  const std::vector<std::string> kinds = r.string_list("layer_types");
  const bool qwen = type.rfind("qwen", 0) == 0;
  if (kinds.empty()) {
    if (qwen && r.find_bool("use_sliding_window").value_or(false))
      r.fail("use_sliding_window",
             "Qwen's sliding window above max_window_layers is not modelled; expected false");
    if (type == "mistral" || type == "mixtral")
      m.sliding_window = r.find_int("sliding_window").value_or(0);
    else if (type == "gpt_oss")
      r.fail("layer_types", "missing (needed for the layers' attention: sliding or full)");
    return;
  }
  if (static_cast<int64_t>(kinds.size()) != m.layers)
    r.fail("layer_types", "expected one entry per layer (" + std::to_string(m.layers) + "), found " +
                              std::to_string(kinds.size()));
  int64_t full_every = 0, windowed = 0;
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] != "sliding_attention" && kinds[i] != "full_attention")
      r.fail("layer_types",
             "expected \"sliding_attention\" or \"full_attention\", found \"" + kinds[i] + "\"");
    windowed += kinds[i] == "sliding_attention" ? 1 : 0;
    if (full_every == 0 && kinds[i] == "full_attention")
      full_every = static_cast<int64_t>(i) + 1;
  }
  if (windowed == 0)
    return;
  m.sliding_window = r.require_int("sliding_window", "the sliding_attention layers of layer_types");
  m.full_attention_every = windowed == m.layers ? 0 : full_every;
  for (int64_t i = 0; i < m.layers; ++i)
    if ((kinds[static_cast<size_t>(i)] == "sliding_attention") != m.windowed_layer(i))
      r.fail("layer_types",
             "only every n-th layer attending to the full sequence (and the others through the "
             "window) is modelled; layer " +
                 std::to_string(i) + " breaks that pattern (n = " + std::to_string(full_every) + ")");
}

bool is_deepseek(const std::string& type) {
  return type == "deepseek_v2" || type == "deepseek_v3";
}

/// The JSON object in `text`; a key given twice in one object, a syntax error or a non-object
/// top level fails naming `name` (and the line and column of a syntax error).
json parse_config_json(const std::string& name, const std::string& text) {
  json root;
  // A key given twice in one object would otherwise keep its last value unseen: refuse it.
  std::vector<std::set<std::string>> keys;
  const json::parser_callback_t unique_keys = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start)
      keys.emplace_back();
    else if (event == json::parse_event_t::object_end && !keys.empty())
      keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() &&
             !keys.back().insert(parsed.get<std::string>()).second)
      throw ConfigError(name + ": key '" + parsed.get<std::string>() + "' is given twice in one object");
    return true;
  };
  try {
    root = json::parse(text, unique_keys);
  } catch (const json::parse_error& e) {
    throw ConfigError(name + ":" + line_col(text, e.byte > 0 ? e.byte - 1 : 0) +
                      ": JSON syntax error: " + json_message(e));
  } catch (const json::exception& e) { // e.g. a number out of double's range
    throw ConfigError(name + ": not readable JSON: " + json_message(e));
  }
  if (!root.is_object())
    throw ConfigError(name + ":1:1: expected a JSON object (a Hugging Face config.json), found " +
                      std::string(root.type_name()));
  return root;
}

/// model_type, which must be one of supported_hf_model_types().
std::string read_model_type(const JsonReader& r) {
  std::string type = r.require_string("model_type");
  const auto& types = supported_hf_model_types();
  if (std::find(types.begin(), types.end(), type) == types.end()) {
    std::string list;
    for (const auto& t : types)
      list += (list.empty() ? "" : ", ") + t;
    r.fail("model_type", "unsupported model type '" + type + "'; supported: " + list);
  }
  return type;
}

/// The sizes and layer choices every supported family shares (no MoE, no sliding window).
void read_common(const JsonReader& r, const std::string& type, ModelSpec& m) {
  m.name = type;
  m.hidden = r.require_int("hidden_size", "model.hidden");
  m.layers = r.require_int("num_hidden_layers", "model.layers");
  m.heads = r.require_int("num_attention_heads", "model.heads");
  m.kv_heads = r.find_int("num_key_value_heads").value_or(m.heads);
  m.ffn_hidden = r.require_int("intermediate_size", "model.ffn_hidden");
  m.vocab = r.require_int("vocab_size", "model.vocab");
  m.seq_len = r.require_int("max_position_embeddings", "model.seq_len");
  // Qwen3 and Mistral NeMo give the head width apart from hidden_size / num_attention_heads.
  // (DeepSeek's multi-head latent attention has its own qk/v head dims and no head_dim.)
  if (!is_deepseek(type))
    m.head_dim_set = r.find_int("head_dim").value_or(0);
  if (m.head_dim_set <= 0 && m.hidden % m.heads != 0)
    r.fail("num_attention_heads", "expected a divisor of hidden_size = " + std::to_string(m.hidden) +
                                      ", found " + std::to_string(m.heads) + " (or a head_dim)");
  if (m.heads % m.kv_heads != 0)
    r.fail("num_key_value_heads", "expected a divisor of num_attention_heads = " + std::to_string(m.heads) +
                                      ", found " + std::to_string(m.kv_heads));
  // Every supported family is Llama-like (Qwen2's q/k/v biases and Qwen3's q/k norms are not
  // modelled).
  m.mlp = MlpKind::SWIGLU;
  m.norm = NormKind::RMSNORM;
  m.position = PositionEmbedding::ROTARY;
  m.bias = false;
  m.tied_embeddings = r.find_bool("tie_word_embeddings").value_or(false);
  // These families have no hidden dropout; attention dropout only when the config sets one.
  const double attention_dropout = r.find_number("attention_dropout").value_or(0.0);
  if (attention_dropout > 1.0)
    r.fail("attention_dropout",
           "expected a probability in [0, 1], found " + std::to_string(attention_dropout));
  m.dropout = attention_dropout > 0.0;
}

/// DeepSeek-V2/V3: multi-head latent attention, shared experts, leading dense layers, MTP and
/// group-limited routing.
void read_deepseek(const JsonReader& r, ModelSpec& m) {
  // Multi-head latent attention; q_lora_rank null: one full query projection (V2-Lite).
  m.mla.q_lora_rank = r.find_int("q_lora_rank", 0).value_or(0);
  m.mla.kv_lora_rank = r.require_int("kv_lora_rank", "model.mla.kv_lora_rank");
  m.mla.qk_nope_head_dim = r.require_int("qk_nope_head_dim", "model.mla.qk_nope_head_dim");
  m.mla.qk_rope_head_dim = r.find_int("qk_rope_head_dim", 0).value_or(0);
  m.mla.v_head_dim = r.require_int("v_head_dim", "model.mla.v_head_dim");
  m.moe.experts = r.require_int("n_routed_experts", "model.moe.experts");
  m.moe.top_k = r.require_int("num_experts_per_tok", "model.moe.top_k");
  m.moe.expert_ffn_hidden = r.require_int("moe_intermediate_size", "model.moe.expert_ffn_hidden");
  m.moe.shared_experts = r.find_int("n_shared_experts", 0).value_or(0);
  m.moe.first_dense_layers = r.find_int("first_k_dense_replace", 0).value_or(0);
  m.moe.layer_freq = r.find_int("moe_layer_freq").value_or(1);
  m.mtp_layers = r.find_int("num_nextn_predict_layers", 0).value_or(0);
  // Group-limited routing (DeepSeek-V3: n_group 8, topk_group 4); 1 group is no limit.
  if (const int64_t g = r.find_int("n_group", 0).value_or(0); g > 1) {
    m.moe.routing.groups = g;
    m.moe.routing.group_top_k = r.find_int("topk_group", 1).value_or(g);
  }
}

/// Qwen2-MoE / Qwen3-MoE: every layer MoE, with Qwen2-MoE's shared expert.
void read_qwen_moe(const JsonReader& r, ModelSpec& m) {
  m.moe.experts = r.require_int("num_experts", "model.moe.experts");
  m.moe.top_k = r.require_int("num_experts_per_tok", "model.moe.top_k");
  m.moe.expert_ffn_hidden = r.require_int("moe_intermediate_size", "model.moe.expert_ffn_hidden");
  // Every layer MoE: the models published so far (decoder_sparse_step 1, no mlp_only_layers).
  if (const int64_t step = r.find_int("decoder_sparse_step").value_or(1); step != 1)
    r.fail("decoder_sparse_step", "only 1 (every layer MoE) is modelled, found " + std::to_string(step));
  if (r.non_empty_list("mlp_only_layers"))
    r.fail("mlp_only_layers", "dense layers among the MoE layers are not modelled; expected an empty list");
  // Qwen2-MoE's one shared expert of shared_expert_intermediate_size is n experts' worth.
  if (const int64_t shared = r.find_int("shared_expert_intermediate_size", 0).value_or(0); shared > 0) {
    if (shared % m.moe.expert_ffn_hidden != 0)
      r.fail("shared_expert_intermediate_size",
             "expected a multiple of moe_intermediate_size = " + std::to_string(m.moe.expert_ffn_hidden) +
                 ", found " + std::to_string(shared));
    m.moe.shared_experts = shared / m.moe.expert_ffn_hidden;
  }
}

/// The family's mixture of experts (and DeepSeek's latent attention); dense families read nothing.
void read_moe(const JsonReader& r, const std::string& type, ModelSpec& m) {
  if (type == "mixtral" || type == "gpt_oss") {
    m.moe.experts = r.require_int("num_local_experts", "model.moe.experts");
    m.moe.top_k = r.require_int("num_experts_per_tok", "model.moe.top_k");
    m.moe.expert_ffn_hidden = m.ffn_hidden;
    // gpt-oss: biases on the attention projections (and the experts', a few per mille of them).
    if (type == "gpt_oss")
      m.bias = r.find_bool("attention_bias").value_or(true);
  } else if (is_deepseek(type)) {
    read_deepseek(r, m);
  } else if (type == "qwen2_moe" || type == "qwen3_moe") {
    read_qwen_moe(r, m);
  }
}

} // namespace

const std::vector<std::string>& supported_hf_model_types() {
  static const std::vector<std::string> types = {"llama",       "mistral", "mixtral",   "qwen2",
                                                 "qwen2_moe",   "qwen3",   "qwen3_moe", "deepseek_v2",
                                                 "deepseek_v3", "gpt_oss"};
  return types;
}

ModelSpec read_hf_config(const std::filesystem::path& file) {
  const std::string name = file.string();
  const std::string text = read_input_file(file, "Hugging Face config", kMaxConfigBytes);
  const json root = parse_config_json(name, text);
  const JsonReader r(name, root);
  const std::string type = read_model_type(r);
  ModelSpec m;
  read_common(r, type, m);
  read_moe(r, type, m);
  read_sliding_window(r, type, m);
  if (m.moe.enabled() && m.moe.top_k > m.moe.experts)
    r.fail("num_experts_per_tok", "expected at most the number of routed experts (" +
                                      std::to_string(m.moe.experts) + "), found " +
                                      std::to_string(m.moe.top_k));
  return m;
}

} // namespace stepsim::config
