#pragma once
// Metrics of one simulated step, computed from the task timeline (start/end per task, as
// published by the engine) and the specs: step time, throughput, MFU/HFU, pipeline bubble,
// exposed communication per group. Writes summary.json and the stdout table.

#include "config/spec.hpp"
#include "graph/step_builder.hpp"
#include "report/critical_path.hpp"
#include "report/memory_timeline.hpp"
#include "report/straggler.hpp"
#include "report/variability.hpp"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace stepsim::report {

/// A time per communication group.
struct GroupTimes {
  Seconds tp, pp, dp, ep, cp; ///< ep: expert all-to-all; cp: ring-attention sends
};

/// Payload bytes per step per GPU and group (sum of collective sizes S a GPU takes part in).
struct GroupBytes {
  Bytes tp, pp, dp, ep, cp;
};

struct StageMetrics {
  int stage = 0;
  double bubble_fraction = 0; ///< mean over the stage's GPUs
  Seconds compute;            ///< mean busy compute time per GPU
  GroupTimes exposed;         ///< mean per GPU
};

/// Parameter counts of the model (summary.json's `parameters`).
struct ParameterCounts {
  int64_t total = 0;                     ///< the whole model, tied weights once, no MTP modules
  int64_t active = 0;                    ///< used per token: total less the routed experts not chosen
  std::vector<int64_t> per_gpu_by_stage; ///< held by one GPU of each stage, before ZeRO sharding
};

/// The parameter counts of `w` (check_layout passed), from model/ (docs/model.md).
ParameterCounts parameter_counts(const WorkloadSpec& w);

/// Which GPUs and which part of the step the trace file of a run holds (`run --trace-ranks`,
/// `--trace-window`), for summary.json's `trace` and the table.
struct TraceNote {
  std::string file;          ///< "trace.json" or "trace.json.gz"
  std::vector<int> gpus;     ///< ranks drawn, ascending
  std::string gpu_ranges;    ///< the same as "0-7, 128-135"
  double window_start_s = 0; ///< drawn from
  double window_end_s = -1;  ///< drawn to; < 0: the end of the step
};

/// summary.json's format and version, its first key (docs/output.md).
inline constexpr const char* SUMMARY_SCHEMA = "stepsim.summary/2";

struct Summary {
  std::string cluster;
  std::string workload;
  int num_gpus = 0;
  int simulated_gpus = 0;
  int micro_batches = 0;
  Seconds step_time;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0; ///< model FLOPs / (step time * GPUs), in TFLOP/s
  double mfu = 0;            ///< model FLOPs / (step time * GPUs * peak)
  double hfu = 0;            ///< hardware FLOPs (with recomputation) / (step time * GPUs * peak)
  std::string flops_formula;
  double bubble_fraction =
      0;           ///< share of the step a compute stream idles for pipeline reasons, mean over GPUs
  Seconds compute; ///< busy compute time per GPU, mean
  /// Where the compute time came from (kernel profile rows measured or interpolated, the
  /// profile's model, or the plain roofline): shares of all simulated compute time, summing to
  /// 1 (all 0 when there is none). Weighted by each task's simulated busy time.
  graph::TimeSources compute_source;
  GroupTimes exposed; ///< time the compute stream waits on each group's communication, mean per GPU
  Seconds other_idle; ///< idle time attributed to nothing above, mean per GPU
  GroupBytes comm_bytes_per_gpu; ///< collective payloads S a GPU takes part in
  GroupBytes
      comm_volume_per_gpu; ///< bytes a GPU sends: 2(n-1)/n*S all-reduce, (n-1)/n*S gather/scatter, S send
  MemoryReport memory;     ///< peaks from the memory timeline (no tracks)
  std::vector<StageMetrics> stages;
  ParameterCounts parameters;
  std::optional<TraceNote> trace; ///< set by `run` when it writes a trace
  size_t tasks = 0;
  CriticalPath critical_path; ///< the chain of tasks that sets the step time
  /// On a degraded cluster (docs/degraded.md): the slow GPUs and what the others waited on them.
  std::optional<StragglerReport> degraded;
  /// With several steps or kernel noise (docs/variability.md): the step-time distribution. The
  /// figures above are then the first step's.
  std::optional<Variability> variability;
};

/// Computes the summary. `start`/`end` are per task id, in seconds from the step's start.
///
/// Attribution of compute-stream idle time: for each gap before a compute task, the predecessor
/// that finished last is followed back. While it is a collective, the part of the gap during
/// which that collective ran is exposed communication of its group and the part before it is
/// explained by what the collective waited for. When it is compute on another GPU (an upstream
/// stage) or nothing, the rest is pipeline bubble. Idle time after a GPU's last task until the
/// step ends is bubble (waiting for the pipeline to drain).
Summary summarize(const graph::StepProgram& program, const std::vector<Seconds>& start,
                  const std::vector<Seconds>& end, const ClusterSpec& cluster, const WorkloadSpec& workload);

/// summary.json: deterministic key order, full double precision.
void write_summary_json(std::ostream& out, const Summary& s);

/// The human-readable table for stdout.
void print_summary_table(std::ostream& out, const Summary& s);

} // namespace stepsim::report
