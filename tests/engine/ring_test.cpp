// A single ring all-reduce on one link class (inside one NVSwitch node) against MODEL.md §4:
// time = 2(n-1) alpha + 2(n-1)/n S / beta, alpha = one-way route latency between two GPUs of the
// node (nvswitch.latency), beta = nvswitch.bandwidth x efficiency. Both forms, 1 MiB and 1 GiB.
// One Replay per TEST (gtest_discover_tests runs each in its own process).

#include "collectives/flows.hpp"
#include "common/specs.hpp"
#include "engine/helpers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <tuple>

using namespace stepsim;
using stepsim::CollectiveForm;

namespace {

struct RingCase {
  int n;
  double bytes;
  CollectiveForm form;
};

void PrintTo(const RingCase& c, std::ostream* os) {
  *os << "n=" << c.n << " S=" << c.bytes;
}

std::string name(const testing::TestParamInfo<RingCase>& info) {
  const RingCase& c = info.param;
  return "n" + std::to_string(c.n) + (c.bytes > 1e8 ? "_1GiB" : "_1MiB") +
         (c.form == CollectiveForm::FINE ? "_fine" : "_coarse");
}

class RingAllReduce : public testing::TestWithParam<RingCase> {};

} // namespace

TEST_P(RingAllReduce, MatchesClosedForm) {
  const RingCase c = GetParam();
  const ClusterSpec cluster = stepsim::test::dgx_cluster(1, 8, 8);
  const auto prog = stepsim::test::collectives_program({stepsim::test::iota_ranks(0, c.n)}, Bytes(c.bytes));
  engine::ReplayOptions o;
  o.collective_form = c.form;
  engine::Replay replay(prog, cluster, o);
  const engine::ReplayResult r = replay.run();

  const double alpha = 3e-6, beta = 300e9 * 0.8;
  const double expected = 2 * (c.n - 1) * alpha + 2.0 * (c.n - 1) / c.n * c.bytes / beta;
  EXPECT_NEAR(r.step_time.value(), expected, 0.02 * expected)
      << "simulated " << r.step_time.value() << " s, closed form " << expected << " s";
  // The same closed form, as the collectives module states it.
  EXPECT_NEAR(
      collectives::ring_time(CollectiveOp::ALL_REDUCE, Bytes(c.bytes), c.n, Seconds(alpha), BytesPerSec(beta))
          .value(),
      expected, 1e-12);
  // Flow counts: fine 2(n-1) n, coarse n.
  EXPECT_EQ(r.flows, static_cast<uint64_t>(c.form == CollectiveForm::FINE ? 2 * (c.n - 1) * c.n : c.n));
  ASSERT_EQ(r.start.size(), 1u);
  EXPECT_EQ(r.start[0].value(), 0.0);
  EXPECT_EQ(r.end[0].value(), r.step_time.value());
}

INSTANTIATE_TEST_SUITE_P(
    InNode, RingAllReduce,
    testing::Values(RingCase{2, 1 << 20, CollectiveForm::FINE}, RingCase{2, 1 << 20, CollectiveForm::COARSE},
                    RingCase{4, 1 << 20, CollectiveForm::FINE}, RingCase{4, 1 << 20, CollectiveForm::COARSE},
                    RingCase{8, 1 << 20, CollectiveForm::FINE}, RingCase{8, 1 << 20, CollectiveForm::COARSE},
                    RingCase{2, 1 << 30, CollectiveForm::FINE}, RingCase{2, 1 << 30, CollectiveForm::COARSE},
                    RingCase{4, 1 << 30, CollectiveForm::FINE}, RingCase{4, 1 << 30, CollectiveForm::COARSE},
                    RingCase{8, 1 << 30, CollectiveForm::FINE}, RingCase{8, 1 << 30, CollectiveForm::COARSE}),
    name);

// AUTO picks the coarse form for rings of more than two ranks: n flows.
TEST(RingAuto, CoarseAboveTwoRanks) {
  const ClusterSpec cluster = stepsim::test::dgx_cluster(1, 8, 8);
  const auto prog = stepsim::test::collectives_program({stepsim::test::iota_ranks(0, 8)}, Bytes(1 << 20));
  engine::Replay replay(prog, cluster);
  EXPECT_EQ(replay.run().flows, 8u);
}

// All-gather over n ranks: (n-1) alpha + (n-1)/n S / beta (fine form).
TEST(RingAllGather, MatchesClosedForm) {
  const ClusterSpec cluster = stepsim::test::dgx_cluster(1, 8, 8);
  const double S = 1 << 28;
  const auto prog = stepsim::test::collectives_program({stepsim::test::iota_ranks(0, 8)}, Bytes(S),
                                                       graph::CollectiveOp::ALL_GATHER);
  const double t = stepsim::test::step_time(prog, cluster, CollectiveForm::FINE);
  const double expected = 7 * 3e-6 + 7.0 / 8 * S / 240e9;
  EXPECT_NEAR(t, expected, 0.02 * expected);
}

// A point-to-point send inside a node: alpha + S / beta.
TEST(Send, MatchesClosedForm) {
  const ClusterSpec cluster = stepsim::test::dgx_cluster(1, 8, 8);
  const double S = 1 << 26;
  const auto prog = stepsim::test::collectives_program({{2, 5}}, Bytes(S), graph::CollectiveOp::SEND);
  const double t = stepsim::test::step_time(prog, cluster, CollectiveForm::AUTO);
  EXPECT_NEAR(t, 3e-6 + S / 240e9, 1e-3 * (3e-6 + S / 240e9));
}
