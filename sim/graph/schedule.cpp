#include "graph/schedule.hpp"

#include <algorithm>

namespace stepsim::graph {

std::vector<PassRef> gpipe_order(int /*stage*/, int /*pp*/, int m) {
  std::vector<PassRef> order;
  order.reserve(2 * static_cast<size_t>(m));
  for (int i = 0; i < m; ++i)
    order.push_back({Phase::FORWARD, i});
  for (int i = 0; i < m; ++i)
    order.push_back({Phase::BACKWARD, i});
  return order;
}

std::vector<PassRef> one_f_one_b_order(int stage, int pp, int m) {
  std::vector<PassRef> order;
  order.reserve(2 * static_cast<size_t>(m));
  const int warmup = std::min(pp - stage - 1, m);
  int next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f)
    order.push_back({Phase::FORWARD, next_f});
  while (next_f < m) {
    order.push_back({Phase::FORWARD, next_f++});
    order.push_back({Phase::BACKWARD, next_b++});
  }
  while (next_b < m)
    order.push_back({Phase::BACKWARD, next_b++});
  return order;
}

std::vector<PassRef> stage_order(Schedule schedule, int stage, int pp, int m) {
  switch (schedule) {
  case Schedule::GPIPE: return gpipe_order(stage, pp, m);
  case Schedule::ONE_F_ONE_B: return one_f_one_b_order(stage, pp, m);
  }
  return {};
}

} // namespace stepsim::graph
