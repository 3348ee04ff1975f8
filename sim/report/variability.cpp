#include "report/variability.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace stepsim::report {

Seconds nearest_rank_quantile(std::vector<Seconds> values, double p) {
  if (values.empty())
    throw SimulationError("nearest_rank_quantile: no values");
  std::sort(values.begin(), values.end(), [](Seconds a, Seconds b) { return a.value() < b.value(); });
  const auto n = static_cast<double>(values.size());
  const auto k = static_cast<size_t>(std::clamp(std::ceil(p * n), 1.0, n));
  return values[k - 1];
}

double expected_max_of_normals(int n) {
  if (n < 1)
    throw SimulationError("expected_max_of_normals: n = " + std::to_string(n));
  const double p = (n - 0.375) / (n + 0.25);
  // Phi^-1(p) by bisection on Phi(x) = erfc(-x / sqrt 2) / 2, to 1e-12.
  double lo = -10, hi = 10;
  while (hi - lo > 1e-12) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

namespace {

/// The standard deviation across each row's entries, pooled over the rows.
double pooled_sd(const std::vector<std::vector<double>>& rows) {
  double squares = 0;
  size_t freedom = 0;
  for (const std::vector<double>& row : rows) {
    if (row.size() < 2)
      continue;
    double mean = 0;
    for (const double x : row)
      mean += x;
    mean /= static_cast<double>(row.size());
    for (const double x : row)
      squares += (x - mean) * (x - mean);
    freedom += row.size() - 1;
  }
  return freedom == 0 ? 0.0 : std::sqrt(squares / static_cast<double>(freedom));
}

} // namespace

Variability::Sampled sampled_wait(const graph::ReplicaTimes& times, int replicas) {
  Variability::Sampled s;
  s.replicas = replicas;
  s.simulated = times.before.empty() ? 0 : static_cast<int>(times.before.front().size());
  if (s.simulated < 2 || s.simulated > replicas)
    throw SimulationError("sampled_wait: " + std::to_string(s.simulated) + " units simulated of " +
                          std::to_string(replicas));
  s.sd_before = Seconds(pooled_sd(times.before));
  s.sd_optimizer = Seconds(pooled_sd(times.optimizer));
  s.wait = (s.sd_before + s.sd_optimizer) *
           (expected_max_of_normals(replicas) - expected_max_of_normals(s.simulated));
  return s;
}

Variability variability_of(const graph::StepSeries& series, double kernel_cv, int64_t seed) {
  Variability v;
  v.steps = static_cast<int>(series.step_times.size());
  v.kernel_cv = kernel_cv;
  v.seed = seed;
  v.step_times = series.step_times;
  if (v.step_times.empty())
    return v;
  double sum = 0;
  for (const Seconds& t : v.step_times)
    sum += t.value();
  v.mean = Seconds(sum / static_cast<double>(v.step_times.size()));
  v.p50 = nearest_rank_quantile(v.step_times, 0.50);
  v.p90 = nearest_rank_quantile(v.step_times, 0.90);
  v.p99 = nearest_rank_quantile(v.step_times, 0.99);
  v.max = nearest_rank_quantile(v.step_times, 1.0);
  std::map<int, int> counts;
  for (const graph::Rank r : series.slowest_rank)
    if (r >= 0)
      ++counts[r];
  v.slowest_ranks.assign(counts.begin(), counts.end());
  std::stable_sort(v.slowest_ranks.begin(), v.slowest_ranks.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return v;
}

} // namespace stepsim::report
