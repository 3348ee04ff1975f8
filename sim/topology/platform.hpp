#pragma once
// ClusterSpec -> SimGrid platform: one zone per node (GPU hosts, an NVSwitch crossbar reached
// through per-GPU up/down NVLink port links, NIC up/down links to the node's gateway), nodes
// under fat-tree leaves (a star zone each), leaves under a spine (a star zone whose per-leaf
// uplinks carry the leaf's NIC bandwidth divided by the oversubscription ratio).

#include "config/spec.hpp"
#include "core/units.hpp"

#include <cstdint>
#include <vector>

namespace simgrid::s4u {
class Engine;
class Host;
} // namespace simgrid::s4u

namespace stepsim::topology {

struct Platform {
  /// index = GPU number = global rank. pstate 0 runs at gpu_speed, pstate 1 at
  /// gpu_speed / cluster.gpu.overlap_slowdown (the engine switches while the GPU communicates).
  std::vector<simgrid::s4u::Host*> gpus;
  std::vector<simgrid::s4u::Host*> switches; ///< per node: its NVSwitch as an endpoint (NVLS flows)
  simgrid::s4u::Host* timer = nullptr;       ///< many-core host that runs pure delays
  double gpu_speed = 0;                      ///< host speed: SimGrid flops per simulated second
};

struct PlatformOptions {
  /// Leave the latency-only hops between a fat tree's nodes and their leaf (unlimited bandwidth:
  /// they never limit a flow) out of the routes' links, keeping their latencies in the routes'.
  /// Every flow of a node crossed its hop, which joined all of them into one set the flow solver
  /// re-solved on each completion (docs/engine.md, "Platform"). Off when link loads are counted
  /// (`stepsim jobs`).
  bool omit_unbinding_links = true;
};

/// Builds the platform inside `engine` (which must not have one yet). Link bandwidths are
/// spec bandwidth x efficiency; latencies are split evenly over a route's links so that a
/// route's latency is the spec's one-way latency.
Platform build_platform(simgrid::s4u::Engine& engine, const ClusterSpec& cluster,
                        PlatformOptions options = {});

/// One-way latency of the route between GPUs a and b (sum of its links' latencies).
Seconds route_latency(const Platform& platform, int a, int b);

/// Lowest bandwidth along the route between GPUs a and b.
BytesPerSec route_bandwidth(const Platform& platform, int a, int b);

/// The host standing for `endpoint`: a GPU (>= 0) or a node's switch (collectives::switch_endpoint).
simgrid::s4u::Host* endpoint_host(const Platform& platform, int32_t endpoint);

/// Index of the NIC that GPU `local_gpu` of a node uses (GPUs spread evenly over NICs).
int nic_of(const ClusterSpec& cluster, int local_gpu);

} // namespace stepsim::topology
