#include "topology/platform.hpp"

#include "core/error.hpp"

#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/NetZone.hpp>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

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

/// A star zone `name` under `parent` whose own switch (a router in a zone of its own: SimGrid
/// 3.32 mis-resolves a route to a router placed directly in a zone that also holds sub-zones) is
/// its gateway; up/down links of `capacity` and latency `sw` connect it in `parent`.
sg4::NetZone* switch_zone(sg4::NetZone* parent, const std::string& name, double capacity, double sw) {
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
}

/// Node `n` of a fat tree as a zone under `leaf_zone`: its GPU hosts and NVSwitch host, the
/// NVLink port links (and a PCIe node's shared bridge), the NIC links to the node's gateway, and
/// the latency-only hop to the leaf switch. The GPUs and the switch are appended to `out`.
void build_node_zone(const ClusterSpec& c, sg4::NetZone* leaf_zone, int n, Platform& out,
                     const std::vector<double>& gpu_pstates) {
  const double nvl_bw = c.nvswitch.bandwidth.value() * c.nvswitch.efficiency;
  const double nvl_lat = c.nvswitch.latency.value() / 2.0;
  const double nic_bw = c.nic.bandwidth.value() * c.nic.efficiency;
  const double nic_lat = c.nic.latency.value() / 2.0;
  const double sw = c.fabric.switch_latency.value();
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
    nz->add_route(hosts[a]->get_netpoint(), sw_host->get_netpoint(), nullptr, nullptr,
                  {sg4::LinkInRoute(nvl_up[a])}, false);
    nz->add_route(sw_host->get_netpoint(), hosts[a]->get_netpoint(), nullptr, nullptr,
                  {sg4::LinkInRoute(nvl_down[a])}, false);
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

/// Node zones (build_node_zone) under leaf star zones, leaves under pod star zones (three
/// tiers), pods or leaves under the root. Each level's up/down link per child carries the
/// child's bandwidth / oversubscription.
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

  const double nic_bw = c.nic.bandwidth.value() * c.nic.efficiency;
  const double sw = c.fabric.switch_latency.value();
  out.gpus.reserve(static_cast<size_t>(c.num_gpus()));
  for (int pod = 0; pod < pods; ++pod) {
    sg4::NetZone* pod_zone = root;
    if (three_tier) {
      // Pod uplinks to the core: the pod's leaf uplink capacity / spine oversubscription.
      const int first_node = pod * per_pod * per_leaf;
      const int nodes_here = std::min(per_pod * per_leaf, c.nodes - first_node);
      const double capacity =
          nodes_here * c.nics_per_node * nic_bw / c.fabric.oversubscription / c.fabric.spine_oversubscription;
      pod_zone = switch_zone(root, "pod" + std::to_string(pod), capacity, sw);
    }
    for (int leaf = pod * per_pod; leaf < std::min(leaves, (pod + 1) * per_pod); ++leaf) {
      sg4::NetZone* leaf_zone = pod_zone;
      if (two_tier) {
        const int nodes_here = std::min(per_leaf, c.nodes - leaf * per_leaf);
        // Leaf -> spine -> leaf crosses three switches: the node hops carry half a switch each,
        // the leaf uplinks one each (the pod uplinks one each more: five switches).
        leaf_zone = switch_zone(pod_zone, "leaf" + std::to_string(leaf),
                                nodes_here * c.nics_per_node * nic_bw / c.fabric.oversubscription, sw);
      }
      for (int n = leaf * per_leaf; n < std::min(c.nodes, (leaf + 1) * per_leaf); ++n)
        build_node_zone(c, leaf_zone, n, out, gpu_pstates);
      if (two_tier)
        leaf_zone->seal();
    }
    if (three_tier)
      pod_zone->seal();
  }
  root->seal();
  return out;
}

/// The zone of rail-optimised and graph fabrics: GPU hosts, per-node NVSwitch hosts (the hub of
/// the node's NVLink star) and the fabric's switches, routed by this zone itself. A route inside a
/// node runs over NVLink (the source's port up, the destination's port down); a route between
/// nodes leaves through the source GPU's NIC to the switch it hangs off, takes the switch path
/// of fewest cables (breadth-first, ties to the earlier-listed cable) and enters the destination
/// through its NIC. Each lookup costs the path's length: SimGrid's shortest-path zones search the
/// whole graph of GPUs once per source GPU, which on a 16 k-GPU platform is most of a run.
class SwitchGraphZone final : public simgrid::kernel::routing::NetZoneImpl {
public:
  using NetPoint = simgrid::kernel::routing::NetPoint;
  using LinkImpl = simgrid::kernel::resource::StandardLinkImpl;
  struct Hop {
    LinkImpl* link = nullptr;
    double latency = 0;
  };
  /// What a netpoint of this zone is: a GPU (node, NIC switch, its two NVLink ports) or a node's
  /// NVSwitch host.
  struct Endpoint {
    bool gpu = false;
    int node = -1;        ///< -1: not a GPU or NVSwitch of this zone (the timer host)
    int nic = -1;         ///< the node's NIC the GPU uses
    Hop nvl_up, nvl_down; ///< GPU ports
  };

