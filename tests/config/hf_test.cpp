// Hugging Face config.json reading (config/hf_config.hpp) and the MoE / EP / CP keys of workload
// files: an HF Llama config gives exactly the parameters of the equivalent YAML, YAML keys next
// to model.from_hf override it, unsupported model types and missing fields are clear errors, and
// the bundled MoE / long-context workloads load and pass the layout checks.

#include "config/config.hpp"
#include "config/hf_config.hpp"

#include "core/error.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using namespace stepsim;

const fs::path SOURCE_DIR = STEPSIM_SOURCE_DIR;

std::string slurp_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class HfConfig : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("stepsim-hf-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& name, const std::string& text) const {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }
  /// The FROM_HF_YAML workload (next to an hf.json written before) with `sets` as --set overrides.
  WorkloadSpec load_from_hf(const std::vector<std::string>& sets) const;
  /// The message of the ConfigError `f` throws ("" when it throws none).
  template <class F> static std::string config_error(F f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  /// The message of the ModelError check_layout throws for load_from_hf(sets) on `cluster`.
  std::string layout_error(const ClusterSpec& cluster, const std::vector<std::string>& sets) const {
    WorkloadSpec w = load_from_hf(sets);
    try {
      w = config::check_layout(cluster, w).workload;
    } catch (const ModelError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

const std::string LLAMA_JSON = R"({
  "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
  "max_position_embeddings": 4096, "tie_word_embeddings": false, "hidden_act": "silu"
})";

const std::string LLAMA_YAML = R"(name: llama-7b
model:
  layers: 32
  hidden: 4096
  heads: 32
  kv_heads: 32
  ffn_hidden: 11008
  vocab: 32000
  seq_len: 4096
  mlp: swiglu
batch: {global_batch: 8, micro_batch: 1}
parallel: {tp: 1, pp: 1, schedule: 1f1b}
precision: bf16
)";

const std::string FROM_HF_YAML = R"(name: llama-7b
model:
  from_hf: hf.json
batch: {global_batch: 8, micro_batch: 1}
parallel: {tp: 1, pp: 1, schedule: 1f1b}
precision: bf16
)";

WorkloadSpec HfConfig::load_from_hf(const std::vector<std::string>& sets) const {
  std::vector<config::Override> o;
  for (const auto& s : sets)
    o.push_back(config::parse_override(s));
  return config::load_workload(write("w.yaml", FROM_HF_YAML), o);
}

} // namespace

// An HF Llama config gives exactly the parameter count (and every field) of the equivalent YAML.
TEST_F(HfConfig, LlamaConfigEqualsEquivalentYaml) {
  write("hf.json", LLAMA_JSON);
  const WorkloadSpec hf = config::load_workload(write("a.yaml", FROM_HF_YAML));
  const WorkloadSpec yaml = config::load_workload(write("b.yaml", LLAMA_YAML));
  EXPECT_EQ(model::total_params(hf.model), model::total_params(yaml.model));
  EXPECT_EQ(hf.model.layers, yaml.model.layers);
  EXPECT_EQ(hf.model.kv_heads, yaml.model.kv_heads);
  EXPECT_EQ(hf.model.seq_len, yaml.model.seq_len);
  EXPECT_EQ(hf.model.mlp, yaml.model.mlp);
  EXPECT_EQ(hf.model.norm, yaml.model.norm);
  EXPECT_EQ(hf.model.position, yaml.model.position);
  EXPECT_EQ(hf.model.bias, yaml.model.bias);
  EXPECT_EQ(hf.model.tied_embeddings, yaml.model.tied_embeddings);
  EXPECT_FALSE(hf.model.moe.enabled());
  // Llama-like models have no hidden dropout, and this config sets no attention dropout.
  EXPECT_TRUE(yaml.model.dropout);
  EXPECT_FALSE(hf.model.dropout);
  std::string with_dropout = LLAMA_JSON;
  with_dropout.insert(with_dropout.find('{') + 1, "\n  \"attention_dropout\": 0.1,");
  write("hf.json", with_dropout);
  EXPECT_TRUE(config::load_workload(write("c.yaml", FROM_HF_YAML)).model.dropout);
}

// Keys given next to from_hf override the config's values.
TEST_F(HfConfig, YamlKeysOverrideTheConfig) {
  write("hf.json", LLAMA_JSON);
  std::string text = FROM_HF_YAML;
  text.replace(text.find("  from_hf: hf.json\n"), 19, "  from_hf: hf.json\n  seq_len: 1024\n  layers: 8\n");
  const WorkloadSpec w = config::load_workload(write("a.yaml", text));
  EXPECT_EQ(w.model.seq_len, 1024);
  EXPECT_EQ(w.model.layers, 8);
  EXPECT_EQ(w.model.hidden, 4096);
  // --set too.
  const WorkloadSpec s =
      config::load_workload(write("b.yaml", FROM_HF_YAML), {config::parse_override("model.vocab=64000")});
  EXPECT_EQ(s.model.vocab, 64000);
}

