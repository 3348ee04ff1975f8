// The mapping tables (sim/validate/rules.cpp): every row is hit by a small synthetic record, and
// a control record one fact away does not match it.

#include "validate/rules.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace stepsim;
using namespace stepsim::validate;

namespace {

/// A record of `framework`, `model` and `year`, ZeRO-0, bf16, multi-head attention.
RecordFacts record(std::string framework, std::string model = "", std::optional<int> year = std::nullopt) {
  return RecordFacts{.framework = std::move(framework),
                     .model = std::move(model),
                     .year = year,
                     .zero_stage = 0,
                     .precision = Precision::BF16,
                     .grouped_query = false,
                     .sequence_splits_over_tp = false};
}

RecordFacts with_zero(RecordFacts f, int zero) {
  f.zero_stage = zero;
  return f;
}

RecordFacts with_precision(RecordFacts f, Precision p) {
  f.precision = p;
  return f;
}

RecordFacts grouped(RecordFacts f) {
  f.grouped_query = true;
  return f;
}

RecordFacts splitting(RecordFacts f) {
  f.sequence_splits_over_tp = true;
  return f;
}

/// One row's case: the record that reaches it (its mechanism's first match), what it lists, and
/// a control that the row does not match.
struct Case {
  std::size_t row; ///< index into framework_rules()
  RecordFacts hit;
  std::string listed; ///< the defaults' text
  RecordFacts control;
};

std::vector<Case> cases() {
  return {
      {0, record("", "gpt-oss-120b"), "mlp=swiglu (gpt-oss)", record("", "gpt-3 175B")},
      {1, record("", "GPT OSS 20B"), "mlp=swiglu (gpt-oss)", record("", "gpt-3 175B")},
      {2, record("", "Nemotron-4 GPT 340B"), "mlp=gelu (nemotron)", record("", "Llama 3 70B")},
      {3, record("", "Llama-3.1-405B"), "mlp=swiglu (llama)", record("", "MT-NLG 530B")},
      {4, grouped(record("", "unknown-7b")), "mlp=swiglu (grouped-query attention)",
       record("", "unknown-7b")},
      {5, record("", "unknown-7b"), "mlp=gelu (multi-head attention)", record("", "unknown-7b")}, // catch-all
      {6, record("", "Mixtral 8x7B"), "dropout=false (mixtral)", record("", "BLOOM-176B")},
      {7, record("NeMo 24.09"), "sp=true (framework 'NeMo 24.09')", record("Megatron-LM")},
      {8, splitting(record("Megatron-Core", "", 2023)),
       "sp=true (tensor parallelism in a source from 2023: sequence parallelism is its standard companion)",
       splitting(record("Megatron-DeepSpeed", "", 2023))},
      {9, record("Megatron-LM"), "pp_scatter_gather=true (framework 'Megatron-LM')",
       record("DeepSpeed + Megatron-LM")},
      {10, record("Megatron-DeepSpeed", "", 2022), "tp_grad_overlap=false (framework 'Megatron-DeepSpeed')",
       record("Megatron-LM", "", 2022)},
      {11, record("Megatron-LM", "", 2021), "tp_grad_overlap=false (a source from 2021)",
       record("Megatron-LM")},
      {12, record("Megatron-Bridge 25.09"), "etp=1 (framework 'Megatron-Bridge 25.09')",
       record("Megatron-Core")},
      {13, record("NeMo 2.0"), "zero_stage=1 (distributed optimizer, framework 'NeMo 2.0')",
       record("Megatron-LM")},
      {14, record("Megatron-LM"), "zero_stage=0", record("Megatron-LM")}, // catch-all
      {15, record("Composer + PyTorch FSDP", "", 2023),
       "flash_attention=true (framework 'Composer + PyTorch FSDP', source year 2023)",
       record("Composer", "", 2022)},
      {16, record("torchtitan"), "flash_attention=true (framework 'torchtitan')", record("Megatron-LM")},
      {17, record("", "", 2024), "flash_attention=true (framework 'none', source year 2024)",
       record("", "", 2022)},
      {18, record("Megatron-LM", "", 2021), "flash_attention=false (framework 'Megatron-LM')",
       record("Megatron-LM", "", 2021)}, // catch-all
      {19, with_precision(record("Megatron-Bridge"), Precision::FP8),
       "fp8_params=true (fp8 primary weights, framework 'Megatron-Bridge')", record("Megatron-Bridge")},
      {20, with_zero(record("NeMo"), 1), "overlap_param_gather=true (framework 'NeMo')",
       with_zero(record("NeMo"), 3)},
      {21, with_zero(record("torchtitan"), 3),
       "grad_reduce_in_fp32=true (framework 'torchtitan': FSDP2 mixed_precision_reduce float32)",
       with_precision(with_zero(record("torchtitan"), 3), Precision::FP16)},
      {22, with_zero(record("DeepSpeed", "", 2021), 3),
       "zero3_fetch=blocking (framework 'DeepSpeed', a source from 2021)",
       with_zero(record("DeepSpeed", "", 2022), 3)},
  };
}

bool catch_all(const Rule& r) {
  const RuleMatch& w = r.when;
  return w.framework.empty() && w.not_framework.empty() && w.model.empty() && w.year_from == 0 &&
         w.year_to == 0 && w.zero_from == 0 && w.zero_to == 3 && w.precision.empty() && !w.grouped_query &&
         !w.sequence_splits_over_tp;
}

} // namespace