  explicit SwitchGraphZone(const std::string& name) : NetZoneImpl(name) {}

  static Hop hop(sg4::Link* link) { return {link->get_impl(), link->get_latency()}; }

  /// One directed cable between switches a and b.
  void add_cable(int a, int b, sg4::Link* link) {
    if (static_cast<size_t>(std::max(a, b)) >= out_.size())
      out_.resize(static_cast<size_t>(std::max(a, b)) + 1);
    out_[static_cast<size_t>(a)].push_back(static_cast<int>(cables_.size()));
    cables_.push_back({a, b, hop(link)});
  }
  /// Node n: its NICs' links, the switch each hangs off and its NVLink bridge (PCIe, may be null).
  void add_node(std::vector<Hop> nic_up, std::vector<Hop> nic_down, std::vector<int> nic_switch, Hop bridge) {
    nodes_.push_back({std::move(nic_up), std::move(nic_down), std::move(nic_switch), bridge});
  }
  void add_endpoint(const sg4::Host* host, Endpoint e) {
    const unsigned long id = host->get_netpoint()->id();
    if (id >= endpoints_.size())
      endpoints_.resize(id + 1);
    endpoints_[id] = e;
  }
  void set_switch_count(size_t n) {
    out_.resize(std::max(out_.size(), n));
    paths_.assign(n, {});
  }

  void get_local_route(const NetPoint* src, const NetPoint* dst, simgrid::kernel::routing::Route* into,
                       double* latency) override {
    if (src == dst)
      return;
    const Endpoint& a = endpoint(src);
    const Endpoint& b = endpoint(dst);
    const auto add = [&](const Hop& h) {
      if (h.link == nullptr)
        return;
      into->link_list_.push_back(h.link);
      if (latency != nullptr)
        *latency += h.latency;
    };
    const Node& na = nodes_.at(static_cast<size_t>(a.node));
    if (a.node == b.node) { // NVLink through the node's hub
      if (a.gpu)
        add(a.nvl_up);
      if (b.gpu) {
        add(na.bridge);
        add(b.nvl_down);
      }
      return;
    }
    if (!a.gpu || !b.gpu)
      throw SimulationError("platform: no route from " + src->get_name() + " to " + dst->get_name() +
                            " (a node's NVSwitch is reached from its own GPUs only)");
    const Node& nb = nodes_.at(static_cast<size_t>(b.node));
    add(na.nic_up.at(static_cast<size_t>(a.nic)));
    const int from = na.nic_switch.at(static_cast<size_t>(a.nic));
    const int to = nb.nic_switch.at(static_cast<size_t>(b.nic));
    const std::vector<int>& path = switch_path(from, to);
    for (int c : path)
      add(cables_[static_cast<size_t>(c)].hop);
    add(nb.nic_down.at(static_cast<size_t>(b.nic)));
  }

private:
  struct Cable {
    int a = 0, b = 0;
    Hop hop;
  };
  struct Node {
    std::vector<Hop> nic_up, nic_down;
    std::vector<int> nic_switch;
    Hop bridge;
  };

  const Endpoint& endpoint(const NetPoint* p) const {
    const unsigned long id = p->id();
    if (id >= endpoints_.size() || endpoints_[id].node < 0)
      throw SimulationError("platform: no route through " + p->get_name());
    return endpoints_[id];
  }

  /// Cables from switch `from` to switch `to`, fewest first (breadth-first from `from`, cached
  /// per source switch as the cable that reaches each switch).
  const std::vector<int>& switch_path(int from, int to) {
    auto& tree = paths_.at(static_cast<size_t>(from));
    if (tree.reach.empty()) {
      tree.reach.assign(out_.size(), -2);
      tree.reach[static_cast<size_t>(from)] = -1;
      std::vector<int> queue{from};
      for (size_t q = 0; q < queue.size(); ++q)
        for (int c : out_[static_cast<size_t>(queue[q])]) {
          const int next = cables_[static_cast<size_t>(c)].b;
          if (tree.reach[static_cast<size_t>(next)] == -2) {
            tree.reach[static_cast<size_t>(next)] = c;
            queue.push_back(next);
          }
        }
      tree.to.assign(out_.size(), {});
      tree.done.assign(out_.size(), false);
    }
    if (!tree.done[static_cast<size_t>(to)]) {
      if (tree.reach[static_cast<size_t>(to)] == -2)
        throw SimulationError("platform: the fabric's switch graph does not connect switch " +
                              std::to_string(from) + " to switch " + std::to_string(to));
      std::vector<int>& path = tree.to[static_cast<size_t>(to)];
      for (int sw = to; sw != from;) {
        const int c = tree.reach[static_cast<size_t>(sw)];
        path.push_back(c);
        sw = cables_[static_cast<size_t>(c)].a;
      }
      std::reverse(path.begin(), path.end());
      tree.done[static_cast<size_t>(to)] = true;
    }
    return tree.to[static_cast<size_t>(to)];
  }

