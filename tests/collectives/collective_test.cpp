// Pure unit tests of collectives/collective.cpp (no SimGrid): bus_factor, channels, applicable,
// estimate (closed forms, the tree's log-depth latency term), choose, names, expand's checks.

#include "collectives/collective.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace stepsim;
using namespace stepsim::collectives;

namespace {

constexpr double AI = 3e-6, AX = 8e-6;  // intra / inter-node one-way latency
constexpr double BI = 240e9, BX = 24e9; // NVLink per GPU / one NIC

/// A view of nodes of `per_node` GPUs with `nics` NICs each: latency and bandwidth by node.
TopologyView view_of(int per_node, int nics, bool nvls = false) {
  TopologyView v;
  v.gpus_per_node = per_node;
  v.nics_per_node = nics;
  v.nvls = nvls;
  v.nvls_latency = Seconds(18e-6);
  v.nvls_payload_scale = 0.8 / 0.62;
  v.latency = [per_node](int32_t a, int32_t b) { return Seconds(a / per_node == b / per_node ? AI : AX); };
  v.bandwidth = [per_node](int32_t a, int32_t b) {
    return BytesPerSec(a / per_node == b / per_node ? BI : BX);
  };
  return v;
}

std::vector<int32_t> first(int n) {
  std::vector<int32_t> g;
  for (int i = 0; i < n; ++i)
    g.push_back(i);
  return g;
}

/// GPU `local` of nodes 0..nodes-1.
std::vector<int32_t> one_per_node(int nodes, int per_node, int local = 0) {
  std::vector<int32_t> g;
  for (int i = 0; i < nodes; ++i)
    g.push_back(i * per_node + local);
  return g;
}

} // namespace

// nccl-tests: all-reduce 2(n-1)/n, all-gather / reduce-scatter / all-to-all (n-1)/n, else 1.
TEST(Collective, BusFactor) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::ALL_REDUCE, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::ALL_GATHER, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::REDUCE_SCATTER, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::ALL_TO_ALL, 2), 0.5);
  for (CollectiveOp op : {CollectiveOp::BROADCAST, CollectiveOp::REDUCE, CollectiveOp::SEND})
    EXPECT_DOUBLE_EQ(bus_factor(op, 16), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::ALL_REDUCE, 1), 1.0);
}

// One ring per NIC the group uses on every node; 1 inside one node or with one GPU per node.
TEST(Collective, Channels) {
  const TopologyView v8 = view_of(8, 8), v4 = view_of(8, 4);
  EXPECT_EQ(channels(first(8), v8), 1);
  EXPECT_EQ(channels(first(16), v8), 8);
  EXPECT_EQ(channels(first(16), v4), 4);
  EXPECT_EQ(channels(one_per_node(4, 8), v8), 1);
  const std::vector<int32_t> two_each{0, 1, 8, 9}; // GPUs 0,1 on NICs 0,1 (8 NICs) / NIC 0 (4 NICs)
  EXPECT_EQ(channels(two_each, v8), 2);
  EXPECT_EQ(channels(two_each, v4), 1);
}

TEST(Collective, Applicable) {
  const TopologyView v = view_of(8, 8, true), plain = view_of(8, 8, false);
  EXPECT_TRUE(applicable(CollectiveOp::ALL_REDUCE, Algorithm::NVLS, first(8), v));
  EXPECT_FALSE(applicable(CollectiveOp::ALL_REDUCE, Algorithm::NVLS, first(8), plain)); // no NVLS hardware
  EXPECT_FALSE(applicable(CollectiveOp::ALL_REDUCE, Algorithm::NVLS, first(16), v)); // only inside one node
  EXPECT_FALSE(applicable(CollectiveOp::ALL_GATHER, Algorithm::NVLS, first(8), v));  // all-reduce only
  EXPECT_TRUE(applicable(CollectiveOp::ALL_REDUCE, Algorithm::HIERARCHICAL, first(16), v));
  EXPECT_FALSE(applicable(CollectiveOp::ALL_REDUCE, Algorithm::HIERARCHICAL, first(8), v)); // one node
  EXPECT_FALSE(
      applicable(CollectiveOp::ALL_REDUCE, Algorithm::HIERARCHICAL, first(12), v)); // 8 + 4: not uniform
  EXPECT_FALSE(applicable(CollectiveOp::ALL_REDUCE, Algorithm::HIERARCHICAL, one_per_node(4, 8),
                          v)); // one GPU per node
  EXPECT_TRUE(applicable(CollectiveOp::ALL_REDUCE, Algorithm::TREE, first(16), v));
  EXPECT_FALSE(applicable(CollectiveOp::ALL_GATHER, Algorithm::TREE, first(16), v));
  EXPECT_TRUE(applicable(CollectiveOp::ALL_TO_ALL, Algorithm::PAIRWISE, first(16), v));
  EXPECT_FALSE(applicable(CollectiveOp::ALL_TO_ALL, Algorithm::RING, first(16), v));
  EXPECT_FALSE(applicable(CollectiveOp::ALL_REDUCE, Algorithm::PAIRWISE, first(16), v));
  for (CollectiveOp op : {CollectiveOp::ALL_GATHER, CollectiveOp::REDUCE_SCATTER, CollectiveOp::BROADCAST,
                          CollectiveOp::REDUCE})
    EXPECT_TRUE(applicable(op, Algorithm::RING, first(16), v));
  EXPECT_TRUE(applicable(CollectiveOp::SEND, Algorithm::RING, first(2), v));
  EXPECT_TRUE(applicable(CollectiveOp::ALL_REDUCE, Algorithm::AUTO, first(16), v));
}

