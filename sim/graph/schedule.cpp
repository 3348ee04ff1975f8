#include "graph/schedule.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <deque>
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

/// DualPipe's pass order on one stage, in its own terms: chunk 0 is the stage's "near" chunk (the
/// direction fed at its end of the pipeline), 1 the "far" one; `h` the distance to that end, `half`
/// the stages from the end to the middle, `n` the micro-batches through each chunk and `first[c]`
/// the first micro-batch of chunk c. Micro-batches go through a chunk in order; W passes deferred
/// by a backward run first in, first out.
class DualOrder {
public:
  DualOrder(int h, int half, int n, const std::array<int, 2>& local, const std::array<int, 2>& first)
      : local_(local), next_f_(first), next_b_(first) {
    build(h, half, n);
  }
  std::vector<PassRef> take() { return std::move(order_); }

private:
  void build(int h, int half, int n) {
    const int edge = half - h - 1; // stages between this one and the middle
    for (int i = 0; i < 2 * edge; ++i)
      forward(0);
    for (int i = 0; i < h + 1; ++i) {
      forward(0);
      forward(1);
    }
    for (int i = 0; i < edge; ++i) {
      backward(1, true);
      weight();
      forward(1);
    }
    for (int i = 0; i < n - 2 * half + h + 1; ++i) {
      if (i == 0 && edge == 0) { // the middle stages: their first pair one after the other
        forward(0);
        backward(1, false);
      } else {
        forward(0);
        backward(1, false, true);
      }
      forward(1);
      backward(0, false, true);
    }
    for (int i = 0; i < edge; ++i) {
      backward(1, false);
      forward(1);
      backward(0, false, true);
    }
    // The second half of these backwards defer their W (h+1 of the 2(h+1)).
    bool defer = false;
    for (int i = 0; i < h + 1; ++i) {
      if (i == (h + 1) / 2 && h % 2 == 1)
        defer = true;
      backward(1, defer);
      if (i == (h + 1) / 2 && h % 2 == 0)
        defer = true;
      backward(0, defer);
    }
    for (int i = 0; i < edge; ++i) {
      weight();
      backward(0, true);
    }
    for (int i = 0; i < h + 1; ++i)
      weight();
  }
  void forward(int c) {
    order_.push_back({Phase::FORWARD, next_f_[static_cast<size_t>(c)]++, local_[static_cast<size_t>(c)]});
  }
  void backward(int c, bool defer, bool paired = false) {
    const PassRef b{Phase::BACKWARD, next_b_[static_cast<size_t>(c)]++, local_[static_cast<size_t>(c)],
                    paired};
    order_.push_back(b);
    const PassRef w{Phase::WEIGHT_GRAD, b.micro_batch, b.chunk};
    if (defer)
      deferred_.push_back(w);
    else
      order_.push_back(w);
  }
  void weight() {
    order_.push_back(deferred_.front());
    deferred_.pop_front();
  }

  std::array<int, 2> local_;
  std::array<int, 2> next_f_, next_b_;
  std::deque<PassRef> deferred_;
  std::vector<PassRef> order_;
};

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

std::vector<PassRef> dualpipe_order(int stage, int pp, int m) {
  if (pp < 2 || pp % 2 != 0 || m % 2 != 0 || m / 2 < pp)
    throw ModelError("dualpipe schedule: needs an even pp >= 2 (" + std::to_string(pp) +
                     ") and an even number of micro-batches, at least 2*pp (" + std::to_string(m) + ")");
  const bool second_half = stage >= pp / 2;
  const std::array<int, 2> local = second_half ? std::array<int, 2>{1, 0} : std::array<int, 2>{0, 1};
  const std::array<int, 2> first = second_half ? std::array<int, 2>{m / 2, 0} : std::array<int, 2>{0, m / 2};
  return DualOrder(std::min(stage, pp - 1 - stage), pp / 2, m / 2, local, first).take();
}

std::vector<PassRef> dualpipe_v_order(int stage, int pp, int m) {
  if (pp < 1 || m < 2 * pp)
    throw ModelError("dualpipev schedule: needs at least 2*pp micro-batches (pp " + std::to_string(pp) +
                     ", micro-batches " + std::to_string(m) + ")");
  return DualOrder(stage, pp, m, {0, 1}, {0, 0}).take();
}

std::optional<ChunkPlace> pipeline_neighbour(const ParallelSpec& par, int stage, int chunk, bool forward) {
  const int pp = par.pp;
  if (par.schedule == Schedule::DUALPIPE) {
    // Chunk 0 runs from stage 0 to pp-1, chunk 1 from pp-1 to 0.
    const int step = (chunk == 0) == forward ? 1 : -1;
    const int next = stage + step;
    if (next < 0 || next >= pp)
      return std::nullopt;
    return ChunkPlace{next, chunk};
  }
  // Model chunk g's neighbour is g +- 1, wherever it sits.
  const int global = par.global_chunk(stage, chunk);
  const int dst = forward ? global + 1 : global - 1;
  if (dst < 0 || dst >= par.model_chunks())
    return std::nullopt;
  if (par.schedule == Schedule::DUALPIPE_V)
    return dst < pp ? ChunkPlace{dst, 0} : ChunkPlace{2 * pp - 1 - dst, 1};
  return ChunkPlace{dst % pp, dst / pp};
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
  case Schedule::DUALPIPE:
    return dualpipe_order(stage, pp, m);
  case Schedule::DUALPIPE_V:
    return dualpipe_v_order(stage, pp, m);
  }
  return {};
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
