// Schedules replayed by the engine (docs/schedules.md), uniform stages and free communication
// (tp = dp = 1, constant block times; logits and optimizer 0), against MODEL.md §5:
//  - interleaved 1F1B: bubble / ideal = (p - 1)/(v m);
//  - ZB-H1: bubble at most about a third of 1F1B's;
//  - ZB-H2: steady-state bubble (longest per-GPU span from first to last compute, minus the
//    ideal) near zero; its single-step bubble is the one-step floor (p - 1) t_F.
// Each simulation runs in a child process (SimGrid: one simulation per process). Also the memory
// timeline balances and peaks at the static ledger for the new schedules.

#include "common/specs.hpp"
#include "common/subprocess.hpp"
#include "engine/replay.hpp"
#include "model/memory.hpp"
#include "report/memory_timeline.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;
using stepsim::test::run_in_child;

namespace {

constexpr double T_BLOCK_F = 1e-3;
constexpr double T_BLOCK_B = 2e-3;

struct Measured {
  double step = 0;   ///< makespan
  double busy = 0;   ///< compute per GPU (equal on every GPU)
  double period = 0; ///< longest first-start-to-last-end span of a GPU
  double bubble() const { return (step - busy) / busy; }
  double steady_bubble() const { return (period - busy) / busy; }
};

/// 12 layers per stage (vp 1, 2, 3 and 4 split them evenly). Hidden 2048, sequence 32: the attention core is
/// < 1 % of the attention FLOPs, so the B/W split of every block is (almost exactly) half and half.
WorkloadSpec bubble_workload(Schedule s, int p, int m, int vp) {
  WorkloadSpec w = test::workload(test::small_gpt(12 * p, 2048, 32), 1, p, 1, m, 1, s);
  w.parallel.vp = vp;
  return w;
}

Measured measure(Schedule s, int p, int m, int vp) {
  const auto r = run_in_child([=] {
    const WorkloadSpec w = bubble_workload(s, p, m, vp);
    BuildOptions o;
    o.compute_time = [](const ComputeQuery& q) {
      if (q.block == Block::LOGITS || q.block == Block::OPTIMIZER)
        return Seconds(0.0);
      return Seconds(q.phase == Phase::BACKWARD ? T_BLOCK_B : T_BLOCK_F);
    };
    const StepProgram prog = build_step(w, o);
    engine::Replay replay(prog, test::free_comm_cluster(1, 8));
    const engine::ReplayResult res = replay.run();
    std::map<Rank, double> busy, first, last;
    for (TaskId id = 0; id < prog.graph.size(); ++id) {
      const Task& t = prog.graph.task(id);
      if (t.kind != TaskKind::COMPUTE || t.duration.value() <= 0)
        continue;
      busy[t.rank] += res.end[id].value() - res.start[id].value();
      first.try_emplace(t.rank, res.start[id].value());
      first[t.rank] = std::min(first[t.rank], res.start[id].value());
      last[t.rank] = std::max(last[t.rank], res.end[id].value());
    }
    double period = 0;
    for (const auto& [rank, f] : first)
      period = std::max(period, last[rank] - f);
    return std::vector<double>{res.step_time.value(), busy.begin()->second, period};
  });
  EXPECT_TRUE(r.ok) << r.error;
  if (!r.ok)
    return {};
  return {r.values[0], r.values[1], r.values[2]};
}

} // namespace

// Interleaved 1F1B: bubble / ideal compute = (p - 1)/(v m) (Narayanan et al. 2021), and 1F1B's
// (p - 1)/m at v = 1 on the same model.
TEST(ScheduleBubble, InterleavedOverIdeal) {
  const int p = 4, m = 8;
  const Measured one = measure(Schedule::ONE_F_ONE_B, p, m, 1);
  EXPECT_NEAR(one.bubble(), (p - 1.0) / m, 0.005);
  for (int vp : {2, 3}) {
    const Measured il = measure(Schedule::INTERLEAVED, p, m, vp);
    const double expected = (p - 1.0) / (vp * m);
    EXPECT_NEAR(il.busy, one.busy, 1e-6 * one.busy);
    EXPECT_NEAR(il.bubble(), expected, 0.005 * expected + 1e-6) << "vp=" << vp;
    std::printf("p=%d m=%d vp=%d: interleaved bubble/ideal %.4f (closed form (p-1)/(v m) = %.4f); 1F1B %.4f; "
                "PP sends x%.3f\n",
                p, m, vp, il.bubble(), expected, one.bubble(), static_cast<double>(p * vp - 1) / (p - 1));
  }
}