// Ring inside one node: exactly the ring closed form 2(n-1) a + 2(n-1)/n S / b.
TEST(Collective, EstimateRingInsideNode) {
  const TopologyView v = view_of(8, 8);
  const double S = 1 << 30;
  EXPECT_NEAR(estimate(CollectiveOp::ALL_REDUCE, Algorithm::RING, first(8), Bytes(S), v).value(),
              ring_time(CollectiveOp::ALL_REDUCE, Bytes(S), 8, Seconds(AI), BytesPerSec(BI)).value(), 1e-12);
  EXPECT_NEAR(estimate(CollectiveOp::ALL_GATHER, Algorithm::RING, first(8), Bytes(S), v).value(),
              ring_time(CollectiveOp::ALL_GATHER, Bytes(S), 8, Seconds(AI), BytesPerSec(BI)).value(), 1e-12);
  EXPECT_EQ(estimate(CollectiveOp::ALL_REDUCE, Algorithm::RING, first(1), Bytes(S), v).value(), 0.0);
  EXPECT_EQ(estimate(CollectiveOp::ALL_REDUCE, Algorithm::RING, first(8), Bytes(0), v).value(), 0.0);
}

// Tree: latency 2 (floor(log2 N) a_inter + (m-1) a_intra): doubling the nodes adds 2 a_inter,
// where the ring's latency term grows linearly (2(n-1) a); bandwidth 0.92 of the ring's links, as
// NCCL's tuner rates it.
TEST(Collective, EstimateTreeLogDepthLatency) {
  const TopologyView v = view_of(1, 1);
  const double S = 8; // latency-bound
  const auto tree = [&](int nodes) {
    return estimate(CollectiveOp::ALL_REDUCE, Algorithm::TREE, first(nodes), Bytes(S), v).value();
  };
  const auto ring = [&](int nodes) {
    return estimate(CollectiveOp::ALL_REDUCE, Algorithm::RING, first(nodes), Bytes(S), v).value();
  };
  for (int nodes : {4, 16, 64, 256}) {
    EXPECT_NEAR(tree(2 * nodes) - tree(nodes), 2 * AX, 1e-12) << nodes;
    EXPECT_NEAR(tree(nodes), 2 * std::log2(nodes) * AX + 2 * S / (0.92 * BX), 1e-12) << nodes;
    EXPECT_NEAR(ring(nodes), 2 * (nodes - 1) * AX + 2.0 * (nodes - 1) / nodes * S / BX, 1e-12) << nodes;
  }
}

// Hierarchical: 2 intra phases (m-1)/m S / b_intra + a rail all-reduce of S/m over k nodes; with a
// slow NVLink the intra phases bound it, with slow NICs the rail phase does.
TEST(Collective, EstimateHierarchicalSlowerTier) {
  const TopologyView v = view_of(8, 8);
  const double S = 8.0 * (1 << 30);
  const int k = 4, m = 8;
  const double intra = (m - 1) * AI + (m - 1.0) / m * S / BI;
  const double inter = 2.0 * (k - 1) * AX + 2.0 * (k - 1) / k * (S / m) / BX;
  EXPECT_NEAR(estimate(CollectiveOp::ALL_REDUCE, Algorithm::HIERARCHICAL, first(k * m), Bytes(S), v).value(),
              2 * intra + inter, 1e-9);
  EXPECT_GT(inter, 2 * intra); // NIC tier (24 GB/s per rail) is the slower one here
}

