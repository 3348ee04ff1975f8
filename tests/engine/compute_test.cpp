// Compute on a GPU (docs/engine.md, "Replay"): the GPU host's current speed is shared equally by
// its running compute tasks, as SimGrid's CPU model shares a one-core host between Execs, and is
// lower on a slow GPU (degraded.gpus). The speed while the GPU's flows run (gpu.overlap_slowdown):
// OverlapSlowdown.ComputeSlowsExactlyWhileItsGpuCommunicates (tests/runner). Closed forms on
// hand-built programs; one Replay per TEST (each runs in its own process).

#include "common/specs.hpp"
#include "engine/replay.hpp"
#include "graph/step_builder.hpp"

#include <gtest/gtest.h>

#include <vector>

using namespace stepsim;

namespace {

graph::Task compute(graph::Rank rank, double seconds) {
  graph::Task t = graph::compute_task(rank, graph::Block::MLP, graph::Phase::FORWARD, 0, 0, 0);
  t.duration = Seconds(seconds);
  return t;
}

/// A program of the given tasks and edges over ranks 0 and 1.
graph::StepProgram program(const std::vector<graph::Task>& tasks,
                           const std::vector<std::pair<graph::TaskId, graph::TaskId>>& edges = {}) {
  graph::StepProgram p;
  for (const graph::Task& t : tasks) {
    if (t.kind == graph::TaskKind::COLLECTIVE)
      p.graph.add_collective(t, std::vector<graph::Rank>{0, 1});
    else
      p.graph.add_task(t);
  }
  for (const auto& [a, b] : edges)
    p.graph.add_edge(a, b);
  p.graph.finalize();
  p.simulated_ranks = {0, 1};
  p.grid = graph::RankGrid{2, 1, 1};
  p.micro_batches = 1;
  return p;
}

} // namespace

// Two independent tasks of 1 and 2 ms on one GPU run together at half speed each: the first ends
// at 2 ms, the second alone at full speed for its last 1 ms, at 3 ms. A task on the other GPU is
// not slowed.
TEST(GpuCompute, RunningTasksShareTheGpu) {
  const graph::StepProgram p = program({compute(0, 1e-3), compute(0, 2e-3), compute(1, 1e-3)});
  engine::Replay replay(p, test::dgx_cluster(1, 2, 2));
  const engine::ReplayResult r = replay.run();
  EXPECT_NEAR(r.end[0].value(), 2e-3, 1e-12);
  EXPECT_NEAR(r.end[1].value(), 3e-3, 1e-12);
  EXPECT_NEAR(r.end[2].value(), 1e-3, 1e-12);
}

// A task that starts while another runs: 2 ms alone, the second (1 ms) joining after 1 ms. From
// then both at half speed: the first's last 1 ms and the second's 1 ms both end at 3 ms.
TEST(GpuCompute, ATaskJoiningSlowsTheRunningOne) {
  const graph::StepProgram p = program({compute(0, 2e-3), compute(1, 1e-3), compute(0, 1e-3)}, {{1, 2}});
  engine::Replay replay(p, test::dgx_cluster(1, 2, 2));
  const engine::ReplayResult r = replay.run();
  EXPECT_NEAR(r.start[2].value(), 1e-3, 1e-12);
  EXPECT_NEAR(r.end[0].value(), 3e-3, 1e-12);
  EXPECT_NEAR(r.end[2].value(), 3e-3, 1e-12);
}

// A slow GPU (degraded.gpus, speed 0.5) takes twice as long.
TEST(GpuCompute, ASlowGpuTakesDurationOverSpeed) {
  ClusterSpec c = test::dgx_cluster(1, 2, 2);
  c.degraded.gpus.push_back({.node = 0, .gpu = 1, .speed = 0.5});
  const graph::StepProgram p = program({compute(0, 1e-3), compute(1, 1e-3)});
  engine::Replay replay(p, c);
  const engine::ReplayResult r = replay.run();
  EXPECT_NEAR(r.end[0].value(), 1e-3, 1e-12);
  EXPECT_NEAR(r.end[1].value(), 2e-3, 1e-12);
}