// Qwen3-32B's config.json (Qwen/Qwen3-32B on Hugging Face): 64 heads of 128 on a hidden size of
// 5120, so the query and output projections are 5120 x 8192. The parameter count matches the
// model card's 32.8B (31.2B without the embeddings); with head_dim = hidden / heads it would be
// 25.1B. Mistral NeMo 12B (mistralai/Mistral-Nemo-Base-2407: 32 heads of 128 on 5120) gives its
// published 12.2B.
TEST_F(HfConfig, HeadDimApartFromHiddenOverHeads) {
  const fs::path qwen = write("qwen3.json", R"({
    "model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 25600, "num_hidden_layers": 64,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": false, "attention_dropout": 0.0})");
  const ModelSpec q = config::read_hf_config(qwen);
  EXPECT_EQ(q.head_dim(), 128);
  EXPECT_EQ(q.q_dim(), 8192);
  const double non_embedding = model::stack_params(q, 0, q.layers, 1, 1, 1).total();
  EXPECT_NEAR(non_embedding / 1e9, 31.2, 0.05);
  EXPECT_NEAR(model::total_params(q) / 1e9, 32.8, 0.05);
  // The attention block's FLOPs follow the 8192-wide projections: 2·T·(2·h·q + 2·h·kv) plus the
  // core 4·b·s²·q (one 4096-token sequence, tp 1).
  ModelSpec m = q;
  m.seq_len = 4096;
  const double T = 4096, h = 5120, qd = 8192, kv = 1024;
  EXPECT_DOUBLE_EQ(model::attention_block_forward_flops(m, 1, 1).value(),
                   2 * T * (2 * h * qd + 2 * h * kv) + 4 * T * T * qd);

  const fs::path nemo = write("nemo.json", R"({
    "model_type": "mistral", "hidden_size": 5120, "intermediate_size": 14336, "num_hidden_layers": 40,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
    "max_position_embeddings": 1024000, "tie_word_embeddings": false})");
  EXPECT_NEAR(model::total_params(config::read_hf_config(nemo)) / 1e9, 12.2, 0.1);

  // The same from YAML: model.head_dim lifts the heads-divide-hidden rule; without it the error
  // says so.
  std::string yaml = LLAMA_YAML;
  yaml.replace(yaml.find("  heads: 32\n  kv_heads: 32\n"), 26,
               "  heads: 48\n  kv_heads: 8\n  head_dim: 128\n");
  const WorkloadSpec w = config::load_workload(write("a.yaml", yaml));
  EXPECT_EQ(w.model.head_dim(), 128);
  EXPECT_EQ(w.model.q_dim(), 6144);
  yaml.replace(yaml.find("  head_dim: 128\n"), 16, "");
  const std::string msg = config_error([&] { config::load_workload(write("b.yaml", yaml)); });
  EXPECT_NE(msg.find("key 'model.heads': expected a divisor of model.hidden = 4096, found 48"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("or give model.head_dim"), std::string::npos) << msg;
  yaml.replace(yaml.find("  kv_heads: 8\n"), 14, "  kv_heads: 8\n  head_dim: 0\n");
  EXPECT_NE(config_error([&] { config::load_workload(write("c.yaml", yaml)); }).find("head_dim"),
            std::string::npos);
  // heads x head_dim is held to model.hidden's limit (2^20), from YAML or from the config.
  yaml.replace(yaml.find("  head_dim: 0\n"), 14, "  head_dim: 65536\n");
  EXPECT_NE(config_error([&] { config::load_workload(write("d.yaml", yaml)); })
                .find("key 'model.head_dim': heads x head_dim = 48 x 65536 = 3145728, more than the 1048576 "
                      "accepted"),
            std::string::npos);
}

// Qwen3-30B-A3B's config.json (Qwen/Qwen3-30B-A3B): 128 experts of 768, top-8, on every layer,
// 32 heads of 128 on a hidden size of 2048: the model card's 30.5B parameters. Qwen2-MoE's one
// shared expert of shared_expert_intermediate_size counts as that many routed experts' worth;
// layouts the model does not cover (sparse steps, dense layers in between) are clear errors.
TEST_F(HfConfig, QwenMoeConfigs) {
  const std::string qwen3 = R"({
    "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 40960, "tie_word_embeddings": false, "num_experts": 128,
    "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": []})";
  const ModelSpec q = config::read_hf_config(write("q3.json", qwen3));
  EXPECT_EQ(q.moe.experts, 128);
  EXPECT_EQ(q.moe.top_k, 8);
  EXPECT_EQ(q.moe.expert_ffn_hidden, 768);
  EXPECT_EQ(q.moe.shared_experts, 0);
  EXPECT_EQ(q.q_dim(), 4096);
  EXPECT_NEAR(model::total_params(q) / 1e9, 30.5, 0.1);

  std::string qwen2 = qwen3;
  qwen2.replace(qwen2.find("qwen3_moe"), 9, "qwen2_moe");
  qwen2.replace(qwen2.find("\"mlp_only_layers\": []"), 21, "\"shared_expert_intermediate_size\": 3072");
  EXPECT_EQ(config::read_hf_config(write("q2.json", qwen2)).moe.shared_experts, 4);

  std::string bad = qwen3;
  bad.replace(bad.find("\"decoder_sparse_step\": 1"), 24, "\"decoder_sparse_step\": 2");
  EXPECT_NE(config_error([&] {
              config::read_hf_config(write("b1.json", bad));
            }).find("key 'decoder_sparse_step': only 1 (every layer MoE) is modelled, found 2"),
            std::string::npos);
  bad = qwen3;
  bad.replace(bad.find("\"mlp_only_layers\": []"), 21, "\"mlp_only_layers\": [0, 47]");
  EXPECT_NE(
      config_error([&] { config::read_hf_config(write("b2.json", bad)); }).find("key 'mlp_only_layers'"),
      std::string::npos);
  bad = qwen2;
  bad.replace(bad.find("3072"), 4, "1000");
  EXPECT_NE(
      config_error([&] {
        config::read_hf_config(write("b3.json", bad));
      }).find("key 'shared_expert_intermediate_size': expected a multiple of moe_intermediate_size = 768"),
      std::string::npos);
}

