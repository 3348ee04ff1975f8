#pragma once
// The mapping rules as data (docs/validation.md, "Mapping"): how a published record's free text
// (framework, source year, model name, GPU name) turns into workload and cluster settings. The
// framework text names a training stack (config/stacks.hpp, docs/stacks.md) and its release; the
// stack's preset gives the framework mechanisms. Model families and the era of a record whose
// stack is not recognised have rows of their own. Each row names what it sets, a structured match
// condition and its cited source; plan_run asks the tables, row order deciding. The tables
// themselves are in rules.cpp.

#include "config/spec.hpp"
#include "config/stacks.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace stepsim::validate {

/// The framework behaviour a rule sets, named as the workload key it writes.
enum class Mechanism {
  MLP,                    ///< model.mlp, by model family
  DROPOUT,                ///< model.dropout, by model family
  SEQUENCE_PARALLEL,      ///< parallel.sp (with tp > 1, the record leaving sp)
  PP_SCATTER_GATHER,      ///< parallel.pp_scatter_gather (with tp > 1, pp > 1 and no sp)
  TP_GRAD_OVERLAP,        ///< parallel.tp_grad_overlap (with tp > 1)
  EXPERT_TENSOR_PARALLEL, ///< parallel.etp (MoE with tp > 1, the record leaving etp)
  ZERO_STAGE,             ///< parallel.zero_stage (the record leaving zero_stage and fsdp)
  FLASH_ATTENTION,        ///< training.flash_attention
  FP8_PARAMS,             ///< training.fp8_params (the record leaving fp8_params)
  OVERLAP_PARAM_GATHER,   ///< training.overlap_param_gather (with dp > 1)
  GRAD_REDUCE_IN_FP32,    ///< training.grad_reduce_in_fp32
  ZERO3_FETCH,            ///< training.zero3_fetch
};

/// The workload key a mechanism sets, as the listed defaults name it: "mlp", "sp", "etp", ...
const char* to_string(Mechanism m);

/// A setting's value, typed by the mechanism: bool (sp, pp_scatter_gather, tp_grad_overlap,
/// flash_attention, dropout, fp8_params, overlap_param_gather, grad_reduce_in_fp32), int (etp,
/// zero_stage), MlpKind (mlp) or Zero3Fetch (zero3_fetch).
using Setting = std::variant<bool, int, MlpKind, Zero3Fetch>;

/// "true", "1", "swiglu", "blocking".
std::string to_string(const Setting& s);

/// What a rule matches. Word lists are '|'-separated substrings of the lowercased record text;
/// an empty list matches any text. A bounded year needs the record's `source.year`.
struct RuleMatch {
  std::string_view model = {};          ///< one of these in `model.name` (the first found names it)
  int year_from = 0;                    ///< source.year >= this; 0 = no bound
  int year_to = 0;                      ///< source.year <= this; 0 = no bound
  bool grouped_query = false;           ///< kv_heads given and unlike heads
  bool sequence_splits_over_tp = false; ///< seq_len % tp == 0
};

/// One row: the mechanism, when it applies, the value, the note the run's defaults list
/// ("<key>=<value> (<note>)"; {framework} is the record's framework text or "none", {year} its
/// year, {model} the word of `model` found), and where the behaviour is documented. The rows of
/// a framework mechanism apply only to a record whose stack is not recognised, except a
/// catch-all row (no condition), which also stands where the recognised stack's preset leaves the
/// mechanism out.
struct Rule {
  Mechanism mechanism;
  RuleMatch when;
  Setting value;
  std::string_view note;
  std::string_view source;
};

/// The facts of a record the rules match on, as plan_run has mapped them so far.
struct RecordFacts {
  std::string framework;   ///< as written
  std::string model;       ///< model.name as written
  std::optional<int> year; ///< source.year
  int zero_stage = 0;
  Precision precision = Precision::BF16;
  bool grouped_query = false;
  bool sequence_splits_over_tp = false;
};

/// Every model-family and era rule, in the order they are tried.
std::span<const Rule> framework_rules();

/// One row of the stack recognition: words of a record's framework text that name a training
/// stack and, where the row pins one, its version. Rows are tried in order; the first match wins.
struct StackRule {
  std::string_view words;        ///< one of these in the lowercased framework text
  std::string_view also = {};    ///< and one of these ("" = no second list)
  int year_from = 0;             ///< source.year >= this (0 = any; a bounded row needs a year)
  std::string_view stack;        ///< the preset's name (config/stacks.hpp)
  std::string_view version = {}; ///< "" = the release current at the source's year (none: newest)
  std::string_view source;
};

std::span<const StackRule> stack_rules();

