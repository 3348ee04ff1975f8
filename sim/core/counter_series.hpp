#pragma once
// A quantity sampled over simulated time for one GPU (e.g. memory in use), shared by report/
// (which computes it) and trace/ (which draws it as a counter track).

#include <cstdint>
#include <utility>
#include <vector>

namespace stepsim {

struct CounterSeries {
  int32_t gpu = 0;                                ///< GPU index (= global rank)
  std::vector<std::pair<double, double>> samples; ///< (seconds, value) at each change, in time order
};

} // namespace stepsim