// An unsupported model_type is an error naming the file and the key, listing the supported types.
TEST_F(HfConfig, UnsupportedModelTypeIsAClearError) {
  const fs::path p = write("hf.json", R"({"model_type": "gpt2", "n_embd": 768})");
  const std::string msg = config_error([&] { config::read_hf_config(p); });
  EXPECT_NE(msg.find(p.string() + ": key 'model_type': unsupported model type 'gpt2'"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("supported: llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, "
                     "deepseek_v3, gpt_oss"),
            std::string::npos)
      << msg;
}

// A missing field names the json file and the key (and what it was needed for).
TEST_F(HfConfig, MissingFieldNamesFileAndKey) {
  std::string json = LLAMA_JSON;
  json.replace(json.find("\"hidden_size\": 4096, "), 21, "");
  const fs::path p = write("hf.json", json);
  const std::string msg = config_error([&] { config::read_hf_config(p); });
  EXPECT_NE(msg.find(p.string() + ": key 'hidden_size': missing (needed for model.hidden)"),
            std::string::npos)
      << msg;
}

// Invalid JSON is reported with line:col; a missing file at the from_hf key of the workload.
TEST_F(HfConfig, SyntaxErrorAndMissingFile) {
  const fs::path p = write("hf.json", "{\n  \"model_type\": \"llama\",\n  oops\n}");
  const std::string msg = config_error([&] { config::read_hf_config(p); });
  EXPECT_NE(msg.find(p.string() + ":3:"), std::string::npos) << msg;
  std::string yaml = FROM_HF_YAML;
  yaml.replace(yaml.find("hf.json"), 7, "missing.json");
  const std::string missing = config_error([&] { config::load_workload(write("a.yaml", yaml)); });
  EXPECT_NE(missing.find("a.yaml:3:12: key 'model.from_hf': Hugging Face config"), std::string::npos)
      << missing;
  EXPECT_NE(missing.find("missing.json': it does not exist"), std::string::npos) << missing;
}

// The size limits hold for sizes a Hugging Face config gives too, reported at the from_hf key
// (a workload key overriding the size is checked where it is written).
TEST_F(HfConfig, SizesBeyondTheLimitsAreRefused) {
  std::string json = LLAMA_JSON;
  json.replace(json.find("\"num_hidden_layers\": 32"), 23, "\"num_hidden_layers\": 4194304");
  write("hf.json", json);
  const std::string msg = config_error([&] { config::load_workload(write("a.yaml", FROM_HF_YAML)); });
  EXPECT_NE(
      msg.find("a.yaml:3:12: key 'model.from_hf': the Hugging Face config gives model.layers = 4194304, more "
               "than the 100000 accepted"),
      std::string::npos)
      << msg;
  EXPECT_NO_THROW(
      config::load_workload(write("b.yaml", FROM_HF_YAML), {config::parse_override("model.layers=32")}));
}

// Every size a config gives obeys its workload key's limit, the MoE and MLA ones too (a head width
// of 2^63 - 1 once reached the kernels as a negative size, 2^63 shared experts a negative memory
// ledger); a key given twice in one object and an attention dropout above 1 are refused.
TEST_F(HfConfig, EveryConfigSizeIsLimitedAndKeysAreUnique) {
  const std::string v2 = slurp_file(SOURCE_DIR / "workloads/hf/deepseek-v3.json");
  struct Case {
    std::string key, value, says;
  };
  for (const Case& c :
       {Case{"qk_nope_head_dim", "9223372036854775807", "model.mla.qk_nope_head_dim = 9223372036854775807"},
        Case{"v_head_dim", "4611686018427387904", "model.mla.v_head_dim"},
        Case{"n_shared_experts", "9223372036854775807", "model.moe.shared_experts"},
        Case{"moe_layer_freq", "9223372036854775807", "model.moe.moe_layer_freq"},
        Case{"num_nextn_predict_layers", "100", "model.mtp_layers = 100"}}) {
    std::string json = v2;
    const std::string from = "\"" + c.key + "\": ";
    const auto at = json.find(from);
    ASSERT_NE(at, std::string::npos) << c.key;
    const auto end = json.find_first_of(",}", at);
    json.replace(at + from.size(), end - at - from.size(), c.value);
    write("hf.json", json);
    const std::string msg = config_error([&] { config::load_workload(write("a.yaml", FROM_HF_YAML)); });
    EXPECT_NE(msg.find("key 'model.from_hf': the Hugging Face config gives " + c.says), std::string::npos)
        << c.key << ": " << msg;
  }
  std::string twice = LLAMA_JSON;
  twice.replace(twice.rfind('}'), 1, ", \"hidden_size\": 1}");
  write("hf.json", twice);
  std::string msg = config_error([&] { config::load_workload(write("a.yaml", FROM_HF_YAML)); });
  EXPECT_NE(msg.find("key 'hidden_size' is given twice in one object"), std::string::npos) << msg;
  std::string dropout = LLAMA_JSON;
  dropout.replace(dropout.rfind('}'), 1, ", \"attention_dropout\": 1.5}");
  write("hf.json", dropout);
  msg = config_error([&] { config::load_workload(write("a.yaml", FROM_HF_YAML)); });
  EXPECT_NE(msg.find("key 'attention_dropout': expected a probability in [0, 1]"), std::string::npos) << msg;
}

// A key of model.mla over a config's MLA overrides that one value; the others stay the config's.
TEST_F(HfConfig, MlaKeyOverridesOneValueOfTheConfig) {
  const WorkloadSpec w = config::load_workload(SOURCE_DIR / "workloads/deepseek-v3-like.yaml",
                                               {config::parse_override("model.mla.v_head_dim=64")});
  const ModelSpec ds = config::read_hf_config(SOURCE_DIR / "workloads/hf/deepseek-v3.json");
  EXPECT_EQ(w.model.mla.v_head_dim, 64);
  EXPECT_EQ(w.model.mla.kv_lora_rank, ds.mla.kv_lora_rank);
  EXPECT_EQ(w.model.mla.qk_nope_head_dim, ds.mla.qk_nope_head_dim);
  EXPECT_EQ(w.model.mla.q_lora_rank, ds.mla.q_lora_rank);
}

// Mixtral fields: num_local_experts, num_experts_per_tok; DeepSeek: routed, shared, first dense.
TEST_F(HfConfig, BundledMoeConfigs) {
  const ModelSpec mixtral = config::read_hf_config(SOURCE_DIR / "workloads/hf/mixtral-8x7b.json");
  EXPECT_EQ(mixtral.moe.experts, 8);
  EXPECT_EQ(mixtral.moe.top_k, 2);
  EXPECT_EQ(mixtral.moe.expert_ffn_hidden, 14336);
  EXPECT_NEAR(model::total_params(mixtral) / 46.7e9, 1.0, 0.01);
  const ModelSpec ds = config::read_hf_config(SOURCE_DIR / "workloads/hf/deepseek-v3.json");
  EXPECT_EQ(ds.moe.experts, 256);
  EXPECT_EQ(ds.moe.top_k, 8);
  EXPECT_EQ(ds.moe.shared_experts, 1);
  EXPECT_EQ(ds.moe.first_dense_layers, 3);
  EXPECT_EQ(ds.moe.expert_ffn_hidden, 2048);
  EXPECT_EQ(ds.moe.routing.groups, 8); // n_group: group-limited routing, 4 groups per token
  EXPECT_EQ(ds.moe.routing.group_top_k, 4);
  EXPECT_EQ(mixtral.moe.routing.groups, 0);
  EXPECT_FALSE(model::is_moe_layer(ds, 2));
  EXPECT_TRUE(model::is_moe_layer(ds, 3));
  // Multi-head latent attention (DeepSeek-V3 report, sec. 2.1): query latent 1536, key/value
  // latent 512, per-head widths 128 + 64 (rotary) for queries and keys and 128 for values.
  EXPECT_EQ(ds.mla.q_lora_rank, 1536);
  EXPECT_EQ(ds.mla.kv_lora_rank, 512);
  EXPECT_EQ(ds.mla.qk_head_dim(), 192);
  EXPECT_EQ(ds.mla.v_head_dim, 128);
  // The report's 671B parameters (the multi-token-prediction module's 14B apart) and 37B
  // activated per token (rounded; here without the input embedding, 0.93B).
  EXPECT_NEAR(model::total_params(ds) / 671e9, 1.0, 0.002) << model::total_params(ds);
  EXPECT_NEAR((model::active_params(ds) - model::embedding_params(ds, 1)) / 37e9, 1.0, 0.03)
      << model::active_params(ds);
  // Its one multi-token-prediction depth (num_nextn_predict_layers): an MoE layer (index 61), the
  // 2h x h projection and three norms. The HF checkpoint's 685B less the main model's 671B = 14B
  // (rounded) also stores the module's copies of the embedding and of the output head, which
  // training shares with the main model (none counted on a single pipeline stage).
  EXPECT_EQ(ds.mtp_layers, 1);
  EXPECT_TRUE(model::is_moe_layer(ds, 61));
  const double mtp = model::layer_params_at(ds, 61, 1, 1, 1).total() + model::mtp_params(ds, 1, 1);
  EXPECT_NEAR((mtp + 2.0 * 7168.0 * 129280.0) / 14e9, 1.0, 0.05) << mtp;
  EXPECT_NEAR(model::output_params(ds, 1, 1) - model::mtp_params(ds, 1, 1), 7168.0 * 129280.0 + 7168.0,
              1.0); // the untied output layer and the final norm
}

// DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite config.json): MLA without a query latent
// (q_lora_rank null: one full query projection), 64 routed experts of 1408 and 2 shared, top-6,
// the first layer dense. Its model card's 15.7B parameters and 2.4B activated (without the input
// embedding).
TEST_F(HfConfig, DeepSeekV2LiteMlaWithoutQueryLatent) {
  const fs::path p = write("v2lite.json", R"({"model_type": "deepseek_v2", "hidden_size": 2048,
    "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
    "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
    "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 163840,
    "tie_word_embeddings": false})");
  const ModelSpec m = config::read_hf_config(p);
  EXPECT_TRUE(m.mla.enabled());
  EXPECT_EQ(m.mla.q_lora_rank, 0);
  EXPECT_NEAR(model::total_params(m) / 15.7e9, 1.0, 0.005) << model::total_params(m);
  EXPECT_NEAR((model::active_params(m) - model::embedding_params(m, 1)) / 2.4e9, 1.0, 0.03)
      << model::active_params(m);
}

