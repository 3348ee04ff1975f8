// Simulated collectives on modelled fabrics (docs/collectives.md): closed forms (tree log-depth
// latency, hierarchical bound by the slower tier, ring busbw -> link x efficiency, 2:1
// oversubscription halving cross-leaf bandwidth), fine vs coarse forms within 2 % (tree, NVLS,
// all-to-all, also under contention), contention between DP groups on an oversubscribed uplink,
// and rail-optimised vs plain fat tree for all-to-all. SimGrid allows one simulation per
// process: every simulation runs in a forked child (tests/common/subprocess.hpp).

#include "bench.hpp"
#include "common/specs.hpp"
#include "common/subprocess.hpp"
#include "config/config.hpp"
#include "engine/helpers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace stepsim;
using collectives::Algorithm;

namespace {

constexpr double MiB = 1024.0 * 1024.0, GiB = 1024.0 * MiB;
constexpr double NIC = 25e9 * 0.96, NVL = 300e9 * 0.8; // test::dgx_cluster's achieved bandwidths
constexpr double NIC_LAT = 4e-6, SW = 0.5e-6;

std::string topo(const char* f) {
  return std::string(STEPSIM_SOURCE_DIR) + "/topologies/" + f;
}

std::vector<graph::Rank> ranks(std::initializer_list<int> nodes, int per_node, int first_local = 0,
                               int count = -1) {
  std::vector<graph::Rank> r;
  for (int n : nodes)
    for (int g = first_local; g < (count < 0 ? per_node : first_local + count); ++g)
      r.push_back(n * per_node + g);
  return r;
}

/// Concurrent collectives (one per group, no edges); returns the step time. Run in a child.
double concurrent(const ClusterSpec& c, graph::CollectiveOp op,
                  const std::vector<std::vector<graph::Rank>>& groups, double bytes, Algorithm algorithm,
                  CollectiveForm form) {
  const graph::StepProgram prog = test::collectives_program(groups, Bytes(bytes), op);
  engine::ReplayOptions o;
  o.collective_form = form;
  o.algorithms = {algorithm, algorithm, algorithm};
  engine::Replay replay(prog, c, o);
  return replay.run().step_time.value();
}

double in_child(const std::function<double()>& fn) {
  const test::ChildResult r = test::run_in_child([&] { return std::vector<double>{fn()}; });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values.at(0) : std::nan("");
}

/// Fine and coarse step times of the same program.
std::pair<double, double> fine_coarse(const ClusterSpec& c, graph::CollectiveOp op,
                                      const std::vector<std::vector<graph::Rank>>& groups, double bytes,
                                      Algorithm a) {
  return {in_child([&] { return concurrent(c, op, groups, bytes, a, CollectiveForm::FINE); }),
          in_child([&] { return concurrent(c, op, groups, bytes, a, CollectiveForm::COARSE); })};
}

/// 4 nodes of 4 GPUs / 4 NICs, 2 nodes per leaf, leaf uplinks 4:1 (2 NICs' worth per leaf).
ClusterSpec oversubscribed() {
  ClusterSpec c = test::dgx_cluster(4, 4, 4);
  c.fabric.nodes_per_leaf = 2;
  c.fabric.oversubscription = 4;
  return c;
}

} // namespace

// Ring busbw at a large size approaches the bottleneck link x efficiency (NVLink, one node).
TEST(ClosedForm, RingBusbwApproachesLinkTimesEfficiency) {
  const double t = in_child([] {
    return concurrent(test::dgx_cluster(1, 8, 8), graph::CollectiveOp::ALL_REDUCE, {ranks({0}, 8)}, 8 * GiB,
                      Algorithm::RING, CollectiveForm::AUTO);
  });
  EXPECT_NEAR(8 * GiB / t * 1.75, NVL, 0.01 * NVL);
}

// 2:1 oversubscription halves cross-leaf bandwidth: every GPU of leaf 0 (nodes 0-7 of
// fat-tree-2to1) sends S to its peer on leaf 1 at NIC/2; inside the leaf at NIC.
TEST(ClosedForm, OversubscriptionTwoToOneHalvesCrossLeaf) {
  const ClusterSpec c = config::load_cluster(topo("fat-tree-2to1.yaml"));
  const double nic = c.nic.bandwidth.value() * c.nic.efficiency, S = 256 * MiB;
  std::vector<std::vector<graph::Rank>> cross, inside;
  for (int g = 0; g < 64; ++g)
    cross.push_back({g, g + 64});
  for (int g = 0; g < 32; ++g)
    inside.push_back({g, g + 32});
  const double t_cross = in_child([&] {
    return concurrent(c, graph::CollectiveOp::SEND, cross, S, Algorithm::RING, CollectiveForm::AUTO);
  });
  const double t_inside = in_child([&] {
    return concurrent(c, graph::CollectiveOp::SEND, inside, S, Algorithm::RING, CollectiveForm::AUTO);
  });
  EXPECT_NEAR(t_inside, S / nic, 0.01 * S / nic);
  EXPECT_NEAR(t_cross, S / (nic / 2), 0.01 * S / (nic / 2));
  EXPECT_NEAR(t_cross / t_inside, 2.0, 0.03);
}

