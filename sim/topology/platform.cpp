#include "topology/platform.hpp"

#include "core/error.hpp"
#include "topology/degrade.hpp"

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

/// What the self-routed fabric zones share (FatTreeZone, SwitchGraphZone): links as hops with
/// their latencies, and what each netpoint is (a GPU with its node, NIC and NVLink ports, or a
/// node's NVSwitch host).
class SelfRoutedZone : public simgrid::kernel::routing::NetZoneImpl {
public:
  using NetPoint = simgrid::kernel::routing::NetPoint;
  using LinkImpl = simgrid::kernel::resource::StandardLinkImpl;
  struct Hop {
    LinkImpl* link = nullptr;
    double latency = 0;
  };
  struct Endpoint {
    bool gpu = false;
    int node = -1;        ///< -1: not a GPU or NVSwitch of this zone (the timer host)
    int nic = -1;         ///< the node's NIC the GPU uses
    Hop nvl_up, nvl_down; ///< GPU ports
  };

  explicit SelfRoutedZone(const std::string& name) : NetZoneImpl(name) {}

  static Hop hop(sg4::Link* link) { return {link->get_impl(), link->get_latency()}; }

  void add_endpoint(const sg4::Host* host, Endpoint e) {
    const unsigned long id = host->get_netpoint()->id();
    if (id >= endpoints_.size())
      endpoints_.resize(id + 1);
    endpoints_[id] = e;
  }

protected:
  const Endpoint& endpoint(const NetPoint* p) const {
    const unsigned long id = p->id();
    if (id >= endpoints_.size() || endpoints_[id].node < 0)
      throw SimulationError("platform: no route through " + p->get_name());
    return endpoints_[id];
  }

private:
  std::vector<Endpoint> endpoints_;
};

/// Node n's GPU hosts, each with its NVLink port links (up, down), registered with `impl`.
void add_gpus(const ClusterSpec& c, sg4::NetZone* zone, SelfRoutedZone* impl, int n, Platform& out,
              const std::vector<double>& gpu_pstates) {
  const double nvl_bw = c.nvswitch.bandwidth.value() * c.nvswitch.efficiency;
  const double nvl_lat = c.nvswitch.latency.value() / 2.0;
  for (int g = 0; g < c.gpus_per_node; ++g) {
    // A slower GPU (degraded.gpus): every pstate at its speed, so its compute takes duration / speed.
    const double speed = gpu_speed(c, n, g);
    std::vector<double> pstates = gpu_pstates;
    for (double& p : pstates)
      p *= speed;
    sg4::Host* h = zone->create_host("node" + std::to_string(n) + "-gpu" + std::to_string(g),
                                     speed == 1.0 ? gpu_pstates : pstates);
    h->seal();
    out.gpus.push_back(h);
    sg4::Link* up = make_link(zone, h->get_name() + "-nvl-up", nvl_bw, nvl_lat);
    sg4::Link* down = make_link(zone, h->get_name() + "-nvl-down", nvl_bw, nvl_lat);
    impl->add_endpoint(h, {.gpu = true,
                           .node = n,
                           .nic = nic_of(c, g),
                           .nvl_up = SelfRoutedZone::hop(up),
                           .nvl_down = SelfRoutedZone::hop(down)});
  }
}

/// The zone of a fat tree: every GPU and NVSwitch host of the cluster in this one zone, which
/// routes by itself over the fat tree's links. A route is the one SimGrid's zone hierarchy gave
/// when each node, leaf and pod was a zone of its own (a node's full zone under a leaf's star
/// zone under a pod's under the root): the same links in the same order, and the latency summed
/// in the order SimGrid summed it (the common level's up and down links first, then the source's
/// levels from the top down, then the destination's), so every route figure and simulated time
/// is the same to the last bit. One zone because SimGrid 3.32 checks each new link's and host's
/// name by walking every zone: with a zone per node, building a 16 k-GPU platform cost
/// O(nodes x links), most of a run (docs/performance.md).
class FatTreeZone final : public SelfRoutedZone {
public:
  /// A node's NIC links, its PCIe bridge (may be empty), its latency hops to the leaf, its leaf.
  struct Node {
    std::vector<Hop> nic_up, nic_down;
    Hop bridge, to_leaf, from_leaf;
    int leaf = 0;
    Hop network_up, network_down; ///< with a NIC down: the working NICs' summed rate, shared by all
  };
  /// A leaf's (or pod's) uplink to the level above and downlink from it; `pod`: the leaf's pod.
  struct Uplink {
    Hop up, down;
    int pod = 0;
  };