// The bundled MoE and long-context workloads load and pass the layout checks on their clusters.
TEST_F(HfConfig, BundledWorkloadsPassLayoutChecks) {
  struct Case {
    const char* workload;
    int nodes;
    int dp;
    const char* cluster = "h200-cluster";
  };
  for (const Case c :
       {Case{"mixtral-8x7b", 8, 8}, Case{"deepseek-v3-like", 32, 32}, Case{"llama3-405b-128k", 28, 1},
        Case{"gpt-oss-120b", 8, 64, "dgx-b200"}, Case{"qwen3-235b-a22b", 32, 128}}) {
    const ClusterSpec cluster =
        config::load_cluster(SOURCE_DIR / "topologies" / (std::string(c.cluster) + ".yaml"),
                             {config::parse_override("cluster.nodes=" + std::to_string(c.nodes))});
    WorkloadSpec w = config::load_workload(SOURCE_DIR / "workloads" / (std::string(c.workload) + ".yaml"));
    EXPECT_NO_THROW(w = config::check_layout(cluster, w).workload) << c.workload;
    EXPECT_EQ(w.parallel.dp, c.dp) << c.workload;
  }
}

// Layout checks of expert and context parallelism, each a ModelError naming the rule.
TEST_F(HfConfig, EpAndCpLayoutChecks) {
  const ClusterSpec cluster = config::load_cluster(SOURCE_DIR / "topologies/h200-cluster.yaml",
                                                   {config::parse_override("cluster.nodes=2")});
  write("hf.json", LLAMA_JSON);
  const auto layout_error = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), "batch.global_batch=64");
    return HfConfig::layout_error(cluster, sets);
  };
  EXPECT_NE(layout_error({"parallel.ep=2"}).find("parallel.ep = 2 needs a mixture-of-experts model"),
            std::string::npos);
  EXPECT_NE(layout_error({"model.moe={experts: 8, top_k: 2}", "parallel.ep=3"})
                .find("does not divide parallel.dp = 16"),
            std::string::npos);
  EXPECT_NE(layout_error({"model.moe={experts: 6, top_k: 2}", "parallel.ep=4"})
                .find("does not divide model.moe.experts = 6"),
            std::string::npos);
  EXPECT_NE(
      layout_error({"parallel.cp=3", "parallel.dp=5", "parallel.tp=1"}).find("but the cluster has 16 GPUs"),
      std::string::npos);
  EXPECT_NE(layout_error({"parallel.cp=16", "model.seq_len=1000"})
                .find("needs model.seq_len = 1000 divisible by cp = 16"),
            std::string::npos);
  EXPECT_EQ(layout_error({"parallel.cp=4", "model.moe={experts: 8, top_k: 2}", "parallel.ep=4"}), "");
  // Expert tensor parallelism: 1 (folded expert groups) or tp; folding needs SP and etp*ep
  // dividing the GPUs of a stage, and may then exceed dp (here 8).
  const std::vector<std::string> moe_tp2 = {"model.moe={experts: 32, top_k: 2}", "parallel.tp=2",
                                            "parallel.sp=true"};
  auto with = [&](std::vector<std::string> sets, const std::vector<std::string>& more) {
    sets.insert(sets.end(), more.begin(), more.end());
    return layout_error(sets);
  };
  EXPECT_NE(layout_error({"parallel.etp=1"}).find("parallel.etp = 1 needs a mixture-of-experts model"),
            std::string::npos);
  EXPECT_NE(with(moe_tp2, {"parallel.etp=4"}).find("parallel.etp = 4 is not modelled with parallel.tp = 2"),
            std::string::npos);
  EXPECT_NE(with(moe_tp2, {"parallel.ep=16"}).find("parallel.ep = 16 does not divide parallel.dp = 8"),
            std::string::npos);
  EXPECT_EQ(with(moe_tp2, {"parallel.ep=16", "parallel.etp=1"}), "");
  EXPECT_EQ(with(moe_tp2, {"parallel.ep=4", "parallel.etp=2"}), "");
  EXPECT_NE(with(moe_tp2, {"parallel.ep=32", "parallel.etp=1"})
                .find("parallel.etp*ep = 1*32 does not divide tp*cp*dp = 16"),
            std::string::npos);
  EXPECT_NE(
      layout_error({"model.moe={experts: 32, top_k: 2}", "parallel.tp=2", "parallel.ep=16", "parallel.etp=1"})
          .find("needs parallel.sp: true"),
      std::string::npos);
  // Combined 1F1B (ep_overlap): MoE with ep >= 2, interleaved with a pipeline (1f1b without),
  // no full recomputation.
  const std::vector<std::string> moe_ep = {"model.moe={experts: 8, top_k: 2}", "parallel.ep=4",
                                           "parallel.ep_overlap=true"};
  EXPECT_EQ(layout_error(moe_ep), "");
  EXPECT_NE(
      layout_error({"parallel.ep_overlap=true"}).find("parallel.ep_overlap needs a mixture-of-experts model"),
      std::string::npos);
  EXPECT_NE(
      with(moe_ep, {"parallel.schedule=gpipe"}).find("with parallel.pp = 1 needs parallel.schedule = 1f1b"),
      std::string::npos);
  EXPECT_NE(with(moe_ep, {"parallel.pp=2", "model.layers=32"}).find("needs parallel.schedule = interleaved"),
            std::string::npos);
  EXPECT_NE(
      with(moe_ep, {"training.recompute=full"}).find("cannot be combined with training.recompute = full"),
      std::string::npos);
  // Uneven model chunks: one count per chunk (pp*vp), adding up to the layers (32 here), none empty
  // but the last.
  EXPECT_EQ(layout_error({"parallel.pp=2", "parallel.dp=8", "parallel.chunk_layers=[15, 17]"}), "");
  EXPECT_NE(layout_error({"parallel.pp=2", "parallel.dp=8", "parallel.chunk_layers=[15, 16]"})
                .find("parallel.chunk_layers adds up to 31 layers, expected model.layers = 32"),
            std::string::npos);
  EXPECT_NE(layout_error({"parallel.pp=2", "parallel.dp=8", "parallel.chunk_layers=[32]"})
                .find("parallel.chunk_layers lists 1 model chunks, expected pp*vp = 2"),
            std::string::npos);
  // Kept ZeRO-3 gathers (reshard_after_forward false) need ZeRO-3 with prefetch and a dense model;
  // with a pipeline (held for the step) a schedule that does not split the backward.
  EXPECT_EQ(layout_error({"parallel.zero_stage=3", "training.reshard_after_forward=false"}), "");
  EXPECT_NE(
      layout_error({"parallel.zero_stage=1", "training.reshard_after_forward=false"})
          .find("training.reshard_after_forward: false keeps ZeRO-3's gathered parameters from the forward "
                "to the backward and needs parallel.zero_stage 3, found 1"),
      std::string::npos);
  EXPECT_EQ(layout_error({"parallel.zero_stage=3", "parallel.pp=2", "parallel.dp=8",
                          "training.reshard_after_forward=false"}),
            "");
  EXPECT_NE(layout_error({"parallel.zero_stage=3", "parallel.pp=2", "parallel.dp=8",
                          "parallel.schedule=zb-h1", "training.reshard_after_forward=false"})
                .find("needs a schedule that does not split the backward"),
            std::string::npos);
  EXPECT_NE(layout_error({"parallel.zero_stage=3", "training.zero3_fetch=blocking",
                          "training.reshard_after_forward=false"})
                .find("needs training.zero3_fetch: prefetch"),
            std::string::npos);
  EXPECT_NE(with(moe_ep, {"parallel.zero_stage=3", "training.reshard_after_forward=false"})
                .find("needs a dense model (not modelled with experts)"),
            std::string::npos);
  // Hybrid sharding: shard groups dividing dp, under ZeRO-3 of a dense model (dp 16 here).
  EXPECT_EQ(layout_error({"parallel.zero_stage=3", "parallel.dp_shard=8"}), "");
  EXPECT_EQ(layout_error({"parallel.zero_stage=1", "parallel.dp_shard=16"}), ""); // = dp: one group
  EXPECT_NE(layout_error({"parallel.zero_stage=3", "parallel.dp_shard=3"})
                .find("parallel.dp_shard = 3 does not divide parallel.dp = 16"),
            std::string::npos);
  EXPECT_NE(layout_error({"parallel.zero_stage=2", "parallel.dp_shard=8"})
                .find("parallel.dp_shard = 8 shards ZeRO-3 over groups of DP replicas and needs "
                      "parallel.zero_stage 3, found 2"),
            std::string::npos);
  EXPECT_NE(layout_error({"parallel.zero_stage=3", "parallel.dp_shard=1"})
                .find("parallel.dp_shard = 1 shards nothing"),
            std::string::npos);
  EXPECT_NE(with(moe_ep, {"parallel.zero_stage=3", "parallel.dp_shard=8"})
                .find("parallel.dp_shard = 8 is not modelled with experts"),
            std::string::npos);
  EXPECT_NE(layout_error({"parallel.pp=2", "parallel.dp=8", "parallel.chunk_layers=[0, 32]"})
                .find("only the last model chunk (it holds the output layer) may have no layers"),
            std::string::npos);
  EXPECT_EQ(with(moe_ep, {"parallel.ep_dispatch=deduplicated"}), "");
  const std::string bad_groups = config_error(
      [&] { load_from_hf({"model.moe={experts: 8, top_k: 2, routing: {groups: 3, group_top_k: 1}}"}); });
  EXPECT_NE(bad_groups.find("routing.groups = 3 must divide moe.experts = 8"), std::string::npos)
      << bad_groups;
  const std::string no_mla = config_error([&] {
    load_from_hf({"training.recompute=selective", "training.recompute_modules=[mla_up_proj]"});
  });
  EXPECT_NE(no_mla.find("module 'mla_up_proj' needs multi-head latent attention"), std::string::npos)
      << no_mla;
  EXPECT_NE(layout_error({"parallel.ep_dispatch=deduplicated"})
                .find("parallel.ep_dispatch = deduplicated needs a mixture-of-experts model"),
            std::string::npos);
  // tp*cp*pp*dp = GPUs; dp derived with cp.
  std::vector<config::Override> o = {config::parse_override("parallel.cp=4")};
  o.push_back(config::parse_override("batch.global_batch=64"));
  WorkloadSpec w = config::load_workload(write("w.yaml", FROM_HF_YAML), o);
  w = config::check_layout(cluster, w).workload;
  EXPECT_EQ(w.parallel.dp, 4);
  EXPECT_EQ(w.num_gpus(), 16);
}

