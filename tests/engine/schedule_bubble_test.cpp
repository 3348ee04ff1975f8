// Schedules replayed by the engine (docs/schedules.md), uniform stages and free communication
// (tp = dp = 1, constant block times; logits and optimizer 0), against MODEL.md §5:
//  - interleaved 1F1B: bubble / ideal = (p - 1)/(v m);
//  - ZB-H1: bubble at most about a third of 1F1B's;
//  - ZB-H2: steady-state bubble (longest per-GPU span from first to last compute, minus the
//    ideal) near zero; its single-step bubble is the one-step floor (p - 1) t_F;
//  - DualPipe and DualPipeV: DeepSeek-V3's Table 2, (p/2 - 1)(F&B + B - 3W).
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

/// `t_backward`: a block's whole backward (B + W).
Measured measure(Schedule s, int p, int m, int vp, double t_backward = T_BLOCK_B) {
  const auto r = run_in_child([=] {
    const WorkloadSpec w = bubble_workload(s, p, m, vp);
    BuildOptions o;
    o.compute_time = [t_backward](const ComputeQuery& q) {
      if (q.block == Block::LOGITS || q.block == Block::OPTIMIZER)
        return Seconds(0.0);
      return Seconds(q.phase == Phase::BACKWARD ? t_backward : T_BLOCK_F);
    };
    const StepProgram prog = build_step(w, o);
    engine::Replay replay(prog, test::free_comm_cluster(1, 8));
    const engine::ReplayResult res = replay.run();
    // Busy: the union of a GPU's compute intervals (a DualPipe pair's passes run at once).
    std::map<Rank, double> busy, first, last;
    std::map<Rank, std::vector<std::pair<double, double>>> spans;
    for (TaskId id = 0; id < prog.graph.size(); ++id) {
      const Task& t = prog.graph.task(id);
      if (t.kind != TaskKind::COMPUTE || t.duration.value() <= 0)
        continue;
      spans[t.rank].emplace_back(res.start[id].value(), res.end[id].value());
      first.try_emplace(t.rank, res.start[id].value());
      first[t.rank] = std::min(first[t.rank], res.start[id].value());
      last[t.rank] = std::max(last[t.rank], res.end[id].value());
    }
    for (auto& [rank, list] : spans) {
      std::sort(list.begin(), list.end());
      double end = -1;
      for (const auto& [a, b] : list) {
        busy[rank] += std::max(0.0, b - std::max(a, end));
        end = std::max(end, b);
      }
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

// DualPipe in the engine against DeepSeek-V3's Table 2: (p/2 - 1)(F&B + B - 3W) where a chunk's
// forward is as long as its whole backward (B and W halves of it): (p/2 - 1)·1.5 t_F, t_F = 24
// blocks of one stage's chunk; a pair's passes share the GPU (F&B = F + B). DualPipeV: the same over
// 2p chunks of 12 blocks, (p - 1)·1.5 t_F. Within 3 %, and never above: the engine starts a pair's
// pass whose input is there before the other's arrives (measured 1.4 % below for DualPipe, 2.7 %
// for DualPipeV at p = 4), where the Table counts the pair as one cell. 1F1B and ZB-H1 of the same
// model for comparison.
TEST(ScheduleBubble, DualPipeTable2) {
  for (const auto& [p, m] : std::vector<std::pair<int, int>>{{4, 8}, {4, 16}, {8, 16}}) {
    const double chunk_f = 2 * 12 * T_BLOCK_F;
    const Measured one = measure(Schedule::ONE_F_ONE_B, p, m, 1, T_BLOCK_F);
    const Measured h1 = measure(Schedule::ZB_H1, p, m, 1, T_BLOCK_F);
    const Measured dual = measure(Schedule::DUALPIPE, p, m, 1, T_BLOCK_F);
    const Measured v = measure(Schedule::DUALPIPE_V, p, m, 1, T_BLOCK_F);
    EXPECT_NEAR(dual.busy, one.busy, 1e-6 * one.busy);
    EXPECT_NEAR(v.busy, one.busy, 1e-6 * one.busy);
    const double b = chunk_f, w = b / 2;
    EXPECT_NEAR(one.step - one.busy, (p - 1) * (chunk_f + b), 1e-3 * chunk_f);
    EXPECT_NEAR(h1.step - h1.busy, (p - 1) * (chunk_f + b - 2 * w), 0.01 * chunk_f * p);
    const double dual_closed = (p / 2 - 1) * ((chunk_f + b) + b - 3 * w);
    EXPECT_NEAR(dual.step - dual.busy, dual_closed, 0.03 * dual_closed) << "p=" << p << " m=" << m;
    EXPECT_LE(dual.step - dual.busy, dual_closed * (1 + 1e-6));
    const double v_closed = (p - 1) * ((chunk_f + b) + b - 3 * w) / 2;
    EXPECT_NEAR(v.step - v.busy, v_closed, 0.03 * v_closed) << "p=" << p << " m=" << m;
    EXPECT_LE(v.step - v.busy, v_closed * (1 + 1e-6));
    std::printf("p=%d m=%d, t_F = t_B(whole) = %.0f ms per chunk: bubble 1F1B %.1f ms, ZB-H1 %.1f ms, "
                "DualPipe %.1f ms (closed form %.1f), DualPipeV %.1f ms (closed form %.1f)\n",
                p, m, chunk_f * 1e3, (one.step - one.busy) * 1e3, (h1.step - h1.busy) * 1e3,
                (dual.step - dual.busy) * 1e3, dual_closed * 1e3, (v.step - v.busy) * 1e3, v_closed * 1e3);
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

// DualPipe and DualPipeV: the engine's memory timeline peaks at the static ledger (pp + 1 and
// 2pp + 1 chunk passes) on every stage and balances.
TEST(ScheduleMemory, DualPipeTimelineMatchesStatic) {
  expect_timeline_matches_static(mem_workload(Schedule::DUALPIPE, 4, 8, 1));
  expect_timeline_matches_static(mem_workload(Schedule::DUALPIPE_V, 4, 8, 1));
  expect_timeline_matches_static(mem_workload(Schedule::DUALPIPE_V, 2, 6, 1));
}

namespace {

/// A DualPipe pair on GPU 0 of a 4-layer MoE over pp 2 (layers 0-1 dense: stage 0's chunk 0;
/// layers 2-3 MoE: its chunk 1), ep 2: the forward of chunk 1 paired with the backward B of chunk 0.
/// Forward compute is free, so the forward is its expert all-to-alls alone (C, back to back) and the
/// backward its compute alone (D, `t_block` per backward block): what the pair hides is exact.
/// Returns {the backward's start, D, the all-to-alls' start, their end, C, the pair's end, the
/// backward's last task}.
std::vector<double> measure_pair(double t_block) {
  const auto r = run_in_child([t_block] {
    ModelSpec model = test::small_gpt(4, 512, 256);
    model.mlp = MlpKind::SWIGLU;
    model.moe.experts = 8;
    model.moe.top_k = 2;
    model.moe.expert_ffn_hidden = 1024;
    model.moe.first_dense_layers = 2;
    WorkloadSpec w = test::workload(model, 1, 2, 2, 4, 1, Schedule::DUALPIPE);
    w.parallel.ep = 2;
    BuildOptions o;
    o.fold_dp = false;
    o.compute_time = [t_block](const ComputeQuery& q) {
      const bool counted = q.phase == Phase::BACKWARD && q.block != Block::LOGITS;
      return Seconds(counted ? t_block : 0.0);
    };
    const StepProgram prog = build_step(w, o);
    engine::Replay replay(prog, test::dgx_cluster(1, 8, 8));
    const engine::ReplayResult res = replay.run();
    const StepGraph& g = prog.graph;
    // The pair's second pass: GPU 0's first backward of chunk 0 drawn alongside (lane 1).
    constexpr TaskId none = ~TaskId{0};
    TaskId b_first = none;
    for (TaskId id = 0; id < g.size() && b_first == none; ++id) {
      const Task& t = g.task(id);
      if (t.kind == TaskKind::COMPUTE && t.rank == 0 && t.lane == 1 && t.phase == Phase::BACKWARD &&
          t.layer < 2)
        b_first = id;
    }
    int f_mb = -1; // the pair's first pass: the chunk-1 forward emitted just before
    for (TaskId id = 0; id < b_first; ++id) {
      const Task& t = g.task(id);
      if (t.kind == TaskKind::COMPUTE && t.rank == 0 && t.phase == Phase::FORWARD && t.layer >= 2)
        f_mb = t.micro_batch;
    }
    const int b_mb = g.task(b_first).micro_batch;
    double b_start = 1e9, b_end = 0, d = 0, d_last = 0, a2a_start = 1e9, a2a_end = 0, c = 0, f_end = 0;
    for (TaskId id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      const double s = res.start[id].value(), e = res.end[id].value();
      const auto ranks = g.participants(t);
      const bool on0 = std::find(ranks.begin(), ranks.end(), Rank{0}) != ranks.end();
      if (t.kind == TaskKind::COMPUTE && t.rank == 0 && t.phase == Phase::BACKWARD && t.micro_batch == b_mb &&
          t.layer < 2 && t.lane == 1) {
        b_start = std::min(b_start, s);
        b_end = std::max(b_end, e);
        d += t.duration.value();
        d_last = t.duration.value(); // the pass's last task: it closes the pair
      }
      if (t.micro_batch == f_mb && t.phase == Phase::FORWARD && t.layer >= 2 && on0) {
        if (t.group == CommGroup::EP) {
          a2a_start = std::min(a2a_start, s);
          a2a_end = std::max(a2a_end, e);
          c += e - s;
        }
        f_end = std::max(f_end, e);
      }
    }
    return std::vector<double>{b_start, d, a2a_start, a2a_end, c, std::max(b_end, f_end), d_last};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values : std::vector<double>(7, 0.0);
}

} // namespace

// The overlapped all-to-all of a DualPipe pair: its forward's expert all-to-alls (C, from t_a) run
// under the backward's compute (D, from t_b), so the pair ends at max(t_b + D, t_a + C + D_last), not
// after C + D: hidden when the compute covers them, exposed by exactly the difference when not.
// D_last: the backward's last task, which closes the pair after the forward has ended.
TEST(ScheduleBubble, DualPipePairHidesTheAllToAll) {
  for (const double t_block : {2e-4, 1e-7}) {
    const std::vector<double> v = measure_pair(t_block);
    const double t_b = v[0], d = v[1], t_a = v[2], a2a_end = v[3], c = v[4], end = v[5], d_last = v[6];
    ASSERT_GT(c, 0.0);
    ASSERT_GT(d, 0.0);
    EXPECT_NEAR(a2a_end - t_a, c, 1e-9); // back to back: nothing delays them
    const double late = (t_a + c + d_last) - (t_b + d);
    const double exposed = end - (t_b + d);
    EXPECT_NEAR(exposed, std::max(0.0, late), 1e-9) << "C " << c << " D " << d;
    EXPECT_LT(end, std::min(t_a, t_b) + c + d - 1e-9); // overlapped, not one after the other
    std::printf("DualPipe pair: all-to-alls %.2f us, backward compute %.2f us: exposed %.2f us (%s)\n",
                c * 1e6, d * 1e6, exposed * 1e6, late > 0 ? "not covered" : "hidden");
    if (t_block > 1e-5) {
      EXPECT_LT(late, 0.0); // the first regime: covered
    } else {
      EXPECT_GT(late, 0.0); // the second: not
    }
  }
}
