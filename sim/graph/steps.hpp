#pragma once
// Several consecutive steps and per-kernel time noise (docs/variability.md). The noise is a
// counter-based draw: a pure function of (seed, step, rank, task), so the factors do not depend
// on the order anything is evaluated in, and the same seed gives the same bytes.

#include "graph/step_builder.hpp"

#include <cstdint>
#include <vector>

namespace stepsim::graph {

/// The key of one draw: which seed, step, GPU and task (the task's id within one step).
struct NoiseKey {
  uint64_t seed = 0;
  uint64_t step = 0;
  uint64_t rank = 0;
  uint64_t task = 0;
};

/// A uniform in (0, 1) (never 0 or 1) from the key and a stream index (0 or 1), by SplitMix64
/// over the key's words.
double uniform_draw(const NoiseKey& key, uint64_t stream);

/// A standard normal for the key (Box-Muller over its two uniforms).
double standard_normal(const NoiseKey& key);

/// A lognormal factor of mean 1 and coefficient of variation `cv` (>= 0): exp(mu + sigma Z) with
/// sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2, Z = standard_normal(key). cv 0 gives exactly 1.
double lognormal_factor(double cv, const NoiseKey& key);

struct StepsOptions {
  int steps = 1;        ///< consecutive steps, >= 1
  double kernel_cv = 0; ///< per-compute-task noise (lognormal_factor); 0 = none
  uint64_t seed = 0;
};

/// `one`'s tasks for step `step`: the same DAG with each compute task's duration multiplied by
/// lognormal_factor(kernel_cv, {seed, step, task's rank, task id}). Finalized.
StepProgram noisy_step(const StepProgram& one, const StepsOptions& options, int step);

/// `options.steps` consecutive steps of `one` as one DAG. Step k's tasks have ids
/// k (n + 1) + i (i < n = one's size, noisy as noisy_step(one, options, k)), followed by its end
/// marker at k (n + 1) + n: a zero-time compute task that waits for every task of step k (its
/// end is the step's end), and that every task of step k + 1 without a predecessor waits for.
/// A step thus starts on every GPU when the previous one has ended on all of them (the
/// optimizer's global synchronisation). Finalized; grid, ranks and micro-batches are `one`'s.
StepProgram repeat_steps(const StepProgram& one, const StepsOptions& options);

/// What repeat_steps' replay says of each step.
struct StepSeries {
  std::vector<Seconds> step_times; ///< step k: its end less the previous step's end (the first: its end)
  /// Per step, the GPU whose compute before the optimizer (forward, backward, recomputation)
  /// ended last: its gradients were ready last (ties: the lowest rank); -1 when there is none.
  std::vector<Rank> slowest_rank;
};

/// Reads the series off the end times (per task id of repeat_steps(one, {.steps = steps})).
StepSeries step_series(const StepProgram& one, int steps, const std::vector<Seconds>& end);

/// Per step and simulated unit (one.replica_unit consecutive DP indices, in ascending order of
/// unit): when the unit's compute before the optimizer ended, and when its optimizer ended, each
/// less the step's start (the previous step's end). Read off repeat_steps' end times as
/// step_series; a unit without such tasks reads 0.
struct ReplicaTimes {
  std::vector<std::vector<double>> before;    ///< [step][unit]
  std::vector<std::vector<double>> optimizer; ///< [step][unit]
};
ReplicaTimes replica_times(const StepProgram& one, int steps, const std::vector<Seconds>& end);

} // namespace stepsim::graph
