#pragma once
// Why a degraded cluster is slower (docs/degraded.md, "Reports"): the slow GPUs among the
// simulated ranks, the time the healthy ranks waited on them at each group's collectives, and
// the communication over degraded NICs and links that compute did not hide.

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
  /// Simulated ranks standing for a whole TP group that holds a slow GPU: the group replayed at
  /// its slowest member's pace (docs/degraded.md, "Folding"), its healthy members' waits
  /// replayed from that rank's compute (wait_s's TP figure counts them).
  int paced_tp_groups = 0;
  /// Per group (tp, pp, dp, ep, cp): the longest total time one simulated rank's compute stream
  /// stood idle while a collective or send of that group it takes part in ran across nodes with
  /// a participant on a node whose network is degraded (ClusterSpec::network_degraded_at).
  std::vector<double> link_exposed_s;
};

/// The report, or nullopt when the cluster has no GPU slower than its spec and no node the job
/// uses has a degraded network (outputs then stay those of a perfect cluster).
std::optional<StragglerReport> straggler_report(const graph::StepProgram& program,
                                                const std::vector<Seconds>& start,
                                                const std::vector<Seconds>& end, const ClusterSpec& cluster);

} // namespace stepsim::report
