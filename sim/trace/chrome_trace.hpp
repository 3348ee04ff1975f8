#pragma once
// Timelines of a replayed step: a Chrome trace-event JSON file (opens in ui.perfetto.dev and
// chrome://tracing) and a flat per-task CSV. Consumes the per-task intervals a replay produced
// (engine::ReplayResult::start/end); never includes SimGrid or the engine.
//
// Layout of the JSON: one process per simulated GPU (pid = rank), one thread per stream
// (tid = graph::Stream index), one complete ("X") event per task and simulated participant, flow
// arrows for pipeline sends. A send is drawn on the sender's pp-comm thread and on one of two
// receive threads of the receiver ("pp recv fwd", tid 4; "pp recv bwd", tid 5), so slices on a
// thread never overlap. Times are printed in microseconds with nanosecond resolution.

#include "config/spec.hpp"
#include "core/counter_series.hpp"
#include "core/units.hpp"
#include "graph/step_builder.hpp"

#include <limits>
#include <ostream>
#include <string>
#include <vector>

namespace stepsim::trace {

/// Which part of the step a trace draws (`run --trace-ranks`, `--trace-window`).
struct TraceSelection {
  std::vector<graph::Rank> ranks; ///< the GPUs drawn, ascending; empty: every simulated GPU
  Seconds window_start{0.0};      ///< slices and samples ending before this are left out
  Seconds window_end{std::numeric_limits<double>::infinity()}; ///< ... and starting after this
};

/// The simulated GPUs `spec` selects: comma-separated `DIM=VALUE` with DIM one of dp, pp, tp, cp,
/// ep and VALUE `*`, an index `N` or a range `A-B` of that coordinate (docs/output.md, "Traces");
/// a dimension not named matches every index; "" or "all" selects every simulated GPU. Throws
/// ConfigError naming `--trace-ranks` for a malformed spec or one that selects no simulated GPU.
std::vector<graph::Rank> select_ranks(const graph::StepProgram& program, const std::string& spec);

/// "START:END" in seconds of the step (either side may be empty: from the start, to the end).
/// Throws ConfigError naming `--trace-window`.
TraceSelection parse_window(const std::string& spec);

/// "0-7, 64-71" for ascending ranks: runs of consecutive ranks as ranges.
std::string rank_ranges(const std::vector<graph::Rank>& ranks);

/// Several jobs in one trace (`stepsim jobs`): what a GPU of the shared program is in its job.
struct JobLabel {
  std::string job;                       ///< the job's name, put before the GPU's process name
  const graph::RankGrid* grid = nullptr; ///< the job's grid, whose coordinates the name gives
  graph::Rank rank = -1;                 ///< the GPU's rank in its job
};

/// What a trace is drawn from. All references must outlive the call.
struct TraceInput {
  const graph::StepProgram& program;                  ///< the replayed DAG (finalized)
  const std::vector<Seconds>& start;                  ///< per task id: simulated start
  const std::vector<Seconds>& end;                    ///< per task id: simulated end
  const ClusterSpec& cluster;                         ///< names the run; gpus_per_node places ranks on nodes
  const WorkloadSpec& workload;                       ///< names the run
  const std::vector<CounterSeries>* memory = nullptr; ///< bytes in use per GPU: a "memory" counter track
  TraceSelection selection = {};                      ///< the GPUs and time window drawn
  /// Per rank of `program` (indexed by rank): its job's label when the program holds several jobs
  /// whose ranks are the cluster's GPUs; null for one job.
  const std::vector<JobLabel>* jobs = nullptr;
};

/// The GPUs a trace of `in` draws: the selection's ranks, or every simulated GPU.
std::vector<graph::Rank> drawn_ranks(const TraceInput& in);

/// Writes `in` as a Chrome trace-event JSON object
/// {"traceEvents":[...],"displayTimeUnit":"ms","metadata":{...}}.
/// Byte-identical output for identical input (no locale, events in task-id order).
/// Throws stepsim::Error if start/end do not hold one entry per task.
void write_chrome_trace(std::ostream& out, const TraceInput& in);

/// Writes one CSV row per task (times in seconds, shortest round-trip form) under the header
/// task,kind,rank,stream,phase,block,group,op,stage,layer,micro_batch,start_s,end_s,bytes,flops.
/// Throws stepsim::Error if start/end do not hold one entry per task.
void write_task_csv(std::ostream& out, const TraceInput& in);

} // namespace stepsim::trace