  /// `omit_node_hops`: routes leave out the latency-only node-to-leaf hops' links, their
  /// latencies stay in the route's.
  FatTreeZone(const std::string& name, bool omit_node_hops)
      : SelfRoutedZone(name), omit_node_hops_(omit_node_hops) {}

  void add_node(Node n) { nodes_.push_back(std::move(n)); }
  void add_leaf(Uplink l) { leaves_.push_back(l); }
  void add_pod(Uplink p) { pods_.push_back(p); }

  void get_local_route(const NetPoint* src, const NetPoint* dst, simgrid::kernel::routing::Route* into,
                       double* latency) override {
    if (src == dst)
      return;
    const Endpoint& a = endpoint(src);
    const Endpoint& b = endpoint(dst);
    double sum = 0;
    const auto lat = [&](const Hop& h) {
      if (h.link != nullptr)
        sum += h.latency;
    };
    std::vector<const Hop*> hops;
    const Node& na = nodes_.at(static_cast<size_t>(a.node));
    if (a.node == b.node) { // the node's full zone: port up, PCIe bridge, port down
      if (a.gpu)
        hops.push_back(&a.nvl_up);
      if (a.gpu && b.gpu && na.bridge.link != nullptr)
        hops.push_back(&na.bridge);
      if (b.gpu)
        hops.push_back(&b.nvl_down);
      for (const Hop* h : hops)
        lat(*h);
    } else {
      if (!a.gpu || !b.gpu)
        throw SimulationError("platform: no route from " + src->get_name() + " to " + dst->get_name() +
                              " (a node's NVSwitch is reached from its own GPUs only)");
      const Node& nb = nodes_.at(static_cast<size_t>(b.node));
      const Hop& nic_up = na.nic_up.at(static_cast<size_t>(a.nic));
      const Hop& nic_down = nb.nic_down.at(static_cast<size_t>(b.nic));
      const Uplink* leaf_a = leaves_.empty() ? nullptr : &leaves_[static_cast<size_t>(na.leaf)];
      const Uplink* leaf_b = leaves_.empty() ? nullptr : &leaves_[static_cast<size_t>(nb.leaf)];
      const bool other_leaf = leaf_a != leaf_b;
      const bool other_pod = other_leaf && !pods_.empty() && leaf_a->pod != leaf_b->pod;
      // SimGrid's order: the common ancestor's route first, then the source side from the top
      // down (each level's uplink, the node's hop, its NIC), then the destination side.
      if (other_pod) {
        lat(pods_[static_cast<size_t>(leaf_a->pod)].up);
        lat(pods_[static_cast<size_t>(leaf_b->pod)].down);
      }
      if (other_leaf)
        lat(leaf_a->up);
      if (other_leaf && !other_pod)
        lat(leaf_b->down);
      if (other_leaf) {
        lat(na.to_leaf);
        lat(nic_up);
        if (other_pod)
          lat(leaf_b->down);
        lat(nb.from_leaf);
        lat(nic_down);
      } else { // one leaf: its star route (the two node hops), then each node's NIC
        lat(na.to_leaf);
        lat(nb.from_leaf);
        lat(nic_up);
        lat(nic_down);
      }
      // The latency-only node hops stay out of the solver (PlatformOptions).
      hops = {&nic_up, &na.network_up};
      if (!omit_node_hops_)
        hops.push_back(&na.to_leaf);
      if (other_leaf)
        hops.push_back(&leaf_a->up);
      if (other_pod) {
        hops.push_back(&pods_[static_cast<size_t>(leaf_a->pod)].up);
        hops.push_back(&pods_[static_cast<size_t>(leaf_b->pod)].down);
      }
      if (other_leaf)
        hops.push_back(&leaf_b->down);
      if (!omit_node_hops_)
        hops.push_back(&nb.from_leaf);
      hops.push_back(&nb.network_down);
      hops.push_back(&nic_down);
    }
    for (const Hop* h : hops)
      if (h->link != nullptr)
        into->link_list_.push_back(h->link);
    if (latency != nullptr)
      *latency += sum;
  }

private:
  bool omit_node_hops_ = false;
  std::vector<Node> nodes_;
  std::vector<Uplink> leaves_; ///< empty on a one-leaf fabric
  std::vector<Uplink> pods_;   ///< empty unless pods exist (three tiers, more than one pod)
};

