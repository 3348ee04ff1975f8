// Training stack presets (sim/config/stacks.cpp, docs/stacks.md): each preset expands into the
// values docs/stacks.md states, a key the file writes wins, a layout-dependent value applies only
// where the layout has it, and an unknown preset or version is an error naming the file and key.

#include "config/config.hpp"
#include "config/stacks.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

using namespace stepsim;
namespace fs = std::filesystem;

namespace {

const fs::path SOURCE_DIR = STEPSIM_SOURCE_DIR;

/// A dense model; `parallel` and `training` are the mappings' lines (two-space indented).
std::string workload_text(const std::string& parallel, const std::string& training,
                          const std::string& precision = "bf16", const std::string& model_extra = "") {
  return "name: stack-test\n"
         "model: {layers: 8, hidden: 1024, heads: 16, ffn_hidden: 4096, vocab: 32000, seq_len: 2048, mlp: "
         "swiglu" +
         model_extra +
         "}\n"
         "batch: {global_batch: 64, micro_batch: 1}\n"
         "parallel:\n  schedule: 1f1b\n" +
         parallel + "precision: " + precision + "\ntraining:\n" + training;
}

class StackTest : public ::testing::Test {
protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("stepsim_stack_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path path() const { return dir_ / "workload.yaml"; }
  /// The workload as check_layout expands it on one 8-GPU DGX H100 node.
  WorkloadSpec expanded(const std::string& text, const std::vector<config::Override>& more = {}) const {
    std::ofstream(path()) << text;
    std::vector<config::Override> overrides = {{"cluster.nodes", "1"}};
    overrides.insert(overrides.end(), more.begin(), more.end());
    const ClusterSpec cluster = config::load_cluster(SOURCE_DIR / "topologies/dgx-h100.yaml", overrides);
    return config::check_layout(cluster, config::load_workload(path(), overrides)).workload;
  }
  std::string error(const std::string& text) const {
    std::ofstream(path()) << text;
    try {
      (void)config::load_workload(path());
    } catch (const ConfigError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no ConfigError";
    return "";
  }

private:
  fs::path dir_;
};

StackOrigin origin(const WorkloadSpec& w, StackKey k) {
  return w.stack.origin[static_cast<std::size_t>(k)];
}

} // namespace

// NeMo 2.0's recipes on tp 2 x pp 2 x dp 2: sequence parallelism, the distributed optimizer with
// its parameter gather under the forward, fused attention, Megatron-Core's whole-tensor sends.
TEST_F(StackTest, NemoRecipesExpand) {
  const WorkloadSpec w =
      expanded(workload_text("  tp: 2\n  pp: 2\n", "  stack: {name: nemo, version: \"24.07\"}\n"));
  EXPECT_TRUE(w.parallel.sp);
  EXPECT_EQ(w.parallel.zero_stage, 1);
  EXPECT_TRUE(w.training.overlap_param_gather);
  EXPECT_TRUE(w.training.flash_attention);
  EXPECT_TRUE(w.parallel.tp_grad_overlap);
  EXPECT_FALSE(w.parallel.pp_scatter_gather);
  EXPECT_FALSE(w.training.grad_reduce_in_fp32); // not set by the preset (docs/stacks.md)
  EXPECT_EQ(origin(w, StackKey::SP), StackOrigin::STACK);
  EXPECT_EQ(origin(w, StackKey::GRAD_REDUCE_IN_FP32), StackOrigin::BUILT_IN);
}

// Megatron-LM of 2021: unfused attention, the TP all-reduce after the backward, scatter/gather of
// pipeline messages, no distributed optimizer, and bf16 gradients reduced in fp32.
TEST_F(StackTest, MegatronLm2021Expands) {
  const WorkloadSpec w = expanded(workload_text(
      "  tp: 2\n  pp: 2\n", "  stack: {name: megatron-lm, version: \"2021\"}\n  recompute: none\n"));
  EXPECT_FALSE(w.training.flash_attention);
  EXPECT_FALSE(w.parallel.tp_grad_overlap);
  EXPECT_TRUE(w.parallel.pp_scatter_gather);
  EXPECT_FALSE(w.parallel.sp);
  EXPECT_EQ(w.parallel.zero_stage, 0);
  EXPECT_TRUE(w.training.grad_reduce_in_fp32);
  // fp16 keeps 16-bit reductions (the --bf16 branch forces fp32 accumulation).
  const WorkloadSpec fp16 = expanded(
      workload_text("  tp: 2\n  pp: 2\n", "  stack: {name: megatron-lm, version: \"2021\"}\n", "fp16"));
  EXPECT_FALSE(fp16.training.grad_reduce_in_fp32);
  EXPECT_EQ(origin(fp16, StackKey::GRAD_REDUCE_IN_FP32), StackOrigin::BUILT_IN);
  // 2022: the asynchronous TP all-reduce is on.
  const WorkloadSpec later =
      expanded(workload_text("  tp: 2\n  pp: 2\n", "  stack: {name: megatron-lm, version: \"2022\"}\n"));
  EXPECT_TRUE(later.parallel.tp_grad_overlap);
  EXPECT_FALSE(later.training.flash_attention);
}

// DeepSpeed's ZeRO-3 of 2021 gathers tensor by tensor; 0.6 prefetches. ZeRO-3 is the file's.
TEST_F(StackTest, DeepSpeedZero3Fetch) {
  const std::string par = "  tp: 1\n  pp: 1\n  zero_stage: 3\n";
  const WorkloadSpec old =
      expanded(workload_text(par, "  stack: {name: deepspeed, version: \"0.3\"}\n", "fp16"));
  EXPECT_EQ(old.training.zero3_fetch, Zero3Fetch::BLOCKING);
  EXPECT_EQ(origin(old, StackKey::ZERO_STAGE), StackOrigin::WORKLOAD_FILE);
  EXPECT_FALSE(old.training.flash_attention);
  const WorkloadSpec later = expanded(workload_text(par, "  stack: {name: deepspeed}\n", "fp16"));
  EXPECT_EQ(later.stack.version, "0.6"); // the newest when the file gives none
  EXPECT_EQ(later.training.zero3_fetch, Zero3Fetch::PREFETCH);
  // Without ZeRO-3 the blocking fetch does not apply (the layout check would refuse it).
  const WorkloadSpec zero0 =
      expanded(workload_text("  tp: 1\n  pp: 1\n", "  stack: {name: deepspeed, version: \"0.3\"}\n", "fp16"));
  EXPECT_EQ(zero0.training.zero3_fetch, Zero3Fetch::PREFETCH);
  EXPECT_EQ(zero0.parallel.zero_stage, 0);
}

// FSDP trainers shard everything; torchtitan reduces gradients in fp32 and adds SP under TP,
// Composer's PURE mixed precision reduces in bf16.
TEST_F(StackTest, FsdpTrainersExpand) {
  const WorkloadSpec titan =
      expanded(workload_text("  tp: 2\n  pp: 1\n", "  stack: {name: torchtitan, version: \"0.1\"}\n"));
  EXPECT_EQ(titan.parallel.zero_stage, 3);
  EXPECT_TRUE(titan.training.grad_reduce_in_fp32);
  EXPECT_TRUE(titan.parallel.sp);
  EXPECT_TRUE(titan.training.flash_attention);
  // DTensor's TP: the input gradient's reduce-scatter after the linear's whole backward.
  EXPECT_FALSE(titan.parallel.tp_grad_overlap);
  EXPECT_EQ(origin(titan, StackKey::TP_GRAD_OVERLAP), StackOrigin::STACK);
  // torchtitan runs eagerly unless compiled, and its async TP is off by default.
  EXPECT_EQ(titan.training.pointwise, Pointwise::EAGER);
  EXPECT_EQ(origin(titan, StackKey::POINTWISE), StackOrigin::STACK);
  EXPECT_FALSE(titan.parallel.tp_comm_overlap);
  EXPECT_EQ(origin(titan, StackKey::TP_COMM_OVERLAP), StackOrigin::STACK);
  // Written keys win: a compiled torchtitan run with async TP.
  const WorkloadSpec compiled =
      expanded(workload_text("  tp: 2\n  pp: 1\n  tp_comm_overlap: true\n",
                             "  pointwise: fused\n  stack: {name: torchtitan, version: \"0.1\"}\n"));
  EXPECT_EQ(compiled.training.pointwise, Pointwise::FUSED);
  EXPECT_TRUE(compiled.parallel.tp_comm_overlap);
  EXPECT_EQ(origin(compiled, StackKey::TP_COMM_OVERLAP), StackOrigin::WORKLOAD_FILE);
  // Without TP (no sp) the async-TP value does not apply: the built-in default.
  const WorkloadSpec no_tp =
      expanded(workload_text("  tp: 1\n  pp: 1\n", "  stack: {name: torchtitan, version: \"0.1\"}\n"));
  EXPECT_EQ(origin(no_tp, StackKey::TP_COMM_OVERLAP), StackOrigin::BUILT_IN);
  EXPECT_EQ(origin(no_tp, StackKey::TP_GRAD_OVERLAP), StackOrigin::BUILT_IN);
  const WorkloadSpec composer =
      expanded(workload_text("  tp: 1\n  pp: 1\n", "  stack: {name: composer, version: \"0.3\"}\n"));
  EXPECT_EQ(composer.parallel.zero_stage, 3);
  EXPECT_FALSE(composer.training.grad_reduce_in_fp32);
  EXPECT_TRUE(composer.training.flash_attention);
  EXPECT_EQ(composer.training.pointwise, Pointwise::FUSED);
  EXPECT_EQ(origin(composer, StackKey::POINTWISE), StackOrigin::BUILT_IN);
  for (const char* v : {"1", "2"}) {
    const WorkloadSpec fsdp = expanded(
        workload_text("  tp: 1\n  pp: 1\n", std::string("  stack: {name: fsdp, version: \"") + v + "\"}\n"));
    EXPECT_EQ(fsdp.parallel.zero_stage, 3) << v;
    EXPECT_FALSE(fsdp.training.grad_reduce_in_fp32) << v;
    // FSDP shards; it says nothing of how the model's kernels run (the built-in fused).
    EXPECT_EQ(origin(fsdp, StackKey::POINTWISE), StackOrigin::BUILT_IN) << v;
  }
}

// Megatron-Bridge: NeMo's values, expert TP 1 for an MoE model under TP, fp8 primary weights
// under fp8; neither for a dense bf16 model.
TEST_F(StackTest, MegatronBridgeMoeAndFp8) {
  const std::string moe = ", moe: {experts: 8, top_k: 2}";
  const WorkloadSpec w = expanded(
      workload_text("  tp: 2\n  pp: 1\n  ep: 4\n", "  stack: {name: megatron-bridge}\n", "fp8", moe));
  EXPECT_EQ(w.parallel.etp, 1);
  EXPECT_TRUE(w.training.fp8_params);
  EXPECT_TRUE(w.parallel.sp); // folding the experts needs it
  const WorkloadSpec dense =
      expanded(workload_text("  tp: 2\n  pp: 1\n", "  stack: {name: megatron-bridge}\n", "bf16"));
  EXPECT_EQ(dense.parallel.etp, 0);
  EXPECT_FALSE(dense.training.fp8_params);
  EXPECT_EQ(origin(dense, StackKey::ETP), StackOrigin::BUILT_IN);
}

// Megatron-Core: the argparse defaults: no SP, no distributed optimizer, fused attention.
TEST_F(StackTest, MegatronCoreExpands) {
  const WorkloadSpec w = expanded(workload_text("  tp: 2\n  pp: 2\n", "  stack: {name: megatron-core}\n"));
  EXPECT_FALSE(w.parallel.sp);
  EXPECT_EQ(w.parallel.zero_stage, 0);
  EXPECT_TRUE(w.training.flash_attention);
  EXPECT_FALSE(w.parallel.pp_scatter_gather);
  EXPECT_TRUE(w.training.grad_reduce_in_fp32);
}

// The fused attention kernel: PyTorch SDPA's flash backend (FlashAttention-2) for the PyTorch
// trainers, Transformer Engine's cuDNN attention for the Megatron-Core stacks; only with fused
// attention, and a written key wins.
TEST_F(StackTest, AttentionKernelByStack) {
  for (const char* stack : {"torchtitan", "fsdp", "composer"}) {
    const WorkloadSpec w =
        expanded(workload_text("  tp: 1\n  pp: 1\n", std::string("  stack: {name: ") + stack + "}\n"));
    EXPECT_TRUE(w.training.flash_attention) << stack;
    EXPECT_EQ(w.training.attention_kernel, AttentionKernel::FLASH2) << stack;
    EXPECT_EQ(origin(w, StackKey::ATTENTION_KERNEL), StackOrigin::STACK) << stack;
  }
  for (const char* stack : {"megatron-core", "nemo", "megatron-bridge"}) {
    const WorkloadSpec w =
        expanded(workload_text("  tp: 1\n  pp: 1\n", std::string("  stack: {name: ") + stack + "}\n"));
    EXPECT_EQ(w.training.attention_kernel, AttentionKernel::CUDNN) << stack;
    EXPECT_EQ(origin(w, StackKey::ATTENTION_KERNEL), StackOrigin::STACK) << stack;
  }
  // PyTorch FSDP keeps fp32 shards; the Megatron stacks' ZeRO is not FSDP.
  for (const char* stack : {"torchtitan", "fsdp", "composer"})
    EXPECT_TRUE(expanded(workload_text("  tp: 1\n  pp: 1\n", std::string("  stack: {name: ") + stack + "}\n"))
                    .training.fp32_shards)
        << stack;
  EXPECT_FALSE(expanded(workload_text("  tp: 1\n  pp: 1\n  zero_stage: 3\n", "  stack: {name: nemo}\n"))
                   .training.fp32_shards);
  // Unfused attention (written): no fused kernel to choose, the built-in default.
  const WorkloadSpec unfused = expanded(
      workload_text("  tp: 1\n  pp: 1\n", "  stack: {name: torchtitan}\n  flash_attention: false\n"));
  EXPECT_EQ(unfused.training.attention_kernel, AttentionKernel::CUDNN);
  EXPECT_EQ(origin(unfused, StackKey::ATTENTION_KERNEL), StackOrigin::BUILT_IN);
  // Megatron-LM of 2021 has no fused attention and no kernel value.
  const WorkloadSpec old =
      expanded(workload_text("  tp: 1\n  pp: 1\n", "  stack: {name: megatron-lm, version: \"2021\"}\n"));
  EXPECT_EQ(origin(old, StackKey::ATTENTION_KERNEL), StackOrigin::BUILT_IN);
  const WorkloadSpec written = expanded(
      workload_text("  tp: 1\n  pp: 1\n", "  stack: {name: torchtitan}\n  attention_kernel: flash3\n"));
  EXPECT_EQ(written.training.attention_kernel, AttentionKernel::FLASH3);
  EXPECT_EQ(origin(written, StackKey::ATTENTION_KERNEL), StackOrigin::WORKLOAD_FILE);
  const WorkloadSpec set = expanded(workload_text("  tp: 1\n  pp: 1\n", "  stack: {name: torchtitan}\n"),
                                    {{"training.attention_kernel", "cudnn"}});
  EXPECT_EQ(set.training.attention_kernel, AttentionKernel::CUDNN);
  EXPECT_EQ(origin(set, StackKey::ATTENTION_KERNEL), StackOrigin::WORKLOAD_FILE);
  // A value the key does not know: the file, the key and the choices.
  const std::string bad = error(workload_text("  tp: 1\n  pp: 1\n", "  attention_kernel: flash4\n"));
  EXPECT_NE(bad.find(path().string() + ":"), std::string::npos) << bad;
  EXPECT_NE(bad.find("attention_kernel"), std::string::npos) << bad;
  EXPECT_NE(bad.find("flash2"), std::string::npos) << bad;
}

// A key the file writes, or --set gives, wins over the preset.
TEST_F(StackTest, MegatronDeepSpeedBf16Optimizer) {
  // DeepSpeed's pipeline engine under bf16 (BF16_Optimizer): an fp32 accumulation pass after
  // every backward pass and the fp32 gradients all-reduced.
  const std::string layout = "  tp: 2\n  pp: 2\n";
  const WorkloadSpec bf16 = expanded(workload_text(layout, "  stack: {name: megatron-deepspeed}\n"));
  EXPECT_EQ(bf16.training.grad_accumulation, GradAccumulation::FP32_PASS);
  EXPECT_EQ(origin(bf16, StackKey::GRAD_ACCUMULATION), StackOrigin::STACK);
  EXPECT_TRUE(bf16.training.grad_reduce_in_fp32);
  EXPECT_EQ(origin(bf16, StackKey::GRAD_REDUCE_IN_FP32), StackOrigin::STACK);
  // fp16 runs DeepSpeed's fp16 optimizer: gradients accumulate and reduce in fp16.
  const WorkloadSpec fp16 = expanded(workload_text(layout, "  stack: {name: megatron-deepspeed}\n", "fp16"));
  EXPECT_EQ(fp16.training.grad_accumulation, GradAccumulation::FUSED);
  EXPECT_EQ(origin(fp16, StackKey::GRAD_ACCUMULATION), StackOrigin::BUILT_IN);
  EXPECT_FALSE(fp16.training.grad_reduce_in_fp32);
  // The file wins; the Megatron stacks accumulate inside the weight-gradient GEMMs.
  const WorkloadSpec written =
      expanded(workload_text(layout, "  stack: {name: megatron-deepspeed}\n  grad_accumulation: fused\n"));
  EXPECT_EQ(written.training.grad_accumulation, GradAccumulation::FUSED);
  EXPECT_EQ(origin(written, StackKey::GRAD_ACCUMULATION), StackOrigin::WORKLOAD_FILE);
  for (const char* stack : {"megatron-lm", "megatron-core", "nemo", "torchtitan"})
    EXPECT_EQ(expanded(workload_text(layout, std::string("  stack: {name: ") + stack + "}\n"))
                  .training.grad_accumulation,
              GradAccumulation::FUSED)
        << stack;
}

// DeepSpeed's pipeline engine: sends and receives in its 1F1B instruction order, with pp > 1;
// another schedule keeps the built-in default, and written with one it is refused.
TEST_F(StackTest, DeepSpeedPipelineP2pBlocks) {
  for (const char* stack : {"megatron-deepspeed", "deepspeed"}) {
    const WorkloadSpec w =
        expanded(workload_text("  tp: 2\n  pp: 2\n", std::string("  stack: {name: ") + stack + "}\n"));
    EXPECT_TRUE(w.parallel.pp_p2p_blocking) << stack;
    EXPECT_EQ(origin(w, StackKey::PP_P2P_BLOCKING), StackOrigin::STACK) << stack;
  }
  const WorkloadSpec flat =
      expanded(workload_text("  tp: 2\n  pp: 1\n", "  stack: {name: megatron-deepspeed}\n"));
  EXPECT_FALSE(flat.parallel.pp_p2p_blocking);
  EXPECT_EQ(origin(flat, StackKey::PP_P2P_BLOCKING), StackOrigin::BUILT_IN);
  for (const char* stack : {"megatron-lm", "megatron-core", "nemo"})
    EXPECT_FALSE(
        expanded(workload_text("  tp: 2\n  pp: 2\n", std::string("  stack: {name: ") + stack + "}\n"))
            .parallel.pp_p2p_blocking)
        << stack;
  std::ofstream(path()) << workload_text("  tp: 2\n  pp: 2\n  pp_p2p_blocking: true\n",
                                         "  recompute: full\n");
  const ClusterSpec cluster =
      config::load_cluster(SOURCE_DIR / "topologies/dgx-h100.yaml", {{"cluster.nodes", "1"}});
  try {
    (void)config::check_layout(cluster, config::load_workload(path(), {{"parallel.schedule", "gpipe"}}));
    ADD_FAILURE() << "gpipe with blocking pipeline sends accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("pp_p2p_blocking"), std::string::npos) << e.what();
  }
}

// PyTorch's expandable segments: torchtitan's launch script sets them for every run; no other
// preset's release sets them as a default, and a file's own value wins.
TEST_F(StackTest, ExpandableSegmentsWhereTheLaunchScriptSetsThem) {
  const WorkloadSpec titan = expanded(workload_text("  tp: 2\n  pp: 1\n", "  stack: {name: torchtitan}\n"));
  EXPECT_TRUE(titan.training.expandable_segments);
  EXPECT_EQ(origin(titan, StackKey::EXPANDABLE_SEGMENTS), StackOrigin::STACK);
  for (const char* stack : {"megatron-lm", "megatron-core", "nemo", "megatron-bridge", "megatron-deepspeed",
                            "deepspeed", "fsdp", "composer"}) {
    const WorkloadSpec w =
        expanded(workload_text("  tp: 2\n  pp: 1\n", std::string("  stack: {name: ") + stack + "}\n"));
    EXPECT_FALSE(w.training.expandable_segments) << stack;
    EXPECT_EQ(origin(w, StackKey::EXPANDABLE_SEGMENTS), StackOrigin::BUILT_IN) << stack;
  }
  const WorkloadSpec off = expanded(
      workload_text("  tp: 2\n  pp: 1\n", "  stack: {name: torchtitan}\n  expandable_segments: false\n"));
  EXPECT_FALSE(off.training.expandable_segments);
  EXPECT_EQ(origin(off, StackKey::EXPANDABLE_SEGMENTS), StackOrigin::WORKLOAD_FILE);
  const WorkloadSpec on =
      expanded(workload_text("  tp: 2\n  pp: 1\n", "  stack: {name: nemo}\n  expandable_segments: true\n"));
  EXPECT_TRUE(on.training.expandable_segments);
}

TEST_F(StackTest, ExplicitKeysWin) {
  const WorkloadSpec w = expanded(workload_text("  tp: 2\n  pp: 2\n  sp: false\n  zero_stage: 0\n",
                                                "  stack: {name: nemo}\n  flash_attention: false\n"),
                                  {{"training.overlap_param_gather", "false"}});
  EXPECT_FALSE(w.parallel.sp);
  EXPECT_EQ(w.parallel.zero_stage, 0);
  EXPECT_FALSE(w.training.flash_attention);
  EXPECT_FALSE(w.training.overlap_param_gather);
  for (StackKey k :
       {StackKey::SP, StackKey::ZERO_STAGE, StackKey::FLASH_ATTENTION, StackKey::OVERLAP_PARAM_GATHER})
    EXPECT_EQ(origin(w, k), StackOrigin::WORKLOAD_FILE) << config::stack_key_path(k);
  EXPECT_EQ(origin(w, StackKey::TP_GRAD_OVERLAP), StackOrigin::STACK);
  // The stack itself given with --set.
  const WorkloadSpec set =
      expanded(workload_text("  tp: 2\n  pp: 2\n", "  recompute: none\n"), {{"training.stack.name", "nemo"}});
  EXPECT_TRUE(set.parallel.sp);
}

// Layout-dependent values: sp needs tp > 1 and a sequence the TP ranks split; the parameter
// gather needs the distributed optimizer over dp > 1.
TEST_F(StackTest, LayoutConditionsHold) {
  const WorkloadSpec tp1 = expanded(workload_text("  tp: 1\n  pp: 8\n", "  stack: {name: nemo}\n"));
  EXPECT_FALSE(tp1.parallel.sp);                   // the layout check would refuse sp with tp 1
  EXPECT_FALSE(tp1.training.overlap_param_gather); // dp = 1
  EXPECT_EQ(origin(tp1, StackKey::OVERLAP_PARAM_GATHER), StackOrigin::BUILT_IN);
  EXPECT_EQ(tp1.parallel.zero_stage, 1);
  // zero_stage 3 written: no distributed-optimizer gather.
  const WorkloadSpec z3 =
      expanded(workload_text("  tp: 2\n  pp: 1\n  zero_stage: 3\n", "  stack: {name: nemo}\n"));
  EXPECT_FALSE(z3.training.overlap_param_gather);
  EXPECT_TRUE(z3.parallel.sp);
}

// The expansion is idempotent: check_layout on a checked workload changes nothing.
TEST_F(StackTest, ExpansionIsIdempotent) {
  const WorkloadSpec once = expanded(workload_text("  tp: 2\n  pp: 2\n", "  stack: {name: nemo}\n"));
  const ClusterSpec cluster =
      config::load_cluster(SOURCE_DIR / "topologies/dgx-h100.yaml", {{"cluster.nodes", "1"}});
  const WorkloadSpec twice = config::check_layout(cluster, once).workload;
  EXPECT_EQ(config::explain_stack(once), config::explain_stack(twice));
}

// Unknown presets and versions: a ConfigError naming the file, the key and the presets.
TEST_F(StackTest, UnknownPresetOrVersionIsAnError) {
  const std::string name = error(workload_text("  tp: 1\n  pp: 1\n", "  stack: {name: nemo2}\n"));
  EXPECT_NE(name.find(path().string() + ":"), std::string::npos) << name;
  EXPECT_NE(name.find("training.stack.name"), std::string::npos) << name;
  EXPECT_NE(name.find("unknown training stack 'nemo2'"), std::string::npos) << name;
  EXPECT_NE(name.find("nemo (23.11, 24.07)"), std::string::npos) << name;
  const std::string version =
      error(workload_text("  tp: 1\n  pp: 1\n", "  stack: {name: nemo, version: \"24.08\"}\n"));
  EXPECT_NE(version.find("training.stack.version"), std::string::npos) << version;
  EXPECT_NE(version.find("has no version '24.08'"), std::string::npos) << version;
  const std::string missing = error(workload_text("  tp: 1\n  pp: 1\n", "  stack: {version: \"24.07\"}\n"));
  EXPECT_NE(missing.find("training.stack"), std::string::npos) << missing;
  EXPECT_NE(missing.find("name"), std::string::npos) << missing;
}

// The table: every preset has versions oldest first, every value a citation, the release of a
// year is the newest out by then.
TEST(StackTable, VersionsAndCitations) {
  for (const config::StackPreset& p : config::stack_presets()) {
    ASSERT_FALSE(p.versions.empty()) << p.name;
    EXPECT_EQ(config::find_stack(p.name), &p);
    for (std::size_t i = 0; i < p.versions.size(); ++i) {
      if (i > 0) {
        EXPECT_LE(p.versions[i - 1].released, p.versions[i].released) << p.name;
      }
      EXPECT_FALSE(p.versions[i].defaults.empty()) << p.name;
      for (const config::StackDefault& d : p.versions[i].defaults)
        EXPECT_FALSE(d.source.empty()) << p.name << "@" << p.versions[i].version;
    }
  }
  const config::StackPreset& nemo = *config::find_stack("nemo");
  EXPECT_EQ(config::version_of_year(nemo, 2022).version, "23.11"); // before both: the oldest
  EXPECT_EQ(config::version_of_year(nemo, 2023).version, "23.11");
  EXPECT_EQ(config::version_of_year(nemo, 2026).version, "24.07");
  EXPECT_EQ(config::find_version(nemo, "")->version, "24.07");
  EXPECT_EQ(config::find_stack("NeMo"), nullptr); // names are exact
}

// docs/stacks.md lists every preset's release and each of its values with its condition and
// source, as the table holds them.
TEST(StackTable, DocumentListsEveryValue) {
  std::ifstream in(SOURCE_DIR / "docs/stacks.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(doc.empty());
  for (const config::StackPreset& p : config::stack_presets())
    for (const config::StackVersion& v : p.versions) {
      const std::string release = "`" + std::string(p.name) + "@" + std::string(v.version) + "`";
      const std::size_t at = doc.find(release + ": ");
      ASSERT_NE(at, std::string::npos) << release;
      const std::size_t end = doc.find("\n`", at + 1); // the next release's heading line
      const std::string section = doc.substr(at, end == std::string::npos ? std::string::npos : end - at);
      for (const config::StackDefault& d : v.defaults) {
        std::string source(d.source);
        for (std::size_t bar = source.find('|'); bar != std::string::npos; bar = source.find('|', bar + 2))
          source.replace(bar, 1, "\\|");
        const std::string_view when = config::to_string(d.when);
        const std::string row =
            "| `" + std::string(config::stack_key_path(d.key)) + "` | `" + config::to_string(d.value) +
            "` | " + (when.empty() ? std::string("always") : std::string(when)) + " | " + source + " |";
        EXPECT_NE(section.find(row), std::string::npos) << release << ": " << row;
      }
    }
}