// Each row is reached by its synthetic record (no earlier row of its mechanism takes it), lists
// the expected text, and its control does not match it; every row has a case and a source.
TEST(MappingRules, EveryRowIsHitAndItsControlIsNot) {
  const auto rules = framework_rules();
  std::set<std::size_t> covered;
  for (const Case& c : cases()) {
    ASSERT_LT(c.row, rules.size());
    const Rule& row = rules[c.row];
    const auto got = first_rule(row.mechanism, c.hit);
    ASSERT_TRUE(got) << c.row;
    EXPECT_EQ(got->rule, &row) << "row " << c.row << " (" << to_string(row.mechanism) << ") is shadowed";
    EXPECT_EQ(got->listed(c.hit), c.listed) << c.row;
    if (!catch_all(row)) {
      EXPECT_FALSE(matches(row.when, c.control)) << "control of row " << c.row;
    } else {
      // A catch-all matches every record: its control only checks that nothing earlier takes it.
      EXPECT_EQ(first_rule(row.mechanism, c.control)->rule, &row) << c.row;
    }
    EXPECT_FALSE(row.source.empty()) << c.row;
    covered.insert(c.row);
  }
  EXPECT_EQ(covered.size(), rules.size()) << "a row without a case";
}

// Mechanisms whose table ends in a catch-all always give a value; the others give none when no
// framework rule applies (the simulator's default stays).
TEST(MappingRules, CatchAllsAndSimulatorDefaults) {
  const RecordFacts plain = record("Megatron-LM", "GPT-3", 2022);
  for (const Mechanism m : {Mechanism::MLP, Mechanism::ZERO_STAGE, Mechanism::FLASH_ATTENTION})
    EXPECT_TRUE(first_rule(m, plain)) << to_string(m);
  for (const Mechanism m :
       {Mechanism::DROPOUT, Mechanism::SEQUENCE_PARALLEL, Mechanism::TP_GRAD_OVERLAP,
        Mechanism::EXPERT_TENSOR_PARALLEL, Mechanism::FP8_PARAMS, Mechanism::OVERLAP_PARAM_GATHER,
        Mechanism::GRAD_REDUCE_IN_FP32, Mechanism::ZERO3_FETCH})
    EXPECT_FALSE(first_rule(m, plain)) << to_string(m);
  // A bounded year needs a year: a record without one is neither before 2022 nor from 2023 on.
  EXPECT_FALSE(first_rule(Mechanism::TP_GRAD_OVERLAP, record("Megatron-LM")));
  EXPECT_EQ(first_rule(Mechanism::FLASH_ATTENTION, record(""))->listed(record("")),
            "flash_attention=false (framework 'none')");
}