/// Nodes under fat-tree leaves, leaves under pods (three tiers), pods or leaves under the spine
/// (FatTreeZone). Inside a node: per-GPU NVLink ports (and a PCIe node's shared bridge), NIC
/// links; a latency-only hop to the leaf switch (half a switch latency each way); each level's up
/// and down link per child carries the child's bandwidth / oversubscription and a switch latency.
Platform build_fat_tree(const ClusterSpec& c, Platform out, const std::vector<double>& gpu_pstates,
                        const PlatformOptions& options) {
  const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
  const int leaves = (c.nodes + per_leaf - 1) / per_leaf;
  const bool two_tier = leaves > 1;
  const int per_pod = c.fabric.tiers == 3 ? std::max(1, std::min(c.fabric.leaves_per_pod, leaves)) : leaves;
  const int pods = (leaves + per_pod - 1) / per_pod;
  const bool three_tier = pods > 1;
  const double nic_bw = c.nic.bandwidth.value() * c.nic.efficiency;
  const double nic_lat = c.nic.latency.value() / 2.0;
  const double sw = c.fabric.switch_latency.value();

  auto* impl = new FatTreeZone("cluster", options.omit_unbinding_links);
  sg4::NetZone* zone = impl->get_iface();
  out.timer = zone->create_host("timer", GPU_SPEED);
  out.timer->set_core_count(1 << 24);
  out.timer->seal();
  const auto uplink = [&](const std::string& name, double capacity, int pod) {
    sg4::Link* up = make_link(zone, name + "-up", capacity, sw);
    sg4::Link* down = make_link(zone, name + "-down", capacity, sw);
    return FatTreeZone::Uplink{FatTreeZone::hop(up), FatTreeZone::hop(down), pod};
  };
  out.gpus.reserve(static_cast<size_t>(c.num_gpus()));
  for (int pod = 0; pod < pods; ++pod) {
    if (three_tier) {
      // Pod uplinks to the core: the pod's leaf uplink capacity / spine oversubscription.
      const int first_node = pod * per_pod * per_leaf;
      const int nodes_here = std::min(per_pod * per_leaf, c.nodes - first_node);
      impl->add_pod(uplink("pod" + std::to_string(pod),
                           nodes_here * c.nics_per_node * nic_bw / c.fabric.oversubscription /
                               c.fabric.spine_oversubscription,
                           pod));
    }
    for (int leaf = pod * per_pod; leaf < std::min(leaves, (pod + 1) * per_pod); ++leaf) {
      if (two_tier) {
        // Leaf -> spine -> leaf crosses three switches: the node hops carry half a switch each,
        // the leaf uplinks one each (the pod uplinks one each more: five switches).
        const int nodes_here = std::min(per_leaf, c.nodes - leaf * per_leaf);
        impl->add_leaf(uplink(
            "leaf" + std::to_string(leaf),
            leaf_capacity(c, leaf, nodes_here * c.nics_per_node * nic_bw / c.fabric.oversubscription), pod));
      }
      for (int n = leaf * per_leaf; n < std::min(c.nodes, (leaf + 1) * per_leaf); ++n) {
        const std::string node = "node" + std::to_string(n);
        FatTreeZone::Node fn;
        fn.leaf = two_tier ? leaf : 0;
        // The node's switch as an endpoint: NVLS flows go GPU -> switch -> GPU over the ports.
        sg4::Host* sw_host = zone->create_host(node + "-switch", GPU_SPEED);
        sw_host->seal();
        out.switches.push_back(sw_host);
        impl->add_endpoint(sw_host, {.gpu = false, .node = n, .nic = -1, .nvl_up = {}, .nvl_down = {}});
        // PCIe nodes: GPU-to-GPU traffic also crosses the switch / host bridge, shared by all.
        if (c.intra == IntraNodeKind::PCIE && c.pcie_host_bandwidth.value() > 0)
          fn.bridge = FatTreeZone::hop(make_link(zone, node + "-pcie-bridge",
                                                 c.pcie_host_bandwidth.value() * c.nvswitch.efficiency, 0.0));
        add_gpus(c, zone, impl, n, out, gpu_pstates);
        for (int k = 0; k < c.nics_per_node; ++k) {
          const double rate = nic_rate(c, n, k);
          fn.nic_up.push_back(
              FatTreeZone::hop(make_link(zone, node + "-nic" + std::to_string(k) + "-up", rate, nic_lat)));
          fn.nic_down.push_back(
              FatTreeZone::hop(make_link(zone, node + "-nic" + std::to_string(k) + "-down", rate, nic_lat)));
        }
        if (const double rate = node_network_rate(c, n); rate > 0) {
          fn.network_up = FatTreeZone::hop(make_link(zone, node + "-network-up", rate, 0.0));
          fn.network_down = FatTreeZone::hop(make_link(zone, node + "-network-down", rate, 0.0));
        }
        // Node -> leaf switch: the NIC links already bound bandwidth; this carries the switch
        // latency (leaf switch for one-tier fabrics, half of it on each side).
        fn.to_leaf = FatTreeZone::hop(make_link(zone, node + "-leaf-up", UNLIMITED_BANDWIDTH, sw / 2.0));
        fn.from_leaf = FatTreeZone::hop(make_link(zone, node + "-leaf-down", UNLIMITED_BANDWIDTH, sw / 2.0));
        impl->add_node(std::move(fn));
      }
    }
  }
  zone->seal();
  return out;
}

