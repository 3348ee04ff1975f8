// The mapping tables (sim/validate/rules.cpp): every row is hit by a small synthetic record, and
// a control record one fact away does not match it; every stack row recognises its framework text,
// and the presets give the validation records' frameworks their mechanisms.

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
      // The era rows, for a framework no stack row recognises.
      {7, splitting(record("in-house trainer", "", 2023)),
       "sp=true (tensor parallelism in a source from 2023: sequence parallelism is its standard companion)",
       splitting(record("in-house trainer", "", 2022))},
      {8, record("", "", 2021), "tp_grad_overlap=false (a source from 2021)", record("", "", 2022)},
      {9, record(""), "zero_stage=0", record("")}, // catch-all
      {10, record("", "", 2024), "flash_attention=true (framework 'none', source year 2024)",
       record("", "", 2022)},
      {11, record("JAX", "", 2021), "flash_attention=false (framework 'JAX')",
       record("", "", 2021)}, // catch-all
  };
}

bool catch_all(const Rule& r) {
  const RuleMatch& w = r.when;
  return w.model.empty() && w.year_from == 0 && w.year_to == 0 && !w.grouped_query &&
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

// Mechanisms whose table ends in a catch-all always give a value; the others give none when
// neither a stack nor an era row applies (the simulator's default stays).
TEST(MappingRules, CatchAllsAndSimulatorDefaults) {
  const RecordFacts plain = record("", "GPT-3");
  for (const Mechanism m : {Mechanism::MLP, Mechanism::ZERO_STAGE, Mechanism::FLASH_ATTENTION})
    EXPECT_TRUE(first_rule(m, plain)) << to_string(m);
  for (const Mechanism m :
       {Mechanism::DROPOUT, Mechanism::SEQUENCE_PARALLEL, Mechanism::TP_GRAD_OVERLAP,
        Mechanism::EXPERT_TENSOR_PARALLEL, Mechanism::FP8_PARAMS, Mechanism::OVERLAP_PARAM_GATHER,
        Mechanism::GRAD_REDUCE_IN_FP32, Mechanism::ZERO3_FETCH})
    EXPECT_FALSE(first_rule(m, plain)) << to_string(m);
  // A bounded year needs a year: a record without one is neither before 2022 nor from 2023 on.
  EXPECT_FALSE(first_rule(Mechanism::TP_GRAD_OVERLAP, record("")));
  EXPECT_EQ(first_rule(Mechanism::FLASH_ATTENTION, record(""))->listed(record("")),
            "flash_attention=false (framework 'none')");
  // A recognised stack's mechanisms come from its preset, not from the era rows: DeepSpeed of
  // 2023 keeps unfused attention, and its era's sequence parallelism does not apply.
  const RecordFacts ds = splitting(record("DeepSpeed", "", 2023));
  EXPECT_EQ(first_rule(Mechanism::FLASH_ATTENTION, ds)->value(), Setting{false});
  EXPECT_EQ(first_rule(Mechanism::FLASH_ATTENTION, ds)->rule, nullptr);
  EXPECT_FALSE(first_rule(Mechanism::SEQUENCE_PARALLEL, ds));
}

// Every stack row recognises its text (the first matching row wins) and gives the release named
// or current at the source's year; a text no row names gives none.
TEST(MappingRules, StackRowsRecogniseTheirFrameworks) {
  struct StackCase {
    std::string framework;
    std::optional<int> year;
    std::string stack; ///< "name@version", "" = none
    bool by_year;
  };
  const std::vector<StackCase> stacks = {
      {"NeMo Megatron-Bridge (25.11 container)", 2025, "megatron-bridge@25.09", true},
      {"NeMo 24.07", 2024, "nemo@24.07", true},
      {"NeMo (dev container)", 2023, "nemo@23.11", true},
      {"torchtitan", std::nullopt, "torchtitan@0.1", false},
      {"Composer + PyTorch FSDP", 2023, "composer@0.3", true},
      {"Megatron-DeepSpeed", 2022, "megatron-deepspeed@2022", true},
      {"DeepSpeed + Megatron-LM", 2022, "megatron-deepspeed@2022", true},
      {"DeepSpeed ZeRO-3", 2021, "deepspeed@0.3", true},
      {"DeepSpeed ZeRO-3", 2022, "deepspeed@0.6", true},
      {"DeepSpeed", std::nullopt, "deepspeed@0.6", false}, // no year: the newest
      {"PyTorch FSDP2", 2023, "fsdp@2", false},            // the row pins the version
      {"PyTorch FSDP", 2023, "fsdp@1", true},
      {"Megatron-Core", 2024, "megatron-core@0.15", true},
      {"Megatron-LM", 2024, "megatron-core@0.15", true}, // built on Megatron-Core from 2023
      {"Megatron-LM", 2021, "megatron-lm@2021", true},
      {"Megatron-LM", 2022, "megatron-lm@2022", true},
      {"Megatron-LM", std::nullopt, "megatron-lm@2022", false},
      {"JAX / MaxText", 2024, "", false},
  };
  std::set<const StackRule*> hit;
  for (const StackCase& c : stacks) {
    const auto got = recognise_stack(record(c.framework, "", c.year));
    if (c.stack.empty()) {
      EXPECT_FALSE(got) << c.framework;
      continue;
    }
    ASSERT_TRUE(got) << c.framework;
    EXPECT_EQ(got->name(), c.stack) << c.framework;
    EXPECT_EQ(got->by_year, c.by_year) << c.framework;
    hit.insert(got->rule);
  }
  for (const StackRule& r : stack_rules()) {
    EXPECT_TRUE(hit.contains(&r)) << "stack row '" << r.words << "' without a case";
    EXPECT_NE(config::find_stack(r.stack), nullptr) << r.stack;
    EXPECT_FALSE(r.source.empty()) << r.words;
  }
}

// What the presets give the frameworks of the validation records (tests/validate/data), as the
// mapping gave them before the presets: Megatron-LM 2021's scatter/gather and TP all-reduce after
// the backward, DeepSpeed 2021's blocking ZeRO-3 fetch, NeMo's SP and distributed optimizer with
// its gather under the forward, Megatron-Bridge's expert TP 1 and fp8 weights, Composer's fused
// attention with 16-bit reductions.
TEST(MappingRules, PresetsGiveTheRecordsTheirMechanisms) {
  const auto value = [](Mechanism m, const RecordFacts& f) -> std::optional<Setting> {
    const auto a = first_rule(m, f);
    return a ? std::optional<Setting>(a->value()) : std::nullopt;
  };
  using M = Mechanism;
  const RecordFacts mlm21 = record("Megatron-LM", "GPT-3", 2021);
  EXPECT_EQ(value(M::PP_SCATTER_GATHER, mlm21), Setting{true});
  EXPECT_EQ(value(M::TP_GRAD_OVERLAP, mlm21), Setting{false});
  EXPECT_EQ(value(M::FLASH_ATTENTION, mlm21), Setting{false});
  EXPECT_EQ(value(M::SEQUENCE_PARALLEL, splitting(mlm21)), Setting{false});
  EXPECT_EQ(value(M::GRAD_REDUCE_IN_FP32, with_precision(mlm21, Precision::FP16)), std::nullopt);
  EXPECT_EQ(value(M::TP_GRAD_OVERLAP, record("Megatron-LM", "", 2022)), Setting{true});

  const RecordFacts ds21 = with_zero(record("DeepSpeed ZeRO-3", "GPT-3", 2021), 3);
  EXPECT_EQ(value(M::ZERO3_FETCH, ds21), Setting{Zero3Fetch::BLOCKING});
  EXPECT_EQ(value(M::TP_GRAD_OVERLAP, ds21), Setting{false});
  EXPECT_EQ(value(M::PP_SCATTER_GATHER, record("DeepSpeed + Megatron-LM", "", 2022)), Setting{false});

  const RecordFacts nemo = splitting(record("NeMo (24.09 / 24.11 containers)", "Llama 3.1 70B", 2024));
  EXPECT_EQ(value(M::SEQUENCE_PARALLEL, nemo), Setting{true});
  EXPECT_EQ(value(M::ZERO_STAGE, nemo), Setting{1});
  EXPECT_EQ(value(M::FLASH_ATTENTION, nemo), Setting{true});
  EXPECT_EQ(value(M::OVERLAP_PARAM_GATHER, with_zero(nemo, 1)), Setting{true});
  EXPECT_EQ(value(M::OVERLAP_PARAM_GATHER, with_zero(nemo, 3)), std::nullopt);
  EXPECT_EQ(value(M::FP8_PARAMS, with_precision(nemo, Precision::FP8)), std::nullopt);
  EXPECT_EQ(value(M::EXPERT_TENSOR_PARALLEL, nemo), std::nullopt);
  EXPECT_EQ(value(M::GRAD_REDUCE_IN_FP32, nemo), std::nullopt);
  EXPECT_EQ(value(M::PP_SCATTER_GATHER, nemo), Setting{false});

  const RecordFacts bridge = record("NeMo Megatron-Bridge (26.02 container)", "Qwen3 30B-A3B", 2026);
  EXPECT_EQ(value(M::EXPERT_TENSOR_PARALLEL, bridge), Setting{1});
  EXPECT_EQ(value(M::FP8_PARAMS, with_precision(bridge, Precision::FP8)), Setting{true});
  EXPECT_EQ(value(M::FP8_PARAMS, bridge), std::nullopt);

  const RecordFacts composer = with_zero(record("Composer + PyTorch FSDP", "MPT-7B", 2023), 3);
  EXPECT_EQ(value(M::FLASH_ATTENTION, composer), Setting{true});
  EXPECT_EQ(value(M::GRAD_REDUCE_IN_FP32, composer), Setting{false});
  EXPECT_EQ(value(M::GRAD_REDUCE_IN_FP32, with_zero(record("torchtitan"), 3)), Setting{true});
  EXPECT_EQ(
      value(M::GRAD_REDUCE_IN_FP32, with_precision(with_zero(record("torchtitan"), 3), Precision::FP16)),
      std::nullopt);
}

// A preset's value lists the stack, how its release was chosen, and the framework text.
TEST(MappingRules, PresetValuesListTheirStack) {
  const RecordFacts nemo = splitting(record("NeMo 24.09", "", 2024));
  EXPECT_EQ(first_rule(Mechanism::SEQUENCE_PARALLEL, nemo)->listed(nemo),
            "sp=true (stack nemo@24.07, current in 2024, for framework 'NeMo 24.09')");
  const RecordFacts titan = with_zero(record("torchtitan"), 3);
  EXPECT_EQ(first_rule(Mechanism::ZERO_STAGE, titan)->listed(titan),
            "zero_stage=3 (stack torchtitan@0.1, for framework 'torchtitan')");
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