// MoE keys are validated like every other key.
TEST_F(HfConfig, MoeKeyErrors) {
  write("hf.json", LLAMA_JSON);
  const auto error = [&](const std::string& set) {
    return config_error(
        [&] { config::load_workload(write("w.yaml", FROM_HF_YAML), {config::parse_override(set)}); });
  };
  EXPECT_NE(error("model.moe={experts: 8, top_k: 9}")
                .find("key 'model.moe.top_k': expected at most model.moe.experts = 8"),
            std::string::npos);
  EXPECT_NE(error("model.moe={top_k: 2}").find("missing required key 'model.moe.experts'"), std::string::npos)
      << error("model.moe={top_k: 2}");
  EXPECT_NE(
      error("model.moe={experts: 8, routing: {distribution: pareto}}").find("expected one of uniform, zipf"),
      std::string::npos);
  EXPECT_NE(error("model.moe={experts: 8, capacity_factor: 0.5}").find("a number >= 1, or 0"),
            std::string::npos);
  EXPECT_NE(error("model.moe={experts: 8, top_kk: 2}").find("did you mean 'model.moe.top_k'"),
            std::string::npos);
}

// gpt-oss-120b (OpenAI's model card: 116.83 B parameters, 5.13 B active per token counting the
// output layer but not the input embedding): 128 experts of 2880 (top-4) on 36 layers, 64 heads
// of 64, attention through a 128-token window on the even layers (layer_types).
TEST_F(HfConfig, GptOssConfigGivesWindowsAndExperts) {
  const ModelSpec m = config::read_hf_config(SOURCE_DIR / "workloads/hf/gpt-oss-120b.json");
  EXPECT_EQ(m.moe.experts, 128);
  EXPECT_EQ(m.moe.top_k, 4);
  EXPECT_EQ(m.moe.expert_ffn_hidden, 2880);
  EXPECT_EQ(m.q_dim(), 4096);
  EXPECT_EQ(m.sliding_window, 128);
  EXPECT_EQ(m.full_attention_every, 2);
  EXPECT_TRUE(m.windowed_layer(0));
  EXPECT_FALSE(m.windowed_layer(1));
  EXPECT_TRUE(m.windowed_layer(34));
  EXPECT_FALSE(m.windowed_layer(35));
  EXPECT_NEAR(model::total_params(m) / 1e9, 116.83, 0.05);
  EXPECT_NEAR((model::active_params(m) - model::embedding_params(m, 1)) / 1e9, 5.13, 0.02);
}