// AUTO picks the cheapest: NVLS for a large in-node all-reduce when present, tree for a tiny
// all-reduce over many nodes, ring for a large one; all-to-all is always pairwise; never an
// algorithm that does not apply.
TEST(Collective, Choose) {
  const TopologyView v = view_of(8, 8, true), plain = view_of(8, 8);
  EXPECT_EQ(choose(CollectiveOp::ALL_REDUCE, first(8), Bytes(1 << 30), v), Algorithm::NVLS);
  EXPECT_EQ(choose(CollectiveOp::ALL_REDUCE, first(8), Bytes(1 << 30), plain), Algorithm::RING);
  EXPECT_EQ(choose(CollectiveOp::ALL_REDUCE, one_per_node(64, 8), Bytes(1024), plain), Algorithm::TREE);
  EXPECT_EQ(choose(CollectiveOp::ALL_REDUCE, one_per_node(4, 8), Bytes(1 << 30), plain), Algorithm::RING);
  // Over 128 nodes (a DP group of one GPU per node) the tree's 8 % less bandwidth outweighs the
  // ring's 254 latency steps from about 243 MB on (8 us, 24 GB/s): a 64 MiB gradient bucket takes
  // the tree, an 800 MB one the ring, as NCCL's tuner decides.
  EXPECT_EQ(choose(CollectiveOp::ALL_REDUCE, one_per_node(128, 8), Bytes(64 << 20), plain), Algorithm::TREE);
  EXPECT_EQ(choose(CollectiveOp::ALL_REDUCE, one_per_node(128, 8), Bytes(800e6), plain), Algorithm::RING);
  EXPECT_EQ(choose(CollectiveOp::ALL_TO_ALL, first(16), Bytes(1 << 20), v), Algorithm::PAIRWISE);
  EXPECT_EQ(choose(CollectiveOp::ALL_GATHER, first(16), Bytes(1 << 20), v), Algorithm::RING);
  for (double size : {1e3, 1e6, 1e9})
    for (int n : {8, 16, 12, 64}) {
      const Algorithm a = choose(CollectiveOp::ALL_REDUCE, first(n), Bytes(size), v);
      EXPECT_TRUE(applicable(CollectiveOp::ALL_REDUCE, a, first(n), v)) << n << " " << size;
      for (Algorithm b : {Algorithm::RING, Algorithm::TREE, Algorithm::HIERARCHICAL, Algorithm::NVLS}) {
        if (applicable(CollectiveOp::ALL_REDUCE, b, first(n), v)) {
          EXPECT_LE(estimate(CollectiveOp::ALL_REDUCE, a, first(n), Bytes(size), v).value(),
                    estimate(CollectiveOp::ALL_REDUCE, b, first(n), Bytes(size), v).value());
        }
      }
    }
}

TEST(Collective, Names) {
  for (Algorithm a : {Algorithm::AUTO, Algorithm::RING, Algorithm::TREE, Algorithm::HIERARCHICAL,
                      Algorithm::NVLS, Algorithm::PAIRWISE})
    EXPECT_EQ(parse_algorithm(to_string(a)), a);
  for (CollectiveOp op :
       {CollectiveOp::ALL_REDUCE, CollectiveOp::ALL_GATHER, CollectiveOp::REDUCE_SCATTER, CollectiveOp::SEND,
        CollectiveOp::BROADCAST, CollectiveOp::REDUCE, CollectiveOp::ALL_TO_ALL})
    EXPECT_EQ(collective_op_by_name(to_string(op)), op);
  EXPECT_THROW(parse_algorithm("Ring"), ConfigError);
  EXPECT_THROW((void)collective_op_by_name("allreduce"), ConfigError);
}

