#include "collectives/collective.hpp"

#include "collectives/algorithms.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <string>

namespace stepsim::collectives {

namespace {

/// The tree all-reduce's bus bandwidth as a share of the ring's in the algorithm choice (NCCL's
/// tuner, docs/collectives.md "Automatic choice"); the simulated tree's flows are not scaled.
constexpr double TREE_BANDWIDTH_SHARE = 0.92;

/// The size route_cost() expands an algorithm at (its flows' bytes scale with the size).
constexpr double ROUTE_COST_BYTES = 64.0 * 1024 * 1024;

/// The all-reduce estimate on the routes of the algorithm's own flows (route_cost): the closed
/// form's latency terms with the longest route latency of each class, and the busiest link's
/// drain time. Rings and trees run their flows at once: the slower class bounds them; the
/// hierarchical algorithm's intra-node and rail phases follow each other.
Seconds routed_all_reduce(Algorithm a, std::span<const int32_t> gpus, Bytes size, const TopologyView& v,
                          int nodes, int per_node) {
  const RouteCost c = route_cost(CollectiveOp::ALL_REDUCE, a, gpus, v);
  const double S = size.value();
  const double ai = c.intra_alpha.value();
  const double ax = c.inter_alpha.value();
  const int n = static_cast<int>(gpus.size());
  switch (a) {
  case Algorithm::RING:
    return Seconds(ring_steps(CollectiveOp::ALL_REDUCE, n) * ax +
                   S * std::max(c.intra_s_per_byte, c.inter_s_per_byte));
  case Algorithm::TREE: {
    // Pipelined in chunks: the first chunk crosses every hop up and down (each hop its latency
    // and the chunk at the route's rate), the rest drain behind it at the busiest link's rate.
    int depth_nodes = 0;
    for (int k = nodes; k > 1; k /= 2)
      ++depth_nodes;
    const double per_tree = S / (2.0 * channels(gpus, v));
    const double chunk = per_tree / detail::chunks_for(per_tree);
    const double hop_x = ax + chunk / c.inter_beta.value();
    const double hop_i = per_node > 1 ? ai + chunk / c.intra_beta.value() : 0.0;
    return Seconds(2.0 * (depth_nodes * hop_x + (per_node - 1) * hop_i) +
                   S * std::max(c.intra_s_per_byte, c.inter_s_per_byte) / TREE_BANDWIDTH_SHARE);
  }
  case Algorithm::HIERARCHICAL:
    return Seconds(2.0 * (per_node - 1) * ai + 2.0 * (nodes - 1) * ax +
                   S * (c.intra_s_per_byte + c.inter_s_per_byte));
  default:
    break;
  }
  return Seconds(std::numeric_limits<double>::infinity());
}

} // namespace

using detail::append_all_to_all;
using detail::append_chain;
using detail::append_hierarchical;
using detail::append_nvls;
using detail::append_ring;
using detail::append_tree_all_reduce;
using detail::by_node;
using detail::channel_rings;
using detail::chunks_for;
using detail::GroupShape;
using detail::merge_concurrent;
using detail::shape_of;

// ---- names ----------------------------------------------------------------------------------------

Algorithm parse_algorithm(std::string_view text) {
  if (text == "auto")
    return Algorithm::AUTO;
  if (text == "ring")
    return Algorithm::RING;
  if (text == "tree")
    return Algorithm::TREE;
  if (text == "hierarchical")
    return Algorithm::HIERARCHICAL;
  if (text == "nvls")
    return Algorithm::NVLS;
  if (text == "pairwise")
    return Algorithm::PAIRWISE;
  throw ConfigError("expected one of auto, ring, tree, hierarchical, nvls, pairwise, found '" +
                    std::string(text) + "'");
}

std::string_view to_string(Algorithm a) {
  switch (a) {
  case Algorithm::AUTO:
    return "auto";
  case Algorithm::RING:
    return "ring";
  case Algorithm::TREE:
    return "tree";
  case Algorithm::HIERARCHICAL:
    return "hierarchical";
  case Algorithm::NVLS:
    return "nvls";
  case Algorithm::PAIRWISE:
    return "pairwise";
  }
  return "?";
}

double bus_factor(CollectiveOp op, int n) {
  if (n < 2)
    return 1.0;
  switch (op) {
  case CollectiveOp::ALL_REDUCE:
    return 2.0 * (n - 1) / n;
  case CollectiveOp::ALL_GATHER:
  case CollectiveOp::REDUCE_SCATTER:
  case CollectiveOp::ALL_TO_ALL:
    return static_cast<double>(n - 1) / n;
  case CollectiveOp::SEND:
  case CollectiveOp::BROADCAST:
  case CollectiveOp::REDUCE:
    return 1.0;
  }
  return 1.0;
}

// ---- selection ------------------------------------------------------------------------------------

int channels(std::span<const int32_t> gpus, const TopologyView& v) {
  const auto groups = by_node(gpus, v);
  if (groups.size() < 2)
    return 1;
  int nch = std::numeric_limits<int>::max();
  for (const auto& g : groups) {
    std::vector<int> nics;
    for (int32_t x : g)
      if (std::find(nics.begin(), nics.end(), v.nic_of(x)) == nics.end())
        nics.push_back(v.nic_of(x));
    nch = std::min(nch, static_cast<int>(nics.size()));
  }
  return std::max(1, nch);
}

bool applicable(CollectiveOp op, Algorithm a, std::span<const int32_t> gpus, const TopologyView& v) {
  if (a == Algorithm::AUTO)
    return true;
  switch (op) {
  case CollectiveOp::SEND:
    return a == Algorithm::RING;
  case CollectiveOp::ALL_TO_ALL:
    return a == Algorithm::PAIRWISE;
  case CollectiveOp::ALL_GATHER:
  case CollectiveOp::REDUCE_SCATTER:
  case CollectiveOp::BROADCAST:
  case CollectiveOp::REDUCE:
    return a == Algorithm::RING;
  case CollectiveOp::ALL_REDUCE:
    break;
  }
  const auto groups = by_node(gpus, v);
  switch (a) {
  case Algorithm::RING:
  case Algorithm::TREE:
    return true;
  case Algorithm::HIERARCHICAL: {
    if (groups.size() < 2 || groups.front().size() < 2)
      return false;
    for (const auto& g : groups)
      if (g.size() != groups.front().size())
        return false;
    return true;
  }
  case Algorithm::NVLS:
    return v.nvls && groups.size() == 1 && gpus.size() >= 2;
  case Algorithm::PAIRWISE:
  case Algorithm::AUTO:
    return false;
  }
  return false;
}

Seconds estimate(CollectiveOp op, Algorithm a, std::span<const int32_t> gpus, Bytes size,
                 const TopologyView& v) {
  const GroupShape s = shape_of(gpus, v);
  const int n = s.n;
  if (n < 2 || size.value() <= 0)
    return Seconds(0.0);
  const double S = size.value();
  const double inf = std::numeric_limits<double>::infinity();
  const double ai = s.intra.present ? s.intra.alpha.value() : 0.0;
  const double bi = s.intra.present ? s.intra.beta.value() : inf;
  const double ax = s.inter.present ? s.inter.alpha.value() : ai;
  const double bx = s.inter.present ? s.inter.beta.value() : bi;
  const int nch = channels(gpus, v);
  const int m = s.per_node;
  // Ring edges: the slowest edge class bounds each step; channels multiply the NIC bandwidth,
  // NVLink carries (m-1)/m of the traffic on each GPU.
  const double ring_alpha = s.nodes > 1 ? ax : ai;
  const double ring_beta = s.nodes > 1 ? std::min(bx * nch, m > 1 ? bi * m / (m - 1.0) : inf) : bi;
  if (v.route_links && op == CollectiveOp::ALL_REDUCE && s.nodes > 1 &&
      (a == Algorithm::RING || a == Algorithm::TREE || a == Algorithm::HIERARCHICAL))
    return routed_all_reduce(a, gpus, size, v, s.nodes, m);
  switch (a) {
  case Algorithm::AUTO:
    return estimate(op, choose(op, gpus, size, v), gpus, size, v);
  case Algorithm::RING: {
    if (op == CollectiveOp::SEND)
      return Seconds(ring_alpha + S / (s.nodes > 1 ? bx : bi));
    if (op == CollectiveOp::BROADCAST || op == CollectiveOp::REDUCE) {
      const int C = chunks_for(S / nch);
      return Seconds((n + C - 2) * (ring_alpha + S / nch / C / std::min(bx, bi)));
    }
    return Seconds(ring_steps(op, n) * ring_alpha + ring_bytes_per_rank(op, size, n).value() / ring_beta);
  }
  case Algorithm::TREE: {
    int depth_nodes = 0;
    for (int k = s.nodes; k > 1; k /= 2)
      ++depth_nodes;
    const double lat = 2.0 * (depth_nodes * ax + (m - 1) * ai);
    // NCCL's tuner rates a tree all-reduce at 0.92 of the bus bandwidth of the ring over the same
    // links (src/graph/tuning.cc, "model refinements"), so large messages go to the ring unless
    // its latency, 2(n-1) steps, costs more than the 8 %.
    const double tree_beta = TREE_BANDWIDTH_SHARE * (s.nodes > 1 ? std::min(bx * nch, bi) : bi);
    return Seconds(lat + 2.0 * S / tree_beta);
  }
  case Algorithm::HIERARCHICAL: {
    const int k = s.nodes;
    const double rail_beta = bx * std::min(1.0, static_cast<double>(v.nics_per_node) / m);
    const double intra = (m - 1) * ai + (m - 1.0) / m * S / bi;
    const double inter = 2.0 * (k - 1) * ax + 2.0 * (k - 1) / k * (S / m) / rail_beta;
    return Seconds(2 * intra + inter);
  }
  case Algorithm::NVLS: {
    const double bytes = S * v.nvls_payload_scale;
    return Seconds(v.nvls_latency.value() + ai + bytes / bi * (1.0 + 1.0 / chunks_for(bytes)));
  }
  case Algorithm::PAIRWISE: {
    const double nic_beta = bx * v.nics_per_node / v.gpus_per_node;
    const double remote = static_cast<double>(n - m) / n * S / nic_beta;
    const double local = static_cast<double>(m - 1) / n * S / bi;
    // Network and NVLink lanes run concurrently, one piece per round each (node-aware schedule).
    return Seconds(std::max(s.nodes > 1 ? (n - m) * ax + remote : 0.0, (m - 1) * ai + local));
  }
  }
  return Seconds(inf);
}

RouteCost route_cost(CollectiveOp op, Algorithm a, std::span<const int32_t> gpus, const TopologyView& v) {
  RouteCostCache::Key key{op, a, std::vector<int32_t>(gpus.begin(), gpus.end())};
  if (v.route_costs != nullptr)
    if (const RouteCost* known = v.route_costs->find_or_null(key))
      return *known;
  TopologyView whole = v; // every flow, whatever is sampled in the simulation
  whole.observed_nodes = nullptr;
  const FlowProgram p = expand(op, gpus, Bytes(ROUTE_COST_BYTES), a, CollectiveForm::COARSE, whole);
  struct Load {
    double bytes = 0, bandwidth = 0;
    bool intra = false, inter = false;
  };
  std::map<uint32_t, Load> loads;
  RouteCost c;
  for (const Flow& f : p.flows) {
    if (f.src < 0 || f.dst < 0)
      continue; // NVSwitch endpoints: not among these algorithms
    const bool intra = v.node_of(f.src) == v.node_of(f.dst);
    Seconds& alpha = intra ? c.intra_alpha : c.inter_alpha;
    alpha = std::max(alpha, v.latency(f.src, f.dst));
    BytesPerSec& beta = intra ? c.intra_beta : c.inter_beta;
    beta = std::min(beta, v.bandwidth(f.src, f.dst));
    for (const RouteLink& l : v.route_links(f.src, f.dst)) {
      Load& load = loads[l.id];
      load.bytes += f.bytes;
      load.bandwidth = l.bandwidth.value();
      (intra ? load.intra : load.inter) = true;
    }
  }
  for (const auto& [id, load] : loads) {
    const double s_per_byte = load.bytes / ROUTE_COST_BYTES / load.bandwidth;
    if (load.intra)
      c.intra_s_per_byte = std::max(c.intra_s_per_byte, s_per_byte);
    if (load.inter)
      c.inter_s_per_byte = std::max(c.inter_s_per_byte, s_per_byte);
  }
  if (v.route_costs != nullptr)
    v.route_costs->put(std::move(key), c);
  return c;
}

Algorithm choose(CollectiveOp op, std::span<const int32_t> gpus, Bytes size, const TopologyView& v) {
  if (op == CollectiveOp::ALL_TO_ALL)
    return Algorithm::PAIRWISE;
  Algorithm best = Algorithm::RING;
  Seconds best_t(std::numeric_limits<double>::infinity());
  for (Algorithm a : {Algorithm::RING, Algorithm::TREE, Algorithm::HIERARCHICAL, Algorithm::NVLS}) {
    if (!applicable(op, a, gpus, v))
      continue;
    const Seconds t = estimate(op, a, gpus, size, v);
    if (t < best_t) {
      best_t = t;
      best = a;
    }
  }
  return best;
}

// ---- expansion ------------------------------------------------------------------------------------

double remote_copy_share(const NodeDeduplication& d, int nodes) {
  if (d.experts <= 0 || d.top_k <= 0 || nodes < 2 || d.top_k > d.experts)
    return 1.0;
  // Experts per node (the group's experts split evenly over its nodes); a token's top_k experts
  // are distinct: P(none on the node) = prod_i (E - E_node - i) / (E - i).
  const double on_node = static_cast<double>(d.experts) / nodes;
  // Group-limited routing with one group per node: the node is among the token's chosen groups
  // with probability group_top_k/nodes, and its experts compete with those of the other chosen ones.
  const bool limited = d.groups == nodes && d.group_top_k > 0 && d.group_top_k < d.groups;
  const double chosen = limited ? static_cast<double>(d.group_top_k) / nodes : 1.0;
  const double e = limited ? on_node * static_cast<double>(d.group_top_k) : static_cast<double>(d.experts);
  double none = 1.0;
  for (int64_t i = 0; i < d.top_k; ++i)
    none *= std::max(0.0, e - on_node - static_cast<double>(i)) / (e - static_cast<double>(i));
  const double copies = static_cast<double>(d.top_k) / nodes; // routed copies per token for the node
  return std::min(1.0, chosen * (1.0 - none) / copies);
}

FlowProgram expand(CollectiveOp op, std::span<const int32_t> gpus, Bytes size, Algorithm algorithm,
                   CollectiveForm form, const TopologyView& view, const NodeDeduplication& dedup) {
  const int n = static_cast<int>(gpus.size());
  form = resolve_form(form, gpus.size());
  if (op == CollectiveOp::SEND)
    return expand_ring(op, gpus, size, form, view.latency);
  FlowProgram prog;
  prog.dep_begin.push_back(0);
  if (n < 2 || size.value() <= 0)
    return prog;
  if (algorithm == Algorithm::AUTO)
    algorithm = choose(op, gpus, size, view);
  if (!applicable(op, algorithm, gpus, view))
    throw SimulationError("collectives: algorithm " + std::string(to_string(algorithm)) + " cannot run " +
                          std::string(to_string(op)) + " over these " + std::to_string(n) + " GPUs");
  switch (algorithm) {
  case Algorithm::RING:
    if (op == CollectiveOp::BROADCAST || op == CollectiveOp::REDUCE) {
      const auto rings = channel_rings(gpus, view);
      for (auto ring : rings) {
        const auto root = std::find(ring.begin(), ring.end(), gpus.front());
        std::rotate(ring.begin(), root, ring.end());
        if (op == CollectiveOp::REDUCE)
          std::reverse(ring.begin(), ring.end());
        FlowProgram one;
        append_chain(one, ring, size.value() / static_cast<double>(rings.size()), form, view);
        merge_concurrent(prog, one); // channels run concurrently
      }
    } else {
      append_ring(prog, op, channel_rings(gpus, view), size, form, view);
    }
    break;
  case Algorithm::TREE:
    append_tree_all_reduce(prog, gpus, size, form, view);
    break;
  case Algorithm::HIERARCHICAL:
    append_hierarchical(prog, gpus, size, form, view);
    break;
  case Algorithm::NVLS:
    append_nvls(prog, gpus, size, form, view);
    break;
  case Algorithm::PAIRWISE:
    append_all_to_all(prog, gpus, size, form, view, dedup);
    break;
  case Algorithm::AUTO:
    break;
  }
  return prog;
}

} // namespace stepsim::collectives