// Qwen3-235B-A22B (its model card: 235 B parameters, 22 B activated): 94 layers of 128 experts of
// 1536 (top-8) and 64 heads of 128 on a hidden size of 4096. By hand: per layer 64*128*4096*2 +
// 2*4*128*4096 (attention) + 4096*128 (router) + 128*3*4096*1536 (experts) = 2.4887 B, 94 of them
// plus untied embeddings of 151936 x 4096 twice: 235.1 B; active: 8 experts instead of 128 per layer.
TEST_F(HfConfig, Qwen3MoeConfigGivesTheModelCardsCounts) {
  const ModelSpec m = config::read_hf_config(SOURCE_DIR / "workloads/hf/qwen3-235b-a22b.json");
  EXPECT_EQ(m.moe.experts, 128);
  EXPECT_EQ(m.moe.top_k, 8);
  EXPECT_EQ(m.moe.expert_ffn_hidden, 1536);
  EXPECT_EQ(m.q_dim(), 8192);
  EXPECT_NEAR(model::total_params(m) / 235.1e9, 1.0, 0.005) << model::total_params(m);
  EXPECT_NEAR(model::active_params(m) / 22.2e9, 1.0, 0.02) << model::active_params(m);
}

// Sliding windows from other configs: Mistral's sliding_window on every layer (null: none), a
// layer_types list that is not "every n-th layer full" and Qwen's use_sliding_window are
// errors naming the key.
TEST_F(HfConfig, SlidingWindowKeys) {
  const std::string mistral = R"({
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
    "max_position_embeddings": 32768, "sliding_window": 4096})";
  const ModelSpec m = config::read_hf_config(write("m.json", mistral));
  EXPECT_EQ(m.sliding_window, 4096);
  EXPECT_EQ(m.full_attention_every, 0);
  EXPECT_TRUE(m.windowed_layer(31));
  std::string none = mistral;
  none.replace(none.find("4096}"), 4, "null");
  EXPECT_EQ(config::read_hf_config(write("n.json", none)).sliding_window, 0);

  std::string pattern = mistral;
  std::string kinds = "[";
  for (int i = 0; i < 32; ++i)
    kinds += std::string(i ? ", " : "") + (i % 4 == 3 ? "\"full_attention\"" : "\"sliding_attention\"");
  pattern.replace(pattern.find("\"sliding_window\""), 0, "\"layer_types\": " + kinds + "], ");
  const ModelSpec p = config::read_hf_config(write("p.json", pattern));
  EXPECT_EQ(p.full_attention_every, 4);
  EXPECT_FALSE(p.windowed_layer(3));
  EXPECT_TRUE(p.windowed_layer(4));

  std::string irregular = pattern;
  irregular.replace(irregular.find("\"sliding_attention\""), 19, "\"full_attention\"");
  const fs::path ip = write("i.json", irregular);
  EXPECT_NE(
      config_error([&] {
        config::read_hf_config(ip);
      }).find(ip.string() + ": key 'layer_types': only every n-th layer attending to the full sequence"),
      std::string::npos);
  std::string short_list = mistral;
  short_list.replace(short_list.find("\"sliding_window\""), 0, "\"layer_types\": [\"full_attention\"], ");
  EXPECT_NE(config_error([&] {
              config::read_hf_config(write("s.json", short_list));
            }).find("key 'layer_types': expected one entry per layer (32), found 1"),
            std::string::npos);

  const std::string qwen = R"({
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
    "max_position_embeddings": 32768, "use_sliding_window": true, "sliding_window": 4096})";
  EXPECT_NE(
      config_error([&] {
        config::read_hf_config(write("q.json", qwen));
      }).find("key 'use_sliding_window': Qwen's sliding window above max_window_layers is not modelled"),
      std::string::npos);
}