// Double binary tree: latency grows with the depth, log2(nodes), not with the node count: from 4
// to 16 nodes (one GPU each, latency-bound size) the time grows by about 2 levels x (up + down)
// x the inter-node latency, where a ring's would grow by 2 x 12 latencies.
TEST(ClosedForm, TreeLatencyIsLogDepth) {
  const auto t = [](int nodes) {
    return in_child([nodes] {
      ClusterSpec c = test::dgx_cluster(nodes, 1, 1);
      std::vector<graph::Rank> r;
      for (int i = 0; i < nodes; ++i)
        r.push_back(i);
      return concurrent(c, graph::CollectiveOp::ALL_REDUCE, {r}, 64, Algorithm::TREE, CollectiveForm::FINE);
    });
  };
  const double t4 = t(4), t16 = t(16), t64 = t(64);
  const double alpha = NIC_LAT + SW;
  EXPECT_NEAR(t16 - t4, 2 * 2 * alpha, 0.25 * 4 * alpha) << t4 << " " << t16;
  EXPECT_NEAR(t64 - t16, 2 * 2 * alpha, 0.25 * 4 * alpha) << t16 << " " << t64;
  EXPECT_LT(t64 - t4, 2 * 60 * alpha / 4); // far below the ring's linear growth
}

// Hierarchical all-reduce = intra reduce-scatter + rail all-reduce of S/m + intra all-gather: with
// the NICs the slower tier the rail phase dominates; the simulated time matches the closed form.
TEST(ClosedForm, HierarchicalBoundBySlowerTier) {
  const double S = 1 * GiB;
  const int k = 2, m = 8;
  const double intra = (m - 1.0) / m * S / NVL, inter = 2.0 * (k - 1) / k * (S / m) / NIC;
  const double t = in_child([&] {
    return concurrent(test::dgx_cluster(k, m, m), graph::CollectiveOp::ALL_REDUCE, {ranks({0, 1}, 8)}, S,
                      Algorithm::HIERARCHICAL, CollectiveForm::AUTO);
  });
  EXPECT_NEAR(t, 2 * intra + inter, 0.03 * (2 * intra + inter));
  // Ten times faster NVLink barely changes it (bound by the NIC tier) ...
  const double t_fast_nvl = in_child([&] {
    ClusterSpec c = test::dgx_cluster(k, m, m);
    c.nvswitch.bandwidth = BytesPerSec(3000e9);
    return concurrent(c, graph::CollectiveOp::ALL_REDUCE, {ranks({0, 1}, 8)}, S, Algorithm::HIERARCHICAL,
                      CollectiveForm::AUTO);
  });
  EXPECT_NEAR(t_fast_nvl, inter + 2 * intra / 10, 0.03 * t_fast_nvl);
  // ... ten times faster NICs make the NVLink tier the bound.
  const double t_fast_nic = in_child([&] {
    ClusterSpec c = test::dgx_cluster(k, m, m);
    c.nic.bandwidth = BytesPerSec(250e9);
    return concurrent(c, graph::CollectiveOp::ALL_REDUCE, {ranks({0, 1}, 8)}, S, Algorithm::HIERARCHICAL,
                      CollectiveForm::AUTO);
  });
  EXPECT_NEAR(t_fast_nic, 2 * intra + inter / 10, 0.03 * t_fast_nic);
}

// Fine and coarse forms agree within 2 % where both run (docs/collectives.md "Forms").
// Tree, 4 x 8 GPUs, 256 MiB: was coarse 2.99 ms vs fine 2.57 ms (+16 %): the analytic fill charged
// all 2 x depth hops a chunk at the NIC rate (14 of the 18 are NVLink). The coarse tree now
// simulates fill and drain (a head and a last chunk per edge, forwarded after arrival; the body
// streams between them): coarse 2.535 vs fine 2.567 ms (-1.3 %).
TEST(FineVsCoarse, Tree) {
  const auto [fine, coarse] = fine_coarse(test::dgx_cluster(4, 8, 8), graph::CollectiveOp::ALL_REDUCE,
                                          {ranks({0, 1, 2, 3}, 8)}, 256 * MiB, Algorithm::TREE);
  EXPECT_NEAR(coarse, fine, 0.02 * fine);
}