// The typed values, as the workload file spells them.
TEST(MappingRules, SettingsSpellTheirValues) {
  EXPECT_EQ(to_string(Setting{true}), "true");
  EXPECT_EQ(to_string(Setting{1}), "1");
  EXPECT_EQ(to_string(Setting{MlpKind::GELU}), "gelu");
  EXPECT_EQ(to_string(Setting{Zero3Fetch::BLOCKING}), "blocking");
  EXPECT_STREQ(to_string(Mechanism::SEQUENCE_PARALLEL), "sp");
  EXPECT_STREQ(to_string(Mechanism::ZERO3_FETCH), "zero3_fetch");
}

// GPU families: every row named by a text (and capacity) of its own; a control text one word or
// one capacity band away names another row.
TEST(MappingRules, EveryGpuRowIsNamed) {
  struct GpuCase {
    std::string family;
    std::string text;
    std::optional<double> mem_gb;
    std::string control_text;
    std::optional<double> control_mem_gb;
  };
  const std::vector<GpuCase> gpus = {
      {"GB200", "GB200 NVL72", std::nullopt, "B200", std::nullopt},
      {"V100-16GB", "V100-SXM2-16GB", std::nullopt, "V100-SXM2-32GB", std::nullopt},
      {"V100", "v100", 32.0, "v100", 16.0},
      {"A100-40GB", "A100-SXM4-40GB", std::nullopt, "A100-SXM4-80GB", std::nullopt},
      {"A100", "a100_80gb", std::nullopt, "a100_40g", std::nullopt},
      {"A800-40GB", "A800", 40.0, "A800", 80.0},
      {"A800", "A800-SXM4-80GB", std::nullopt, "A100-SXM4-80GB", std::nullopt},
      {"H100-PCIe", "NVIDIA H100 PCIe", std::nullopt, "H100-SXM5-80GB", std::nullopt},
      {"H100", "H100-SXM5-80GB", std::nullopt, "H800", std::nullopt},
      {"H800", "H800 SXM5", std::nullopt, "H100", std::nullopt},
      {"H200", "GH200 Grace Hopper", 96.0, "H200", std::nullopt}, // the GH200 row, then the H200 one
      {"H200", "H200-SXM-141GB", std::nullopt, "B200", std::nullopt},
      {"H20", "NVIDIA H20 96GB", std::nullopt, "H200", std::nullopt}, // after the H200 rows
      {"B200", "B200", std::nullopt, "GB200", std::nullopt},
  };
  const auto rows = gpu_rules();
  ASSERT_EQ(gpus.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const GpuCase& c = gpus[i];
    EXPECT_EQ(gpu_rule(c.text, c.mem_gb), &rows[i]) << c.text;
    EXPECT_EQ(rows[i].family, c.family) << i;
    EXPECT_NE(gpu_rule(c.control_text, c.control_mem_gb), &rows[i]) << c.control_text;
    EXPECT_FALSE(rows[i].source.empty()) << i;
  }
  EXPECT_EQ(gpu_rule("MI300X", std::nullopt), nullptr);
  // A family's first row gives its profile and topology.
  EXPECT_EQ(gpu_rule_of("H800")->kind, "H100-SXM5-80GB");
  EXPECT_EQ(gpu_rule_of("H200")->hbm_from_record, true); // the GH200 row comes first
  EXPECT_EQ(gpu_rule_of("nope"), nullptr);
}

// Card forms without a bundled topology: a PCIe card (the H100 PCIe's own row comes first, so
// this one is left the A100 PCIe), an H100 NVL; an SXM part is none.
TEST(MappingRules, CardRowsNameTheirForms) {
  const auto rows = card_rules();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(has_word(lowered("A100 PCIe 40GB"), rows[0].words));
  EXPECT_FALSE(has_word(lowered("A100-SXM4-40GB"), rows[0].words));
  EXPECT_TRUE(has_word(lowered("H100 NVL"), rows[1].words));
  EXPECT_EQ(rows[1].family, "H100");
  EXPECT_FALSE(has_word(lowered("H100-SXM5-80GB"), rows[1].words));
}

// Word lists: '|'-separated, the first word of the list found is the one named.
TEST(MappingRules, WordListsNameTheFirstWordFound) {
  std::string found;
  EXPECT_TRUE(has_word("nemotron gpt", "opt-|nemotron|gpt", &found));
  EXPECT_EQ(found, "nemotron");
  EXPECT_FALSE(has_word("llama", "gpt|bloom", &found));
  EXPECT_FALSE(has_word("anything", ""));
}
