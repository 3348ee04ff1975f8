// The critical path of a step (report/critical_path.hpp): on hand-made timelines whose heaviest
// chain is known, and on replayed steps, where the chain's busy time is the step time.

#include "engine/replay.hpp"
#include "report/critical_path.hpp"

#include "common/specs.hpp"
#include "engine/helpers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>

using namespace stepsim;

namespace {

using graph::Block;
using graph::CommGroup;
using graph::TaskId;

/// A hand-made DAG with a given interval per task (no engine: the times are the test's own).
struct Timeline {
  graph::StepGraph graph;
  std::vector<Seconds> start, end;

  TaskId compute(Block block, double from, double to) {
    start.emplace_back(from);
    end.emplace_back(to);
    return graph.add_task(graph::compute_task(0, block, graph::Phase::FORWARD, 0, 0, 0));
  }
  TaskId collective(CommGroup group, graph::CollectiveOp op, double from, double to) {
    graph::Task t;
    t.kind = graph::TaskKind::COLLECTIVE;
    t.group = group;
    t.op = op;
    start.emplace_back(from);
    end.emplace_back(to);
    const std::array<graph::Rank, 2> ranks{0, 1};
    return graph.add_collective(t, ranks);
  }
  report::CriticalPath path(double step) {
    graph.finalize();
    return report::critical_path(graph, start, end, Seconds(step));
  }
};

/// A [0,1] feeds an MLP B [1,3] and a TP all-reduce C [1,c_end]; D (`d_block`, 1 s) starts when
/// both are done. Returns {A, B, C, D}.
std::array<TaskId, 4> diamond(Timeline& t, double c_end, Block d_block) {
  const TaskId a = t.compute(Block::ATTENTION, 0, 1);
  const TaskId b = t.compute(Block::MLP, 1, 3);
  const TaskId c = t.collective(CommGroup::TP, graph::CollectiveOp::ALL_REDUCE, 1, c_end);
  const double d_start = std::max(3.0, c_end);
  const TaskId d = t.compute(d_block, d_start, d_start + 1);
  for (const auto& [x, y] : {std::pair{a, b}, {a, c}, {b, d}, {c, d}})
    t.graph.add_edge(x, y);
  return {a, b, c, d};
}

Seconds at(const std::map<Block, Seconds>& m, Block b) {
  return m.contains(b) ? m.at(b) : Seconds(0.0);
}
Seconds at(const std::map<CommGroup, Seconds>& m, CommGroup g) {
  return m.contains(g) ? m.at(g) : Seconds(0.0);
}

} // namespace

// A [0,1] feeds an MLP B [1,3] and a TP all-reduce C [1,2]; D [3,4] needs both. The chain is
// A, B, D (4 s of busy time, no wait); C is off it.
TEST(CriticalPath, FollowsTheHeavierBranch) {
  Timeline t;
  const auto [a, b, c, d] = diamond(t, 2, Block::LOGITS);
  const report::CriticalPath p = t.path(4.0);
  EXPECT_EQ(p.tasks, (std::vector<TaskId>{a, b, d}));
  EXPECT_DOUBLE_EQ(p.length.value(), 4.0);
  EXPECT_DOUBLE_EQ(p.wait.value(), 0.0);
  EXPECT_DOUBLE_EQ(at(p.compute, Block::ATTENTION).value(), 1.0);
  EXPECT_DOUBLE_EQ(at(p.compute, Block::MLP).value(), 2.0);
  EXPECT_DOUBLE_EQ(at(p.compute, Block::LOGITS).value(), 1.0);
  EXPECT_TRUE(p.collectives.empty());
}

// The same DAG with the all-reduce lasting [1,5] and D at [5,6], then a PP send E [6,7] and,
// after a wait of 1 s, F [8,9]; the step ends at 10. The chain is A, C, D, E, F: compute 1 + 1 +
// 1, TP collectives 4, p2p 1, and 2 s of wait (before F and after it), 10 in all.
TEST(CriticalPath, CountsCollectivesSendsAndWaits) {
  Timeline t;
  const auto [a, b, c, d] = diamond(t, 5, Block::MLP);
  const TaskId e = t.collective(CommGroup::PP, graph::CollectiveOp::SEND, 6, 7);
  const TaskId f = t.compute(Block::OPTIMIZER, 8, 9);
  t.graph.add_edge(d, e);
  t.graph.add_edge(e, f);
  const report::CriticalPath p = t.path(10.0);
  EXPECT_EQ(p.tasks, (std::vector<TaskId>{a, c, d, e, f}));
  EXPECT_DOUBLE_EQ(at(p.collectives, CommGroup::TP).value(), 4.0);
  EXPECT_DOUBLE_EQ(at(p.p2p, CommGroup::PP).value(), 1.0);
  EXPECT_DOUBLE_EQ(at(p.compute, Block::MLP).value(), 1.0);
  EXPECT_DOUBLE_EQ(at(p.compute, Block::OPTIMIZER).value(), 1.0);
  EXPECT_DOUBLE_EQ(p.wait.value(), 2.0);
  EXPECT_DOUBLE_EQ(p.length.value(), 10.0);
}

