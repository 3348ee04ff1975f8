#pragma once
// One simulation, end to end: specs in, step DAG built, replayed on SimGrid, summarized. Used by
// `stepsim run` and by every command that simulates (sweeps run it in child processes, since
// SimGrid allows one simulation per process).

#include "config/spec.hpp"
#include "engine/replay.hpp"
#include "graph/step_builder.hpp"
#include "report/summary.hpp"

namespace stepsim::runner {

struct SimulateOptions {
  engine::CollectiveForm collective_form = engine::CollectiveForm::AUTO;
  bool fold_dp = true; ///< simulate one DP replica (docs/engine.md)
};

struct Simulation {
  graph::StepProgram program;
  engine::ReplayResult result;
  report::Summary summary;
  double wall_s = 0; ///< host time spent building and replaying (not part of any output file)
};

/// The compute-time model used for compute tasks (roofline over the cluster's GPU).
graph::ComputeTimeFn compute_time_model(const ClusterSpec& cluster, const WorkloadSpec& workload);

/// Builds, replays and summarizes one step. Precondition: config::check_layout() passed.
/// At most once per process (SimGrid). Throws SimulationError / ModelError.
Simulation simulate(const ClusterSpec& cluster, const WorkloadSpec& workload, const SimulateOptions& options = {});

} // namespace stepsim::runner
