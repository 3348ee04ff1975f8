// Fabrics (sim/topology): route latency and bottleneck bandwidth of rail-optimised planes,
// three-tier fat trees with per-tier oversubscription and free-form graph fabrics; the YAML keys
// that describe them and their errors (file:line:col). One platform per TEST (one SimGrid
// engine per process: gtest_discover_tests runs each TEST alone).

#include "common/specs.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "topology/platform.hpp"

#include <gtest/gtest.h>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <xbt/log.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace stepsim;

namespace {

constexpr double NIC = 25e9 * 0.96, NVL = 300e9 * 0.8;
constexpr double NIC_LAT = 4e-6, NVL_LAT = 3e-6, SW = 0.5e-6;

topology::Platform build(const ClusterSpec& c) {
  xbt_log_control_set("root.thres:critical");
  static int argc = 1;
  static char arg0[] = "topology_test";
  static char* argv[] = {arg0, nullptr};
  static simgrid::s4u::Engine engine(&argc, argv);
  engine.set_config("network/model:CM02");
  return topology::build_platform(engine, c);
}

std::string write_temp(const std::string& name, const std::string& text) {
  const auto p =
      std::filesystem::temp_directory_path() / ("stepsim-topo-" + std::to_string(getpid()) + "-" + name);
  std::ofstream(p) << text;
  return p.string();
}

const char* CLUSTER_HEAD = R"(name: g
nodes: 4
gpus_per_node: 2
gpu: {kind: X, peak_flops: {bf16: 100TFLOPS}, hbm_capacity: 80GiB, hbm_bandwidth: 2TBps,
      compute_efficiency: 0.5, memory_efficiency: 0.5}
nvswitch: {bandwidth: 300GBps, latency: 3us, efficiency: 0.8}
nics: {count: 2, bandwidth: 200Gbps, latency: 4us, efficiency: 0.96}
)";

std::string graph_cluster(const std::string& fabric) {
  return std::string(CLUSTER_HEAD) + fabric;
}

// Two leaves joined by two spines; nodes 0-1 on leafA, 2-3 on leafB; a slow direct link.
const char* GRAPH_FABRIC = R"(fabric:
  kind: graph
  switch_latency: 0.5us
  switches: [leafA, leafB, spine1, spine2]
  links:
    - {between: [leafA, spine1], bandwidth: 400Gbps, latency: 1us}
    - {between: [leafB, spine1], bandwidth: 400Gbps, latency: 1us}
    - {between: [leafA, spine2], bandwidth: 100Gbps}
    - {between: [spine2, leafB], bandwidth: 100Gbps}
  attach:
    - {nodes: [0, 1], switch: leafA}
    - {nodes: [2, 3], rails: [leafB, leafB]}
)";

} // namespace

// Rail-optimised: NIC k of every node of a scalable unit on leaf (unit, k). Same rail: one switch;
// cross rail (GPU 0 of node 0 -> GPU 1 of node 1): leaf -> spine -> leaf, three switches; the
// route's bottleneck is still the NIC (non-blocking uplinks). Inside a node: NVLink only.
TEST(RailOptimized, RoutesThroughRailLeavesAndSpine) {
  ClusterSpec c = test::dgx_cluster(4, 2, 2);
  c.fabric.kind = FabricKind::RAIL_OPTIMIZED;
  c.fabric.nodes_per_leaf = 4;
  const auto p = build(c);
  EXPECT_NEAR(topology::route_latency(p, 0, 2).value(), NIC_LAT + SW, 1e-12);     // rail 0 -> rail 0
  EXPECT_NEAR(topology::route_latency(p, 0, 3).value(), NIC_LAT + 3 * SW, 1e-12); // rail 0 -> rail 1
  EXPECT_NEAR(topology::route_latency(p, 0, 1).value(), NVL_LAT, 1e-12);          // same node
  EXPECT_NEAR(topology::route_bandwidth(p, 0, 3).value(), NIC, 1e-3);
  EXPECT_NEAR(topology::route_bandwidth(p, 0, 1).value(), NVL, 1e-3);
  // NVLS endpoints still reach every GPU of their node.
  std::vector<simgrid::s4u::Link*> links;
  p.switches.at(1)->route_to(p.gpus.at(3), links, nullptr);
  EXPECT_FALSE(links.empty());
}

