#pragma once
// The critical path of a replayed step: the chain of tasks that sets the step time. Each task
// weighs its simulated interval (end - start); the path is the heaviest chain through the DAG
// (Boost.Graph's DAG longest path over a CSR copy of the step graph). The engine starts a task
// the moment its last input is done, so the chain's busy time is the step time and its waits
// (before its first task, between its tasks, after its last) are zero up to rounding.

#include "graph/step_graph.hpp"

#include <map>
#include <vector>

namespace stepsim::report {

struct CriticalPath {
  std::vector<graph::TaskId> tasks;                ///< the chain, first task first
  Seconds length;                                  ///< busy + wait: the step time
  Seconds wait;                                    ///< the step's time not covered by a task of the chain
  std::map<graph::Block, Seconds> compute;         ///< busy time of compute tasks per block
  std::map<graph::CommGroup, Seconds> collectives; ///< collectives per group (sends excluded)
  std::map<graph::CommGroup, Seconds> p2p;         ///< point-to-point sends per group (PP, CP ring)
};

/// The critical path of `graph` replayed with `start`/`end` per task id, over a step of
/// `step_time` (the latest end). Ties between equally heavy chains go to the lower task ids.
CriticalPath critical_path(const graph::StepGraph& graph, const std::vector<Seconds>& start,
                           const std::vector<Seconds>& end, Seconds step_time);

} // namespace stepsim::report
