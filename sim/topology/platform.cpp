#include "topology/platform.hpp"

#include "core/error.hpp"

#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include <algorithm>
#include <limits>
#include <string>

namespace sg4 = simgrid::s4u;

namespace stepsim::topology {

namespace {

// Simulated compute runs at this many SimGrid flops per second, so an Exec of d seconds has
// d * GPU_SPEED flops. Large enough that SimGrid's precision thresholds are far below a ns.
constexpr double GPU_SPEED = 1e12;
// A link that never limits: used to carry latency only.
constexpr double UNLIMITED_BANDWIDTH = 1e18;

sg4::Link* make_link(sg4::NetZone* zone, const std::string& name, double bandwidth, double latency) {
  sg4::Link* link = zone->create_link(name, bandwidth);
  link->set_latency(latency);
  link->set_sharing_policy(sg4::Link::SharingPolicy::SHARED);
  return link->seal();
}

} // namespace

int nic_of(const ClusterSpec& cluster, int local_gpu) {
  return local_gpu * cluster.nics_per_node / cluster.gpus_per_node;
}

Platform build_platform(sg4::Engine& engine, const ClusterSpec& c) {
  if (c.nodes < 1 || c.gpus_per_node < 1 || c.nics_per_node < 1)
    throw SimulationError("platform: cluster needs nodes, gpus_per_node and nics >= 1");
  Platform out;
  out.gpu_speed = GPU_SPEED;
  // GPU pstate 1: compute slowed by communication on the same GPU (engine: overlap_slowdown).
  const std::vector<double> gpu_pstates{GPU_SPEED, GPU_SPEED / std::max(1.0, c.gpu.overlap_slowdown)};

  const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
  const int leaves = (c.nodes + per_leaf - 1) / per_leaf;
  const bool two_tier = leaves > 1;

  sg4::NetZone* root = sg4::create_star_zone("cluster");
  out.timer = root->create_host("timer", GPU_SPEED);
  out.timer->set_core_count(1 << 24);
  out.timer->seal();

  const double nvl_bw = c.nvswitch.bandwidth.value() * c.nvswitch.efficiency;
  const double nvl_lat = c.nvswitch.latency.value() / 2.0;
  const double nic_bw = c.nic.bandwidth.value() * c.nic.efficiency;
  const double nic_lat = c.nic.latency.value() / 2.0;
  const double sw = c.fabric.switch_latency.value();

  out.gpus.reserve(static_cast<size_t>(c.num_gpus()));
  for (int leaf = 0; leaf < leaves; ++leaf) {
    sg4::NetZone* leaf_zone = root;
    if (two_tier) {
      leaf_zone = sg4::create_star_zone("leaf" + std::to_string(leaf));
      leaf_zone->set_parent(root);
      // The leaf switch lives in a zone of its own: SimGrid 3.32 mis-resolves a route to a
      // router placed directly in a zone that also holds sub-zones.
      sg4::NetZone* sw_zone = sg4::create_full_zone("leaf" + std::to_string(leaf) + "-swzone");
      sw_zone->set_parent(leaf_zone);
      simgrid::kernel::routing::NetPoint* leaf_gw = sw_zone->create_router("leaf" + std::to_string(leaf) + "-sw");
      sw_zone->seal();
      leaf_zone->add_route(sw_zone->get_netpoint(), nullptr, leaf_gw, nullptr, {}, true);
      const int nodes_here = std::min(per_leaf, c.nodes - leaf * per_leaf);
      const double uplink = nodes_here * c.nics_per_node * nic_bw / c.fabric.oversubscription;
      // Leaf -> spine -> leaf crosses three switches: the node hops carry half a switch each,
      // the leaf uplinks one each.
      sg4::Link* up = make_link(root, "leaf" + std::to_string(leaf) + "-up", uplink, sw);
      sg4::Link* down = make_link(root, "leaf" + std::to_string(leaf) + "-down", uplink, sw);
      root->add_route(leaf_zone->get_netpoint(), nullptr, leaf_gw, nullptr,
                      {sg4::LinkInRoute(up)}, false);
      root->add_route(nullptr, leaf_zone->get_netpoint(), nullptr, leaf_gw,
                      {sg4::LinkInRoute(down)}, false);
    }
    for (int n = leaf * per_leaf; n < std::min(c.nodes, (leaf + 1) * per_leaf); ++n) {
      const std::string node = "node" + std::to_string(n);
      sg4::NetZone* nz = sg4::create_full_zone(node);
      nz->set_parent(leaf_zone);
      simgrid::kernel::routing::NetPoint* gw = nz->create_router(node + "-gw");
      std::vector<sg4::Host*> hosts;
      std::vector<sg4::Link*> nvl_up, nvl_down, nic_up, nic_down;
      // The node's switch as an endpoint: NVLS flows go GPU -> switch -> GPU over the port links.
      sg4::Host* sw_host = nz->create_host(node + "-switch", GPU_SPEED);
      sw_host->seal();
      out.switches.push_back(sw_host);
      // PCIe nodes: GPU-to-GPU traffic also crosses the switch / host bridge, shared by all.
      sg4::Link* bridge = nullptr;
      if (c.intra == IntraNodeKind::PCIE && c.pcie_host_bandwidth.value() > 0)
        bridge = make_link(nz, node + "-pcie-bridge", c.pcie_host_bandwidth.value() * c.nvswitch.efficiency, 0.0);
      for (int g = 0; g < c.gpus_per_node; ++g) {
        sg4::Host* h = nz->create_host(node + "-gpu" + std::to_string(g), gpu_pstates);
        h->seal();
        hosts.push_back(h);
        out.gpus.push_back(h);
        nvl_up.push_back(make_link(nz, h->get_name() + "-nvl-up", nvl_bw, nvl_lat));
        nvl_down.push_back(make_link(nz, h->get_name() + "-nvl-down", nvl_bw, nvl_lat));
      }
      for (int k = 0; k < c.nics_per_node; ++k) {
        nic_up.push_back(make_link(nz, node + "-nic" + std::to_string(k) + "-up", nic_bw, nic_lat));
        nic_down.push_back(make_link(nz, node + "-nic" + std::to_string(k) + "-down", nic_bw, nic_lat));
      }
      for (int a = 0; a < c.gpus_per_node; ++a) {
        for (int b = 0; b < c.gpus_per_node; ++b) {
          if (a == b)
            continue;
          std::vector<sg4::LinkInRoute> route{sg4::LinkInRoute(nvl_up[a])};
          if (bridge != nullptr)
            route.emplace_back(bridge);
          route.emplace_back(nvl_down[b]);
          nz->add_route(hosts[a]->get_netpoint(), hosts[b]->get_netpoint(), nullptr, nullptr, route, false);
        }
        nz->add_route(hosts[a]->get_netpoint(), sw_host->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(nvl_up[a])}, false);
        nz->add_route(sw_host->get_netpoint(), hosts[a]->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(nvl_down[a])}, false);
        const int k = nic_of(c, a);
        nz->add_route(hosts[a]->get_netpoint(), gw, nullptr, nullptr, {sg4::LinkInRoute(nic_up[k])}, false);
        nz->add_route(gw, hosts[a]->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(nic_down[k])}, false);
      }
      nz->seal();
      // Node -> leaf switch: the NIC links already bound bandwidth; this carries the switch
      // latency (leaf switch for one-tier fabrics, half of it on each side).
      sg4::Link* lat_up = make_link(leaf_zone, node + "-leaf-up", UNLIMITED_BANDWIDTH, sw / 2.0);
      sg4::Link* lat_down = make_link(leaf_zone, node + "-leaf-down", UNLIMITED_BANDWIDTH, sw / 2.0);
      leaf_zone->add_route(nz->get_netpoint(), nullptr, gw, nullptr, {sg4::LinkInRoute(lat_up)}, false);
      leaf_zone->add_route(nullptr, nz->get_netpoint(), nullptr, gw, {sg4::LinkInRoute(lat_down)}, false);
    }
    if (two_tier)
      leaf_zone->seal();
  }
  root->seal();
  (void)engine;
  return out;
}

sg4::Host* endpoint_host(const Platform& platform, int32_t endpoint) {
  if (endpoint >= 0)
    return platform.gpus.at(static_cast<size_t>(endpoint));
  return platform.switches.at(static_cast<size_t>(-1 - endpoint));
}

Seconds route_latency(const Platform& platform, int a, int b) {
  std::vector<sg4::Link*> links;
  double latency = 0;
  platform.gpus.at(static_cast<size_t>(a))->route_to(platform.gpus.at(static_cast<size_t>(b)), links, &latency);
  return Seconds(latency);
}

BytesPerSec route_bandwidth(const Platform& platform, int a, int b) {
  std::vector<sg4::Link*> links;
  platform.gpus.at(static_cast<size_t>(a))->route_to(platform.gpus.at(static_cast<size_t>(b)), links, nullptr);
  double bw = std::numeric_limits<double>::infinity();
  for (const sg4::Link* l : links)
    bw = std::min(bw, l->get_bandwidth());
  return BytesPerSec(bw);
}

} // namespace stepsim::topology