// Oversubscribed rail leaves: a leaf's uplink carries (nodes under it x NIC) / ratio; cross-rail
// routes cross it, same-rail routes do not.
TEST(RailOptimized, OversubscribedUplinkOnlyOnCrossRail) {
  ClusterSpec c = test::dgx_cluster(4, 2, 2);
  c.fabric.kind = FabricKind::RAIL_OPTIMIZED;
  c.fabric.nodes_per_leaf = 2;
  c.fabric.oversubscription = 8;
  const auto p = build(c);
  EXPECT_NEAR(topology::route_bandwidth(p, 0, 2).value(), NIC, 1e-3);         // same unit, same rail
  EXPECT_NEAR(topology::route_bandwidth(p, 0, 3).value(), 2 * NIC / 8, 1e-3); // cross rail: uplink
  EXPECT_NEAR(topology::route_bandwidth(p, 0, 4).value(), 2 * NIC / 8, 1e-3); // other unit, same rail
  EXPECT_NEAR(topology::route_latency(p, 0, 4).value(), NIC_LAT + 3 * SW, 1e-12);
}

// Three tiers: leaves of 2 nodes, pods of 2 leaves; leaf uplink = 2 nodes x 2 NICs / 2, pod
// uplink = the pod's leaf capacity / 2 / 4. Latency: 1 switch in a leaf, 3 in a pod, 5 across.
TEST(ThreeTier, LatencyAndOversubscriptionPerTier) {
  ClusterSpec c = test::dgx_cluster(8, 2, 2);
  c.fabric.nodes_per_leaf = 2;
  c.fabric.oversubscription = 2;
  c.fabric.tiers = 3;
  c.fabric.leaves_per_pod = 2;
  c.fabric.spine_oversubscription = 4;
  const auto p = build(c);
  EXPECT_NEAR(topology::route_latency(p, 0, 2).value(), NIC_LAT + SW, 1e-12);         // node 0 -> 1
  EXPECT_NEAR(topology::route_latency(p, 0, 4).value(), NIC_LAT + 3 * SW, 1e-12);     // leaf 0 -> 1
  EXPECT_NEAR(topology::route_latency(p, 0, 8).value(), NIC_LAT + 5 * SW, 1e-12);     // pod 0 -> 1
  EXPECT_NEAR(topology::route_bandwidth(p, 0, 4).value(), NIC, 1e-3);                 // 2 NICs of uplink
  EXPECT_NEAR(topology::route_bandwidth(p, 0, 8).value(), 4 * 2 * NIC / 2 / 4, 1e-3); // pod uplink: 1 NIC
}

// Graph fabric from YAML: fewest hops (leafA -> spine1 or spine2 -> leafB, both two links; the
// cable latency and the switches traversed add up), bottleneck = the slowest link on the path.
TEST(GraphFabric, ShortestPathRoutes) {
  const ClusterSpec c = config::load_cluster(write_temp("graph.yaml", graph_cluster(GRAPH_FABRIC)));
  ASSERT_EQ(c.fabric.kind, FabricKind::GRAPH);
  ASSERT_EQ(c.fabric.switches.size(), 4u);
  ASSERT_EQ(c.fabric.links.size(), 4u);
  EXPECT_EQ(c.fabric.nic_switch[3], (std::vector<int>{1, 1}));
  const auto p = build(c);
  EXPECT_NEAR(topology::route_latency(p, 0, 2).value(), NIC_LAT + SW, 1e-12); // node 0 -> 1, leafA
  EXPECT_NEAR(topology::route_latency(p, 0, 1).value(), NVL_LAT, 1e-12);
  const double cross = topology::route_latency(p, 0, 4).value();
  // leafA, spine, leafB: three switches, plus 1 us of cable per hop via spine1 or 0 via spine2.
  EXPECT_TRUE(std::abs(cross - (NIC_LAT + 3 * SW + 2e-6)) < 1e-12 ||
              std::abs(cross - (NIC_LAT + 3 * SW)) < 1e-12)
      << cross;
  const double bw = topology::route_bandwidth(p, 0, 4).value();
  EXPECT_TRUE(std::abs(bw - NIC) < 1e-3 || std::abs(bw - 12.5e9) < 1e-3) << bw;
}

// The routed zone breaks a tie between equal-hop switch paths towards the cable listed first:
// leafA -> spine1 -> leafB (1 us per cable, 400 Gb/s) rather than spine2 (100 Gb/s), from every
// GPU on those switches and back; a node's NVSwitch host is reached from its own GPUs only.
TEST(GraphFabric, TiesGoToTheCableListedFirst) {
  const ClusterSpec c = config::load_cluster(write_temp("ties.yaml", graph_cluster(GRAPH_FABRIC)));
  const auto p = build(c);
  for (const auto& [a, b] : {std::pair{0, 4}, std::pair{3, 7}, std::pair{4, 0}, std::pair{6, 1}}) {
    EXPECT_NEAR(topology::route_latency(p, a, b).value(), NIC_LAT + 3 * SW + 2e-6, 1e-12) << a << " -> " << b;
    EXPECT_NEAR(topology::route_bandwidth(p, a, b).value(), NIC, 1e-3) << a << " -> " << b;
  }
  std::vector<simgrid::s4u::Link*> links;
  p.switches.at(2)->route_to(p.gpus.at(5), links, nullptr); // node 2's NVSwitch -> its GPU 1
  EXPECT_EQ(links.size(), 1u);
  links.clear();
  EXPECT_THROW(p.switches.at(0)->route_to(p.gpus.at(4), links, nullptr), SimulationError);
}