// ZB-H1 keeps 1F1B's memory with about a third of its bubble ((p - 1)(t_F + t_B - t_W) against
// (p - 1)(t_F + t_B + t_W) with t_B = t_W = t_F: 1/3); ZB-H2's steady-state bubble is near zero
// (< 0.2 of 1F1B's) and its single-step bubble is the one-step floor (p - 1) t_F, also a third.
TEST(ScheduleBubble, ZeroBubbleAgainstOneFOneB) {
  for (const auto& [p, m] : std::vector<std::pair<int, int>>{{4, 8}, {4, 16}, {8, 16}}) {
    const Measured one = measure(Schedule::ONE_F_ONE_B, p, m, 1);
    const Measured h1 = measure(Schedule::ZB_H1, p, m, 1);
    const Measured h2 = measure(Schedule::ZB_H2, p, m, 1);
    EXPECT_NEAR(h1.busy, one.busy, 1e-6 * one.busy);
    const double r1 = h1.bubble() / one.bubble();
    const double r2 = h2.steady_bubble() / one.steady_bubble();
    EXPECT_LE(r1, 0.35) << "p=" << p << " m=" << m;
    EXPECT_GE(r1, 0.30) << "p=" << p << " m=" << m;
    EXPECT_LT(r2, 0.2) << "p=" << p << " m=" << m;
    EXPECT_LE(h2.bubble(), h1.bubble() + 1e-9);
    std::printf(
        "p=%d m=%d: 1F1B bubble/ideal %.4f (closed form %.4f); ZB-H1 %.4f (x%.3f); ZB-H2 single step %.4f "
        "(x%.3f), steady %.4f (x%.3f)\n",
        p, m, one.bubble(), (p - 1.0) / m, h1.bubble(), r1, h2.bubble(), h2.bubble() / one.bubble(),
        h2.steady_bubble(), r2);
  }
}

namespace {

void expect_timeline_matches_static(const WorkloadSpec& w) {
  const auto r = run_in_child([w] {
    const ClusterSpec c = test::dgx_cluster(1, 8, 8);
    BuildOptions o;
    o.fold_dp = false;
    o.compute_time = [](const ComputeQuery& q) {
      return q.block == Block::OPTIMIZER ? Seconds(2e-4) : Seconds(1e-3);
    };
    const StepProgram prog = build_step(w, o);
    engine::Replay replay(prog, c);
    const engine::ReplayResult res = replay.run();
    const report::MemoryReport rep = report::memory_timeline(prog, res.start, res.end, c, w, true);
    std::vector<double> out;
    for (int p = 0; p < w.parallel.pp; ++p) {
      out.push_back(rep.stage_peaks[static_cast<size_t>(p)].value());
      out.push_back(model::static_memory(w, c.gpu, p).peak().value());
    }
    double unbalanced = 0;
    for (const CounterSeries& track : rep.tracks) {
      const double first = track.samples.front().second;
      for (const auto& [t, bytes] : track.samples)
        unbalanced = std::max(unbalanced, first - bytes);
      unbalanced = std::max(unbalanced, std::abs(track.samples.back().second - first));
    }
    out.push_back(unbalanced);
    return out;
  });
  ASSERT_TRUE(r.ok) << r.error;
  for (int p = 0; p < w.parallel.pp; ++p)
    EXPECT_NEAR(r.values[static_cast<size_t>(2 * p)], r.values[static_cast<size_t>(2 * p + 1)], 1.0)
        << "stage " << p;
  EXPECT_LE(r.values.back(), 1.0) << "the ledger does not balance";
}

WorkloadSpec mem_workload(Schedule s, int pp, int64_t m, int vp) {
  WorkloadSpec w = test::workload(test::small_gpt(8), 1, pp, 2, m, 1, s);
  w.parallel.vp = vp;
  return w;
}

} // namespace

TEST(ScheduleMemory, InterleavedTimelineMatchesStatic) {
  expect_timeline_matches_static(mem_workload(Schedule::INTERLEAVED, 4, 8, 2));
  WorkloadSpec w = mem_workload(Schedule::INTERLEAVED, 2, 4, 4);
  w.training.recompute = Recompute::FULL;
  expect_timeline_matches_static(w);
  expect_timeline_matches_static(mem_workload(Schedule::INTERLEAVED, 4, 4, 2)); // m == pp: all forwards first
}

TEST(ScheduleMemory, ZeroBubbleH1TimelineMatchesStatic) {
  expect_timeline_matches_static(mem_workload(Schedule::ZB_H1, 4, 8, 1));
}

TEST(ScheduleMemory, ZeroBubbleH2TimelineMatchesStatic) {
  expect_timeline_matches_static(mem_workload(Schedule::ZB_H2, 4, 8, 1));
}

TEST(ScheduleMemory, ZeroBubbleSelectiveTimelineMatchesStatic) {
  WorkloadSpec w = mem_workload(Schedule::ZB_H2, 2, 5, 1);
  w.training.recompute = Recompute::SELECTIVE;
  w.parallel.sp = false;
  expect_timeline_matches_static(w);
}
