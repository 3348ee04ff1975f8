#include "graph/block_costs.hpp"

namespace stepsim::graph::detail {

bool BlockCosts::windowed(Block block, int layer) const {
  const ModelSpec& m = w_.model;
  return block == Block::ATTENTION && m.windowed_layer(layer) && m.window_below_sequence();
}

std::pair<ComputeCost, ComputeQuery> BlockCosts::cost(Block block, Phase phase, int stage, bool windowed) {
  const auto key = std::make_tuple(static_cast<int>(block), static_cast<int>(phase), stage, windowed);
  if (auto it = cache_.find(key); it != cache_.end())
    return it->second;
  const ComputeQuery q = block_query(w_, block, phase, stage, windowed);
  const auto result = std::make_pair(gpu_compute_cost(w_, time_, q), q);
  cache_.emplace(key, result);
  return result;
}

std::pair<ComputeCost, ComputeQuery> BlockCosts::task_cost(Block block, Phase phase, int stage,
                                                           bool windowed) {
  if (!split_ || (phase != Phase::BACKWARD && phase != Phase::WEIGHT_GRAD))
    return cost(block, phase, stage, windowed);
  // Zero-bubble split (docs/schedules.md): W is the weight-gradient GEMMs, B the rest
  // (input-gradient GEMMs, the attention core's backward, a selectively recomputed core).
  auto [c, q] = cost(block, Phase::BACKWARD, stage, windowed);
  const double w_share = block_work(w_, block, windowed).weight_grad_share();
  const double share = phase == Phase::WEIGHT_GRAD ? w_share : 1.0 - w_share;
  c.time = c.time * share;
  q.flops = q.flops * share;
  q.bytes = q.bytes * share;
  q.phase = phase;
  return {c, q};
}

std::pair<Seconds, Seconds> BlockCosts::input_linear_times(Block block, int stage, int layer) {
  const auto [c, q] = cost(block, Phase::BACKWARD, stage, windowed(block, layer));
  return graph::input_linear_times(w_, block, c, q);
}

} // namespace stepsim::graph::detail