/// The stack a record's framework text names, and its release.
struct RecognisedStack {
  const config::StackPreset* preset = nullptr;
  const config::StackVersion* version = nullptr;
  const StackRule* rule = nullptr;
  bool by_year = false; ///< the release current at the source's year (the text names none)
  /// "nemo@24.07"
  [[nodiscard]] std::string name() const;
};

/// The first stack row matching `facts.framework` (and its year), or nullopt.
std::optional<RecognisedStack> recognise_stack(const RecordFacts& facts);

/// The workload key a framework mechanism is (nullopt: MLP, DROPOUT, the model's).
std::optional<StackKey> stack_key(Mechanism m);

/// A rule or preset value that matched, with the note it lists.
struct Applied {
  const Rule* rule = nullptr;                   ///< the row, or null for a preset's value
  const config::StackDefault* preset = nullptr; ///< the preset's value, or null for a row
  Mechanism mechanism = Mechanism::MLP;
  Setting setting;
  std::string model_word; ///< the word of when.model found ("" without one)
  std::string stack_note; ///< a preset value's note
  [[nodiscard]] const Setting& value() const { return setting; }
  /// The row's note, its placeholders filled in, or the preset value's note.
  [[nodiscard]] std::string note(const RecordFacts& facts) const;
  /// "<key>=<value>", or "<key>=<value> (<note>)" when there is a note.
  [[nodiscard]] std::string listed(const RecordFacts& facts) const;
};

/// True when `rule` matches `facts`; `model_word` gets the model word found.
bool matches(const RuleMatch& when, const RecordFacts& facts, std::string* model_word = nullptr);

/// The value for `m`: a framework mechanism of a recognised stack from its preset (its layout
/// condition judged on `facts`; the caller judges tp, dp and MoE), else the first row for `m` that
/// matches `facts` (nullopt: none, the simulator's default stays).
std::optional<Applied> first_rule(Mechanism m, const RecordFacts& facts);

/// One GPU family as records name it: the words that identify it in `hardware.gpu`, the bundled
/// profile and topology it runs on, and what differs from that profile.
struct GpuRule {
  std::string_view family; ///< the plan's name: "A100-40GB", "H800"
  std::string_view words;  ///< one of these in the lowercased hardware.gpu text
  /// A capacity band: gpu_mem_gb below this, or without gpu_mem_gb one of `memory_words` in the
  /// text (0 = any capacity).
  double below_gb = 0;
  std::string_view memory_words = {};
  /// And one of these in the text too (a card form, a memory type: "pcie|hbm2e"), "" = none:
  /// a GPU variant whose bundled topology states it (gpu.variant, docs/kernels.md).
  std::string_view form_words = {};
  /// None of these in the text ("sxm": an SXM part with HBM2e is no PCIe card), "" = none.
  std::string_view not_form_words = {};
  std::string_view kind;     ///< gpu.kind of the bundled profile and calibration file
  std::string_view topology; ///< bundled topology file
  /// Another topology for nodes of this many GPUs (V100: 16, a DGX-2), "" = none.
  std::string_view wide_topology = {};
  int64_t wide_gpus_per_node = 0;
  /// Another topology for jobs of more nodes than this (H100: a SuperPOD above 32), "" = none.
  std::string_view large_topology = {};
  int64_t large_above_nodes = 0;
  double nvswitch_gbytes_per_s = 0; ///< NVLink per GPU per direction, GB/s (0 = the profile's)
  double hbm_gib = 0;               ///< HBM capacity, GiB (0 = the profile's)
  bool hbm_from_record = false;     ///< HBM capacity from gpu_mem_gb when given
  double max_gb = 0;                ///< gpu_mem_gb above this is no such part (0 = no check)
  /// The part's power limit, W: a lower wattage in the text ("500W", "power-capped to 450 W")
  /// runs as gpu.variant.power_limit against it (0 = no power cap recognised for the family).
  double power_limit_w = 0;
  bool variant = false;       ///< the topology states a gpu.variant (its note is listed)
  std::string_view note = {}; ///< listed with the defaults
  std::string_view source;
};

/// The GPU families, in the order their words are tried.
std::span<const GpuRule> gpu_rules();

/// A card form no bundled topology stands for (PCIe cards: lower clocks, no NVSwitch).
struct CardRule {
  std::string_view family; ///< "" = any family
  std::string_view words;  ///< one of these in the lowercased hardware.gpu text
  std::string_view source;
};

std::span<const CardRule> card_rules();

/// The row `hw.gpu` names (first match), or null.
const GpuRule* gpu_rule(const std::string& gpu_text, std::optional<double> gpu_mem_gb);

/// The first row of `family`, or null.
const GpuRule* gpu_rule_of(std::string_view family);

/// True when one of `words` ('|'-separated) is in `lowered`; `found` gets the first one.
bool has_word(std::string_view lowered, std::string_view words, std::string* found = nullptr);

/// `text` in lower case.
std::string lowered(std::string text);

} // namespace stepsim::validate