// NVLS, 8 x H100, 1 GiB: was -2.3 % (-15 % at 64 MiB): the coarse tail lacked the per-chunk port
// latency the fine two-stage pipeline pays; both are now nvls_latency + (C+1) (alpha + chunk/beta).
TEST(FineVsCoarse, Nvls) {
  const ClusterSpec c = config::load_cluster(topo("dgx-h100.yaml"));
  for (double S : {64 * MiB, 1 * GiB}) {
    const auto [fine, coarse] =
        fine_coarse(c, graph::CollectiveOp::ALL_REDUCE, {ranks({0}, 8)}, S, Algorithm::NVLS);
    EXPECT_NEAR(coarse, fine, 0.02 * fine) << S;
  }
}

// Pairwise all-to-all, 2 x 8 GPUs, 256 MiB: was fine 28.2 ms vs coarse 5.7 ms. The fine form's
// unsynchronised per-rank chains in flat order (i -> i+k) sent every node-0 rank to rank 8 first,
// then 9, ...: a convoy on one receiver NIC at a time. Now NCCL's node-aware schedule (each
// remote round gives every NIC one send and one receive), sends and receives ordered per rank
// and lane (network / NVLink / PXN hop): both 5.63 ms = 8 x (alpha + 16 MiB / NIC).
TEST(FineVsCoarse, AllToAll) {
  const auto [fine, coarse] = fine_coarse(test::dgx_cluster(2, 8, 8), graph::CollectiveOp::ALL_TO_ALL,
                                          {ranks({0, 1}, 8)}, 256 * MiB, Algorithm::PAIRWISE);
  EXPECT_NEAR(coarse, fine, 0.02 * fine);
  const double closed = 8 * (NIC_LAT + SW + 16 * MiB / NIC);
  EXPECT_NEAR(fine, closed, 0.01 * closed);
}

// Same on rail planes (was fine 27.2 ms vs coarse 5.7 ms): PXN hops run ahead on NVLink.
TEST(FineVsCoarse, AllToAllRailOptimized) {
  ClusterSpec c = test::dgx_cluster(2, 8, 8);
  c.fabric.kind = FabricKind::RAIL_OPTIMIZED;
  const auto [fine, coarse] =
      fine_coarse(c, graph::CollectiveOp::ALL_TO_ALL, {ranks({0, 1}, 8)}, 256 * MiB, Algorithm::PAIRWISE);
  EXPECT_NEAR(coarse, fine, 0.02 * fine);
}

// Under contention: two groups whose traffic shares the 4:1 leaf uplinks (was +2.2 %; -0.05 %).
TEST(FineVsCoarse, TreeUnderContention) {
  const auto [fine, coarse] = fine_coarse(oversubscribed(), graph::CollectiveOp::ALL_REDUCE,
                                          {ranks({0, 2}, 4), ranks({1, 3}, 4)}, 256 * MiB, Algorithm::TREE);
  EXPECT_NEAR(coarse, fine, 0.02 * fine);
}

// Each form against its closed form on one link class.
// Tree over 2 nodes x 1 GPU (NICs only): each tree is one edge, C chunks; each link carries one
// tree's up stream and the other's down stream, so after the first chunk every step moves two
// chunks: T = (C+1) alpha + 2 C chunk/beta = (C+1) alpha + S/beta.
TEST(ClosedForm, TreeFormsOnNics) {
  const double S = 256 * MiB, C = 64, alpha = NIC_LAT + SW;
  const double closed = (C + 1) * alpha + S / NIC;
  const auto [fine, coarse] =
      fine_coarse(test::dgx_cluster(2, 1, 1), graph::CollectiveOp::ALL_REDUCE, {{0, 1}}, S, Algorithm::TREE);
  EXPECT_NEAR(fine, closed, 0.01 * closed);
  EXPECT_NEAR(coarse, closed, 0.01 * closed);
}

