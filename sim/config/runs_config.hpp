#pragma once
// A measured-runs file (the schema of tests/validate/data/measured_runs.yaml, docs/validation.md):
// published training runs with their model, hardware, layout and measured throughput. Parsed
// here because config/ is the only user of yaml-cpp; the result is plain structs with every
// optional figure as std::optional (YAML `null` = absent). Mapping a run onto a cluster and a
// workload lives in validate/.

#include "config/config.hpp"

#include "config/spec.hpp"
#include <cstdint>
#include <filesystem>

#include <optional>
#include <string>
#include <vector>

namespace stepsim::config {

struct MeasuredModel {
  std::string name;
  std::optional<int64_t> layers, hidden, ffn_hidden, heads, kv_heads, vocab, seq_len;
  std::optional<int64_t> moe_experts, moe_topk, moe_shared_experts;
  std::optional<double> params_b; ///< published parameter count, billions (resolves the head width)
  std::optional<int64_t>
      head_dim;               ///< attention head width when not hidden / heads (an extension of the schema)
  std::optional<MlaSpec> mla; ///< multi-head latent attention (an extension of the schema)
  /// Sliding-window attention (extensions of the schema): the window, and every how-many-th layer
  /// attends to the full sequence (model.sliding_window, model.full_attention_every).
  std::optional<int64_t> sliding_window, full_attention_every;
  /// Extensions of the schema for DeepSeek-style MoE: the experts' inner size when ffn_hidden is the
  /// dense layers' (model.moe.expert_ffn_hidden), the leading dense layers
  /// (model.moe.first_dense_layers) and the multi-token-prediction depth (model.mtp_layers).
  std::optional<int64_t> moe_ffn_hidden, moe_first_dense, mtp_layers;
  /// Group-limited routing (an extension of the schema): model.moe.routing.groups / group_top_k.
  std::optional<int64_t> moe_groups, moe_group_topk;
  std::string notes;
};

struct MeasuredHardware {
  std::string gpu; ///< as written, e.g. "A100-SXM4-80GB", "a100_80gb"
  std::optional<int64_t> num_gpus, gpus_per_node;
  std::optional<double> peak_tflops; ///< peak_tflops_assumed, TFLOP/s
  std::optional<double> gpu_mem_gb;  ///< memory per GPU, GB
  std::string inter_node;            ///< free text, e.g. "8x 200 Gb/s HDR InfiniBand per node"
  std::string system;
};

struct MeasuredParallelism {
  std::optional<int64_t> tp, pp, dp, cp, ep, sp, virtual_pp;
  std::optional<int64_t> etp; ///< expert tensor parallelism (an extension of the schema)
  std::string zero_stage;     ///< as written ("3", "1 (BF16_Optimizer ...)", "FSDP FULL_SHARD"), "" = null
  std::optional<bool> fsdp;
  std::optional<bool> ep_overlap; ///< combined 1F1B all-to-all overlap (an extension of the schema)
  std::optional<bool>
      tp_comm_overlap; ///< pipelined TP communication as the recipe sets it (an extension of the schema)
  std::string
      ep_dispatch; ///< "deduplicated" (DeepEP / HybridEP) or "all_to_all" (an extension), "" = not given
  std::vector<int64_t>
      chunk_layers;     ///< layers per model chunk (an extension of the schema), empty = not given
  std::string schedule; ///< free text, "" = null
};

struct MeasuredBatch {
  std::optional<int64_t> micro_batch, global_batch_seqs, global_batch_tokens, grad_accum;
};

/// The published figures. At least one is present in a usable run.
struct MeasuredFigures {
  std::optional<double> tflops_per_gpu, mfu_pct, hfu_pct, iteration_time_s;
  std::optional<double> tokens_per_s_per_gpu, tokens_per_s_total;
  std::optional<double> aggregate_pflops; ///< the whole job's sustained PFLOP/s
  std::string tflops_basis;               ///< the source's FLOP convention, free text
};

struct MeasuredRun {
  std::string id;
  std::string group;
  std::string where; ///< "FILE:LINE:COL" of the run's entry
  MeasuredModel model;
  MeasuredHardware hardware;
  MeasuredParallelism parallelism;
  MeasuredBatch batch;
  std::string recompute; ///< free text, "" = null
  /// What a selective recomputation repeats (an extension of the schema: Megatron's
  /// recompute_modules, names as training.recompute_modules), empty = not given.
  std::vector<std::string> recompute_modules;
  /// Memory settings of the run's recipe (extensions of the schema, as the workload's training
  /// keys of the same names): fp8 primary weights, activation offloading, optimizer state bytes.
  std::optional<bool> fp8_params;
  std::optional<int64_t> offload_layers;
  std::optional<int64_t> recompute_layers; ///< with full recomputation, the first N layers of each chunk
  std::optional<double> optimizer_bytes_per_param;
  /// The launch environment's PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (as
  /// training.expandable_segments); absent = the stack's preset.
  std::optional<bool> expandable_segments;
  std::string precision; ///< free text, "" = null
  std::string framework;
  /// source.year when the source is a mapping with an integer year (the rest of `source` is
  /// free-form and not read).
  std::optional<int> year;
  MeasuredFigures measured;
};

struct RunsFile {
  std::string source;
  std::vector<MeasuredRun> runs; ///< file order
  /// Unknown keys, read past: "FILE:LINE:COL: unknown key 'PATH' ignored[; did you mean ...]".
  /// Measured-run files grow new fields; a key a run needs that is misspelt still shows as that
  /// run's skip reason.
  std::vector<std::string> ignored;
};

/// A calibration data file (topologies/calibration/<gpu kind>.yaml, docs/calibration.md): the
/// fitted knobs of one GPU kind and its bundled fabric, as cluster keys, and a record of the fit.
struct CalibrationFile {
  std::string source;
  std::string gpu_kind;                ///< must equal the cluster's gpu.kind
  std::vector<Override> knobs;         ///< paths prefixed "cluster.", file order
  std::vector<std::string> fit_runs;   ///< ids of the runs the knobs were fitted on
  std::string objective;               ///< e.g. "median_abs_error_pct"
  std::optional<double> fit_error_pct; ///< the objective on the fit set
  /// How a fit searched, as `stepsim calibrate` took it (optional keys `ranges`, `rounds`,
  /// `tolerance` of a record): each knob's range as `--knob` reads it ("LO:HI[:UNIT]"), the
  /// coordinate-descent rounds and the grid step. A refit (`stepsim validate --cross-validate`)
  /// repeats it; a record without ranges cannot be refitted.
  struct Search {
    std::vector<std::pair<std::string, std::string>> ranges; ///< ("cluster.KEY", "LO:HI[:UNIT]")
    std::optional<int64_t> rounds;
    std::optional<double> tolerance;
    std::string where; ///< "FILE:LINE:COL: key 'fit'" (or then[i]), for messages
  };
  /// fit.knobs: the knobs the first fit searched (paths prefixed "cluster."); empty = every knob
  /// that no later fit names. The others were set otherwise (transferred from another GPU kind).
  std::vector<std::string> fit_knobs;
  Search fit_search;
  /// A later fit (`then:`): some knobs fitted after the first fit on runs of their own, with the
  /// knobs fitted before held at their values. The first fit (`fit:`) covers the other knobs.
  struct Stage {
    std::vector<std::string> knobs; ///< paths prefixed "cluster.", each one of `knobs`
    std::vector<std::string> runs;
    std::string objective;
    std::optional<double> error_pct;
    Search search;
  };
  std::vector<Stage> then;
};

/// Reads a calibration file: `gpu_kind` (required), `knobs` (a mapping of dotted cluster keys to
/// scalar values, required), `fit` (optional: runs, objective, its value, and free `note`/`search`
/// text, and how it searched: `knobs`, `ranges`, `rounds`, `tolerance`), `then` (optional: a list
/// of later fits, each the same, `knobs` required). Every key a record names must be a key of
/// `knobs`. Throws ConfigError naming FILE:LINE:COL.
CalibrationFile load_calibration(const std::filesystem::path& file);

/// Reads a measured-runs file: a mapping with a `runs:` list (and optionally `meta`,
/// `collective_measurements`, `gemm_measurements`, which are not read). Every run mapping and
/// its sub-mappings accept exactly the schema's keys; numbers must be numbers (or null), ids
/// unique and non-empty. Throws ConfigError naming FILE:LINE:COL and the key.
RunsFile load_runs(const std::filesystem::path& file);

/// Several measured-runs files as one (in the order given): `source` lists the files' names
/// ("a.yaml + b.yaml"). A run id given in two files is an error naming both.
RunsFile load_runs(const std::vector<std::filesystem::path>& files);

} // namespace stepsim::config
