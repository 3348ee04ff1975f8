// Simulations compared with each other or with the closed form across node boundaries. Each
// simulation runs in a forked child (one SimGrid simulation per process).

#include "common/specs.hpp"
#include "common/subprocess.hpp"
#include "engine/helpers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace stepsim;
using stepsim::CollectiveForm;
using stepsim::test::collectives_program;
using stepsim::test::iota_ranks;
using stepsim::test::run_in_child;

namespace {

using Groups = std::vector<std::vector<graph::Rank>>;

/// Step time of the collectives `groups` on `cluster`, simulated in a child process.
double simulate(const ClusterSpec& cluster, const Groups& groups, double bytes, CollectiveForm form) {
  const auto r = run_in_child([&] {
    const auto prog = collectives_program(groups, Bytes(bytes));
    return std::vector<double>{stepsim::test::step_time(prog, cluster, form)};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok && r.values.size() == 1 ? r.values[0] : NAN;
}

double ring(int n, double alpha, double beta, double S) {
  return 2 * (n - 1) * alpha + 2.0 * (n - 1) / n * S / beta;
}

constexpr double NVL_BETA = 300e9 * 0.8, NVL_ALPHA = 3e-6;
constexpr double NIC_BETA = 25e9 * 0.96;
constexpr double SWITCH = 0.5e-6;
constexpr double NIC_ALPHA = 4e-6 + SWITCH; // NIC latency end to end plus the leaf switch

} // namespace

// Fine (2(n-1) n ordered flows) and coarse (n flows + analytic latency) agree within 2 % for
// n = 8 inside a node, at a latency-bound and a bandwidth-bound size.
TEST(FineVsCoarse, EightGpusInNode) {
  const ClusterSpec c = stepsim::test::dgx_cluster(1, 8, 8);
  for (double S : {double(1 << 20), double(64 << 20)}) {
    const double fine = simulate(c, {iota_ranks(0, 8)}, S, CollectiveForm::FINE);
    const double coarse = simulate(c, {iota_ranks(0, 8)}, S, CollectiveForm::COARSE);
    EXPECT_NEAR(coarse, fine, 0.02 * fine) << "S=" << S;
  }
}

// n = 16 over two nodes of 8 with 8 NICs each: NCCL builds one ring (channel) per NIC, each
// carrying S/8 and crossing the node boundary through its own NIC. Fine and coarse agree within
// 2 %, and both follow the ring formula per channel with the inter-node edge's alpha and beta:
// 2(n-1)*alpha + 2(n-1)/n*(S/8)/beta (NIC-limited).
TEST(FineVsCoarse, SixteenGpusOverTwoNodes) {
  const ClusterSpec c = stepsim::test::dgx_cluster(2, 8, 8);
  const double S = 64 << 20;
  const double fine = simulate(c, {iota_ranks(0, 16)}, S, CollectiveForm::FINE);
  const double coarse = simulate(c, {iota_ranks(0, 16)}, S, CollectiveForm::COARSE);
  EXPECT_NEAR(coarse, fine, 0.02 * fine);
  const double expected = ring(16, NIC_ALPHA, NIC_BETA, S / 8);
  EXPECT_NEAR(fine, expected, 0.02 * expected);
}

// Under contention: two concurrent 8-rank all-reduces, each spanning both nodes (4 GPUs on each),
// with one NIC per node, so every NIC link carries one flow of each ring. Fine and coarse agree
// within 2 %, and both match the ring formula at half the NIC bandwidth.
TEST(FineVsCoarse, TwoAllReducesSharingNics) {
  const ClusterSpec c = stepsim::test::dgx_cluster(2, 8, 1);
  const Groups groups{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}};
  const double S = 64 << 20;
  const double fine = simulate(c, groups, S, CollectiveForm::FINE);
  const double coarse = simulate(c, groups, S, CollectiveForm::COARSE);
  EXPECT_NEAR(coarse, fine, 0.02 * fine);
  const double expected = ring(8, NIC_ALPHA, NIC_BETA / 2, S);
  EXPECT_NEAR(fine, expected, 0.02 * expected);
  // And one of them alone is twice as fast (bandwidth-bound): the sharing is real.
  const double alone = simulate(c, {groups[0]}, S, CollectiveForm::FINE);
  EXPECT_NEAR(alone, ring(8, NIC_ALPHA, NIC_BETA, S), 0.02 * alone);
}

// An all-reduce over 8 GPUs, 4 on each of two nodes, is limited by the NIC, not NVLink: time
// follows the ring formula with beta = NIC bandwidth x efficiency and the inter-node alpha, in
// both forms, and is far slower (NVLink/NIC = 10x here) than the same ring inside one node.
TEST(NicLimited, FourGpusOnEachOfTwoNodes) {
  // One NIC per node: a single ring channel (with 4 NICs NCCL-like channels would use all 4).
  const ClusterSpec two = stepsim::test::dgx_cluster(2, 4, 1);
  const ClusterSpec one = stepsim::test::dgx_cluster(1, 8, 8);
  const double S = 256 << 20;
  const double expected = ring(8, NIC_ALPHA, NIC_BETA, S);
  for (CollectiveForm form : {CollectiveForm::FINE, CollectiveForm::COARSE}) {
    const double across = simulate(two, {iota_ranks(0, 8)}, S, form);
    EXPECT_NEAR(across, expected, 0.02 * expected);
    const double inside = simulate(one, {iota_ranks(0, 8)}, S, form);
    EXPECT_NEAR(inside, ring(8, NVL_ALPHA, NVL_BETA, S), 0.02 * inside);
    EXPECT_GT(across, 5 * inside);
  }
}

// One GPU per node, 8 nodes under one leaf: the ring formula with NIC alpha and beta.
TEST(NicLimited, OneGpuPerNode) {
  const ClusterSpec c = stepsim::test::dgx_cluster(8, 1, 1);
  const double S = 64 << 20;
  const double expected = ring(8, NIC_ALPHA, NIC_BETA, S);
  EXPECT_NEAR(simulate(c, {iota_ranks(0, 8)}, S, CollectiveForm::FINE), expected, 0.02 * expected);
}

// Two-tier fat tree (4 nodes per leaf, 8 nodes, one GPU and NIC each). A route between leaves
// still leaves through the sender's NIC and enters through the receiver's (docs/engine.md), so a
// send across leaves is NIC-bound: alpha + S / (NIC bandwidth x efficiency).
TEST(TwoTier, SendAcrossLeavesIsNicBound) {
  ClusterSpec c = stepsim::test::dgx_cluster(8, 1, 1);
  c.fabric.nodes_per_leaf = 4;
  const double S = 64 << 20;
  const auto r = run_in_child([&] {
    const auto prog = collectives_program({{3, 4}}, Bytes(S), graph::CollectiveOp::SEND);
    return std::vector<double>{stepsim::test::step_time(prog, c, CollectiveForm::AUTO)};
  });
  ASSERT_TRUE(r.ok) << r.error;
  const double expected = S / NIC_BETA; // latency (~10 us) is < 0.5 % of it
  EXPECT_NEAR(r.values[0], expected, 0.02 * expected);
}

// Two-tier latency: switch_latency is added per switch traversed (docs/schema.md). Between leaves
// a route crosses leaf, spine and leaf: alpha = NIC latency + 3 x switch latency, against NIC
// latency + 1 x switch inside a leaf. Ring 0..7: edges 3->4
// and 7->0 cross leaves and, being the slowest, set every step of the fine form:
// 14 x (alpha + S/(8 beta)).
TEST(TwoTier, RingLatencyAcrossLeaves) {
  ClusterSpec c = stepsim::test::dgx_cluster(8, 1, 1);
  c.fabric.nodes_per_leaf = 4;
  c.fabric.switch_latency = Seconds(5e-6); // make the switch term visible
  const double S = 1 << 20;
  const double expected = ring(8, 4e-6 + 3 * 5e-6, NIC_BETA, S);
  EXPECT_NEAR(simulate(c, {iota_ranks(0, 8)}, S, CollectiveForm::FINE), expected, 0.02 * expected);
}

// Oversubscription: each leaf's spine uplink carries (nodes under it x NICs x NIC bandwidth) /
// oversubscription. Four simultaneous sends from leaf 0 to leaf 1 with oversubscription 4 share
// one NIC's worth of uplink: each takes S / (NIC beta / 4).
TEST(TwoTier, OversubscribedUplinkIsShared) {
  ClusterSpec c = stepsim::test::dgx_cluster(8, 1, 1);
  c.fabric.nodes_per_leaf = 4;
  c.fabric.oversubscription = 4.0;
  const double S = 16 << 20;
  const auto r = run_in_child([&] {
    graph::StepProgram prog;
    for (graph::Rank i = 0; i < 4; ++i) {
      graph::Task t;
      t.group = graph::CommGroup::PP;
      t.op = graph::CollectiveOp::SEND;
      t.bytes = Bytes(S);
      t.rank = i;
      const graph::Rank pair[2] = {i, i + 4};
      prog.graph.add_collective(t, pair);
    }
    prog.graph.finalize();
    prog.simulated_ranks = iota_ranks(0, 8);
    prog.grid = graph::RankGrid{8, 1, 1};
    return std::vector<double>{stepsim::test::step_time(prog, c, CollectiveForm::AUTO)};
  });
  ASSERT_TRUE(r.ok) << r.error;
  const double expected = S / (NIC_BETA / 4);
  EXPECT_NEAR(r.values[0], expected, 0.02 * expected);
}
