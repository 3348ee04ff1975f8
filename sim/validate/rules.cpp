#include "validate/rules.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace stepsim::validate {

namespace {

using enum Mechanism;

// Model families, then the era of a record whose stack is not recognised (recognised stacks take
// their framework mechanisms from their preset, STACK_RULES below). Per mechanism the first
// matching row wins; a mechanism no row matches keeps the simulator's default.
constexpr std::array FRAMEWORK_RULES{
    // The MLP by model family: gated (SwiGLU) or two GEMMs (GELU, squared ReLU: the same GEMMs).
    // Words in priority order: gpt-oss before gpt, the two-GEMM families before the gated ones.
    Rule{MLP,
         {.model = "gpt-oss"},
         MlpKind::SWIGLU,
         "gpt-oss",
         "OpenAI gpt-oss model card (2025): gated SwiGLU experts"},
    Rule{MLP,
         {.model = "gpt oss"},
         MlpKind::SWIGLU,
         "gpt-oss",
         "OpenAI gpt-oss model card (2025): gated SwiGLU experts"},
    Rule{MLP,
         {.model = "opt-|falcon|nemotron|mpt|bloom|gpt"},
         MlpKind::GELU,
         "{model}",
         "the families' configurations: GPT-2/3, BLOOM, MPT, Falcon, OPT gelu; Nemotron-4 squared ReLU"},
    Rule{MLP,
         {.model = "gemma|deepseek|qwen|mixtral|mistral|llama"},
         MlpKind::SWIGLU,
         "{model}",
         "the families' Hugging Face configurations: hidden_act silu with gate_proj (GeGLU for Gemma)"},
    Rule{MLP,
         {.grouped_query = true},
         MlpKind::SWIGLU,
         "grouped-query attention",
         "heuristic: the grouped-query models of 2023 on (Llama 2 70B, Mistral, Qwen) all gate their MLP"},
    Rule{MLP,
         {},
         MlpKind::GELU,
         "multi-head attention",
         "the GPT convention (Radford et al. 2019; Brown et al. 2020)"},
    // Families published and trained without dropout: no masks among the stored activations.
    Rule{DROPOUT,
         {.model = "llama|mistral|mixtral|qwen|deepseek|gemma|nemotron|gpt-oss"},
         false,
         "{model}",
         "the families' configurations: attention_dropout 0.0 and no hidden dropout"},
    // The era of an unrecognised stack: what every stack of the time did.
    Rule{SEQUENCE_PARALLEL,
         {.year_from = 2023, .sequence_splits_over_tp = true},
         true,
         "tensor parallelism in a source from {year}: sequence parallelism is its standard companion",
         "every Megatron-Core-based stack's recipes (NeMo, Megatron-Bridge), torchtitan's TP plan, "
         "Llama 3's 4D parallelism (Llama Team 2024)"},
    Rule{TP_GRAD_OVERLAP,
         {.year_to = 2021},
         false,
         "a source from {year}",
         "Megatron-LM's asynchronous TP all-reduce came late in 2021 (off by default); Megatron-LM 2022's "
         "--no-async-tensor-model-parallel-allreduce turned it on"},
    Rule{ZERO_STAGE, {}, 0, "", "no sharding unless the record says so"},
    Rule{FLASH_ATTENTION,
         {.year_from = 2023},
         true,
         "framework '{framework}', source year {year}",
         "FlashAttention-2 (Dao 2023) and Transformer Engine's fused attention the default from 2023"},
    Rule{FLASH_ATTENTION,
         {},
         false,
         "framework '{framework}'",
         "Megatron-LM and (Megatron-)DeepSpeed of 2021-22: unfused QK^T/softmax/dropout/AV kernels"},
};

// The training stack a record's framework text names (config/stacks.hpp). Words in priority order:
// Megatron-Bridge records also say NeMo, Composer's also FSDP, Megatron-DeepSpeed's both words.
constexpr std::array STACK_RULES{
    StackRule{.words = "bridge",
              .stack = "megatron-bridge",
              .source =
                  "NVIDIA's Megatron-Bridge benchmark tables ('NeMo Megatron-Bridge (25.11 container)')"},
    StackRule{.words = "nemo", .stack = "nemo", .source = "NVIDIA NeMo and its benchmark tables"},
    StackRule{.words = "torchtitan", .stack = "torchtitan", .source = "pytorch/torchtitan"},
    StackRule{.words = "composer|llm-foundry|llm foundry|mosaic",
              .stack = "composer",
              .source = "MosaicML Composer with llm-foundry ('Composer + PyTorch FSDP')"},
    StackRule{.words = "deepspeed",
              .also = "megatron",
              .stack = "megatron-deepspeed",
              .source = "Megatron-DeepSpeed, and Megatron-LM's layers under DeepSpeed's engine ('DeepSpeed + "
                        "Megatron-LM', MT-NLG: Smith et al. 2022)"},
    StackRule{.words = "deepspeed", .stack = "deepspeed", .source = "microsoft/DeepSpeed"},
    StackRule{.words = "fsdp2|fully_shard",
              .stack = "fsdp",
              .version = "2",
              .source = "PyTorch's fully_shard (FSDP2)"},
    StackRule{.words = "fsdp", .stack = "fsdp", .source = "PyTorch FullyShardedDataParallel"},
    StackRule{.words = "megatron-core|megatron core|mcore",
              .stack = "megatron-core",
              .source = "NVIDIA Megatron-Core"},
    StackRule{.words = "megatron",
              .year_from = 2023,
              .stack = "megatron-core",
              .source = "Megatron-LM from 2023 on is built on Megatron-Core (megatron/core)"},
    StackRule{
        .words = "megatron", .stack = "megatron-lm", .source = "NVIDIA Megatron-LM before Megatron-Core"},
};

// GPU families by name. The first row whose words (and capacity band) match names the family.
constexpr std::array GPU_RULES{
    // A GB200 is no B200 in a DGX: its NVLink domain is the 72-GPU rack.
    GpuRule{.family = "GB200",
            .words = "gb200",
            .kind = "GB200-186GB",
            .topology = "gb200-nvl72.yaml",
            .source = "NVIDIA GB200 NVL72 datasheet: 72 Blackwell GPUs in one NVLink domain"},
    GpuRule{.family = "V100-16GB",
            .words = "v100",
            .below_gb = 24,
            .memory_words = "16gb|16 gb|_16g",
            .kind = "V100-SXM2-32GB",
            .topology = "dgx1-v100.yaml",
            .wide_topology = "dgx2-v100.yaml",
            .wide_gpus_per_node = 16,
            .hbm_gib = 16,
            .max_gb = 34,
            .note = "V100 16 GB = the V100 32 GB profile with hbm_capacity 16GiB",
            .source = "NVIDIA V100 datasheet: the 16 and 32 GB parts share die, clocks and HBM2 bandwidth"},
    GpuRule{.family = "V100",
            .words = "v100",
            .kind = "V100-SXM2-32GB",
            .topology = "dgx1-v100.yaml",
            .wide_topology = "dgx2-v100.yaml",
            .wide_gpus_per_node = 16,
            .max_gb = 34,
            .source = "NVIDIA DGX-1 (8 V100) and DGX-2 (16 V100) system guides"},
    GpuRule{.family = "A100-40GB",
            .words = "a100",
            .below_gb = 60,
            .memory_words = "40gb|40 gb|_40g",
            .kind = "A100-SXM4-40GB",
            .topology = "dgx-a100-40gb-superpod.yaml",
            .source = "NVIDIA A100 datasheet: 40 GB HBM2, 1555 GB/s"},
    GpuRule{.family = "A100",
            .words = "a100",
            .kind = "A100-SXM4-80GB",
            .topology = "dgx-a100-superpod.yaml",
            .source =
                "NVIDIA A100 datasheet: 80 GB HBM2e, 2039 GB/s; DGX A100 SuperPOD reference architecture"},
    GpuRule{.family = "A800-40GB",
            .words = "a800",
            .below_gb = 60,
            .memory_words = "40gb|40 gb|_40g",
            .kind = "A100-SXM4-40GB",
            .topology = "dgx-a100-40gb-superpod.yaml",
            .nvswitch_gbytes_per_s = 200,
            .note = "A800 = A100 SXM with NVLink 200 GB/s per direction",
            .source = "NVIDIA A800 datasheet: NVLink 400 GB/s bidirectional"},
    GpuRule{.family = "A800",
            .words = "a800",
            .kind = "A100-SXM4-80GB",
            .topology = "dgx-a100-superpod.yaml",
            .nvswitch_gbytes_per_s = 200,
            .note = "A800 = A100 SXM with NVLink 200 GB/s per direction",
            .source = "NVIDIA A800 datasheet: NVLink 400 GB/s bidirectional"},
    // The H100 PCIe card (an H800 PCIe has its compute and memory): 114 SMs, 350 W, HBM2e. Its
    // topology states the variant and PCIe between the cards. An SXM part with HBM2e (Meta's
    // 96 GB Grand Teton H100s) is the SXM row below with the record's HBM (map_memory_variant).
    GpuRule{.family = "H100-PCIe",
            .words = "h100|h800",
            .form_words = "pcie|hbm2e",
            .not_form_words = "sxm",
            .kind = "H100-SXM5-80GB",
            .topology = "h100-pcie.yaml",
            .variant = true,
            .note = "H100 PCIe = the H100 SXM5 variant of 114 SMs at 350 W with 2 TB/s HBM2e, on PCIe",
            .source = "NVIDIA H100 datasheet: PCIe 756 TFLOPS bf16, 2 TB/s HBM2e, 350 W"},
    GpuRule{
        .family = "H100",
        .words = "h100",
        .kind = "H100-SXM5-80GB",
        .topology = "dgx-h100.yaml",
        .large_topology = "dgx-h100-superpod.yaml",
        .large_above_nodes = 32,
        .power_limit_w = 700,
        .source =
            "NVIDIA DGX H100 user guide; DGX SuperPOD H100 reference architecture (32-node scalable units)"},
    GpuRule{.family = "H800",
            .words = "h800",
            .kind = "H100-SXM5-80GB",
            .topology = "dgx-h800.yaml",
            .large_topology = "dgx-h100-superpod.yaml",
            .large_above_nodes = 32,
            .nvswitch_gbytes_per_s = 200,
            .power_limit_w = 700,
            .note = "H800 = H100 SXM with NVLink 200 GB/s per direction",
            .source = "NVIDIA H800 datasheet: NVLink 400 GB/s bidirectional"},
    // Grace Hopper: the H100's die with HBM3e (the 144 GB part: 4.9 TB/s), the H200 profile's.
    GpuRule{.family = "H200",
            .words = "gh200",
            .kind = "H200-SXM-141GB",
            .topology = "h200-cluster.yaml",
            .hbm_from_record = true,
            .note = "GH200 = the H200 profile (same GH100 die and HBM3e)",
            .source = "NVIDIA GH200 datasheet: GH100 with 96 or 144 GB HBM3e"},
    GpuRule{.family = "H200",
            .words = "h200",
            .kind = "H200-SXM-141GB",
            .topology = "h200-cluster.yaml",
            .power_limit_w = 700,
            .source = "NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s"},
    // After the H200 rows: "h20" is in "h200" and "gh200".
    GpuRule{.family = "H20",
            .words = "h20",
            .kind = "H100-SXM5-80GB",
            .topology = "hgx-h20.yaml",
            .variant = true,
            .note = "H20 = the H100 SXM5 variant of 148 TFLOPS bf16 with 96 GB of HBM3 at 4.0 TB/s",
            .source = "H20 spec listings: 148 TFLOPS bf16 dense, 96 GB HBM3, 4.0 TB/s, NVLink 900 GB/s"},
    GpuRule{.family = "B200",
            .words = "b200",
            .kind = "B200-SXM-180GB",
            .topology = "dgx-b200.yaml",
            .source = "NVIDIA DGX B200 datasheet"},
};

// PCIe cards without a bundled topology (the A100 PCIe, the H100 NVL) run lower clocks and join
// by NVLink bridges or PCIe, not an NVSwitch. (The H100 PCIe has one: the H100-PCIe row above.)
constexpr std::array CARD_RULES{
    CardRule{.family = "", .words = "pcie", .source = "NVIDIA A100 PCIe datasheet: no NVSwitch"},
    CardRule{.family = "H100",
             .words = " nvl|-nvl",
             .source = "NVIDIA H100 NVL datasheet: NVLink bridge pairs, PCIe"},
};

std::string replaced(std::string text, std::string_view key, const std::string& by) {
  for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + by.size()))
    text.replace(at, key.size(), by);
  return text;
}

} // namespace

