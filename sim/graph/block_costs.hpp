#pragma once
// Private to graph/: the duration and query of each dense compute block of the step, as one GPU
// sees it (graph/compute_cost.hpp), cached per (block, phase, stage, window).

#include "config/spec.hpp"
#include "graph/compute_cost.hpp"

#include <map>
#include <tuple>
#include <utility>

namespace stepsim::graph::detail {

class BlockCosts {
public:
  /// `split_backward`: the zero-bubble schedules split each backward into B and W passes.
  BlockCosts(const WorkloadSpec& w, ComputeTimeFn time, bool split_backward)
      : w_(w), time_(std::move(time)), split_(split_backward) {}

  /// True when `block` of global layer `layer` is an attention block whose sliding window is
  /// shorter than the sequence (else it costs as full attention).
  [[nodiscard]] bool windowed(Block block, int layer) const;

  /// Duration and query of a dense block (block_query) in FORWARD, RECOMPUTE or BACKWARD.
  std::pair<ComputeCost, ComputeQuery> cost(Block block, Phase phase, int stage, bool windowed = false);

  /// The cost of one compute task of `block` in `phase`: cost(), or with a split backward its B
  /// or W share (model::BlockWork::weight_grad_share of time, FLOPs and bytes).
  std::pair<ComputeCost, ComputeQuery> task_cost(Block block, Phase phase, int stage, bool windowed);

  /// The data- and weight-gradient time of `block`'s input linear on one rank (input_linear_times).
  std::pair<Seconds, Seconds> input_linear_times(Block block, int stage, int layer);

  /// The compute-time model (BuildOptions::compute_time).
  [[nodiscard]] const ComputeTimeFn& time() const { return time_; }

private:
  const WorkloadSpec& w_;
  ComputeTimeFn time_;
  bool split_ = false;
  std::map<std::tuple<int, int, int, bool>, std::pair<ComputeCost, ComputeQuery>> cache_;
};

} // namespace stepsim::graph::detail
