// Several steps and per-kernel noise, end to end through runner::simulate (docs/variability.md).
// SimGrid allows one simulation per process: each simulation runs in a forked child.

#include "runner/simulate.hpp"

#include "common/specs.hpp"
#include "common/subprocess.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

namespace stepsim {
namespace {

/// The noise of `w` set to `cv` and `seed`.
WorkloadSpec with_noise(WorkloadSpec w, double cv, int64_t seed) {
  w.training.variability.kernel_cv = cv;
  w.training.variability.seed = seed;
  return w;
}

/// Simulates `steps` steps in a child: {summary step time, simulated GPUs, step 1 .. step N}.
std::vector<double> steps_in_child(const ClusterSpec& c, const WorkloadSpec& w, int steps) {
  const test::ChildResult r = test::run_in_child([&] {
    const runner::Simulation sim = runner::simulate(c, w, {.steps = steps});
    std::vector<double> out{sim.summary.step_time.value(), static_cast<double>(sim.summary.simulated_gpus)};
    if (sim.summary.variability)
      for (const Seconds& t : sim.summary.variability->step_times)
        out.push_back(t.value());
    return out;
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values : std::vector<double>(2 + static_cast<size_t>(steps), 0.0);
}

/// Phi^-1(p) by bisection on Phi(x) = erfc(-x / sqrt 2) / 2 (to 1e-12).
double normal_quantile(double p) {
  double lo = -10, hi = 10;
  while (hi - lo > 1e-12) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

/// Blom's approximation of the expected maximum of n standard normals.
double blom_max(int n) {
  return normal_quantile((n - 0.375) / (n + 0.25));
}

const ClusterSpec kCluster = test::dgx_cluster(1, 8, 8);
const WorkloadSpec kWorkload = test::workload(test::small_gpt(2), 2, 2, 2, 4);

// Without noise every step is the same replay: N steps each equal to `run`'s one step. The first
// step is bit for bit the single step (its events are the same); the later ones are the same
// replay shifted by the earlier steps, and their difference of two absolute times carries the
// rounding of those times: equal within 1e-12 relative.
TEST(Steps, ZeroCvGivesIdenticalStepsEqualToRun) {
  const auto one = steps_in_child(kCluster, kWorkload, 1);
  const auto four = steps_in_child(kCluster, kWorkload, 4);
  ASSERT_EQ(one.size(), 2u); // no distribution for one noiseless step
  ASSERT_EQ(four.size(), 6u);
  EXPECT_EQ(four[0], one[0]);
  EXPECT_EQ(four[1], one[1]); // still folded
  for (size_t k = 2; k < 6; ++k)
    EXPECT_NEAR(four[k], one[0], 1e-12 * one[0]) << "step " << k - 1;
}

// Same seed, same draws: the same step times to the bit. Another seed draws other factors.
// Noise makes GPUs differ, so none is folded: all 8 are simulated.
TEST(Steps, SameSeedSameStepsOtherSeedOtherSteps) {
  const auto a = steps_in_child(kCluster, with_noise(kWorkload, 0.05, 7), 4);
  const auto b = steps_in_child(kCluster, with_noise(kWorkload, 0.05, 7), 4);
  const auto c = steps_in_child(kCluster, with_noise(kWorkload, 0.05, 8), 4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a[1], 8.0);
  for (size_t k = 3; k < a.size(); ++k)
    EXPECT_NE(a[k], a[2]); // each step draws its own factors
}

// The CV comes from the GPU kind (gpu.kernel_cv) unless the workload sets one; a workload's 0
// turns the GPU's noise off.
TEST(Steps, WorkloadCvOverridesTheGpuKinds) {
  ClusterSpec noisy_gpu = kCluster;
  noisy_gpu.gpu.kernel_cv = 0.05;
  EXPECT_DOUBLE_EQ(runner::kernel_cv(noisy_gpu, kWorkload), 0.05);
  EXPECT_DOUBLE_EQ(runner::kernel_cv(noisy_gpu, with_noise(kWorkload, 0.0, 0)), 0.0);
  EXPECT_DOUBLE_EQ(runner::kernel_cv(kCluster, with_noise(kWorkload, 0.1, 0)), 0.1);
  const auto from_gpu = steps_in_child(noisy_gpu, kWorkload, 2);
  const auto from_workload = steps_in_child(kCluster, with_noise(kWorkload, 0.05, 0), 2);
  EXPECT_EQ(from_gpu, from_workload);
  const auto off = steps_in_child(noisy_gpu, with_noise(kWorkload, 0.0, 0), 1);
  EXPECT_EQ(off, steps_in_child(kCluster, kWorkload, 1));
}

/// Rank 0's noiseless figures of a pure-DP step: {step time, sqrt(sum d^2) of its compute
/// before the optimizer, sqrt(sum d^2) of its optimizer}.
std::vector<double> dp_baseline(const ClusterSpec& c, const WorkloadSpec& w) {
  const test::ChildResult r = test::run_in_child([&] {
    const runner::Simulation sim = runner::simulate(c, w, {.fold_dp = false});
    double before = 0, optimizer = 0;
    for (const graph::Task& t : sim.program.graph.tasks())
      if (t.kind == graph::TaskKind::COMPUTE && t.rank == 0)
        (t.phase == graph::Phase::OPTIMIZER ? optimizer : before) += t.duration.value() * t.duration.value();
    return std::vector<double>{sim.summary.step_time.value(), std::sqrt(before), std::sqrt(optimizer)};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values : std::vector<double>(3, 0.0);
}

/// The mean of the step times of steps_in_child's result and its standard error.
std::pair<double, double> mean_and_error(const std::vector<double>& result) {
  const std::vector<double> times(result.begin() + 2, result.end());
  const auto n = static_cast<double>(times.size());
  const double mean = std::accumulate(times.begin(), times.end(), 0.0) / n;
  double var = 0;
  for (const double t : times)
    var += (t - mean) * (t - mean);
  return {mean, std::sqrt(var / (n - 1) / n)};
}

// A synchronous pure-DP step on a fabric where communication is free: each rank r computes its
// forward and backward, S_r, then the gradients' all-reduce (which waits for the slowest rank),
// then its optimizer O_r; the step is max_r S_r + max_r O_r. With independent factors of mean 1
// and CV cv per task, E[S_r] is the noiseless S and sd(S_r) = cv sqrt(sum d_i^2) = sigma_S (and
// so for O); S_r, a sum of ~50 factors, is near normal, so by order statistics
//   E[step] = T0 + (sigma_S + sigma_O) E[max of n standard normals],
// E[max] ~ Blom: Phi^-1((n - 0.375) / (n + 0.25)). Checked for n = 2, 8, 32 over 200 steps:
// within 4 standard errors of the simulated mean (its sample sd / sqrt 200) plus 5 % of the
// predicted growth (Blom's own error: 4.4 % at n = 2 against the exact 0.5642, < 1 % from 8 on;
// the sums' small right skew, from the lognormal's 3 cv, lifts the maximum of 32 by a few %).
TEST(Steps, NoisyDataParallelStepGrowsAsTheExpectedMaximum) {
  constexpr double cv = 0.1;
  constexpr int steps = 200;
  double previous = 0;
  for (const int n : {2, 8, 32}) {
    const ClusterSpec c = test::free_comm_cluster(n / 2 < 8 ? 1 : n / 8, n / 2 < 8 ? n : 8);
    const WorkloadSpec w = test::workload(test::small_gpt(2), 1, 1, n, 4);
    const auto base = dp_baseline(c, w);
    const auto noisy = steps_in_child(c, with_noise(w, cv, 11), steps);
    ASSERT_EQ(noisy.size(), 2u + steps);
    const auto [mean, se] = mean_and_error(noisy);
    const double growth = cv * (base[1] + base[2]) * blom_max(n);
    EXPECT_NEAR(mean - base[0], growth, 4 * se + 0.05 * growth)
        << "n " << n << ": T0 " << base[0] << ", mean " << mean << ", se " << se;
    EXPECT_GT(mean, previous) << "n " << n;
    previous = mean;
  }
}

// Sampled replicas (docs/variability.md, "Sampled replicas"): of the 32 ranks of the pure-DP step
// above, 8 simulated; each sync adds its spread times the growth of the expected maximum from 8 to
// 32 replicas. The closed form is the one above for all 32, E[step] = T0 + (sigma_S + sigma_O)
// E[max of 32], with the same tolerance; and only 8 GPUs are simulated.
TEST(Steps, SampledReplicasWaitForTheExpectedMaximumOfAll) {
  constexpr double cv = 0.1;
  constexpr int steps = 200;
  constexpr int n = 32;
  const ClusterSpec c = test::free_comm_cluster(n / 8, 8);
  WorkloadSpec w = test::workload(test::small_gpt(2), 1, 1, n, 4);
  const auto base = dp_baseline(c, w);
  w.training.variability.replicas = 8;
  const auto noisy = steps_in_child(c, with_noise(w, cv, 11), steps);
  ASSERT_EQ(noisy.size(), 2u + steps);
  EXPECT_EQ(noisy[1], 8.0);
  const auto [mean, se] = mean_and_error(noisy);
  const double growth = cv * (base[1] + base[2]) * blom_max(n);
  EXPECT_NEAR(mean - base[0], growth, 4 * se + 0.05 * growth)
      << "T0 " << base[0] << ", mean " << mean << ", se " << se;
  // Without the others' wait the 8 simulated give the maximum of 8, a third less growth.
  EXPECT_GT(mean - base[0], cv * (base[1] + base[2]) * blom_max(8) * 1.2);
}

// As many replicas sampled as the job holds simulates every one: the same bytes as without the key.
TEST(Steps, SamplingEveryReplicaIsTheWholeSimulation) {
  const WorkloadSpec noisy = with_noise(kWorkload, 0.05, 3);
  WorkloadSpec all = noisy;
  all.training.variability.replicas = 2; // dp 2
  EXPECT_EQ(steps_in_child(kCluster, all, 3), steps_in_child(kCluster, noisy, 3));
}

// Sampled replicas stand for alike ones: refused on a degraded cluster and an oversubscribed fabric,
// naming the key.
TEST(Steps, SampledReplicasRefuseUnlikeReplicas) {
  WorkloadSpec w = with_noise(test::workload(test::small_gpt(2), 1, 1, 16, 4), 0.05, 0);
  w.training.variability.replicas = 4;
  ClusterSpec degraded = test::dgx_cluster(2, 8, 8);
  degraded.degraded.gpus.push_back({.node = 1, .gpu = 2, .speed = 0.8});
  ClusterSpec oversubscribed = test::dgx_cluster(2, 8, 8);
  oversubscribed.fabric.oversubscription = 2.0;
  for (const ClusterSpec& c : {degraded, oversubscribed}) {
    try {
      (void)runner::prepare_step(c, w);
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("training.variability.replicas"), std::string::npos) << e.what();
    }
  }
}

} // namespace
} // namespace stepsim