// Two independent chains: a lone task [0,5] outweighs X [0,1] -> Y [1,2]; the path is the lone
// task and the rest of the step (5 to 6) is wait.
TEST(CriticalPath, PicksTheHeaviestOfSeveralSources) {
  Timeline t;
  const TaskId x = t.compute(Block::ATTENTION, 0, 1);
  const TaskId y = t.compute(Block::MLP, 1, 2);
  const TaskId lone = t.compute(Block::EXPERTS, 0, 5);
  t.graph.add_edge(x, y);
  const report::CriticalPath p = t.path(6.0);
  EXPECT_EQ(p.tasks, (std::vector<TaskId>{lone}));
  EXPECT_DOUBLE_EQ(at(p.compute, Block::EXPERTS).value(), 5.0);
  EXPECT_DOUBLE_EQ(p.wait.value(), 1.0);
}

namespace {

struct Replayed : test::Replayed {
  report::CriticalPath path;
};

Replayed replay(const WorkloadSpec& w, const ClusterSpec& c) {
  Replayed r{test::replay_step(w, c), {}};
  r.path = report::critical_path(r.program.graph, r.result.start, r.result.end, r.result.step_time);
  return r;
}

/// Busy time of the path, all kinds together.
double busy(const report::CriticalPath& p) {
  double sum = 0;
  for (const auto& [block, s] : p.compute)
    sum += s.value();
  for (const auto& m : {p.collectives, p.p2p})
    for (const auto& [group, s] : m)
      sum += s.value();
  return sum;
}

} // namespace

// One GPU (tp = pp = dp = 1): the step is its compute stream, one task after another, so the
// critical path is every task with a duration and its compute time is the sum of all of them.
TEST(CriticalPath, OneGpuStepIsItsComputeStream) {
  const WorkloadSpec w = test::workload(test::small_gpt(4), 1, 1, 1, 2);
  const Replayed r = replay(w, test::dgx_cluster(1, 8, 8));
  double compute = 0;
  size_t busy_tasks = 0;
  for (TaskId id = 0; id < r.program.graph.size(); ++id)
    if (r.program.graph.task(id).kind == graph::TaskKind::COMPUTE &&
        r.program.graph.task(id).duration.value() > 0) {
      compute += r.program.graph.task(id).duration.value();
      ++busy_tasks;
    }
  const double T = r.result.step_time.value();
  EXPECT_NEAR(T, compute, 1e-12 * T);
  EXPECT_NEAR(busy(r.path), T, 1e-12 * T);
  EXPECT_GE(r.path.tasks.size(), busy_tasks);
  EXPECT_EQ(r.path.wait.value(), 0.0);
}

// A pipelined, data- and tensor-parallel step over a real fabric: the chain's busy time is the
// step time (the engine starts every task at its last input's end), with no wait.
TEST(CriticalPath, ReplayedStepLengthIsTheStepTime) {
  const WorkloadSpec w = test::workload(test::small_gpt(8), 2, 2, 2, 4);
  const Replayed r = replay(w, test::dgx_cluster(1, 8, 8));
  const double T = r.result.step_time.value();
  EXPECT_DOUBLE_EQ(r.path.length.value(), T);
  EXPECT_NEAR(busy(r.path), T, 1e-9 * T);
  EXPECT_NEAR(r.path.wait.value(), 0.0, 1e-9 * T);
  EXPECT_EQ(r.result.end[r.path.tasks.back()].value(), T);
  EXPECT_GT(at(r.path.collectives, CommGroup::TP).value(), 0.0);
  EXPECT_GT(at(r.path.p2p, CommGroup::PP).value(), 0.0);
}