std::string lowered(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

bool has_word(std::string_view lowered_text, std::string_view words, std::string* found) {
  while (!words.empty()) {
    const std::size_t bar = words.find('|');
    const std::string_view word = words.substr(0, bar);
    if (lowered_text.find(word) != std::string_view::npos) {
      if (found != nullptr)
        *found = std::string(word);
      return true;
    }
    if (bar == std::string_view::npos)
      break;
    words.remove_prefix(bar + 1);
  }
  return false;
}

const char* to_string(Mechanism m) {
  switch (m) {
  case MLP:
    return "mlp";
  case DROPOUT:
    return "dropout";
  case SEQUENCE_PARALLEL:
    return "sp";
  case PP_SCATTER_GATHER:
    return "pp_scatter_gather";
  case TP_GRAD_OVERLAP:
    return "tp_grad_overlap";
  case EXPERT_TENSOR_PARALLEL:
    return "etp";
  case ZERO_STAGE:
    return "zero_stage";
  case FLASH_ATTENTION:
    return "flash_attention";
  case FP8_PARAMS:
    return "fp8_params";
  case OVERLAP_PARAM_GATHER:
    return "overlap_param_gather";
  case GRAD_REDUCE_IN_FP32:
    return "grad_reduce_in_fp32";
  case ZERO3_FETCH:
    return "zero3_fetch";
  }
  return "?";
}

std::string to_string(const Setting& s) {
  if (const bool* b = std::get_if<bool>(&s))
    return *b ? "true" : "false";
  if (const int* i = std::get_if<int>(&s))
    return std::to_string(*i);
  if (const MlpKind* k = std::get_if<MlpKind>(&s))
    return *k == MlpKind::SWIGLU ? "swiglu" : "gelu";
  return std::get<Zero3Fetch>(s) == Zero3Fetch::BLOCKING ? "blocking" : "prefetch";
}

std::span<const Rule> framework_rules() {
  return FRAMEWORK_RULES;
}
std::span<const StackRule> stack_rules() {
  return STACK_RULES;
}
std::span<const GpuRule> gpu_rules() {
  return GPU_RULES;
}
std::span<const CardRule> card_rules() {
  return CARD_RULES;
}

bool matches(const RuleMatch& when, const RecordFacts& facts, std::string* model_word) {
  std::string word;
  if (!when.model.empty() && !has_word(lowered(facts.model), when.model, &word))
    return false;
  if ((when.year_from > 0 || when.year_to > 0) && !facts.year)
    return false;
  if ((when.year_from > 0 && *facts.year < when.year_from) ||
      (when.year_to > 0 && *facts.year > when.year_to))
    return false;
  if ((when.grouped_query && !facts.grouped_query) ||
      (when.sequence_splits_over_tp && !facts.sequence_splits_over_tp))
    return false;
  if (model_word != nullptr)
    *model_word = word;
  return true;
}

std::string RecognisedStack::name() const {
  return std::string(preset->name) + "@" + std::string(version->version);
}

std::optional<RecognisedStack> recognise_stack(const RecordFacts& facts) {
  const std::string text = lowered(facts.framework);
  for (const StackRule& r : STACK_RULES) {
    if (!has_word(text, r.words) || (!r.also.empty() && !has_word(text, r.also)))
      continue;
    if (r.year_from > 0 && (!facts.year || *facts.year < r.year_from))
      continue;
    RecognisedStack s{
        .preset = config::find_stack(r.stack), .version = nullptr, .rule = &r, .by_year = false};
    if (!r.version.empty())
      s.version = config::find_version(*s.preset, r.version);
    else if (facts.year) {
      s.version = &config::version_of_year(*s.preset, *facts.year);
      s.by_year = true;
    } else {
      s.version = config::find_version(*s.preset, "");
    }
    return s;
  }
  return std::nullopt;
}

std::optional<StackKey> stack_key(Mechanism m) {
  using K = StackKey;
  switch (m) {
  case MLP:
  case DROPOUT:
    return std::nullopt;
  case SEQUENCE_PARALLEL:
    return K::SP;
  case PP_SCATTER_GATHER:
    return K::PP_SCATTER_GATHER;
  case TP_GRAD_OVERLAP:
    return K::TP_GRAD_OVERLAP;
  case EXPERT_TENSOR_PARALLEL:
    return K::ETP;
  case ZERO_STAGE:
    return K::ZERO_STAGE;
  case FLASH_ATTENTION:
    return K::FLASH_ATTENTION;
  case FP8_PARAMS:
    return K::FP8_PARAMS;
  case OVERLAP_PARAM_GATHER:
    return K::OVERLAP_PARAM_GATHER;
  case GRAD_REDUCE_IN_FP32:
    return K::GRAD_REDUCE_IN_FP32;
  case ZERO3_FETCH:
    return K::ZERO3_FETCH;
  }
  return std::nullopt;
}

namespace {

/// A preset value's layout condition on what the record gives; tp > 1, pp > 1, sp, dp > 1 and
/// MoE are the caller's (plan_run asks only where the layout has them).
bool applies_to_record(config::StackWhen when, const RecordFacts& f) {
  using W = config::StackWhen;
  const bool sixteen_bit_bf16 = f.precision != Precision::FP16;
  switch (when) {
  case W::ALWAYS:
  case W::TP:
  case W::TP_PP_NO_SP:
  case W::MOE_TP:
  case W::TP_SP:
  case W::FUSED_ATTENTION:
  case W::PP_1F1B:
  case W::DENSE_PLAIN_ATTENTION:
    return true;
  case W::TP_SPLITS_SEQUENCE:
    return f.sequence_splits_over_tp;
  case W::SHARDED_OPTIMIZER_DP:
    return f.zero_stage == 1 || f.zero_stage == 2;
  case W::SIXTEEN_BIT_BF16:
    return sixteen_bit_bf16;
  case W::FP8:
    return f.precision == Precision::FP8;
  case W::ZERO3:
    return f.zero_stage == 3;
  case W::ZERO3_BF16:
    return f.zero_stage == 3 && sixteen_bit_bf16;
  case W::ZERO3_PIPELINE: // the layout's part (pp, dp, experts, schedule) is check_layout's
    return f.zero_stage == 3;
  }
  return false;
}

Setting setting_of(const config::StackValue& v) {
  if (const bool* b = std::get_if<bool>(&v))
    return *b;
  if (const int* i = std::get_if<int>(&v))
    return *i;
  return std::get<Zero3Fetch>(v);
}

bool catch_all(const RuleMatch& w) {
  return w.model.empty() && w.year_from == 0 && w.year_to == 0 && !w.grouped_query &&
         !w.sequence_splits_over_tp;
}

} // namespace

std::optional<Applied> first_rule(Mechanism m, const RecordFacts& facts) {
  const std::optional<StackKey> key = stack_key(m);
  const std::optional<RecognisedStack> stack = key ? recognise_stack(facts) : std::nullopt;
  if (stack) {
    const config::StackDefault* d = config::stack_default(*stack->version, *key);
    if (d != nullptr && applies_to_record(d->when, facts)) {
      std::string note = "stack " + stack->name();
      if (stack->by_year)
        note += ", current in " + std::to_string(*facts.year);
      note += ", for framework '" + facts.framework + "'";
      return Applied{.rule = nullptr,
                     .preset = d,
                     .mechanism = m,
                     .setting = setting_of(d->value),
                     .model_word = "",
                     .stack_note = note};
    }
  }
  for (const Rule& r : FRAMEWORK_RULES) {
    std::string word;
    // A recognised stack's mechanisms come from its preset; only a catch-all stands in for one
    // the preset leaves out.
    if (r.mechanism != m || (stack && !catch_all(r.when)) || !matches(r.when, facts, &word))
      continue;
    return Applied{.rule = &r,
                   .preset = nullptr,
                   .mechanism = m,
                   .setting = r.value,
                   .model_word = word,
                   .stack_note = ""};
  }
  return std::nullopt;
}

std::string Applied::note(const RecordFacts& facts) const {
  if (rule == nullptr)
    return stack_note;
  std::string text(rule->note);
  text = replaced(text, "{framework}", facts.framework.empty() ? "none" : facts.framework);
  text = replaced(text, "{year}", facts.year ? std::to_string(*facts.year) : "?");
  return replaced(text, "{model}", model_word);
}

std::string Applied::listed(const RecordFacts& facts) const {
  const std::string text = std::string(to_string(mechanism)) + "=" + to_string(setting);
  const std::string shown = note(facts);
  return shown.empty() ? text : text + " (" + shown + ")";
}

const GpuRule* gpu_rule(const std::string& gpu_text, std::optional<double> gpu_mem_gb) {
  const std::string text = lowered(gpu_text);
  for (const GpuRule& r : GPU_RULES) {
    if (!has_word(text, r.words))
      continue;
    if (r.below_gb > 0 && !(gpu_mem_gb ? *gpu_mem_gb < r.below_gb : has_word(text, r.memory_words)))
      continue;
    if (!r.form_words.empty() && !has_word(text, r.form_words))
      continue;
    if (!r.not_form_words.empty() && has_word(text, r.not_form_words))
      continue;
    return &r;
  }
  return nullptr;
}

const GpuRule* gpu_rule_of(std::string_view family) {
  for (const GpuRule& r : GPU_RULES)
    if (r.family == family)
      return &r;
  return nullptr;
}

} // namespace stepsim::validate
