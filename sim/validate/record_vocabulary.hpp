#pragma once
// The free texts of a measured run's record (config::MeasuredRun) read as the simulator's own
// types: the pipeline schedule, the ZeRO stage, the precision, the recomputation and the
// inter-node NICs (docs/validation.md, "Mapping"). Each parse returns the value the text names,
// nothing when the record leaves it out, or why the text cannot be mapped (the run's skip reason).

#include "config/spec.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stepsim::validate {

/// A record's text read as a T.
template <class T> struct Parsed {
  std::optional<T> value; ///< nullopt: the record leaves it out (or `error`)
  std::string error;      ///< non-empty: not mapped, the run's skip reason
  std::string note;       ///< non-empty: the default or reading taken, as the plan lists it
};

/// What a record's framework text states about how the step runs, in words of the mechanism, not
/// of a framework: "eager" or "torch.compile" (training.pointwise) and pipelined TP communication
/// ("--tp-comm-overlap", "TP comm overlap", "userbuffers", "async TP": parallel.tp_comm_overlap) and
/// the distributed optimizer's parameter all-gather under the forward ("--overlap-param-gather",
/// "overlap_param_gather": training.overlap_param_gather).
struct StatedOptions {
  std::optional<Pointwise> pointwise;
  bool tp_comm_overlap = false;
  bool overlap_param_gather = false;
  bool fp8_all_gather = false; ///< torchao's enable_fsdp_float8_all_gather, or a float8 all-gather named
};
StatedOptions parse_stated_options(const std::string& framework);

/// Whether a selective `recompute` text names a per-op checkpointing policy ("per-op", "op
/// policy", `selective_ac_option op`): PyTorch's selective activation checkpointing that saves
/// every other matmul (recompute_modules: alternate_linears).
bool names_per_op_policy(const std::string& text);
/// Whether a precision text names fp8 with row-wise (axiswise) scales: torchao's `rowwise` recipe
/// ("float8 rowwise", "row-wise scaling", "axiswise").
bool names_rowwise_scaling(const std::string& text);

/// What a record's `parallelism.schedule` text names.
struct ScheduleText {
  /// ZB_H2, ZB_H1 or GPIPE when the text names one (in that order of precedence), else
  /// ONE_F_ONE_B when it names 1F1B; nullopt when it names none of them.
  std::optional<Schedule> named;
  /// Names the interleaved schedule and nothing else ("1F1B / interleaved not stated" does not).
  bool interleaved = false;
  /// Mentions 1F1B or interleaving at all.
  bool one_f_one_b_family = false;
  /// DualPipe (DeepSeek-V3): bidirectional, forward and backward overlapped, not modelled.
  bool bidirectional = false;
};
ScheduleText parse_schedule(const std::string& text);

/// `parallelism.zero_stage` and `fsdp`: FSDP's SHARD_GRAD_OP is 2, FULL_SHARD, HYBRID_SHARD (or
/// fsdp: true) 3, a leading digit its stage; nullopt when neither is given. Errors: an
/// unrecognised text, a stage above 3.
Parsed<int> parse_zero_stage(const std::string& text, bool fsdp);

/// `precision`: fp8 first (fp8 records often also name their 16-bit precision, "fp8, bf16 master
/// weights"), then bf16, then fp16; PyTorch's dtype names count too (torch.bfloat16,
/// float8_e4m3fn, torch.float16 / half). nullopt for "" and "null".
Parsed<Precision> parse_precision(const std::string& text);

/// `recompute`: selective, full, none by their names; activation checkpointing named without a
/// kind ("true", "checkpoint ...") is full recomputation (Megatron-LM's
/// --checkpoint-activations, Hugging Face's gradient_checkpointing), noted. Not given: selective
/// when `has_modules` (recompute_modules name what it repeats), else none, noted.
Parsed<Recompute> parse_recompute(const std::string& text, bool has_modules);

/// `recompute_modules` (names as training.recompute_modules); nullopt when the list is empty.
Parsed<RecomputeModules> parse_recompute_modules(const std::vector<std::string>& names);

/// A node's inter-node NICs as a record's `hardware.inter_node` text states them.
struct NodeNics {
  int64_t count = 0; ///< NICs per node
  double gbps = 0;   ///< line rate per NIC per direction, Gb/s
};

/// Reads `hardware.inter_node` text (counts 1..128): "8x 200 Gb/s HDR InfiniBand" -> {8, 200}, "4x Omni-Path
/// 100 Gb/s" -> {4, 100}. A rate without a count is the node's total, spread over
/// `gpus_per_node` NICs ("1600 Gb/s node-node RoCE" -> {8, 200}), unless the text says it is per
/// NIC, port or GPU. Units: Gb/s, Gbps, Gbit/s, Gb, Tb/s, Tbps (bits) and GB/s, GBps (bytes),
/// case as written. nullopt when the text states no rate.
std::optional<NodeNics> parse_inter_node(const std::string& text, int64_t gpus_per_node);

} // namespace stepsim::validate