// expand: an algorithm that does not apply throws; forms keep every rank's byte volume.
TEST(Collective, ExpandChecksAndVolumes) {
  const TopologyView v = view_of(8, 8, true);
  EXPECT_THROW(
      expand(CollectiveOp::ALL_REDUCE, first(16), Bytes(1e6), Algorithm::NVLS, CollectiveForm::FINE, v),
      SimulationError);
  EXPECT_THROW(
      expand(CollectiveOp::ALL_GATHER, first(16), Bytes(1e6), Algorithm::TREE, CollectiveForm::FINE, v),
      SimulationError);
  EXPECT_TRUE(expand(CollectiveOp::ALL_REDUCE, first(1), Bytes(1e6), Algorithm::AUTO, CollectiveForm::FINE, v)
                  .flows.empty());
  const double S = 64e6;
  for (Algorithm a : {Algorithm::RING, Algorithm::TREE, Algorithm::HIERARCHICAL}) {
    double fine = 0, coarse = 0;
    for (const Flow& f :
         expand(CollectiveOp::ALL_REDUCE, first(16), Bytes(S), a, CollectiveForm::FINE, v).flows)
      fine += f.bytes;
    for (const Flow& f :
         expand(CollectiveOp::ALL_REDUCE, first(16), Bytes(S), a, CollectiveForm::COARSE, v).flows)
      coarse += f.bytes;
    EXPECT_NEAR(fine, coarse, 1e-6 * fine) << to_string(a);
  }
  // Pairwise all-to-all without PXN: every rank sends (n-1)/n S.
  const TopologyView flat = view_of(8, 8);
  double sent = 0;
  for (const Flow& f :
       expand(CollectiveOp::ALL_TO_ALL, first(16), Bytes(S), Algorithm::PAIRWISE, CollectiveForm::FINE, flat)
           .flows)
    if (f.src == 3)
      sent += f.bytes;
  EXPECT_NEAR(sent, 15.0 / 16 * S, 1e-6 * S);
}

// A deduplicating expert dispatcher (DeepEP / HybridEP) sends a token once to each remote node
// holding one of its experts. With E = 16 experts over 2 nodes (8 each) and top-2 routing a token
// reaches the other node with P = 1 - (8/16)(7/15) = 23/30, against 2/2 = 1 routed copy there:
// cross-node bytes x 23/30. Intra-node pieces, and a group inside one node, are unchanged; the
// coarse and fine forms move the same bytes.
TEST(Collective, DeduplicatedAllToAllShrinksCrossNodeBytes) {
  const NodeDeduplication d{.experts = 16, .top_k = 2};
  EXPECT_DOUBLE_EQ(remote_copy_share(d, 2), 23.0 / 30.0);
  EXPECT_DOUBLE_EQ(remote_copy_share(d, 1), 1.0);
  EXPECT_DOUBLE_EQ(remote_copy_share({}, 4), 1.0);
  // Top-1: every copy goes to a different token's node, nothing to deduplicate.
  EXPECT_DOUBLE_EQ(remote_copy_share({.experts = 16, .top_k = 1}, 4), 1.0);
  // Group-limited routing, one group per node: 16 experts in 4 groups of 4, top-2 from 2 groups.
  // A node is among a token's 2 groups with P 2/4, then holds one of its 2 experts (drawn from
  // the 8 of the chosen groups) with P 1 - (4/8)(3/7) = 11/14: P = 11/28 per token, against
  // 2/4 routed copies: 11/14.
  EXPECT_DOUBLE_EQ(remote_copy_share({.experts = 16, .top_k = 2, .groups = 4, .group_top_k = 2}, 4),
                   11.0 / 14.0);
  // Groups that are not the nodes: the limit is not counted.
  EXPECT_DOUBLE_EQ(remote_copy_share({.experts = 16, .top_k = 2, .groups = 8, .group_top_k = 2}, 2),
                   23.0 / 30.0);
  const TopologyView v = view_of(4, 4);
  const Bytes size(8.0e6); // per rank; 1e6 to each of the 8 peers
  for (CollectiveForm form : {CollectiveForm::COARSE, CollectiveForm::FINE}) {
    double plain_remote = 0, plain_local = 0, dedup_remote = 0, dedup_local = 0;
    for (int k = 0; k < 2; ++k) {
      const FlowProgram p = expand(CollectiveOp::ALL_TO_ALL, first(8), size, Algorithm::PAIRWISE, form, v,
                                   k ? d : NodeDeduplication{});
      for (const Flow& f : p.flows) {
        const bool remote = v.node_of(f.src) != v.node_of(f.dst);
        (k ? (remote ? dedup_remote : dedup_local) : (remote ? plain_remote : plain_local)) += f.bytes;
      }
    }
    EXPECT_NEAR(plain_remote, 8 * 4 * 1.0e6, 1.0) << static_cast<int>(form); // 8 ranks x 4 remote peers
    EXPECT_NEAR(dedup_remote, plain_remote * 23.0 / 30.0, 1.0) << static_cast<int>(form);
    EXPECT_NEAR(dedup_local, plain_local, 1.0) << static_cast<int>(form);
  }
  const FlowProgram in_node =
      expand(CollectiveOp::ALL_TO_ALL, first(4), size, Algorithm::PAIRWISE, CollectiveForm::COARSE, v, d);
  double bytes = 0;
  for (const Flow& f : in_node.flows)
    bytes += f.bytes;
  EXPECT_NEAR(bytes, 4 * 3 * 2.0e6, 1.0);
}
