#pragma once
// Training stack presets (docs/stacks.md): `training.stack: {name, version}` in a workload file
// stands for the mechanism defaults of one framework release (Megatron-LM, NeMo, DeepSpeed,
// PyTorch FSDP, ...). The presets are one data table (stacks.cpp), each value with the
// framework's flag or configuration name and where it is documented. check_layout expands the
// stack before its checks: a key the file writes itself wins, and a value whose mechanism needs a
// layout (sp: tp > 1) applies only where the layout has it.

#include "config/spec.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace stepsim::config {

/// A mechanism's value, typed as its workload key: bool, int (zero_stage, etp), Zero3Fetch,
/// Pointwise, AttentionKernel or GradAccumulation.
using StackValue = std::variant<bool, int, Zero3Fetch, Pointwise, AttentionKernel, GradAccumulation>;

/// The layout a preset's value needs; elsewhere the key keeps its built-in default.
enum class StackWhen {
  ALWAYS,
  TP,                   ///< tp > 1 (a TP collective to place)
  TP_PP_NO_SP,          ///< tp > 1, pp > 1 and no sp (pipeline messages TP could split)
  TP_SPLITS_SEQUENCE,   ///< tp > 1 and seq_len % tp == 0 (sequence parallelism)
  SHARDED_OPTIMIZER_DP, ///< zero_stage 1 or 2 and dp > 1 (the distributed optimizer's gather)
  SIXTEEN_BIT_BF16,     ///< precision bf16 or fp8 (bf16 weights), not fp16
  FP8,                  ///< precision fp8
  ZERO3,                ///< zero_stage 3
  ZERO3_BF16,           ///< zero_stage 3 and precision bf16 or fp8
  MOE_TP,               ///< a mixture-of-experts model with tp > 1
  TP_SP,                ///< tp > 1 and sp (TP communication overlap)
  FUSED_ATTENTION,      ///< training.flash_attention (a fused attention kernel to choose)
  PP_1F1B,              ///< pp > 1 and schedule 1f1b (DeepSpeed's pipeline schedule)
  /// zero_stage 3 with a pipeline, dp*cp > 1, a dense model, prefetched gathers and a schedule that
  /// does not split the backward (FSDP2 under torch.distributed.pipelining)
  ZERO3_PIPELINE,
  DENSE_PLAIN_ATTENTION, ///< a dense model with plain attention (no model.moe, no model.mla)
};

/// One mechanism default of a preset and its citation (flag or configuration name, default, file
/// or document).
struct StackDefault {
  StackKey key;
  StackValue value;
  StackWhen when;
  std::string_view source;
};

/// One release of a stack: its version, the year it came out (a record without a version runs
/// the release current at its source's date) and its defaults.
struct StackVersion {
  std::string_view version;
  int released;
  std::span<const StackDefault> defaults;
  std::string_view about; ///< what the version stands for (tag, container, date)
};

struct StackPreset {
  std::string_view name;                  ///< training.stack.name
  std::string_view title;                 ///< the framework, as docs/stacks.md names it
  std::span<const StackVersion> versions; ///< oldest first
};

/// Every preset, in docs/stacks.md's order.
std::span<const StackPreset> stack_presets();

/// The preset named `name`, or null.
const StackPreset* find_stack(std::string_view name);

/// `preset`'s release `version`, or null; "" = the newest.
const StackVersion* find_version(const StackPreset& preset, std::string_view version);

/// The release of `preset` current in `year`: the newest released by then, else the oldest.
const StackVersion& version_of_year(const StackPreset& preset, int year);

/// The default `version` gives for `key`, or null.
const StackDefault* stack_default(const StackVersion& version, StackKey key);

/// "megatron-lm (2021, 2022), nemo (23.11, 24.07), ...": the presets an error lists.
std::string known_stacks();

/// The key's path in the workload file: "parallel.sp", "training.flash_attention".
std::string_view stack_key_path(StackKey key);

/// "true", "1", "blocking": the value as the workload file spells it.
std::string to_string(const StackValue& value);

/// What `when` needs, for --explain and docs/stacks.md: "tp > 1 and seq_len % tp == 0".
std::string_view to_string(StackWhen when);

/// True when `workload`'s layout (with `dp` data-parallel ranks) has what `when` needs.
bool stack_applies(StackWhen when, const WorkloadSpec& workload, int64_t dp);

/// Sets every mechanism of `workload.stack`'s preset the file did not write to the preset's value
/// where its layout has what the value needs, else to the key's built-in default, and records each
/// mechanism's origin. Idempotent; without a stack it only records the origins.
void expand_stack(WorkloadSpec& workload, int64_t dp);

/// One line per mechanism, in StackKey order: "parallel.sp = true  (stack nemo@24.07: ...)".
std::vector<std::string> explain_stack(const WorkloadSpec& workload);

} // namespace stepsim::config
