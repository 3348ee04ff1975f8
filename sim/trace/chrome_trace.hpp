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

#include <ostream>
#include <vector>

namespace stepsim::trace {

/// What a trace is drawn from. All references must outlive the call.
struct TraceInput {
  const graph::StepProgram& program;                  ///< the replayed DAG (finalized)
  const std::vector<Seconds>& start;                  ///< per task id: simulated start
  const std::vector<Seconds>& end;                    ///< per task id: simulated end
  const ClusterSpec& cluster;                         ///< names the run; gpus_per_node places ranks on nodes
  const WorkloadSpec& workload;                       ///< names the run
  const std::vector<CounterSeries>* memory = nullptr; ///< bytes in use per GPU: a "memory" counter track
};

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
