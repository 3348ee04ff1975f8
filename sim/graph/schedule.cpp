#include "graph/schedule.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <string>

namespace stepsim::graph {

namespace {

/// 1F1B's forward/backward sequence with `warmup` leading forwards.
std::vector<PassRef> forward_backward(int warmup, int m) {
  std::vector<PassRef> order;
  order.reserve(2 * static_cast<size_t>(m));
  warmup = std::clamp(warmup, 0, m);
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

/// Inserts W of micro-batch j right after the B of micro-batch j + delay; the rest at the end.
std::vector<PassRef> defer_weight_grads(const std::vector<PassRef>& fb, int delay, int m) {
  std::vector<PassRef> order;
  order.reserve(3 * static_cast<size_t>(m));
  int next_w = 0;
  for (const PassRef& p : fb) {
    order.push_back(p);
    if (p.phase == Phase::BACKWARD && p.micro_batch - delay >= 0)
      order.push_back({Phase::WEIGHT_GRAD, next_w++});
  }
  while (next_w < m)
    order.push_back({Phase::WEIGHT_GRAD, next_w++});
  return order;
}

} // namespace

std::vector<PassRef> gpipe_order(int /*stage*/, int /*pp*/, int m) {
  return forward_backward(m, m);
}

std::vector<PassRef> one_f_one_b_order(int stage, int pp, int m) {
  return forward_backward(pp - stage - 1, m);
}

std::vector<PassRef> interleaved_order(int stage, int pp, int m, int vp) {
  if (pp < 1 || vp < 1 || m < 1 || m % pp != 0)
    throw ModelError("interleaved schedule: micro-batches (" + std::to_string(m) +
                     ") must be a multiple of pp (" + std::to_string(pp) + "), with pp, vp >= 1");
  const int total = m * vp;
  const int group = pp * vp;
  int warmup = m == pp ? total : (pp - stage - 1) * 2 + (vp - 1) * pp;
  warmup = std::min(warmup, total);
  auto virtual_pass = [&](int k, Phase phase) {
    const int in_group = k % group;
    int chunk = in_group / pp;
    if (phase == Phase::BACKWARD)
      chunk = vp - 1 - chunk;
    return PassRef{phase, (k / group) * pp + k % pp, chunk};
  };
  std::vector<PassRef> order;
  order.reserve(2 * static_cast<size_t>(total));
  for (int k = 0; k < warmup; ++k)
    order.push_back(virtual_pass(k, Phase::FORWARD));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(virtual_pass(warmup + k, Phase::FORWARD));
    order.push_back(virtual_pass(k, Phase::BACKWARD));
  }
  for (int k = std::max(0, total - warmup); k < total; ++k)
    order.push_back(virtual_pass(k, Phase::BACKWARD));
  return order;
}

std::vector<PassRef> zb_h1_order(int stage, int pp, int m) {
  return defer_weight_grads(forward_backward(pp - stage - 1, m), stage, m);
}

std::vector<PassRef> zb_h2_order(int stage, int pp, int m) {
  return defer_weight_grads(forward_backward(2 * (pp - stage) - 2, m), 2 * stage, m);
}

std::vector<PassRef> stage_order(Schedule schedule, int stage, int pp, int m, int vp) {
  switch (schedule) {
  case Schedule::GPIPE:
    return gpipe_order(stage, pp, m);
  case Schedule::ONE_F_ONE_B:
    return one_f_one_b_order(stage, pp, m);
  case Schedule::INTERLEAVED:
    return interleaved_order(stage, pp, m, vp);
  case Schedule::ZB_H1:
    return zb_h1_order(stage, pp, m);
  case Schedule::ZB_H2:
    return zb_h2_order(stage, pp, m);
  }
  return {};
}

bool splits_backward(Schedule schedule) {
  return schedule == Schedule::ZB_H1 || schedule == Schedule::ZB_H2;
}

int peak_in_flight(const std::vector<PassRef>& order, bool split_backward, int output_chunk) {
  int now = 0, peak = 0;
  const Phase frees = split_backward ? Phase::WEIGHT_GRAD : Phase::BACKWARD;
  for (const PassRef& p : order) {
    if (output_chunk >= 0 && p.chunk != output_chunk)
      continue;
    if (p.phase == Phase::FORWARD)
      peak = std::max(peak, ++now);
    else if (p.phase == frees)
      --now;
  }
  return peak;
}

} // namespace stepsim::graph
