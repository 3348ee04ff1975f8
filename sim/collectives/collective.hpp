#pragma once
// The single entry point from a collective to ordered point-to-point flows: expand(op, gpus,
// size, algorithm, form, view). Algorithms: ring (NCCL-like channels over distinct NICs), double
// binary tree (trees over nodes, chains inside nodes), hierarchical (intra-node reduce-scatter,
// inter-node all-reduce per rail, intra-node all-gather), NVLink SHARP (in-switch reduction),
// pairwise all-to-all (PXN on rail-optimised fabrics), direct p2p. AUTO picks the cheapest by an
// alpha-beta cost model, as NCCL's tuner does. No SimGrid here: the platform is seen through a
// TopologyView. docs/collectives.md describes each algorithm and its forms.

#include "collectives/flows.hpp"
#include "config/spec.hpp"
#include "core/units.hpp"

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

namespace stepsim::collectives {

using Algorithm = CollectiveAlgorithm;

/// Bottleneck bandwidth of the route between two GPUs (from the platform).
using BandwidthFn = std::function<BytesPerSec(int32_t, int32_t)>;

/// One directional link of a route: an id unique on the platform and its bandwidth.
struct RouteLink {
  uint32_t id = 0;
  BytesPerSec bandwidth;
};
/// The links of the route between two GPUs, in order (from the platform).
using RouteLinksFn = std::function<std::span<const RouteLink>(int32_t, int32_t)>;

/// What an all-reduce algorithm's flows cost on the actual routes of one group, per byte of the
/// collective's size (docs/collectives.md, "Automatic choice"): the longest route latency of its
/// flows inside a node and between nodes, their lowest route bandwidth, and the busiest link's
/// drain time per byte among the
/// links its intra-node flows use and among those its inter-node flows use.
struct RouteCost {
  Seconds intra_alpha, inter_alpha;
  /// The lowest route bandwidth among the intra-node and among the inter-node flows.
  BytesPerSec intra_beta = BytesPerSec(std::numeric_limits<double>::infinity());
  BytesPerSec inter_beta = BytesPerSec(std::numeric_limits<double>::infinity());
  double intra_s_per_byte = 0, inter_s_per_byte = 0;
};

/// Route costs already worked out, per (op, algorithm, group): a group's routes do not change
/// during a simulation, and a cost scales with the size.
class RouteCostCache {
public:
  using Key = std::tuple<CollectiveOp, CollectiveAlgorithm, std::vector<int32_t>>;
  [[nodiscard]] const RouteCost* find_or_null(const Key& key) const {
    const auto it = costs_.find(key);
    return it == costs_.end() ? nullptr : &it->second;
  }
  void put(Key key, const RouteCost& cost) { costs_.emplace(std::move(key), cost); }

private:
  std::map<Key, RouteCost> costs_;
};

/// What the collectives need to know of the platform. GPUs are numbered node by node:
/// node = gpu / gpus_per_node, local index = gpu % gpus_per_node.
struct TopologyView {
  int gpus_per_node = 1;
  int nics_per_node = 1;
  bool nvls = false;             ///< nodes have NVLink SHARP (flows may use switch_endpoint(node))
  double nvls_payload_scale = 1; ///< NVLS flows carry size x this (link efficiency / NVLS efficiency)
  Seconds nvls_latency;          ///< fixed cost of one NVLS collective
  bool rail_optimized = false;   ///< GPU k of every node sits on rail k: all-to-all uses PXN
  LatencyFn latency;             ///< one-way route latency between two GPUs
  BandwidthFn bandwidth;         ///< bottleneck bandwidth of the route between two GPUs
  /// The links of a route. When set, the choice of an all-reduce over several nodes costs each
  /// algorithm on its own flows' routes (hops, link rates, links shared between its flows);
  /// null: on a representative pair of GPUs.
  RouteLinksFn route_links;
  RouteCostCache* route_costs = nullptr; ///< where route_cost() keeps its answers; null: none kept
  /// Symmetry sampling (docs/engine.md): per node, whether it hosts a simulated rank. When set,
  /// a coarse tree keeps only the flows of the nodes that set the observed nodes' times (their
  /// ancestors, the deepest branches below them, and every flow touching those nodes); null:
  /// every flow.
  const std::vector<bool>* observed_nodes = nullptr;

