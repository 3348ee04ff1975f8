#include "validate/rules.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace stepsim::validate {

namespace {

using enum Mechanism;

// Framework behaviour and model families. Per mechanism the first matching row wins; a mechanism
// no row matches keeps the simulator's default.
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
    // Megatron's sequence parallelism.
    Rule{SEQUENCE_PARALLEL,
         {.framework = "nemo"},
         true,
         "framework '{framework}'",
         "NeMo recipes: sequence_parallel: true with tp > 1 (e.g. the GPT-3 175B recipe's configuration)"},
    Rule{SEQUENCE_PARALLEL,
         {.not_framework = "deepspeed", .year_from = 2023, .sequence_splits_over_tp = true},
         true,
         "tensor parallelism in a source from {year}: sequence parallelism is its standard companion",
         "Megatron-Core, NeMo, torchtitan's TP plan, Llama 3's 4D parallelism (Llama Team 2024); DeepSpeed's "
         "'sequence parallelism' is Ulysses, another scheme"},
    // Pipeline messages split over the TP ranks and all-gathered on the receiving stage.
    Rule{PP_SCATTER_GATHER,
         {.framework = "megatron-lm", .not_framework = "deepspeed"},
         true,
         "framework '{framework}'",
         "Narayanan et al. 2021, sec. 4.1 (on by default in Megatron-LM); DeepSpeed's pipeline engine sends "
         "whole "
         "activations"},
    // The backward's TP collective beside the weight-gradient GEMM (the default) or after the block.
    Rule{TP_GRAD_OVERLAP,
         {.framework = "deepspeed"},
         false,
         "framework '{framework}'",
         "Megatron-DeepSpeed's layers predate Megatron-LM's asynchronous TP all-reduce"},
    Rule{TP_GRAD_OVERLAP,
         {.year_to = 2021},
         false,
         "a source from {year}",
         "Megatron-LM --async-tensor-model-parallel-allreduce (from 2022), then sequence parallelism's "
         "overlapped collectives"},
    // Expert tensor parallelism of Megatron Bridge's MoE recipes.
    Rule{EXPERT_TENSOR_PARALLEL,
         {.framework = "megatron-bridge"},
         1,
         "framework '{framework}'",
         "Megatron Bridge MoE recipes: expert_tensor_parallel_size = 1 (Megatron-Core MoE parallel folding)"},
    // ZeRO stage of a record that gives none.
    Rule{ZERO_STAGE,
         {.framework = "nemo"},
         1,
         "distributed optimizer, framework '{framework}'",
         "NeMo recipes: optim distributed_fused_adam (Megatron's distributed optimizer)"},
    Rule{ZERO_STAGE, {}, 0, "", "no sharding unless the record says so"},
    // Fused (FlashAttention-style) attention.
    Rule{
        FLASH_ATTENTION,
        {.framework = "nemo|composer|fsdp|torchtitan|flash", .year_from = 2023},
        true,
        "framework '{framework}', source year {year}",
        "NeMo 2024 and Transformer Engine fused attention; Composer/FSDP and torchtitan call FlashAttention"},
    Rule{FLASH_ATTENTION,
         {.framework = "nemo|composer|fsdp|torchtitan|flash"},
         true,
         "framework '{framework}'",
         "NeMo and Transformer Engine fused attention; Composer/FSDP and torchtitan call FlashAttention"},
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
    // fp8 primary weights.
    Rule{FP8_PARAMS,
         {.framework = "bridge", .precision = "fp8"},
         true,
         "fp8 primary weights, framework '{framework}'",
         "Megatron Bridge FP8 current-scaling recipes: fp8_param_gather"},
    // The distributed optimizer's parameter all-gather under the forward.
    Rule{OVERLAP_PARAM_GATHER,
         {.framework = "nemo", .zero_from = 1, .zero_to = 2},
         true,
         "framework '{framework}'",
         "NeMo and Megatron Bridge recipes: overlap_param_gather (NeMo 1.0: overlap_param_sync)"},
    // FSDP2's reduction dtype.
    Rule{GRAD_REDUCE_IN_FP32,
         {.framework = "torchtitan", .zero_from = 3, .precision = "bf16|fp8"},
         true,
         "framework '{framework}': FSDP2 mixed_precision_reduce float32",
         "torchtitan MixedPrecisionPolicy: mixed_precision_param bfloat16, mixed_precision_reduce float32 "
         "(Composer's PURE mixed precision reduces in bf16)"},
    // DeepSpeed ZeRO-3 of 2021 (v0.3): a tensor-by-tensor gather after a device synchronize.
    Rule{ZERO3_FETCH,
         {.framework = "deepspeed", .year_to = 2021, .zero_from = 3},
         Zero3Fetch::BLOCKING,
         "framework '{framework}', a source from {year}",
         "DeepSpeed ZeRO-3 of 2021 (v0.3, runtime/zero/stage3.py): a synchronize and a tensor-list "
         "all_gather per "
         "parameter tensor; flat-buffer prefetch in later releases"},
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
    // The H100 PCIe card (an H800 PCIe has its compute and memory): 114 SMs, 350 W, HBM2e; the
    // only H100 with HBM2e. Its topology states the variant and PCIe between the cards.
    GpuRule{.family = "H100-PCIe",
            .words = "h100|h800",
            .form_words = "pcie|hbm2e",
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
std::span<const GpuRule> gpu_rules() {
  return GPU_RULES;
}
std::span<const CardRule> card_rules() {
  return CARD_RULES;
}

bool matches(const RuleMatch& when, const RecordFacts& facts, std::string* model_word) {
  const std::string framework = lowered(facts.framework);
  if (!when.framework.empty() && !has_word(framework, when.framework))
    return false;
  if (!when.not_framework.empty() && has_word(framework, when.not_framework))
    return false;
  std::string word;
  if (!when.model.empty() && !has_word(lowered(facts.model), when.model, &word))
    return false;
  if ((when.year_from > 0 || when.year_to > 0) && !facts.year)
    return false;
  if ((when.year_from > 0 && *facts.year < when.year_from) ||
      (when.year_to > 0 && *facts.year > when.year_to))
    return false;
  if (facts.zero_stage < when.zero_from || facts.zero_stage > when.zero_to)
    return false;
  if (!when.precision.empty()) {
    const std::string_view name = precision_name(facts.precision);
    bool any = false;
    for (std::string_view rest = when.precision; !rest.empty() && !any;) {
      const std::size_t bar = rest.find('|');
      any = rest.substr(0, bar) == name;
      rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
    }
    if (!any)
      return false;
  }
  if ((when.grouped_query && !facts.grouped_query) ||
      (when.sequence_splits_over_tp && !facts.sequence_splits_over_tp))
    return false;
  if (model_word != nullptr)
    *model_word = word;
  return true;
}

std::optional<Applied> first_rule(Mechanism m, const RecordFacts& facts) {
  for (const Rule& r : FRAMEWORK_RULES) {
    std::string word;
    if (r.mechanism == m && matches(r.when, facts, &word))
      return Applied{.rule = &r, .model_word = word};
  }
  return std::nullopt;
}

std::string Applied::note(const RecordFacts& facts) const {
  std::string text(rule->note);
  text = replaced(text, "{framework}", facts.framework.empty() ? "none" : facts.framework);
  text = replaced(text, "{year}", facts.year ? std::to_string(*facts.year) : "?");
  return replaced(text, "{model}", model_word);
}

std::string Applied::listed(const RecordFacts& facts) const {
  const std::string text = std::string(to_string(rule->mechanism)) + "=" + to_string(rule->value);
  return rule->note.empty() ? text : text + " (" + note(facts) + ")";
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
