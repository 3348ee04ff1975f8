#pragma once
// The step-time distribution of several simulated steps (docs/variability.md): summary.json's
// `variability` and the table's lines.

#include "core/units.hpp"
#include "graph/steps.hpp"

#include <cstdint>
#include <optional>
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
  /// With sampled replicas (training.variability.replicas), what the step times add for the
  /// replicas not simulated; absent when every replica was simulated.
  struct Sampled {
    int replicas = 0;  ///< units (DP replicas with their CP and EP ranks) in the job
    int simulated = 0; ///< of them simulated
    /// Spread (standard deviation) across the simulated units, pooled over the steps, of when each
    /// unit's compute before the optimizer ended, and of when its optimizer ended.
    Seconds sd_before, sd_optimizer;
    /// Added to every step: (sd_before + sd_optimizer) (E[max of replicas] - E[max of simulated])
    /// for standard normals.
    Seconds wait;
  };
  std::optional<Sampled> sampled;
};

/// The p-quantile (0 < p <= 1) by nearest rank: the ceil(p N)-th smallest of N values.
/// Precondition: values not empty.
Seconds nearest_rank_quantile(std::vector<Seconds> values, double p);

/// The expected maximum of n independent standard normals by Blom's approximation,
/// Phi^-1((n - 0.375) / (n + 0.25)): 0 for n = 1, within 1 % of the exact value from n = 8 on
/// (1.4236 at 8: 1.434). Precondition: n >= 1.
double expected_max_of_normals(int n);

/// The wait of the job's `replicas` units for the ones not simulated: each sync of the step (the
/// gradients' reduction after every unit's compute, the next step after every optimizer) waits
/// for the slowest unit, so each adds its spread times the growth of the expected maximum from
/// the simulated units to all of them (docs/variability.md, "Sampled replicas"). Precondition:
/// at least two units simulated.
Variability::Sampled sampled_wait(const graph::ReplicaTimes& times, int replicas);

/// The distribution of `series`' step times and the count of each slowest rank.
Variability variability_of(const graph::StepSeries& series, double kernel_cv, int64_t seed);

} // namespace stepsim::report