  [[nodiscard]] int node_of(int32_t gpu) const { return gpu / gpus_per_node; }
  [[nodiscard]] int local_of(int32_t gpu) const { return gpu % gpus_per_node; }
  [[nodiscard]] int nic_of(int32_t gpu) const { return local_of(gpu) * nics_per_node / gpus_per_node; }
};

/// Parses "ring", "tree", "hierarchical", "nvls", "pairwise", "auto". Throws ConfigError.
Algorithm parse_algorithm(std::string_view text);
std::string_view to_string(Algorithm a);

/// True when `algorithm` can run `op` over `gpus` on `view` (e.g. NVLS: all-reduce inside one
/// node that has NVLS; hierarchical: all-reduce, same number of GPUs on each node, >1 node).
bool applicable(CollectiveOp op, Algorithm algorithm, std::span<const int32_t> gpus,
                const TopologyView& view);

/// Analytic alpha-beta estimate of `op` with `algorithm` (no contention). Used to choose.
Seconds estimate(CollectiveOp op, Algorithm algorithm, std::span<const int32_t> gpus, Bytes size,
                 const TopologyView& view);

/// The cost of `algorithm`'s coarse flows for `op` over `gpus` on view.route_links (never
/// sampled), cached in view.route_costs when set. Precondition: view.route_links is set.
RouteCost route_cost(CollectiveOp op, Algorithm algorithm, std::span<const int32_t> gpus,
                     const TopologyView& view);

/// The algorithm AUTO resolves to: the applicable one with the lowest estimate (ties: ring,
/// tree, hierarchical, nvls, pairwise order). A send is always direct (returns RING).
Algorithm choose(CollectiveOp op, std::span<const int32_t> gpus, Bytes size, const TopologyView& view);

/// Number of channels (parallel rings) NCCL would build for `gpus`: the distinct NICs the group
/// can use on every node it spans (1 inside a single node or with one GPU per node).
int channels(std::span<const int32_t> gpus, const TopologyView& view);

/// An expert all-to-all whose dispatcher sends each token once to every node holding one of its
/// experts (DeepEP / HybridEP: then over NVLink to the experts' GPUs), instead of one copy per
/// routed expert: `experts` spread evenly over the group, `top_k` per token (uniform routing).
/// experts == 0: every routed copy travels (NCCL all-to-all).
struct NodeDeduplication {
  int64_t experts = 0;
  int64_t top_k = 0;
  /// Group-limited routing: a token's experts come from group_top_k of `groups` equal groups.
  /// Counted when the groups are the group's nodes (groups == nodes); 0 = no limit.
  int64_t groups = 0;
  int64_t group_top_k = 0;
};

/// With deduplication, the bytes a GPU sends to a remote node over the bytes of its routed
/// copies for that node: P(a token has at least one of its top_k distinct experts among the
/// experts/nodes of the node) / (top_k / nodes). With group-limited routing whose groups are the
/// nodes, P = (group_top_k/nodes) x P(one of the top_k, drawn from the chosen groups' experts,
/// is on the node). 1 without deduplication or for one node.
double remote_copy_share(const NodeDeduplication& d, int nodes);

/// Expands one collective into flows. `size` is nccl-tests' size (the full buffer; all-to-all:
/// the bytes each rank holds, size/n to each peer). `algorithm` AUTO resolves with choose(),
/// `form` AUTO with resolve_form();
/// an algorithm that is not applicable throws SimulationError. Empty for n == 1 or size == 0.
/// `dedup` scales an all-to-all's cross-node pieces by remote_copy_share.
FlowProgram expand(CollectiveOp op, std::span<const int32_t> gpus, Bytes size, Algorithm algorithm,
                   CollectiveForm form, const TopologyView& view, const NodeDeduplication& dedup = {});

/// nccl-tests bus bandwidth factor: algbw x factor = busbw. 2(n-1)/n all-reduce, (n-1)/n
/// all-gather / reduce-scatter / all-to-all, 1 broadcast / reduce / p2p.
double bus_factor(CollectiveOp op, int n);

} // namespace stepsim::collectives