// Schema errors name the file position of the offending value.
TEST(GraphFabric, ErrorsNameFileLineColumn) {
  const auto expect_error = [](const std::string& fabric, const std::string& where, const std::string& what) {
    const std::string file = write_temp("bad.yaml", graph_cluster(fabric));
    try {
      config::load_cluster(file);
      ADD_FAILURE() << "no error for " << what;
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(file + ":" + where), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  expect_error("fabric: {kind: graph, switches: [a, b], links: [{between: [a, c], bandwidth: 1GBps}],"
               " attach: [{nodes: [0, 3], switch: a}]}\n",
               "8:", "found 'c'");
  expect_error("fabric:\n  kind: graph\n  switches: [a, a]\n  links: []\n  attach: []\n",
               "10:", "listed twice");
  expect_error("fabric:\n  kind: graph\n  switches: [a, b]\n  links: [{between: [a, b], bandwidth: 1GBps}]\n"
               "  attach: [{nodes: [0, 2], switch: a}]\n",
               "12:", "node 3 is not attached");
  expect_error("fabric:\n  kind: graph\n  switches: [a, b]\n  links: [{between: [a, b], bandwidth: 1GBps}]\n"
               "  attach: [{nodes: [0, 3], rails: [a]}]\n",
               "12:", "one switch per NIC");
  expect_error(
      "fabric:\n  kind: graph\n  switches: [a, b, c]\n  links: [{between: [a, b], bandwidth: 1GBps}]\n"
      "  attach: [{nodes: [0, 1], switch: a}, {nodes: [2, 3], switch: c}]\n",
      "11:", "not connected");
  expect_error("fabric: {kind: fat_tree, switches: [a]}\n", "8:", "only for kind: graph");
  expect_error("fabric: {kind: fat_tree, tiers: 4}\n", "8:", "2 or 3");
  expect_error("fabric: {kind: fat_tree, leaves_per_pod: 4}\n", "8:", "only with tiers: 3");
  expect_error("fabric: {kind: rail_optimized, tiers: 3}\n", "8:", "only for kind: fat_tree");
  // A graph takes its capacities from its links: the fat tree's keys would be ignored, so they are
  // refused; a list of the wrong length says its length; a graph of 5000 switches is over the limit.
  const std::string graph_tail = ", switches: [a, b], links: [{between: [a, b], bandwidth: 1GBps}],"
                                 " attach: [{nodes: [0, 3], switch: a}]}\n";
  expect_error("fabric: {kind: graph, oversubscription: 2" + graph_tail, "8:", "not for kind: graph");
  expect_error("fabric: {kind: graph, nodes_per_leaf: 4" + graph_tail, "8:", "not for kind: graph");
  expect_error("fabric:\n  kind: graph\n  switches: [a, b]\n  links: [{between: [a], bandwidth: 1GBps}]\n"
               "  attach: [{nodes: [0, 3], switch: a}]\n",
               "11:", "expected two switch names, found a list of 1 item");
  std::string many = "fabric:\n  kind: graph\n  switches: [";
  for (int i = 0; i < 5000; ++i)
    many += (i ? ", s" : "s") + std::to_string(i);
  many += "]\n  links: [{between: [s0, s1], bandwidth: 1GBps}]\n  attach: [{nodes: [0, 3], switch: s0}]\n";
  expect_error(many, "10:", "expected at most 4096 switches (the size limit), found 5000");
}

// Three-tier keys parse into FabricSpec.
TEST(ThreeTier, ParsesTierKeys) {
  const ClusterSpec c = config::load_cluster(write_temp(
      "tiers.yaml", graph_cluster("fabric: {kind: fat_tree, nodes_per_leaf: 1, oversubscription: 2, tiers: 3,"
                                  " leaves_per_pod: 2, spine_oversubscription: 1.5}\n")));
  EXPECT_EQ(c.fabric.tiers, 3);
  EXPECT_EQ(c.fabric.leaves_per_pod, 2);
  EXPECT_DOUBLE_EQ(c.fabric.spine_oversubscription, 1.5);
  EXPECT_THROW(
      config::load_cluster(write_temp("t2.yaml", graph_cluster("fabric: {kind: fat_tree, tiers: 3}\n"))),
      ConfigError);
}
