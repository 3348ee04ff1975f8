// Several steps in one DAG (graph::repeat_steps) and the per-kernel noise's sampler
// (docs/variability.md). Each test states the closed form it checks.

#include "core/error.hpp"
#include "graph/steps.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;

namespace {

/// Sample mean and standard deviation of `n` lognormal factors of CV `cv`, keyed by task index.
std::pair<double, double> sample_moments(double cv, uint64_t seed, int n) {
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x =
        lognormal_factor(cv, {.seed = seed, .step = 3, .rank = 17, .task = static_cast<uint64_t>(i)});
    sum += x;
    sum2 += x * x;
  }
  const double mean = sum / n;
  return {mean, std::sqrt((sum2 - n * mean * mean) / (n - 1))};
}

/// Two ranks: a -> b on rank 0, c on rank 1, then an all-reduce over both.
StepProgram two_rank_step() {
  StepProgram p;
  Task t;
  t.duration = Seconds(1e-3);
  t.rank = 0;
  t.phase = Phase::FORWARD;
  const TaskId a = p.graph.add_task(t);
  t.phase = Phase::BACKWARD;
  const TaskId b = p.graph.add_task(t);
  t.rank = 1;
  t.duration = Seconds(2e-3);
  const TaskId c = p.graph.add_task(t);
  Task ar;
  ar.bytes = Bytes(1024);
  ar.rank = 0;
  const std::vector<Rank> ring{0, 1};
  const TaskId r = p.graph.add_collective(ar, ring);
  p.graph.add_edge(a, b);
  p.graph.add_edge(b, r);
  p.graph.add_edge(c, r);
  p.graph.finalize();
  p.simulated_ranks = {0, 1};
  return p;
}

} // namespace

// E[X] = 1 and sd(X) = cv for X = exp(mu + sigma Z), sigma^2 = ln(1 + cv^2), mu = -sigma^2/2.
// Over n = 200000 draws the sample mean has standard error cv/sqrt(n) and the sample sd about
// cv/sqrt(2n) (near-normal for these CVs: excess kurtosis 16 cv^2 + O(cv^4), at most 0.64 here,
// which widens it by sqrt(1 + kurtosis/2) < 1.2); both are held within 5 of their errors.
TEST(KernelNoise, LognormalHasMeanOneAndTheAskedCv) {
  constexpr int n = 200000;
  for (const double cv : {0.02, 0.05, 0.2}) {
    const auto [mean, sd] = sample_moments(cv, 42, n);
    EXPECT_NEAR(mean, 1.0, 5 * cv / std::sqrt(n)) << "cv " << cv;
    EXPECT_NEAR(sd, cv, 5 * 1.2 * cv / std::sqrt(2.0 * n)) << "cv " << cv;
  }
}

// Z is standard normal: P(Z < -1.959964) = 0.025, with binomial standard error
// sqrt(0.025 * 0.975 / n); mean 0 and variance 1 within 5 standard errors.
TEST(KernelNoise, StandardNormalTails) {
  constexpr int n = 200000;
  int below = 0;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = standard_normal(
        {.seed = 9, .step = 0, .rank = static_cast<uint64_t>(i % 64), .task = static_cast<uint64_t>(i / 64)});
    below += z < -1.959964 ? 1 : 0;
    sum += z;
    sum2 += z * z;
  }
  EXPECT_NEAR(static_cast<double>(below) / n, 0.025, 5 * std::sqrt(0.025 * 0.975 / n));
  EXPECT_NEAR(sum / n, 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(sum2 / n, 1.0, 5 * std::sqrt(2.0 / n));
}

// A draw is a pure function of its key: the same key twice gives the same bits whatever was
// drawn between; changing any one word of the key changes it. cv 0 is exactly 1.
TEST(KernelNoise, CounterBasedAndKeyed) {
  const NoiseKey key{.seed = 1, .step = 2, .rank = 3, .task = 4};
  const double x = lognormal_factor(0.05, key);
  (void)sample_moments(0.05, 1, 1000);
  EXPECT_EQ(lognormal_factor(0.05, key), x);
  EXPECT_NE(lognormal_factor(0.05, {.seed = 2, .step = 2, .rank = 3, .task = 4}), x);
  EXPECT_NE(lognormal_factor(0.05, {.seed = 1, .step = 3, .rank = 3, .task = 4}), x);
  EXPECT_NE(lognormal_factor(0.05, {.seed = 1, .step = 2, .rank = 4, .task = 4}), x);
  EXPECT_NE(lognormal_factor(0.05, {.seed = 1, .step = 2, .rank = 3, .task = 5}), x);
  EXPECT_EQ(lognormal_factor(0.0, key), 1.0);
  const double u = uniform_draw(key, 0);
  EXPECT_GT(u, 0.0);
  EXPECT_LT(u, 1.0);
}

