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

namespace {

/// Node zones (GPU hosts, NVSwitch host, NVLink port links, NIC links to the node gateway)
/// under leaf star zones, leaves under pod star zones (three tiers), pods or leaves under the
/// root. Each level's up/down link per child carries the child's bandwidth / oversubscription.
Platform build_fat_tree(const ClusterSpec& c, Platform out, const std::vector<double>& gpu_pstates) {
  const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
  const int leaves = (c.nodes + per_leaf - 1) / per_leaf;
  const bool two_tier = leaves > 1;
  const int per_pod = c.fabric.tiers == 3 ? std::max(1, std::min(c.fabric.leaves_per_pod, leaves)) : leaves;
  const int pods = (leaves + per_pod - 1) / per_pod;
  const bool three_tier = pods > 1;

  sg4::NetZone* root = sg4::create_star_zone("cluster");
  out.timer = root->create_host("timer", GPU_SPEED);
  out.timer->set_core_count(1 << 24);
  out.timer->seal();

  const double nvl_bw = c.nvswitch.bandwidth.value() * c.nvswitch.efficiency;
  const double nvl_lat = c.nvswitch.latency.value() / 2.0;
  const double nic_bw = c.nic.bandwidth.value() * c.nic.efficiency;
  const double nic_lat = c.nic.latency.value() / 2.0;
  const double sw = c.fabric.switch_latency.value();

  /// A star zone `name` under `parent` whose own switch (a router in a zone of its own: SimGrid
  /// 3.32 mis-resolves a route to a router placed directly in a zone that also holds sub-zones)
  /// is its gateway; up/down links of `capacity` and latency `sw` connect it in `parent`.
  const auto switch_zone = [&](sg4::NetZone* parent, const std::string& name, double capacity) {
    sg4::NetZone* zone = sg4::create_star_zone(name);
    zone->set_parent(parent);
    sg4::NetZone* sw_zone = sg4::create_full_zone(name + "-swzone");
    sw_zone->set_parent(zone);
    simgrid::kernel::routing::NetPoint* gw = sw_zone->create_router(name + "-sw");
    sw_zone->seal();
    zone->add_route(sw_zone->get_netpoint(), nullptr, gw, nullptr, {}, true);
    sg4::Link* up = make_link(parent, name + "-up", capacity, sw);
    sg4::Link* down = make_link(parent, name + "-down", capacity, sw);
    parent->add_route(zone->get_netpoint(), nullptr, gw, nullptr, {sg4::LinkInRoute(up)}, false);
    parent->add_route(nullptr, zone->get_netpoint(), nullptr, gw, {sg4::LinkInRoute(down)}, false);
    return zone;
  };

  out.gpus.reserve(static_cast<size_t>(c.num_gpus()));
  for (int pod = 0; pod < pods; ++pod) {
    sg4::NetZone* pod_zone = root;
    if (three_tier) {
      // Pod uplinks to the core: the pod's leaf uplink capacity / spine oversubscription.
      const int first_node = pod * per_pod * per_leaf;
      const int nodes_here = std::min(per_pod * per_leaf, c.nodes - first_node);
      const double capacity =
          nodes_here * c.nics_per_node * nic_bw / c.fabric.oversubscription / c.fabric.spine_oversubscription;
      pod_zone = switch_zone(root, "pod" + std::to_string(pod), capacity);
    }
    for (int leaf = pod * per_pod; leaf < std::min(leaves, (pod + 1) * per_pod); ++leaf) {
      sg4::NetZone* leaf_zone = pod_zone;
      if (two_tier) {
        const int nodes_here = std::min(per_leaf, c.nodes - leaf * per_leaf);
        // Leaf -> spine -> leaf crosses three switches: the node hops carry half a switch each,
        // the leaf uplinks one each (the pod uplinks one each more: five switches).
        leaf_zone = switch_zone(pod_zone, "leaf" + std::to_string(leaf),
                                nodes_here * c.nics_per_node * nic_bw / c.fabric.oversubscription);
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
    if (three_tier)
      pod_zone->seal();
  }
  root->seal();
  return out;
}

/// Rail-optimised and graph fabrics: one shortest-path (Dijkstra, cached per source) zone over
/// GPU hosts, per-node NVSwitch hosts (the hub of the node's NVLink star) and the fabric's
/// switches (routers). A GPU's network edge goes from the GPU through its NIC to the switch its
/// NIC hangs off. Routes take the fewest links. Zero-cost padding links steer them: with P pads
/// on NVSwitch->GPU edges and P+1 on GPU->switch edges, GPU to GPU inside a node (2+P links)
/// beats a detour through the NICs (3+P), and a transit through another GPU (4+2P+1 links) loses
/// to any fabric path of at most P+1 switch hops (P = diameter - 1): cross-rail traffic goes
/// through the spine (PXN is the algorithms' business, collectives/).
Platform build_routed(const ClusterSpec& c, Platform out, const std::vector<double>& gpu_pstates) {
  const double nvl_bw = c.nvswitch.bandwidth.value() * c.nvswitch.efficiency;
  const double nvl_lat = c.nvswitch.latency.value() / 2.0;
  const double nic_bw = c.nic.bandwidth.value() * c.nic.efficiency;
  const double nic_lat = c.nic.latency.value() / 2.0;
  const double sw = c.fabric.switch_latency.value();

  // The switch graph: names, [node][nic] -> switch, and inter-switch links (merged per pair).
  std::vector<std::string> names;
  std::vector<std::vector<int>> nic_switch(static_cast<size_t>(c.nodes));
  struct Cable {
    int a, b;
    double bandwidth, latency;
  };
  std::vector<Cable> cables;
  if (c.fabric.kind == FabricKind::RAIL_OPTIMIZED) {
    // Scalable units of nodes_per_leaf nodes; in each, NIC k of every node on leaf (su, k); all
    // leaves under one spine; uplinks = the leaf's NIC bandwidth / oversubscription.
    const int per_su = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
    const int sus = (c.nodes + per_su - 1) / per_su;
    names.push_back("spine");
    for (int su = 0; su < sus; ++su) {
      const int nodes_here = std::min(per_su, c.nodes - su * per_su);
      for (int k = 0; k < c.nics_per_node; ++k) {
        names.push_back("su" + std::to_string(su) + "-rail" + std::to_string(k));
        const int leaf = static_cast<int>(names.size()) - 1;
        cables.push_back({leaf, 0, nodes_here * nic_bw / c.fabric.oversubscription, 0.0});
        for (int n = su * per_su; n < su * per_su + nodes_here; ++n)
          nic_switch[static_cast<size_t>(n)].push_back(leaf);
      }
    }
  } else {
    names = c.fabric.switches;
    nic_switch = c.fabric.nic_switch;
    for (const auto& l : c.fabric.links) {
      bool merged = false;
      for (Cable& x : cables)
        if ((x.a == l.a && x.b == l.b) || (x.a == l.b && x.b == l.a)) {
          x.bandwidth += l.bandwidth.value();
          x.latency = std::max(x.latency, l.latency.value());
          merged = true;
        }
      if (!merged)
        cables.push_back({l.a, l.b, l.bandwidth.value(), l.latency.value()});
    }
    if (nic_switch.size() != static_cast<size_t>(c.nodes))
      throw SimulationError("platform: graph fabric attaches " + std::to_string(nic_switch.size()) + " nodes, the cluster has " +
                            std::to_string(c.nodes));
  }
  // Switch-graph diameter in hops (BFS from every switch): the padding that keeps routes off GPUs.
  std::vector<std::vector<int>> adj(names.size());
  for (const Cable& x : cables) {
    adj[static_cast<size_t>(x.a)].push_back(x.b);
    adj[static_cast<size_t>(x.b)].push_back(x.a);
  }
  int diameter = 0;
  for (size_t s = 0; s < names.size(); ++s) {
    std::vector<int> dist(names.size(), -1);
    std::vector<size_t> queue{s};
    dist[s] = 0;
    for (size_t q = 0; q < queue.size(); ++q)
      for (int t : adj[queue[q]])
        if (dist[static_cast<size_t>(t)] < 0) {
          dist[static_cast<size_t>(t)] = dist[queue[q]] + 1;
          diameter = std::max(diameter, dist[static_cast<size_t>(t)]);
          queue.push_back(static_cast<size_t>(t));
        }
  }
  const int pads = std::max(1, diameter - 1);

  sg4::NetZone* zone = sg4::create_dijkstra_zone("cluster", true);
  out.timer = zone->create_host("timer", GPU_SPEED);
  out.timer->set_core_count(1 << 24);
  out.timer->seal();
  std::vector<simgrid::kernel::routing::NetPoint*> routers;
  for (const std::string& name : names)
    routers.push_back(zone->create_router("sw-" + name));
  for (const Cable& x : cables) {
    const std::string name = "sw-" + names[static_cast<size_t>(x.a)] + "-" + names[static_cast<size_t>(x.b)];
    sg4::Link* ab = make_link(zone, name + "-fwd", x.bandwidth, x.latency + sw);
    sg4::Link* ba = make_link(zone, name + "-bwd", x.bandwidth, x.latency + sw);
    zone->add_route(routers[static_cast<size_t>(x.a)], routers[static_cast<size_t>(x.b)], nullptr, nullptr,
                    {sg4::LinkInRoute(ab)}, false);
    zone->add_route(routers[static_cast<size_t>(x.b)], routers[static_cast<size_t>(x.a)], nullptr, nullptr,
                    {sg4::LinkInRoute(ba)}, false);
  }
  out.gpus.reserve(static_cast<size_t>(c.num_gpus()));
  for (int n = 0; n < c.nodes; ++n) {
    const std::string node = "node" + std::to_string(n);
    sg4::Host* hub = zone->create_host(node + "-switch", GPU_SPEED);
    hub->seal();
    out.switches.push_back(hub);
    sg4::Link* bridge = nullptr;
    if (c.intra == IntraNodeKind::PCIE && c.pcie_host_bandwidth.value() > 0)
      bridge = make_link(zone, node + "-pcie-bridge", c.pcie_host_bandwidth.value() * c.nvswitch.efficiency, 0.0);
    std::vector<sg4::Link*> nic_up, nic_down;
    for (int k = 0; k < c.nics_per_node; ++k) {
      // NIC link + half a switch latency on each side of the first/last switch.
      nic_up.push_back(make_link(zone, node + "-nic" + std::to_string(k) + "-up", nic_bw, nic_lat + sw / 2.0));
      nic_down.push_back(make_link(zone, node + "-nic" + std::to_string(k) + "-down", nic_bw, nic_lat + sw / 2.0));
    }
    for (int g = 0; g < c.gpus_per_node; ++g) {
      sg4::Host* h = zone->create_host(node + "-gpu" + std::to_string(g), gpu_pstates);
      h->seal();
      out.gpus.push_back(h);
      std::vector<sg4::LinkInRoute> up{sg4::LinkInRoute(make_link(zone, h->get_name() + "-nvl-up", nvl_bw, nvl_lat))};
      std::vector<sg4::LinkInRoute> down;
      for (int p = 0; p < pads; ++p)
        down.emplace_back(make_link(zone, h->get_name() + "-pad" + std::to_string(p), UNLIMITED_BANDWIDTH, 0.0));
      if (bridge != nullptr)
        down.emplace_back(bridge);
      down.emplace_back(make_link(zone, h->get_name() + "-nvl-down", nvl_bw, nvl_lat));
      zone->add_route(h->get_netpoint(), hub->get_netpoint(), nullptr, nullptr, up, false);
      zone->add_route(hub->get_netpoint(), h->get_netpoint(), nullptr, nullptr, down, false);
      const int k = nic_of(c, g);
      simgrid::kernel::routing::NetPoint* leaf =
          routers.at(static_cast<size_t>(nic_switch[static_cast<size_t>(n)].at(static_cast<size_t>(k))));
      std::vector<sg4::LinkInRoute> out_links{sg4::LinkInRoute(nic_up[static_cast<size_t>(k)])};
      for (int p = 0; p <= pads; ++p)
        out_links.emplace_back(make_link(zone, h->get_name() + "-nicpad" + std::to_string(p), UNLIMITED_BANDWIDTH, 0.0));
      zone->add_route(h->get_netpoint(), leaf, nullptr, nullptr, out_links, false);
      zone->add_route(leaf, h->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(nic_down[static_cast<size_t>(k)])}, false);
    }
  }
  zone->seal();
  return out;
}

} // namespace

Platform build_platform(sg4::Engine& engine, const ClusterSpec& c) {
  if (c.nodes < 1 || c.gpus_per_node < 1 || c.nics_per_node < 1)
    throw SimulationError("platform: cluster needs nodes, gpus_per_node and nics >= 1");
  Platform out;
  out.gpu_speed = GPU_SPEED;
  // GPU pstate 1: compute slowed by communication on the same GPU (engine: overlap_slowdown).
  const std::vector<double> gpu_pstates{GPU_SPEED, GPU_SPEED / std::max(1.0, c.gpu.overlap_slowdown)};
  (void)engine;
  if (c.fabric.kind == FabricKind::FAT_TREE)
    return build_fat_tree(c, std::move(out), gpu_pstates);
  return build_routed(c, std::move(out), gpu_pstates);
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
