// The record's own vocabulary (sim/validate/record_vocabulary.cpp): schedule, ZeRO stage,
// precision, recomputation and inter-node texts as published records write them.

#include "validate/record_vocabulary.hpp"

#include <gtest/gtest.h>

namespace {

using namespace stepsim;
using validate::parse_precision;
using validate::parse_recompute;
using validate::parse_recompute_modules;
using validate::parse_schedule;
using validate::parse_zero_stage;

TEST(RecordVocabulary, Schedule) {
  EXPECT_EQ(parse_schedule("ZB-H2").named, Schedule::ZB_H2);
  EXPECT_EQ(parse_schedule("zb-h1 (zero bubble)").named, Schedule::ZB_H1);
  EXPECT_EQ(parse_schedule("GPipe").named, Schedule::GPIPE);
  EXPECT_EQ(parse_schedule("1F1B").named, Schedule::ONE_F_ONE_B);
  // A zero-bubble name wins over the 1F1B it is built on.
  EXPECT_EQ(parse_schedule("1F1B, ZB-H1").named, Schedule::ZB_H1);
  EXPECT_FALSE(parse_schedule("").named);
  EXPECT_FALSE(parse_schedule("PipeDream").named);
  // Interleaving named on its own, not as one of two possibilities.
  EXPECT_TRUE(parse_schedule("interleaved 1F1B").interleaved);
  EXPECT_TRUE(parse_schedule("Interleaved").interleaved);
  EXPECT_FALSE(parse_schedule("1F1B / interleaved not stated").interleaved);
  EXPECT_FALSE(parse_schedule("1F1B or interleaved").interleaved);
  // The interleaved schedule named, its depth not: interleaved (the mapping picks the depth).
  EXPECT_TRUE(parse_schedule("interleaved (V per rank not stated)").interleaved);
  EXPECT_TRUE(parse_schedule("1F1B / interleaved not stated").one_f_one_b_family);
  EXPECT_FALSE(parse_schedule("GPipe").one_f_one_b_family);
  EXPECT_TRUE(parse_schedule("DualPipe").bidirectional);
  EXPECT_TRUE(parse_schedule("dual pipe").bidirectional);
  EXPECT_FALSE(parse_schedule("1F1B").bidirectional);
}

TEST(RecordVocabulary, ZeroStage) {
  EXPECT_EQ(parse_zero_stage("1 (BF16_Optimizer)", false).value, 1);
  EXPECT_EQ(parse_zero_stage("3", false).value, 3);
  EXPECT_EQ(parse_zero_stage("FSDP FULL_SHARD", false).value, 3);
  EXPECT_EQ(parse_zero_stage("HYBRID_SHARD", false).value, 3);
  EXPECT_EQ(parse_zero_stage("FSDP SHARD_GRAD_OP", false).value, 2);
  // A leading digit decides over the words after it.
  EXPECT_EQ(parse_zero_stage("2 (FSDP of the optimizer states and gradients)", false).value, 2);
  EXPECT_EQ(parse_zero_stage("", true).value, 3); // fsdp: true is a full shard
  const validate::Parsed<int> none = parse_zero_stage("", false);
  EXPECT_FALSE(none.value);
  EXPECT_TRUE(none.error.empty());
  const validate::Parsed<int> four = parse_zero_stage("4", false);
  EXPECT_FALSE(four.value);
  EXPECT_EQ(four.error, "zero_stage 4 does not exist");
  EXPECT_EQ(parse_zero_stage("ZeRO++", false).error, "unrecognised zero_stage 'ZeRO++'");
}

TEST(RecordVocabulary, Precision) {
  EXPECT_EQ(parse_precision("fp8, bf16 master weights").value, Precision::FP8);
  EXPECT_EQ(parse_precision("float8_e4m3fn").value, Precision::FP8);
  EXPECT_EQ(parse_precision("E5M2 gradients").value, Precision::FP8);
  EXPECT_EQ(parse_precision("torch.bfloat16").value, Precision::BF16);
  EXPECT_EQ(parse_precision("BF16").value, Precision::BF16);
  EXPECT_EQ(parse_precision("mixed fp16").value, Precision::FP16);
  EXPECT_EQ(parse_precision("half").value, Precision::FP16);
  EXPECT_FALSE(parse_precision("").value);
  EXPECT_FALSE(parse_precision("null").value);
  EXPECT_TRUE(parse_precision("null").error.empty());
  EXPECT_EQ(parse_precision("tf32").error, "precision 'tf32' is not modelled (bf16, fp16 or fp8 training)");
}

TEST(RecordVocabulary, Recompute) {
  EXPECT_EQ(parse_recompute("selective (attention)", false).value, Recompute::SELECTIVE);
  EXPECT_EQ(parse_recompute("full", false).value, Recompute::FULL);
  EXPECT_TRUE(parse_recompute("full", false).note.empty());
  EXPECT_EQ(parse_recompute("none", false).value, Recompute::NONE);
  EXPECT_EQ(parse_recompute("no recompute", false).value, Recompute::NONE);
  EXPECT_EQ(parse_recompute("Disabled", false).value, Recompute::NONE);
  // A leading "none" or "no" decides over the words after it.
  EXPECT_EQ(parse_recompute("none (trained without activation checkpointing)", false).value, Recompute::NONE);
  EXPECT_EQ(parse_recompute("no (full recomputation off)", false).value, Recompute::NONE);
  EXPECT_EQ(parse_recompute("nonstandard checkpointing", false).value, Recompute::FULL);
  // Checkpointing without a kind is whole-layer recomputation, and says where it came from.
  const validate::Parsed<Recompute> ckpt = parse_recompute("activation checkpointing", false);
  EXPECT_EQ(ckpt.value, Recompute::FULL);
  EXPECT_EQ(ckpt.note, "recompute=full (from 'activation checkpointing')");
  EXPECT_EQ(parse_recompute("true", false).value, Recompute::FULL);
  // Not given: none, listed; selective when the record names the modules it repeats.
  EXPECT_EQ(parse_recompute("", false).value, Recompute::NONE);
  EXPECT_EQ(parse_recompute("", false).note, "recompute=none");
  EXPECT_EQ(parse_recompute("", true).value, Recompute::SELECTIVE);
  EXPECT_EQ(parse_recompute("sometimes", false).error, "unrecognised recompute 'sometimes'");
  EXPECT_FALSE(parse_recompute("sometimes", false).value);
}

TEST(RecordVocabulary, RecomputeModules) {
  EXPECT_FALSE(parse_recompute_modules({}).value);
  const validate::Parsed<RecomputeModules> m = parse_recompute_modules({"layernorm", "moe_act"});
  ASSERT_TRUE(m.value);
  EXPECT_TRUE(*m.value == (RecomputeModules{.core_attn = false, .layernorm = true, .moe_act = true}));
  EXPECT_NE(
      parse_recompute_modules({"moe"}).error.find("found 'moe' (Megatron's moe and shared_experts are not "
                                                  "modelled)"),
      std::string::npos);
  EXPECT_EQ(parse_recompute_modules({"mlp", "mlp"}).error, "recompute_modules: module 'mlp' listed twice");
}

// A per-op checkpointing policy named in the recompute text (recompute_modules: alternate_linears).
TEST(RecordVocabulary, PerOpCheckpointingPolicy) {
  EXPECT_TRUE(validate::names_per_op_policy(
      "selective (torchtitan selective activation checkpointing, per-op policy: selective_ac_option op)"));
  EXPECT_TRUE(validate::names_per_op_policy("selective (per-op selective activation checkpointing)"));
  EXPECT_FALSE(validate::names_per_op_policy("selective"));
  EXPECT_FALSE(validate::names_per_op_policy("selective (attention core only) + sequence parallelism"));
}

// What a framework text states in the mechanism's own words: eager or compiled pointwise kernels,
// pipelined TP communication ("TP (vanilla)" is not), the parameter all-gather under the forward.
TEST(RecordVocabulary, StatedOptions) {
  using validate::parse_stated_options;
  EXPECT_EQ(parse_stated_options("torchtitan (commit 9dec370; FSDP2, eager)").pointwise, Pointwise::EAGER);
  EXPECT_EQ(parse_stated_options("torchtitan (FSDP2, torch.compile, Float8 linear)").pointwise,
            Pointwise::FUSED);
  EXPECT_FALSE(parse_stated_options("NeMo (24.09 containers)").pointwise);
  EXPECT_TRUE(parse_stated_options("torchtitan (FSDP2, TP with async TP, torch.compile)").tp_comm_overlap);
  EXPECT_FALSE(parse_stated_options("torchtitan (FSDP2, TP (vanilla), torch.compile)").tp_comm_overlap);
  EXPECT_TRUE(parse_stated_options("Megatron-Core (r0.8.0; --overlap-grad-reduce --tp-comm-overlap)")
                  .tp_comm_overlap);
  EXPECT_TRUE(parse_stated_options("NeMo 23.09 (MLPerf; TP comm overlap via userbuffers)").tp_comm_overlap);
  EXPECT_FALSE(parse_stated_options("Megatron-LM").tp_comm_overlap);
  // The distributed optimizer's parameter all-gather under the forward, as the flag names it.
  EXPECT_TRUE(parse_stated_options("Megatron-Core (r0.8.0; --overlap-grad-reduce --overlap-param-gather)")
                  .overlap_param_gather);
  EXPECT_TRUE(parse_stated_options("NeMo (optim overlap_param_gather: true)").overlap_param_gather);
  EXPECT_FALSE(parse_stated_options("Megatron-Core (r0.8.0; --overlap-grad-reduce)").overlap_param_gather);
}

TEST(RecordVocabulary, InterNode) {
  const auto hdr = validate::parse_inter_node("8x 200 Gb/s HDR InfiniBand", 8);
  ASSERT_TRUE(hdr);
  EXPECT_EQ(hdr->count, 8);
  EXPECT_DOUBLE_EQ(hdr->gbps, 200);
  const auto opa = validate::parse_inter_node("4x Omni-Path 100 Gb/s", 8);
  ASSERT_TRUE(opa);
  EXPECT_EQ(opa->count, 4);
  // A node's total rate spread over its GPUs' NICs; bytes per second count eight bits.
  const auto roce = validate::parse_inter_node("1600 Gb/s node-node RoCE", 8);
  ASSERT_TRUE(roce);
  EXPECT_EQ(roce->count, 8);
  EXPECT_DOUBLE_EQ(roce->gbps, 200);
  const auto bytes = validate::parse_inter_node("50 GB/s per GPU", 8);
  ASSERT_TRUE(bytes);
  EXPECT_DOUBLE_EQ(bytes->gbps, 400);
  EXPECT_FALSE(validate::parse_inter_node("InfiniBand, 80GB HBM", 8));
}

} // namespace