/// The zone of rail-optimised and graph fabrics: GPU hosts, per-node NVSwitch hosts (the hub of
/// the node's NVLink star) and the fabric's switches, routed by this zone itself. A route inside a
/// node runs over NVLink (the source's port up, the destination's port down); a route between
/// nodes leaves through the source GPU's NIC to the switch it hangs off, takes the switch path
/// of fewest cables (breadth-first, ties to the earlier-listed cable) and enters the destination
/// through its NIC. Each lookup costs the path's length: SimGrid's shortest-path zones search the
/// whole graph of GPUs once per source GPU, which on a 16 k-GPU platform is most of a run.
class SwitchGraphZone final : public SelfRoutedZone {
public:
  explicit SwitchGraphZone(const std::string& name) : SelfRoutedZone(name) {}

  /// One directed cable between switches a and b.
  void add_cable(int a, int b, sg4::Link* link) {
    if (static_cast<size_t>(std::max(a, b)) >= out_.size())
      out_.resize(static_cast<size_t>(std::max(a, b)) + 1);
    out_[static_cast<size_t>(a)].push_back(static_cast<int>(cables_.size()));
    cables_.push_back({a, b, hop(link)});
  }
  /// Node n: its NICs' links, the switch each hangs off and its NVLink bridge (PCIe, may be null);
  /// with a NIC down, the working NICs' shared links (else null).
  void add_node(std::vector<Hop> nic_up, std::vector<Hop> nic_down, std::vector<int> nic_switch, Hop bridge,
                Hop network_up = {}, Hop network_down = {}) {
    nodes_.push_back(
        {std::move(nic_up), std::move(nic_down), std::move(nic_switch), bridge, network_up, network_down});
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
    add(na.network_up);
    const int from = na.nic_switch.at(static_cast<size_t>(a.nic));
    const int to = nb.nic_switch.at(static_cast<size_t>(b.nic));
    const std::vector<int>& path = switch_path(from, to);
    for (int c : path)
      add(cables_[static_cast<size_t>(c)].hop);
    add(nb.network_down);
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
    Hop network_up, network_down;
  };

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
  std::vector<Tree> paths_;
};

