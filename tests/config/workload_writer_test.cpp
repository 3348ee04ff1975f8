// config::workload_yaml and config::check_workload: a spec written and read back is the same
// spec, and a spec built in code meets the loader's own checks and messages.

#include "config/config.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace stepsim;

const fs::path SOURCE_DIR = STEPSIM_SOURCE_DIR;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("stepsim_writer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

/// Writes `text` to a scratch file and loads it.
WorkloadSpec load_text(const std::string& text, const std::string& name = "w.yaml") {
  const fs::path file = scratch(name);
  std::ofstream(file) << text;
  return config::load_workload(file);
}

std::vector<fs::path> bundled_workloads() {
  std::vector<fs::path> out;
  for (const fs::path& dir : {SOURCE_DIR / "workloads", SOURCE_DIR / "tests/golden/inputs"})
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".yaml")
        out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

/// The message after "key 'KEY': " in `error`, or "" when it names no such key.
std::string message_at(const std::string& error, const std::string& key) {
  const std::string mark = "key '" + key + "': ";
  const auto at = error.find(mark);
  if (at == std::string::npos)
    return "";
  const auto from = at + mark.size();
  return error.substr(from, error.find('\n', from) - from);
}

// Every bundled workload (workloads/*.yaml, Hugging Face configs included, and the golden
// inputs) read, written and read again is the same spec, field for field.
TEST(WorkloadWriter, BundledWorkloadsRoundTrip) {
  const std::vector<fs::path> files = bundled_workloads();
  ASSERT_GE(files.size(), 10u);
  for (const fs::path& file : files) {
    const WorkloadSpec read = config::load_workload(file);
    const std::string text = config::workload_yaml(read);
    WorkloadSpec again = load_text(text, file.filename().string());
    again.source = read.source;
    EXPECT_TRUE(again == read) << file << " written as\n" << text;
    // The written file is a fixed point of the writer.
    EXPECT_EQ(config::workload_yaml(again), text) << file;
    EXPECT_NO_THROW(config::check_workload(read)) << file;
  }
}

// Only what differs from the loader's defaults is written, in the schema's order and nesting.
TEST(WorkloadWriter, WritesRequiredKeysAndWhatDiffersFromTheDefaults) {
  WorkloadSpec w;
  w.name = "tiny";
  w.model.name = "tiny";
  w.model.layers = 4;
  w.model.hidden = 256;
  w.model.heads = 8;
  w.model.kv_heads = 8;
  w.model.ffn_hidden = 1024;
  w.model.vocab = 1000;
  w.model.seq_len = 128;
  config::set_mlp(w.model, MlpKind::GELU);
  w.batch = {.global_batch = 8, .micro_batch = 1};
  w.parallel.tp = 2;
  w.precision = Precision::BF16;
  EXPECT_EQ(config::workload_yaml(w, "made in code"), "# made in code\n"
                                                      "name: tiny\n"
                                                      "model:\n"
                                                      "  layers: 4\n"
                                                      "  hidden: 256\n"
                                                      "  heads: 8\n"
                                                      "  ffn_hidden: 1024\n"
                                                      "  vocab: 1000\n"
                                                      "  seq_len: 128\n"
                                                      "  mlp: gelu\n"
                                                      "batch:\n"
                                                      "  global_batch: 8\n"
                                                      "  micro_batch: 1\n"
                                                      "parallel:\n"
                                                      "  tp: 2\n"
                                                      "  pp: 1\n"
                                                      "  schedule: 1f1b\n"
                                                      "precision: bf16\n");
  // A Llama-style model without biases is swiglu's default; biases are not.
  config::set_mlp(w.model, MlpKind::SWIGLU);
  w.model.bias = true;
  w.model.moe.experts = 8;
  w.model.moe.top_k = 2;
  w.model.moe.expert_ffn_hidden = 1024; // = ffn_hidden, the loader's default
  w.model.moe.routing.groups = 4;
  w.model.moe.routing.group_top_k = 2;
  w.training.recompute = Recompute::SELECTIVE;
  w.training.recompute_modules = RecomputeModules{.core_attn = true, .layernorm = true};
  w.training.dp_bucket = Bytes(50.0 * 1024 * 1024);
  w.parallel.chunk_layers = {1, 3};
  w.parallel.pp = 2;
  w.training.variability = {.kernel_cv = 0.05, .seed = 3};
  w.training.grad_accumulation = GradAccumulation::FP32_PASS;
  const std::string text = config::workload_yaml(w);
  EXPECT_NE(text.find("  grad_accumulation: fp32_pass\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  mlp: swiglu\n  bias: true\n  moe:\n    experts: 8\n    top_k: 2\n    routing:\n"
                      "      groups: 4\n      group_top_k: 2\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("expert_ffn_hidden"), std::string::npos) << text;
  EXPECT_NE(text.find("  chunk_layers: [1, 3]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("training:\n  dp_bucket: 50MiB\n  recompute: selective\n"
                      "  recompute_modules: [core_attn, layernorm]\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  variability:\n    kernel_cv: 0.05\n    seed: 3\n"), std::string::npos) << text;
  WorkloadSpec back = load_text(text);
  back.source.clear();
  EXPECT_TRUE(back == w) << text;
}

/// A small valid workload, built in code.
WorkloadSpec small() {
  return load_text("name: small\nmodel: {layers: 4, hidden: 256, heads: 8, ffn_hidden: 1024, vocab: 1000,"
                   " seq_len: 128, mlp: gelu}\nbatch: {global_batch: 8, micro_batch: 1}\n"
                   "parallel: {tp: 1, pp: 1, schedule: 1f1b}\nprecision: bf16\n");
}

// check_workload on a spec built in code says what the loader says of the same spec written out,
// at the same key.
TEST(WorkloadChecks, SameFindingsAsTheLoader) {
  struct Case {
    const char* key;
    void (*change)(WorkloadSpec&);
  };
  const Case cases[] = {
      {"model.heads", [](WorkloadSpec& w) { w.model.heads = w.model.kv_heads = 7; }},
      {"model.kv_heads", [](WorkloadSpec& w) { w.model.kv_heads = 3; }},
      {"model.moe",
       [](WorkloadSpec& w) {
         w.model.moe.experts = 4;
         w.model.moe.expert_ffn_hidden = 1024;
         w.model.moe.first_dense_layers = 4;
       }},
      {"model.moe",
       [](WorkloadSpec& w) {
         w.model.moe.experts = 8;
         w.model.moe.expert_ffn_hidden = 1024;
         w.model.moe.routing.groups = 3;
       }},
      {"model.full_attention_every", [](WorkloadSpec& w) { w.model.full_attention_every = 2; }},
      {"model.bias",
       [](WorkloadSpec& w) {
         config::set_mlp(w.model, MlpKind::SWIGLU);
         w.model.bias = true;
         w.model.mla =
             MlaSpec{.kv_lora_rank = 64, .qk_nope_head_dim = 32, .qk_rope_head_dim = 16, .v_head_dim = 32};
       }},
      {"batch.micro_batch",
       [](WorkloadSpec& w) {
         w.model.seq_len = int64_t{1} << 27;
         w.batch.micro_batch = 64;
       }},
      {"training.fp8_params", [](WorkloadSpec& w) { w.training.fp8_params = true; }},
      {"training.recompute_modules",
       [](WorkloadSpec& w) {
         w.training.recompute = Recompute::SELECTIVE;
         w.training.recompute_modules.moe_act = true;
       }},
  };
  for (const Case& c : cases) {
    WorkloadSpec w = small();
    w.source.clear();
    c.change(w);
    const std::string in_code = config_error([&] { config::check_workload(w); });
    const std::string text = config::workload_yaml(w);
    const std::string from_file = config_error([&] { (void)load_text(text); });
    ASSERT_FALSE(in_code.empty()) << c.key;
    EXPECT_EQ(in_code.rfind("workload 'small': key '" + std::string(c.key) + "': ", 0), 0u) << in_code;
    EXPECT_FALSE(message_at(from_file, c.key).empty()) << c.key << ": " << from_file << "\n" << text;
    EXPECT_EQ(message_at(in_code, c.key), message_at(from_file, c.key)) << text;
  }
}

// Sizes the reader would refuse while reading are refused in code too (no division by a zero
// head count), naming the key; the spec's source names the place.
TEST(WorkloadChecks, RangesOfASpecBuiltInCode) {
  WorkloadSpec w = small();
  w.model.heads = 0;
  w.parallel.zero_stage = 4;
  w.source = "runs/x/workload.yaml";
  const std::string e = config_error([&] { config::check_workload(w); });
  EXPECT_NE(e.find("runs/x/workload.yaml: key 'model.heads': expected an integer in 1..65536"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("key 'parallel.zero_stage': expected an integer in 0..3 (the size limit), found 4"),
            std::string::npos)
      << e;
  EXPECT_NO_THROW(config::check_workload(small()));
  WorkloadSpec heavy = small();
  heavy.source.clear(); // named by the workload's name
  heavy.training.optimizer_bytes_per_param = 2048;
  EXPECT_NE(
      config_error([&] {
        config::check_workload(heavy);
      }).find("workload 'small': key 'training.optimizer_bytes_per_param': expected a number in 0..1024"),
      std::string::npos);
}

} // namespace
