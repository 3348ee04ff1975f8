#pragma once
// The step-time distribution of several simulated steps (docs/variability.md): summary.json's
// `variability` and the table's lines.

#include "core/units.hpp"
#include "graph/steps.hpp"

#include <cstdint>
#include <utility>
#include <vector>

namespace stepsim::report {

struct Variability {
  int steps = 1;
  double kernel_cv = 0; ///< the CV in effect (workload's, else the GPU kind's)
  int64_t seed = 0;
  std::vector<Seconds> step_times; ///< per step, in order
  Seconds mean, p50, p90, p99, max;
  /// GPUs whose compute before the optimizer ended last in some step, with how many steps:
  /// most often first, then by rank.
  std::vector<std::pair<int, int>> slowest_ranks;
};

/// The p-quantile (0 < p <= 1) by nearest rank: the ceil(p N)-th smallest of N values.
/// Precondition: values not empty.
Seconds nearest_rank_quantile(std::vector<Seconds> values, double p);

/// The distribution of `series`' step times and the count of each slowest rank.
Variability variability_of(const graph::StepSeries& series, double kernel_cv, int64_t seed);

} // namespace stepsim::report