/// Rail-optimised and graph fabrics (SwitchGraphZone): a GPU's network edge goes from the GPU
/// through its NIC to the switch its NIC hangs off; cross-rail traffic goes through the spine
/// (PXN is the algorithms' business, collectives/).
Platform build_routed(const ClusterSpec& c, Platform out, const std::vector<double>& gpu_pstates) {
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
      if (graph_link_rate(c, l.a, l.b, 1.0) == 0)
        continue; // down (degraded.links)
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
    for (Cable& x : cables)
      x.bandwidth = graph_link_rate(c, x.a, x.b, x.bandwidth);
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
    std::vector<int> switch_of = nic_switch[static_cast<size_t>(n)];
    for (int k = 0; k < c.nics_per_node; ++k) {
      // NIC link + half a switch latency on each side of the first/last switch.
      const double rate = nic_rate(c, n, k);
      nic_up.push_back(SwitchGraphZone::hop(
          make_link(zone, node + "-nic" + std::to_string(k) + "-up", rate, nic_lat + sw / 2.0)));
      nic_down.push_back(SwitchGraphZone::hop(
          make_link(zone, node + "-nic" + std::to_string(k) + "-down", rate, nic_lat + sw / 2.0)));
      // A down NIC's GPUs enter the fabric through the next working NIC's switch (PXN-like).
      switch_of[static_cast<size_t>(k)] =
          nic_switch[static_cast<size_t>(n)][static_cast<size_t>(working_nic(c, n, k))];
    }
    SwitchGraphZone::Hop network_up, network_down;
    if (const double rate = node_network_rate(c, n); rate > 0) {
      network_up = SwitchGraphZone::hop(make_link(zone, node + "-network-up", rate, 0.0));
      network_down = SwitchGraphZone::hop(make_link(zone, node + "-network-down", rate, 0.0));
    }
    impl->add_node(std::move(nic_up), std::move(nic_down), std::move(switch_of), bridge, network_up,
                   network_down);
    add_gpus(c, zone, impl, n, out, gpu_pstates);
  }
  zone->seal();
  return out;
}

} // namespace

Platform build_platform(sg4::Engine& engine, const ClusterSpec& c, PlatformOptions options) {
  if (c.nodes < 1 || c.gpus_per_node < 1 || c.nics_per_node < 1)
    throw SimulationError("platform: cluster needs nodes, gpus_per_node and nics >= 1");
  Platform out;
  out.gpu_speed = GPU_SPEED;
  // GPU pstate 1: compute slowed by communication on the same GPU (engine: overlap_slowdown).
  const std::vector<double> gpu_pstates{GPU_SPEED, GPU_SPEED / std::max(1.0, c.gpu.overlap_slowdown)};
  (void)engine;
  out = c.fabric.kind == FabricKind::FAT_TREE ? build_fat_tree(c, std::move(out), gpu_pstates, options)
                                              : build_routed(c, std::move(out), gpu_pstates);
  if (!c.degraded.nodes.empty()) {
    // Ranks fill the nodes that are up (degraded.nodes): index = rank, as everywhere.
    std::vector<sg4::Host*> gpus, switches;
    for (int gpu : rank_gpus(c))
      gpus.push_back(out.gpus[static_cast<size_t>(gpu)]);
    for (int n : c.up_nodes())
      switches.push_back(out.switches[static_cast<size_t>(n)]);
    out.gpus = std::move(gpus);
    out.switches = std::move(switches);
  }
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
