#pragma once
// The degraded parts of a cluster (ClusterSpec::degraded, docs/degraded.md) as the platform
// builds them and as folding sees them. No SimGrid.

#include "config/spec.hpp"
#include "core/units.hpp"

#include <vector>

namespace stepsim::topology {

/// GPU `gpu` of node `node`'s compute rate over its spec, (0, 1].
double gpu_speed(const ClusterSpec& cluster, int node, int gpu);

/// NIC `nic` of node `node`: its rate per direction (bandwidth x efficiency; a slower NIC's
/// given rate), and whether it is down.
double nic_rate(const ClusterSpec& cluster, int node, int nic);
bool nic_down(const ClusterSpec& cluster, int node, int nic);

/// The NIC through which the traffic of a GPU whose own NIC `nic` is down enters the fabric on a
/// rail or graph fabric: the next working NIC of the node (wrapping). `nic` itself when it works.
int working_nic(const ClusterSpec& cluster, int node, int nic);

/// With a NIC of node `node` down: the summed rate of its working NICs, which all of the node's
/// network traffic then shares (docs/degraded.md); 0 when every NIC works.
double node_network_rate(const ClusterSpec& cluster, int node);

/// A fat tree's leaf `leaf` with its nominal up (and down) capacity `nominal`: what it carries.
double leaf_capacity(const ClusterSpec& cluster, int leaf, double nominal);

/// Graph fabrics: the summed rate of the links between switches a and b, `nominal` unless they
/// are degraded (0 = down).
double graph_link_rate(const ClusterSpec& cluster, int a, int b, double nominal);

/// The physical GPU index (node * gpus_per_node + gpu) of each rank: ranks fill the nodes that
/// are up, in order (ClusterSpec::up_nodes).
std::vector<int> rank_gpus(const ClusterSpec& cluster);

/// Whether any NIC, leaf or graph link differs from the cluster's spec (a slower GPU alone
/// leaves every collective's flows as they were once it starts).
bool network_degraded(const ClusterSpec& cluster);

/// Ranks (of the first `ranks`) whose GPU or network differs from the cluster's spec: a slower
/// GPU, a node with a slower or failed NIC, a node under a leaf with fewer uplinks, every rank
/// when a graph fabric's link is degraded. Ascending; empty on a perfect cluster (or one whose
/// entries change nothing).
std::vector<int> degraded_ranks(const ClusterSpec& cluster, int ranks);

} // namespace stepsim::topology
