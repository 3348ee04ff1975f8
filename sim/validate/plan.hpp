#pragma once
// From a published run (config::MeasuredRun) to what stepsim simulates: the bundled topology
// for its GPU kind, a typed workload (WorkloadSpec), cluster overrides, the metric to compare and the
// defaults used for every field the record leaves out (docs/validation.md, "Mapping").

#include "config/config.hpp"
#include "config/runs_config.hpp"
#include "validate/flops.hpp"
#include "validate/record_vocabulary.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace stepsim::validate {

/// The published figure a run is compared on, in order of preference.
enum class Metric {
  ITERATION_TIME, ///< measured.iteration_time_s, seconds
  TFLOPS_PER_GPU, ///< measured.tflops_per_gpu under the source's basis, TFLOP/s
  MFU,            ///< measured.mfu_pct (the model's FLOPs: 3 x forward, no recomputation), percent
  TOKENS_PER_S,   ///< measured.tokens_per_s_per_gpu (or _total / GPUs), tokens/s per GPU
  HFU,            ///< measured.hfu_pct (with the recomputed FLOPs), percent
};

const char*
to_string(Metric m); ///< "iteration_time_s", "tflops_per_gpu", "mfu_pct", "tokens_per_s_per_gpu", "hfu_pct"

struct PlanOptions {
  std::filesystem::path topologies;    ///< folder holding the bundled topologies
  bool calibration = true;             ///< apply topologies/calibration/<gpu kind>.yaml
  std::vector<config::Override> extra; ///< cluster keys applied after everything (calibrate's trial knobs)
};

/// What a record sets on its bundled topology, typed; each is a cluster key of the same meaning.
struct ClusterSettings {
  int64_t nodes = 0;                    ///< nodes (0: the topology's)
  std::optional<int64_t> gpus_per_node; ///< gpus_per_node: the record's node when not 8, or the job's GPUs
  std::optional<int64_t> nics_per_node; ///< nics.count, from hardware.inter_node
  std::optional<double> nic_gbps;       ///< nics.bandwidth, Gb/s per NIC per direction
  std::optional<double> nvswitch_gbytes_per_s; ///< nvswitch.bandwidth, GB/s per GPU per direction
  std::optional<Bytes> hbm_capacity;           ///< gpu.hbm_capacity
};

/// One run, ready to simulate, or skipped with a reason.
struct RunPlan {
  std::string id;
  int64_t num_gpus = 0;
  std::string layout;   ///< "tp8 pp12 dp4", "dp384 zero3", ...
  std::string gpu_kind; ///< "A100", "A100-40GB", "H100", "H200", "H800", "B200", "GB200", or "" when unknown
  std::string skip_reason;            ///< non-empty: not simulated
  std::filesystem::path cluster_file; ///< bundled topology
  /// The workload, as the loader would read it from config::workload_yaml(workload) (`source`
  /// empty until the caller names the file it writes).
  WorkloadSpec workload;
  ClusterSettings cluster;                 ///< what the record sets on the topology
  std::vector<config::Override> overrides; ///< "cluster.*" knobs: calibration file, then PlanOptions::extra
  std::vector<std::string> defaults;       ///< every default used: "micro_batch=1 (not given)"
  Metric metric = Metric::ITERATION_TIME;
  double measured = 0; ///< the measured figure in the metric's unit
  TflopsBasis basis = TflopsBasis::MODEL;
  FlopsShape shape;       ///< for the FLOP conventions
  double peak_tflops = 0; ///< for MFU: the source's assumed peak (or the GPU's)
  bool moe = false;       ///< a mixture-of-experts model
  /// The record leaves the ZeRO stage unstated and the mapping's default is 0: check_plan may take
  /// the distributed optimizer where the stated layout cannot hold unsharded optimizer states.
  bool zero_stage_open = false;
};

/// The GPU family of a record's hardware ("A100-SXM4-80GB", "a100_80gb" -> "A100"), or "". An
/// A100 with 40 GB ("A100-SXM4-40GB", or gpu_mem_gb 40) is "A100-40GB": its HBM differs. A V100
/// with 16 GB is "V100-16GB" (its capacity differs, not its bandwidth).
std::string gpu_family(const config::MeasuredHardware& hw);

/// The gpu.kind of a family's bundled profile, topology and calibration file ("A100" ->
/// "A100-SXM4-80GB"; the H800 takes the H100's, a 16 GB V100 the 32 GB part's), or "".
std::string calibration_kind(const std::string& family);

/// The bundled topology file name for a family, node count and GPUs per node
/// ("dgx-a100-superpod.yaml"; a V100 node of 16 GPUs is a DGX-2, of other counts a DGX-1), or ""
/// when there is none.
std::string bundled_topology(const std::string& family, int64_t nodes, int64_t gpus_per_node = 8);

/// Maps `run`. Never throws for a run it cannot map: the plan carries the skip reason. The
/// workload is built as a WorkloadSpec, not yet checked (see check_plan). Throws ConfigError for
/// a PlanOptions::extra that is not a cluster key, and for an unreadable calibration file.
RunPlan plan_run(const config::MeasuredRun& run, const PlanOptions& options);

/// The plan's cluster: the bundled topology with the knobs (`overrides`, then `more`) read by
/// the loader, then the record's settings set on the spec, save a key a knob sets (the knob
/// wins, as a later `--set` would). Throws ConfigError.
ClusterSpec plan_cluster(const RunPlan& plan, const std::vector<config::Override>& more = {});

/// The `--set` options that give plan_cluster's cluster with `stepsim run` (command.txt): the
/// settings (gpus_per_node, nodes, nics.count, nics.bandwidth, gpu.hbm_capacity,
/// nvswitch.bandwidth), then the knobs.
std::vector<config::Override> set_options(const RunPlan& plan);

/// Loads the plan's cluster (plan_cluster), checks the plan's workload as the loader checks a
/// file (config::check_workload) and the layout; on a ConfigError or ModelError sets skip_reason
/// to its message. With `zero_stage_open`, a layout whose static memory ledger does not fit the
/// GPU without sharding but does with the distributed optimizer (ZeRO-1) over its DP replicas
/// takes it, listed: the run ran, so its memory fit. Returns the peak FLOP/s the run's precision
/// gets on the cluster (0 when skipped).
double check_plan(RunPlan& plan);

/// FLOPs of one simulated step, as summary.json counts them for the model's own architecture
/// (grouped-query attention, gated MLPs, routed experts, windows): model FLOPs (3 x forward) and
/// hardware FLOPs (with what is recomputed). 0 when unknown.
struct StepFlops {
  double model = 0;
  double hardware = 0;
};

/// The predicted figure of `plan.metric` for a simulated step time. MFU, HFU and model-basis
/// TFLOP/s count the architecture's FLOPs (`flops`; for a GPT layer they equal the 72-coefficient
/// formula), falling back on the GPT formula when `flops` is unknown; Megatron's eq. 3 basis is
/// that formula by definition.
double predicted_metric(const RunPlan& plan, Seconds step_time, StepFlops flops = {});

} // namespace stepsim::validate
