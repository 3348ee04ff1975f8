#include "topology/degrade.hpp"

#include <algorithm>

namespace stepsim::topology {

double gpu_speed(const ClusterSpec& c, int node, int gpu) {
  for (const auto& g : c.degraded.gpus)
    if (g.node == node && g.gpu == gpu)
      return g.speed;
  return 1.0;
}

namespace {

const DegradedSpec::Nic* nic_entry(const ClusterSpec& c, int node, int nic) {
  for (const auto& n : c.degraded.nics)
    if (n.node == node && n.nic == nic)
      return &n;
  return nullptr;
}

} // namespace

double nic_rate(const ClusterSpec& c, int node, int nic) {
  const DegradedSpec::Nic* n = nic_entry(c, node, nic);
  const double bandwidth = n != nullptr && !n->down ? n->bandwidth.value() : c.nic.bandwidth.value();
  return bandwidth * c.nic.efficiency;
}

bool nic_down(const ClusterSpec& c, int node, int nic) {
  const DegradedSpec::Nic* n = nic_entry(c, node, nic);
  return n != nullptr && n->down;
}

int working_nic(const ClusterSpec& c, int node, int nic) {
  for (int k = 0; k < c.nics_per_node; ++k) {
    const int candidate = (nic + k) % c.nics_per_node;
    if (!nic_down(c, node, candidate))
      return candidate;
  }
  return nic;
}

double node_network_rate(const ClusterSpec& c, int node) {
  bool any_down = false;
  double sum = 0;
  for (int k = 0; k < c.nics_per_node; ++k) {
    if (nic_down(c, node, k))
      any_down = true;
    else
      sum += nic_rate(c, node, k);
  }
  return any_down ? sum : 0.0;
}

double leaf_capacity(const ClusterSpec& c, int leaf, double nominal) {
  for (const auto& l : c.degraded.leaves) {
    if (l.leaf != leaf)
      continue;
    if (l.bandwidth.value() > 0)
      return l.bandwidth.value() * c.nic.efficiency;
    const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
    const int nodes_here = std::min(per_leaf, c.nodes - leaf * per_leaf);
    const int uplinks = DegradedSpec::uplinks(nodes_here, c.nics_per_node, c.fabric.oversubscription);
    return nominal * (uplinks - l.uplinks_down) / uplinks;
  }
  return nominal;
}

double graph_link_rate(const ClusterSpec& c, int a, int b, double nominal) {
  for (const auto& l : c.degraded.links)
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a))
      return l.bandwidth.value();
  return nominal;
}

std::vector<int> rank_gpus(const ClusterSpec& c) {
  std::vector<int> out;
  for (int n : c.up_nodes())
    for (int g = 0; g < c.gpus_per_node; ++g)
      out.push_back(n * c.gpus_per_node + g);
  return out;
}

bool network_degraded(const ClusterSpec& c) {
  const double nominal = c.nic.bandwidth.value() * c.nic.efficiency;
  for (const auto& n : c.degraded.nics)
    if (n.down || nic_rate(c, n.node, n.nic) != nominal)
      return true;
  return !c.degraded.leaves.empty() || !c.degraded.links.empty();
}

std::vector<int> degraded_ranks(const ClusterSpec& c, int ranks) {
  const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
  const double nominal_nic = c.nic.bandwidth.value() * c.nic.efficiency;
  const auto node_differs = [&](int node) {
    for (int k = 0; k < c.nics_per_node; ++k)
      if (nic_down(c, node, k) || nic_rate(c, node, k) != nominal_nic)
        return true;
    return c.fabric.kind == FabricKind::FAT_TREE && leaf_capacity(c, node / per_leaf, 1.0) != 1.0;
  };
  const bool graph_links = c.fabric.kind == FabricKind::GRAPH && !c.degraded.links.empty();
  std::vector<int> out;
  const std::vector<int> gpus = rank_gpus(c);
  for (int r = 0; r < ranks && r < static_cast<int>(gpus.size()); ++r) {
    const int node = gpus[static_cast<size_t>(r)] / c.gpus_per_node;
    const int gpu = gpus[static_cast<size_t>(r)] % c.gpus_per_node;
    if (graph_links || gpu_speed(c, node, gpu) != 1.0 || node_differs(node))
      out.push_back(r);
  }
  return out;
}

} // namespace stepsim::topology
