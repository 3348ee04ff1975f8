#pragma once
// Why a degraded cluster is slower (docs/degraded.md, "Reports"): the slow GPUs among the
// simulated ranks and the time the healthy ranks waited on them at each group's collectives.

#include "config/spec.hpp"
#include "graph/step_builder.hpp"

#include <optional>
#include <vector>

namespace stepsim::report {

/// A simulated rank on a GPU of `degraded.gpus` with speed below 1.
struct SlowGpu {
  int rank = 0, node = 0, gpu = 0;
  double speed = 1.0;
};

struct StragglerReport {
  std::vector<SlowGpu> slow_gpus; ///< ascending rank
  /// Per group: the longest total time one healthy simulated rank spent at that group's
  /// collectives waiting for a slow rank (the collective started when a slow participant was
  /// ready, after this rank was), over the step.
  std::vector<double> wait_s; ///< tp, pp, dp, ep, cp
  int degraded_nics = 0;      ///< NICs slower or down among the nodes the job uses
};

/// The report, or nullopt when the cluster has no GPU slower than its spec and no degraded NIC
/// on a node the job uses (outputs then stay those of a perfect cluster).
std::optional<StragglerReport> straggler_report(const graph::StepProgram& program,
                                                const std::vector<Seconds>& start,
                                                const std::vector<Seconds>& end, const ClusterSpec& cluster);

} // namespace stepsim::report
