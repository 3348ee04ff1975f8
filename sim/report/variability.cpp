#include "report/variability.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace stepsim::report {

Seconds nearest_rank_quantile(std::vector<Seconds> values, double p) {
  if (values.empty())
    throw SimulationError("nearest_rank_quantile: no values");
  std::sort(values.begin(), values.end(), [](Seconds a, Seconds b) { return a.value() < b.value(); });
  const auto n = static_cast<double>(values.size());
  const auto k = static_cast<size_t>(std::clamp(std::ceil(p * n), 1.0, n));
  return values[k - 1];
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
