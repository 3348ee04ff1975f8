// StepGraph: compressed adjacency, participants, cycle rejection.

#include "core/error.hpp"
#include "graph/step_graph.hpp"

#include <gtest/gtest.h>

#include <vector>

using namespace stepsim;
using namespace stepsim::graph;

namespace {
Task compute(Rank r) {
  Task t;
  t.rank = r;
  t.duration = Seconds(1e-3);
  return t;
}
} // namespace

// Edges become successor/predecessor lists; duplicates collapse; collectives keep their ranks
// in ring order.
TEST(StepGraph, AdjacencyAndParticipants) {
  StepGraph g;
  const TaskId a = g.add_task(compute(0));
  const TaskId b = g.add_task(compute(1));
  const std::vector<Rank> ring{3, 1, 2};
  Task c;
  c.bytes = Bytes(100);
  const TaskId coll = g.add_collective(c, ring);
  g.add_edge(a, coll);
  g.add_edge(b, coll);
  g.add_edge(a, coll); // duplicate
  g.finalize();
  EXPECT_TRUE(g.finalized());
  EXPECT_EQ(g.size(), 3u);
  EXPECT_EQ(g.task(coll).kind, TaskKind::COLLECTIVE);
  const auto parts = g.participants(g.task(coll));
  EXPECT_EQ(std::vector<Rank>(parts.begin(), parts.end()), ring);
  EXPECT_EQ(g.successors(a).size(), 1u);
  EXPECT_EQ(g.successors(a)[0], coll);
  EXPECT_EQ(g.predecessors(coll).size(), 2u);
  EXPECT_EQ(g.predecessors(a).size(), 0u);
  EXPECT_EQ(g.successors(coll).size(), 0u);
}

// finalize() runs Kahn's algorithm: a cycle (here a -> b -> c -> a) is a SimulationError.
TEST(StepGraph, FinalizeRejectsCycles) {
  StepGraph g;
  const TaskId a = g.add_task(compute(0));
  const TaskId b = g.add_task(compute(0));
  const TaskId c = g.add_task(compute(0));
  const TaskId d = g.add_task(compute(0));
  g.add_edge(d, a);
  g.add_edge(a, b);
  g.add_edge(b, c);
  g.add_edge(c, a);
  EXPECT_THROW(g.finalize(), SimulationError);
}

// A self edge is rejected at once; no add_* after finalize().
TEST(StepGraph, SelfEdgeAndLateAdditionsRejected) {
  StepGraph g;
  const TaskId a = g.add_task(compute(0));
  EXPECT_THROW(g.add_edge(a, a), SimulationError);
  const TaskId b = g.add_task(compute(0));
  g.add_edge(a, b);
  g.finalize();
  EXPECT_THROW(g.add_task(compute(0)), SimulationError);
  EXPECT_THROW(g.add_edge(b, a), SimulationError);
}
