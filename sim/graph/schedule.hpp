#pragma once
// Pipeline schedules as per-stage orderings of forward and backward micro-batch passes. Each
// schedule is a small pure function; the engine knows nothing about schedules.

#include "config/spec.hpp"
#include "graph/step_graph.hpp"

#include <vector>

namespace stepsim::graph {

struct PassRef {
  Phase phase = Phase::FORWARD; ///< FORWARD or BACKWARD
  int micro_batch = 0;
};

/// GPipe: all m forwards, then all m backwards (in micro-batch order).
std::vector<PassRef> gpipe_order(int stage, int pp, int m);

/// 1F1B (PipeDream-Flush): min(pp - stage - 1, m) warm-up forwards, then one forward and one
/// backward alternating, then the remaining backwards. Holds at most pp - stage micro-batches.
std::vector<PassRef> one_f_one_b_order(int stage, int pp, int m);

/// The ordering of `schedule` for `stage`. Every micro-batch appears once per phase, and a
/// micro-batch's backward never precedes its forward.
std::vector<PassRef> stage_order(Schedule schedule, int stage, int pp, int m);

} // namespace stepsim::graph
