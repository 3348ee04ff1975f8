// The builder's stream-order rule (graph/rank_streams.hpp) and the keys of the DP collectives the
// simulated replicas share (graph/collective_key.hpp).

#include "graph/collective_key.hpp"
#include "graph/rank_streams.hpp"

#include <gtest/gtest.h>

#include <map>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;
using namespace stepsim::graph::detail;

namespace {

Task compute(Rank r) {
  Task t;
  t.rank = r;
  t.duration = Seconds(1e-3);
  return t;
}

std::vector<TaskId> preds(const StepGraph& g, TaskId id) {
  const auto p = g.predecessors(id);
  return {p.begin(), p.end()};
}

} // namespace

// Rank 0 issues compute a, a collective c it is told to wait for, then compute b and d; rank 1
// issues compute e. Expected: b follows a and c (the wait is then cleared), d follows b only, e
// follows nothing (streams are per rank); the pass overhead is charged to b alone.
TEST(RankStreams, ComputeFollowsItsStreamAndThePendingCollective) {
  StepGraph g;
  RankStreams streams(g, 2);
  const TaskId a = streams.add_compute(compute(0));
  Task coll;
  coll.kind = TaskKind::COLLECTIVE;
  const TaskId c = g.add_collective(coll, std::vector<Rank>{0, 1});
  streams[0].pending_wait = c;
  streams[0].pass_overhead = Seconds(5e-3);
  const TaskId b = streams.add_compute(compute(0));
  const TaskId d = streams.add_compute(compute(0));
  const TaskId e = streams.add_compute(compute(1));
  g.finalize();
  EXPECT_EQ(preds(g, b), (std::vector<TaskId>{a, c}));
  EXPECT_EQ(preds(g, d), (std::vector<TaskId>{b}));
  EXPECT_TRUE(preds(g, e).empty());
  EXPECT_EQ(streams[0].pending_wait, NO_TASK);
  EXPECT_EQ(streams[0].last_compute, d);
  EXPECT_DOUBLE_EQ(g.task(b).duration.value(), 6e-3);
  EXPECT_DOUBLE_EQ(g.task(d).duration.value(), 1e-3);
}

// Two tasks issued on rank 0's DP stream and one on its EP stream: the second DP task follows
// the first; the EP stream is a stream of its own.
TEST(RankStreams, CommunicationStreamsChainInIssueOrder) {
  StepGraph g;
  RankStreams streams(g, 1);
  Task coll;
  coll.kind = TaskKind::COLLECTIVE;
  const std::vector<Rank> one{0};
  const TaskId x = g.add_collective(coll, one);
  const TaskId y = g.add_collective(coll, one);
  const TaskId z = g.add_collective(coll, one);
  streams.chain_dp(0, x);
  streams.chain_ep(0, z);
  streams.chain_dp(0, y);
  g.finalize();
  EXPECT_EQ(preds(g, y), (std::vector<TaskId>{x}));
  EXPECT_TRUE(preds(g, z).empty());
  EXPECT_EQ(streams[0].dp_chain, y);
  EXPECT_EQ(streams[0].ep_chain, z);
}

// Keys that differ in any field name different collectives; equal keys the same one.
TEST(CollectiveKey, EveryFieldTellsCollectivesApart) {
  const CollectiveKey base{
      .group = {1, 2}, .purpose = CollectivePurpose::ZERO3_GATHER, .pass = 3, .layer = 4, .call = 0};
  std::map<CollectiveKey, int> seen{{base, 0}};
  CollectiveKey k = base;
  EXPECT_EQ(seen.count(k), 1u);
  k.call = 1;
  EXPECT_EQ(seen.count(k), 0u);
  k = base;
  k.purpose = CollectivePurpose::ZERO3_REDUCE;
  EXPECT_EQ(seen.count(k), 0u);
  k = base;
  k.group.tp = 0;
  EXPECT_EQ(seen.count(k), 0u);
  k = base;
  k.pass = 2;
  EXPECT_NE(k, base);
  EXPECT_LT(k, base);
}