// The workload keys: a window and the full-attention period are validated, override the Hugging
// Face config, and ring attention over windowed layers is refused.
TEST_F(HfConfig, SlidingWindowWorkloadKeys) {
  write("hf.json", LLAMA_JSON);
  const auto load = [&](const std::vector<std::string>& sets) { return load_from_hf(sets); };
  const WorkloadSpec w = load({"model.sliding_window=1024", "model.full_attention_every=4"});
  EXPECT_EQ(w.model.sliding_window, 1024);
  EXPECT_EQ(w.model.full_attention_every, 4);
  EXPECT_NE(
      config_error([&] {
        load({"model.full_attention_every=2"});
      }).find("key 'model.full_attention_every': model.full_attention_every needs model.sliding_window > 0"),
      std::string::npos);
  EXPECT_NE(config_error([&] {
              load({"model.sliding_window=-1"});
            }).find("key 'model.sliding_window': expected an integer in 0.."),
            std::string::npos);

  const ClusterSpec cluster = config::load_cluster(SOURCE_DIR / "topologies/h200-cluster.yaml",
                                                   {config::parse_override("cluster.nodes=2")});
  EXPECT_NE(layout_error(cluster, {"batch.global_batch=64", "model.sliding_window=1024", "parallel.cp=2"})
                .find("parallel.cp = 2 with model.sliding_window = 1024 is not modelled"),
            std::string::npos);
  // A window of half the (4096-token) sequence is full attention: ring attention is fine.
  EXPECT_EQ(layout_error(cluster, {"batch.global_batch=64", "model.sliding_window=2048", "parallel.cp=2"}),
            "");
}

// training.recompute_modules: read with recompute: selective, each module once, the MLP module
// for dense models and moe_act for MoE ones; anything else is an error naming the key.
TEST_F(HfConfig, RecomputeModulesKey) {
  write("hf.json", LLAMA_JSON);
  const auto load = [&](const std::vector<std::string>& sets) { return load_from_hf(sets); };
  const WorkloadSpec w =
      load({"training.recompute=selective", "training.recompute_modules=[layernorm, mlp]"});
  EXPECT_EQ(w.training.recompute_modules,
            (RecomputeModules{.core_attn = false, .layernorm = true, .mlp = true}));
  EXPECT_EQ(load({"training.recompute=selective"}).training.recompute_modules, RecomputeModules{});
  const auto error = [&](const std::vector<std::string>& sets) { return config_error([&] { load(sets); }); };
  EXPECT_NE(
      error({"training.recompute_modules=[layernorm]"})
          .find("key 'training.recompute_modules': recompute_modules needs training.recompute: selective"),
      std::string::npos);
  EXPECT_NE(error({"training.recompute=selective", "training.recompute_modules=[moe]"})
                .find("expected modules among core_attn, layernorm, mlp, moe_act, mla_up_proj, "
                      "alternate_linears, found "
                      "'moe'"),
            std::string::npos);
  EXPECT_NE(
      error({"training.recompute=selective", "training.recompute_modules=[mlp, mlp]"}).find("listed twice"),
      std::string::npos);
  EXPECT_NE(error({"training.recompute=selective", "training.recompute_modules=[]"}).find("a non-empty list"),
            std::string::npos);
  EXPECT_NE(error({"training.recompute=selective", "training.recompute_modules=[moe_act]"})
                .find("module 'moe_act' needs a mixture-of-experts model"),
            std::string::npos);
  EXPECT_NE(error({"model.moe={experts: 8, top_k: 2}", "training.recompute=selective",
                   "training.recompute_modules=[mlp]"})
                .find("module 'mlp' (the dense MLP) is not modelled for a mixture-of-experts model"),
            std::string::npos);
}