  struct Tree {
    std::vector<int> reach; ///< per switch: the cable that reaches it (-1 the source, -2 unreached)
    std::vector<std::vector<int>> to;
    std::vector<bool> done;
  };
  std::vector<Cable> cables_;
  std::vector<std::vector<int>> out_; ///< per switch: its outgoing cables
  std::vector<Node> nodes_;
  std::vector<Endpoint> endpoints_;
  std::vector<Tree> paths_;
};

/// Rail-optimised and graph fabrics (SwitchGraphZone): a GPU's network edge goes from the GPU
/// through its NIC to the switch its NIC hangs off; cross-rail traffic goes through the spine
/// (PXN is the algorithms' business, collectives/).
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
      throw SimulationError("platform: graph fabric attaches " + std::to_string(nic_switch.size()) +
                            " nodes, the cluster has " + std::to_string(c.nodes));
  }
  auto* impl = new SwitchGraphZone("cluster");
  sg4::NetZone* zone = impl->get_iface();
  out.timer = zone->create_host("timer", GPU_SPEED);
  out.timer->set_core_count(1 << 24);
  out.timer->seal();
  impl->set_switch_count(names.size());
  for (const Cable& x : cables) {
    const std::string name = "sw-" + names[static_cast<size_t>(x.a)] + "-" + names[static_cast<size_t>(x.b)];
    impl->add_cable(x.a, x.b, make_link(zone, name + "-fwd", x.bandwidth, x.latency + sw));
    impl->add_cable(x.b, x.a, make_link(zone, name + "-bwd", x.bandwidth, x.latency + sw));
  }
  out.gpus.reserve(static_cast<size_t>(c.num_gpus()));
  for (int n = 0; n < c.nodes; ++n) {
    const std::string node = "node" + std::to_string(n);
    sg4::Host* hub = zone->create_host(node + "-switch", GPU_SPEED);
    hub->seal();
    out.switches.push_back(hub);
    impl->add_endpoint(hub, {.gpu = false, .node = n, .nic = -1, .nvl_up = {}, .nvl_down = {}});
    SwitchGraphZone::Hop bridge;
    if (c.intra == IntraNodeKind::PCIE && c.pcie_host_bandwidth.value() > 0)
      bridge = SwitchGraphZone::hop(
          make_link(zone, node + "-pcie-bridge", c.pcie_host_bandwidth.value() * c.nvswitch.efficiency, 0.0));
    std::vector<SwitchGraphZone::Hop> nic_up, nic_down;
    for (int k = 0; k < c.nics_per_node; ++k) {
      // NIC link + half a switch latency on each side of the first/last switch.
      nic_up.push_back(SwitchGraphZone::hop(
          make_link(zone, node + "-nic" + std::to_string(k) + "-up", nic_bw, nic_lat + sw / 2.0)));
      nic_down.push_back(SwitchGraphZone::hop(
          make_link(zone, node + "-nic" + std::to_string(k) + "-down", nic_bw, nic_lat + sw / 2.0)));
    }
    impl->add_node(std::move(nic_up), std::move(nic_down), nic_switch[static_cast<size_t>(n)], bridge);
    for (int g = 0; g < c.gpus_per_node; ++g) {
      sg4::Host* h = zone->create_host(node + "-gpu" + std::to_string(g), gpu_pstates);
      h->seal();
      out.gpus.push_back(h);
      sg4::Link* up = make_link(zone, h->get_name() + "-nvl-up", nvl_bw, nvl_lat);
      sg4::Link* down = make_link(zone, h->get_name() + "-nvl-down", nvl_bw, nvl_lat);
      impl->add_endpoint(h, {.gpu = true,
                             .node = n,
                             .nic = nic_of(c, g),
                             .nvl_up = SwitchGraphZone::hop(up),
                             .nvl_down = SwitchGraphZone::hop(down)});
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
  platform.gpus.at(static_cast<size_t>(a))
      ->route_to(platform.gpus.at(static_cast<size_t>(b)), links, &latency);
  return Seconds(latency);
}

BytesPerSec route_bandwidth(const Platform& platform, int a, int b) {
  std::vector<sg4::Link*> links;
  platform.gpus.at(static_cast<size_t>(a))
      ->route_to(platform.gpus.at(static_cast<size_t>(b)), links, nullptr);
  double bw = std::numeric_limits<double>::infinity();
  for (const sg4::Link* l : links)
    bw = std::min(bw, l->get_bandwidth());
  return BytesPerSec(bw);
}

} // namespace stepsim::topology
