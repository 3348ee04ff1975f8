#pragma once
// Private to graph/: the identity of a DP collective shared by the simulated replicas of a DP
// group: the first replica that issues it creates it, the others issue the same task.

#include <compare>

namespace stepsim::graph::detail {

/// What a shared DP collective does.
enum class CollectivePurpose {
  ZERO3_GATHER,     ///< ZeRO-3: a layer's parameters gathered before its compute
  GRAD_BUCKET,      ///< ZeRO-0/1/2: a gradient bucket's all-reduce or reduce-scatter
  ZERO3_REDUCE,     ///< ZeRO-3: a layer's gradients reduce-scattered
  ZERO3_REGATHER,   ///< ZeRO-3 blocking fetch: a recomputed layer gathered again for its backward
  PARAM_GATHER,     ///< ZeRO-1/2 overlap_param_gather: a bucket gathered under the forward
  OPTIMIZER_GATHER, ///< ZeRO-1/2: a bucket's updated parameters gathered after the optimizer
  ZERO3_REPLICATE,  ///< ZeRO-3 hybrid sharding: a gradient shard all-reduced over its replicas
};

/// The DP group of the ranks of pipeline stage `stage` with TP index `tp`; under ZeRO-3 hybrid
/// sharding (parallel.dp_shard) part of it: shard group `shard` (its consecutive DP indices), or
/// the replicas of shard position `position` (one per shard group). -1: not that part.
struct DpGroup {
  int stage = 0;
  int tp = 0;
  int shard = -1;
  int position = -1;
  auto operator<=>(const DpGroup&) const = default;
};

/// A shared DP collective's key; fields a purpose does not use stay -1.
struct CollectiveKey {
  DpGroup group{};
  CollectivePurpose purpose = CollectivePurpose::GRAD_BUCKET;
  int pass = -1;   ///< index of the pass in the stage's order (per-pass collectives)
  int chunk = -1;  ///< local model chunk (PARAM_GATHER)
  int layer = -1;  ///< global layer (ZeRO-3)
  int bucket = -1; ///< gradient bucket
  int call = -1;   ///< ZeRO-3 blocking fetch: the weight tensor's call within the layer
  auto operator<=>(const CollectiveKey&) const = default;
};

} // namespace stepsim::graph::detail