// training.fp8_scaling: rowwise is a scaling of fp8 casts that keeps no fp8 weights: it needs fp8
// training, fp8_weight_cache false, no fp8 primary weights and a dense model; each miss is an error
// naming the key and what it needs. training.fused_projections: false needs a dense model too.
TEST_F(HfConfig, RowwiseFp8ScalingAndSeparateProjectionKeys) {
  write("hf.json", LLAMA_JSON);
  const auto load = [&](const std::vector<std::string>& sets) { return load_from_hf(sets); };
  const auto error = [&](const std::vector<std::string>& sets) { return config_error([&] { load(sets); }); };
  EXPECT_EQ(load({"precision=fp8"}).training.fp8_scaling, Fp8Scaling::TENSORWISE);
  EXPECT_EQ(load({"precision=fp8", "training.fp8_weight_cache=false", "training.fp8_scaling=rowwise"})
                .training.fp8_scaling,
            Fp8Scaling::ROWWISE);
  const std::string bf16 = error({"training.fp8_weight_cache=false", "training.fp8_scaling=rowwise"});
  EXPECT_NE(bf16.find("key 'training.fp8_scaling'"), std::string::npos) << bf16;
  EXPECT_NE(bf16.find("it needs precision: fp8"), std::string::npos) << bf16;
  EXPECT_NE(error({"precision=fp8", "training.fp8_scaling=rowwise"}).find("training.fp8_weight_cache: false"),
            std::string::npos);
  EXPECT_NE(error({"precision=fp8", "training.fp8_weight_cache=false", "training.fp8_params=true",
                   "training.fp8_scaling=rowwise"})
                .find("training.fp8_params: false"),
            std::string::npos);
  EXPECT_NE(error({"precision=fp8", "training.fp8_weight_cache=false", "model.moe={experts: 8, top_k: 2}",
                   "training.fp8_scaling=rowwise"})
                .find("no model.moe, no model.mla"),
            std::string::npos);
  EXPECT_NE(error({"precision=fp8", "training.fp8_scaling=columnwise"}).find("key 'training.fp8_scaling'"),
            std::string::npos);
  // ZeRO-3's fp8 all-gather: fp8 training under ZeRO-3 only.
  EXPECT_TRUE(load({"precision=fp8", "parallel.zero_stage=3", "training.fp8_all_gather=true"})
                  .training.fp8_all_gather);
  EXPECT_NE(error({"precision=fp8", "training.fp8_all_gather=true"})
                .find("key 'training.fp8_all_gather': gathering the parameters as fp8 casts needs"),
            std::string::npos);
  EXPECT_NE(error({"precision=fp8", "parallel.zero_stage=3", "training.fp8_all_gather=true",
                   "model.moe={experts: 8, top_k: 2}"})
                .find("the float8 all-gather is modelled for dense layers"),
            std::string::npos);
  // Separate Q, K, V (gate, up) projections: dense models with plain attention.
  EXPECT_FALSE(load({"training.fused_projections=false"}).training.fused_projections);
  EXPECT_NE(error({"training.fused_projections=false", "model.moe={experts: 8, top_k: 2}"})
                .find("key 'training.fused_projections': separate projections are modelled for dense models"),
            std::string::npos);
}

// training.fp8_params needs fp8 training; training.offload_layers needs a host link in the
// cluster (gpu.host_bandwidth) and fewer layers than a model chunk holds.
TEST_F(HfConfig, Fp8ParamsAndOffloadKeys) {
  write("hf.json", LLAMA_JSON);
  const auto load = [&](const std::vector<std::string>& sets) { return load_from_hf(sets); };
  const auto error = [&](const std::vector<std::string>& sets) { return config_error([&] { load(sets); }); };
  EXPECT_TRUE(load({"precision=fp8", "training.fp8_params=true"}).training.fp8_params);
  EXPECT_NE(
      error({"precision=bf16", "training.fp8_params=true"}).find("fp8 primary weights need precision: fp8"),
      std::string::npos);
  EXPECT_EQ(load({"training.offload_layers=3"}).training.offload_layers, 3);
  EXPECT_NE(error({"training.offload_layers=-1"}).find("key 'training.offload_layers'"), std::string::npos);
  ClusterSpec cluster = config::load_cluster(SOURCE_DIR / "topologies/h200-cluster.yaml",
                                             {config::parse_override("cluster.nodes=2")});
  EXPECT_EQ(layout_error(cluster, {"batch.global_batch=64", "training.offload_layers=3"}), "");
  EXPECT_NE(layout_error(cluster, {"batch.global_batch=64", "training.offload_layers=3",
                                   "training.recompute=selective"})
                .find("training.offload_layers needs training.recompute: none"),
            std::string::npos);
  // Recomputing the first N layers of each chunk is a form of full recomputation.
  EXPECT_EQ(load({"training.recompute=full", "training.recompute_layers=2"}).training.recompute_layers, 2);
  EXPECT_EQ(layout_error(cluster,
                         {"batch.global_batch=64", "training.recompute=full", "training.recompute_layers=2"}),
            "");
  EXPECT_NE(layout_error(cluster, {"batch.global_batch=64", "training.recompute_layers=2"})
                .find("training.recompute_layers = 2 needs training.recompute: full"),
            std::string::npos);
  cluster.gpu.host_bandwidth = BytesPerSec(0.0);
  EXPECT_NE(layout_error(cluster, {"batch.global_batch=64", "training.offload_layers=3"})
                .find("needs gpu.host_bandwidth"),
            std::string::npos);
  // Overlapping the parameter all-gather needs one: the distributed optimizer's (ZeRO-1 or 2).
  EXPECT_TRUE(load({"training.overlap_param_gather=true"}).training.overlap_param_gather);
  EXPECT_NE(error({"training.overlap_param_gather=maybe"}).find("key 'training.overlap_param_gather'"),
            std::string::npos);
  EXPECT_EQ(layout_error(cluster, {"batch.global_batch=64", "parallel.zero_stage=1",
                                   "training.overlap_param_gather=true"}),
            "");
  for (const char* zero : {"parallel.zero_stage=0", "parallel.zero_stage=3"})
    EXPECT_NE(
        layout_error(cluster, {"batch.global_batch=64", zero, "training.overlap_param_gather=true"})
            .find(
                "training.overlap_param_gather overlaps the distributed optimizer's parameter all-gather and "
                "needs parallel.zero_stage 1 or 2"),
        std::string::npos)
        << zero;
}