// NVLS on one node (port links only): nvls_latency + (C+1) (alpha/2 + chunk/beta), payload
// scaled by nvswitch.efficiency / nvls.efficiency, C = ceil(payload / 1 MiB) up to 64.
TEST(ClosedForm, NvlsFormsOnNvlink) {
  const ClusterSpec c = config::load_cluster(topo("dgx-h100.yaml"));
  const double beta = c.nvswitch.bandwidth.value() * c.nvswitch.efficiency;
  for (double S : {4 * MiB, 1 * GiB}) {
    const double bytes = S * c.nvswitch.efficiency / c.nvls.efficiency;
    const double C = std::min(64.0, std::ceil(bytes / MiB));
    const double closed =
        c.nvls.latency.value() + (C + 1) * (c.nvswitch.latency.value() / 2 + bytes / C / beta);
    const auto [fine, coarse] =
        fine_coarse(c, graph::CollectiveOp::ALL_REDUCE, {ranks({0}, 8)}, S, Algorithm::NVLS);
    EXPECT_NEAR(fine, closed, 0.005 * closed) << S;
    EXPECT_NEAR(coarse, closed, 0.005 * closed) << S;
  }
}

// Pairwise all-to-all over 4 nodes x 1 GPU (NICs only): n-1 rounds of one piece per NIC each way:
// T = (n-1) (alpha + S/n / beta).
TEST(ClosedForm, AllToAllFormsOnNics) {
  const double S = 256 * MiB;
  const double closed = 3 * (NIC_LAT + SW + S / 4 / NIC);
  const auto [fine, coarse] = fine_coarse(test::dgx_cluster(4, 1, 1), graph::CollectiveOp::ALL_TO_ALL,
                                          {{0, 1, 2, 3}}, S, Algorithm::PAIRWISE);
  EXPECT_NEAR(fine, closed, 0.005 * closed);
  EXPECT_NEAR(coarse, closed, 0.005 * closed);
}

TEST(FineVsCoarse, AllToAllUnderContention) {
  const auto [fine, coarse] =
      fine_coarse(oversubscribed(), graph::CollectiveOp::ALL_TO_ALL, {ranks({0, 2}, 4), ranks({1, 3}, 4)},
                  256 * MiB, Algorithm::PAIRWISE);
  EXPECT_NEAR(coarse, fine, 0.02 * fine);
}

// Two DP groups whose all-reduces cross the same oversubscribed uplink slow each other: one GPU
// per node, leaves of 2 nodes with uplinks of NIC/2; group {0,2} alone takes S/(NIC/2); with
// group {1,3} running at the same time, twice that.
TEST(Contention, DpGroupsShareOversubscribedUplink) {
  const auto cluster = [] {
    ClusterSpec c = test::dgx_cluster(4, 1, 1);
    c.fabric.nodes_per_leaf = 2;
    c.fabric.oversubscription = 4;
    return c;
  };
  const double S = 256 * MiB;
  const double alone = in_child([&] {
    return concurrent(cluster(), graph::CollectiveOp::ALL_REDUCE, {{0, 2}}, S, Algorithm::RING,
                      CollectiveForm::AUTO);
  });
  const double both = in_child([&] {
    return concurrent(cluster(), graph::CollectiveOp::ALL_REDUCE, {{0, 2}, {1, 3}}, S, Algorithm::RING,
                      CollectiveForm::AUTO);
  });
  EXPECT_NEAR(alone, S / (NIC / 2), 0.02 * S / (NIC / 2));
  EXPECT_NEAR(both / alone, 2.0, 0.05);
  // Inside one leaf they do not interfere.
  const double same_leaf = in_child([&] {
    return concurrent(cluster(), graph::CollectiveOp::ALL_REDUCE, {{0, 1}, {2, 3}}, S, Algorithm::RING,
                      CollectiveForm::AUTO);
  });
  EXPECT_NEAR(same_leaf, S / NIC, 0.02 * S / NIC);
}

// All-to-all across two nodes behind 4:1 uplinks: on a plain fat tree (one leaf per node) every
// byte leaving a node crosses its leaf's uplink; rail-optimised (NIC k of both nodes on leaf k,
// PXN keeping pieces on their rail) never leaves the rail leaves: several times faster.
TEST(Contention, RailOptimizedVsFatTreeAllToAll) {
  const auto run = [](FabricKind kind, int per_leaf) {
    return in_child([=] {
      ClusterSpec c = test::dgx_cluster(2, 8, 8);
      c.fabric.kind = kind;
      c.fabric.nodes_per_leaf = per_leaf;
      c.fabric.oversubscription = 4;
      return concurrent(c, graph::CollectiveOp::ALL_TO_ALL, {ranks({0, 1}, 8)}, 1 * GiB, Algorithm::PAIRWISE,
                        CollectiveForm::AUTO);
    });
  };
  const double fat = run(FabricKind::FAT_TREE, 1), rail = run(FabricKind::RAIL_OPTIMIZED, 2);
  EXPECT_GT(fat / rail, 2.0) << fat << " " << rail;
}