// N steps of an n-task step: N (n + 1) tasks; step k's copy of task i is k (n + 1) + i; its end
// marker waits for step k's sinks, and step k + 1's sources wait for the marker. Collectives keep
// their participants; without noise every duration is the original's.
TEST(RepeatSteps, ChainsCopiesThroughEndMarkers) {
  const StepProgram one = two_rank_step();
  const StepProgram three = repeat_steps(one, {.steps = 3});
  const TaskId n = 4;
  ASSERT_EQ(three.graph.size(), 3 * (n + 1));
  EXPECT_EQ(three.simulated_ranks, one.simulated_ranks);
  for (TaskId k = 0; k < 3; ++k) {
    const TaskId base = k * (n + 1);
    const TaskId marker = base + n;
    EXPECT_EQ(three.graph.task(marker).duration.value(), 0.0);
    const auto preds = three.graph.predecessors(marker);
    ASSERT_EQ(preds.size(), 1u); // the all-reduce is step k's only sink
    EXPECT_EQ(preds[0], base + 3);
    for (TaskId i = 0; i < n; ++i)
      EXPECT_EQ(three.graph.task(base + i).duration.value(), one.graph.task(i).duration.value());
    const auto ring = three.graph.participants(three.graph.task(base + 3));
    EXPECT_EQ(std::vector<Rank>(ring.begin(), ring.end()), (std::vector<Rank>{0, 1}));
    if (k > 0) { // sources a and c wait for the previous marker
      EXPECT_EQ(three.graph.predecessors(base + 0).size(), 1u);
      EXPECT_EQ(three.graph.predecessors(base + 0)[0], base - 1);
      EXPECT_EQ(three.graph.predecessors(base + 2)[0], base - 1);
    }
  }
  EXPECT_THROW((void)repeat_steps(one, {.steps = 0}), ModelError);
  EXPECT_THROW((void)repeat_steps(one, {.steps = 1, .kernel_cv = -0.1}), ModelError);
}

// With noise, step k's compute task i of rank r lasts d_i * lognormal_factor(cv, {seed, k, r, i});
// collectives are untouched; noisy_step(one, options, k) is step k's copy alone.
TEST(RepeatSteps, NoiseIsKeyedByStepRankAndTask) {
  const StepProgram one = two_rank_step();
  const StepsOptions options{.steps = 2, .kernel_cv = 0.1, .seed = 5};
  const StepProgram two = repeat_steps(one, options);
  for (TaskId k = 0; k < 2; ++k) {
    const StepProgram alone = noisy_step(one, options, static_cast<int>(k));
    for (TaskId i = 0; i < 3; ++i) {
      const Task& t = one.graph.task(i);
      const double expected =
          t.duration.value() *
          lognormal_factor(0.1, {.seed = 5, .step = k, .rank = static_cast<uint64_t>(t.rank), .task = i});
      EXPECT_EQ(two.graph.task(k * 5 + i).duration.value(), expected);
      EXPECT_EQ(alone.graph.task(i).duration.value(), expected);
    }
  }
  EXPECT_NE(two.graph.task(0).duration.value(), two.graph.task(5).duration.value());
}

// step_series: step k's time is its marker's end less step k-1's (the first: its end); the
// slowest GPU is the one whose forward/backward compute ended last.
TEST(RepeatSteps, SeriesFromEndTimes) {
  const StepProgram one = two_rank_step();
  // a, b, c, all-reduce, marker; step 1 the same shifted by 4 ms but with rank 0's b late.
  const std::vector<Seconds> end{Seconds(1e-3), Seconds(2e-3), Seconds(2.5e-3), Seconds(3e-3), Seconds(3e-3),
                                 Seconds(4e-3), Seconds(6e-3), Seconds(5e-3),   Seconds(7e-3), Seconds(7e-3)};
  const StepSeries s = step_series(one, 2, end);
  ASSERT_EQ(s.step_times.size(), 2u);
  EXPECT_DOUBLE_EQ(s.step_times[0].value(), 3e-3);
  EXPECT_DOUBLE_EQ(s.step_times[1].value(), 4e-3);
  EXPECT_EQ(s.slowest_rank, (std::vector<Rank>{1, 0}));
  EXPECT_THROW((void)step_series(one, 3, end), SimulationError);
}
