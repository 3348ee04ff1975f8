// Pipeline schedules (MODEL.md §3, §5; docs/schedules.md): every (chunk, micro-batch) once per
// phase, backward after its forward, W after its B, the in-flight bounds (1F1B min(pp - stage, m),
// GPipe m, interleaved 2(pp - stage - 1) + (vp - 1)pp + 1 chunk passes, ZB-H1 min(pp, m), ZB-H2
// min(2pp - 1, m), as model::in_flight_passes states them), and the bubbles of an abstract
// unit-time replay of the orders (the engine-level bubble tests are tests/engine/schedule_bubble_test.cpp).

#include "graph/schedule.hpp"

#include "common/specs.hpp"
#include "core/error.hpp"
#include "model/memory.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;

namespace {

struct Stats {
  int max_in_flight = 0;
};

/// Checks the invariants every schedule must satisfy; returns the peak number of micro-batches
/// whose forward has started and backward not yet finished.
Stats check_order(const std::vector<PassRef>& order, int m) {
  std::vector<int> fwd(static_cast<size_t>(m), 0), bwd(static_cast<size_t>(m), 0);
  Stats s;
  int in_flight = 0;
  EXPECT_EQ(order.size(), static_cast<size_t>(2 * m));
  for (const PassRef& p : order) {
    EXPECT_GE(p.micro_batch, 0);
    EXPECT_LT(p.micro_batch, m);
    if (p.micro_batch < 0 || p.micro_batch >= m)
      continue;
    const size_t i = static_cast<size_t>(p.micro_batch);
    if (p.phase == Phase::FORWARD) {
      ++fwd[i];
      ++in_flight;
    } else {
      EXPECT_EQ(p.phase, Phase::BACKWARD);
      EXPECT_EQ(fwd[i], 1) << "backward of micro-batch " << i << " before its forward";
      ++bwd[i];
      --in_flight;
    }
    s.max_in_flight = std::max(s.max_in_flight, in_flight);
  }
  for (int i = 0; i < m; ++i) {
    EXPECT_EQ(fwd[static_cast<size_t>(i)], 1) << "forward of micro-batch " << i;
    EXPECT_EQ(bwd[static_cast<size_t>(i)], 1) << "backward of micro-batch " << i;
  }
  return s;
}

} // namespace

// GPipe: all forwards in micro-batch order, then all backwards; holds m micro-batches.
TEST(Schedule, GPipe) {
  for (int pp : {1, 2, 4, 8})
    for (int m : {1, 2, 3, 8, 16})
      for (int stage = 0; stage < pp; ++stage) {
        const auto order = gpipe_order(stage, pp, m);
        EXPECT_EQ(check_order(order, m).max_in_flight, m);
        for (int i = 0; i < m; ++i) {
          EXPECT_EQ(order[static_cast<size_t>(i)].phase, Phase::FORWARD);
          EXPECT_EQ(order[static_cast<size_t>(i)].micro_batch, i);
          EXPECT_EQ(order[static_cast<size_t>(m + i)].phase, Phase::BACKWARD);
          EXPECT_EQ(order[static_cast<size_t>(m + i)].micro_batch, i);
        }
        const auto via = stage_order(Schedule::GPIPE, stage, pp, m);
        ASSERT_EQ(via.size(), order.size());
        for (size_t k = 0; k < via.size(); ++k)
          EXPECT_TRUE(via[k].phase == order[k].phase && via[k].micro_batch == order[k].micro_batch);
      }
}

// 1F1B (PipeDream-Flush): min(pp - stage - 1, m) warm-up forwards, then alternating; micro-batch
// order kept in each phase; in flight never exceeds pp - stage and reaches min(pp - stage, m).
TEST(Schedule, OneFOneB) {
  for (int pp : {1, 2, 4, 8})
    for (int m : {1, 2, 3, 8, 16})
      for (int stage = 0; stage < pp; ++stage) {
        const auto order = one_f_one_b_order(stage, pp, m);
        const Stats s = check_order(order, m);
        EXPECT_LE(s.max_in_flight, pp - stage) << "pp=" << pp << " m=" << m << " stage=" << stage;
        EXPECT_EQ(s.max_in_flight, std::min(pp - stage, m))
            << "pp=" << pp << " m=" << m << " stage=" << stage;
        const int warmup = std::min(pp - stage - 1, m);
        for (int i = 0; i < warmup; ++i)
          EXPECT_EQ(order[static_cast<size_t>(i)].phase, Phase::FORWARD);
        int next_f = 0, next_b = 0;
        for (const PassRef& p : order)
          EXPECT_EQ(p.micro_batch, p.phase == Phase::FORWARD ? next_f++ : next_b++);
        const auto via = stage_order(Schedule::ONE_F_ONE_B, stage, pp, m);
        ASSERT_EQ(via.size(), order.size());
        for (size_t k = 0; k < via.size(); ++k)
          EXPECT_TRUE(via[k].phase == order[k].phase && via[k].micro_batch == order[k].micro_batch);
      }
}

// The last stage of 1F1B alternates from the start: F0 B0 F1 B1 ...
TEST(Schedule, OneFOneBLastStageAlternates) {
  const auto order = one_f_one_b_order(3, 4, 4);
  for (size_t k = 0; k < order.size(); ++k) {
    EXPECT_EQ(order[k].phase, k % 2 == 0 ? Phase::FORWARD : Phase::BACKWARD);
    EXPECT_EQ(order[k].micro_batch, static_cast<int>(k / 2));
  }
}

namespace {

/// Invariants of a chunked / split order: every (chunk, micro-batch) has one forward, one backward
/// and (split) one W, in that order.
void check_chunked(const std::vector<PassRef>& order, int m, int vp, bool split) {
  const size_t n = static_cast<size_t>(m) * static_cast<size_t>(vp);
  std::vector<int> f(n, 0), b(n, 0), w(n, 0);
  EXPECT_EQ(order.size(), n * (split ? 3 : 2));
  for (const PassRef& p : order) {
    ASSERT_GE(p.chunk, 0);
    ASSERT_LT(p.chunk, vp);
    ASSERT_GE(p.micro_batch, 0);
    ASSERT_LT(p.micro_batch, m);
    const size_t i =
        static_cast<size_t>(p.chunk) * static_cast<size_t>(m) + static_cast<size_t>(p.micro_batch);
    switch (p.phase) {
    case Phase::FORWARD:
      ++f[i];
      break;
    case Phase::BACKWARD:
      EXPECT_EQ(f[i], 1) << "backward before forward";
      ++b[i];
      break;
    case Phase::WEIGHT_GRAD:
      EXPECT_TRUE(split);
      EXPECT_EQ(b[i], 1) << "W before B";
      ++w[i];
      break;
    default:
      ADD_FAILURE() << "unexpected phase";
    }
  }
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(f[i], 1);
    EXPECT_EQ(b[i], 1);
    EXPECT_EQ(w[i], split ? 1 : 0);
  }
}

/// Replays the per-stage orders of `schedule` with unit-free pass times and free communication
/// (a pass starts when its stage is free and its input arrived: the forward of global chunk c
/// after the forward of chunk c - 1, the backward after the backward of chunk c + 1, or after its
/// own forward on the last chunk; W after its B). Returns {makespan, period}, where period is the
/// longest span of a stage from its first pass's start to its last pass's end (the steady-state
/// step when consecutive steps overlap). Fails on a deadlock.
struct Replayed {
  double makespan = 0;
  double period = 0;
};
Replayed unit_replay(Schedule schedule, int pp, int m, int vp, double tf, double tb, double tw) {
  std::vector<std::vector<PassRef>> orders;
  for (int s = 0; s < pp; ++s)
    orders.push_back(stage_order(schedule, s, pp, m, vp));
  const int chunks = pp * vp;
  auto key = [&](int global, int mb) {
    return static_cast<size_t>(global) * static_cast<size_t>(m) + static_cast<size_t>(mb);
  };
  std::vector<double> fdone(static_cast<size_t>(chunks * m), -1), bdone(fdone);
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::vector<double> free_at(static_cast<size_t>(pp), 0), first(static_cast<size_t>(pp), -1);
  size_t left = 0;
  for (const auto& o : orders)
    left += o.size();
  while (left > 0) {
    bool progress = false;
    for (int s = 0; s < pp; ++s) {
      auto& o = orders[static_cast<size_t>(s)];
      size_t& k = next[static_cast<size_t>(s)];
      while (k < o.size()) {
        const PassRef& p = o[k];
        const int g = p.chunk * pp + s;
        double ready = -1, dur = tf;
        if (p.phase == Phase::FORWARD) {
          ready = g == 0 ? 0.0 : fdone[key(g - 1, p.micro_batch)];
        } else if (p.phase == Phase::BACKWARD) {
          ready = g == chunks - 1 ? fdone[key(g, p.micro_batch)] : bdone[key(g + 1, p.micro_batch)];
          dur = tb;
        } else {
          ready = bdone[key(g, p.micro_batch)];
          dur = tw;
        }
        if (ready < 0)
          break;
        const double start = std::max(ready, free_at[static_cast<size_t>(s)]);
        if (first[static_cast<size_t>(s)] < 0)
          first[static_cast<size_t>(s)] = start;
        free_at[static_cast<size_t>(s)] = start + dur;
        if (p.phase == Phase::FORWARD)
          fdone[key(g, p.micro_batch)] = start + dur;
        if (p.phase == Phase::BACKWARD)
          bdone[key(g, p.micro_batch)] = start + dur;
        ++k;
        --left;
        progress = true;
      }
    }
    if (!progress) {
      ADD_FAILURE() << "schedule deadlocks";
      return {};
    }
  }
  Replayed r;
  for (int s = 0; s < pp; ++s) {
    r.makespan = std::max(r.makespan, free_at[static_cast<size_t>(s)]);
    r.period = std::max(r.period, free_at[static_cast<size_t>(s)] - first[static_cast<size_t>(s)]);
  }
  return r;
}

WorkloadSpec schedule_workload(Schedule s, int pp, int m, int vp) {
  WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(pp * vp * 2), 1, pp, 1, m, 1, s);
  w.parallel.vp = vp;
  return w;
}

} // namespace

// Megatron-LM's interleaved order: per chunk, every micro-batch once per phase; warm-up of
// 2(pp - stage - 1) + (vp - 1)pp forwards; the first forwards walk chunk 0 for micro-batches
// 0..pp-1, then chunk 1, ...; the peak in-flight chunk passes and the ones carrying logits (last
// chunk on the last stage) match model::in_flight_passes.
TEST(Schedule, InterleavedOrderAndInFlight) {
  for (int pp : {2, 4, 8})
    for (int vp : {2, 3, 4})
      for (int m : {pp, 2 * pp, 4 * pp})
        for (int stage = 0; stage < pp; ++stage) {
          const auto order = interleaved_order(stage, pp, m, vp);
          check_chunked(order, m, vp, false);
          std::vector<PassRef> forwards;
          for (const PassRef& p : order)
            if (p.phase == Phase::FORWARD)
              forwards.push_back(p);
          for (int k = 0; k < pp * vp; ++k) {
            EXPECT_EQ(forwards[static_cast<size_t>(k)].chunk, k / pp);
            EXPECT_EQ(forwards[static_cast<size_t>(k)].micro_batch, k % pp);
          }
          const int warmup = m == pp ? m * vp : std::min(2 * (pp - stage - 1) + (vp - 1) * pp, m * vp);
          for (int k = 0; k < warmup; ++k)
            EXPECT_EQ(order[static_cast<size_t>(k)].phase, Phase::FORWARD);
          if (warmup < m * vp) {
            EXPECT_EQ(order[static_cast<size_t>(warmup + 1)].phase, Phase::BACKWARD);
          }
          const model::InFlight expected =
              model::in_flight_passes(schedule_workload(Schedule::INTERLEAVED, pp, m, vp), stage);
          EXPECT_EQ(peak_in_flight(order, false), expected.passes)
              << "pp=" << pp << " vp=" << vp << " m=" << m << " stage=" << stage;
          if (stage == pp - 1) {
            EXPECT_EQ(peak_in_flight(order, false, vp - 1), expected.output_passes);
          }
        }
  EXPECT_THROW(interleaved_order(0, 4, 6, 2), ModelError); // m % pp != 0
}

// MODEL.md §3: the first stage of interleaved 1F1B holds p(1 + (p - 1)/(p v)) stages' worth.
TEST(Schedule, InterleavedFirstStageMemoryClosedForm) {
  for (int pp : {2, 4, 8})
    for (int vp : {2, 4}) {
      const int passes = peak_in_flight(interleaved_order(0, pp, 4 * pp, vp), false);
      EXPECT_DOUBLE_EQ(static_cast<double>(passes) / vp, pp * (1.0 + (pp - 1.0) / (pp * vp)));
    }
}

// ZB-H1 and ZB-H2: F, B and W once per micro-batch, W after B; peak in flight (forward started,
// W not done) min(pp, m) and min(2pp - 1, m) on every stage, as model::in_flight_passes says.
TEST(Schedule, ZeroBubbleOrdersAndInFlight) {
  for (int pp : {1, 2, 4, 8})
    for (int m : {1, 2, 3, 4, 8, 16, 24})
      for (int stage = 0; stage < pp; ++stage) {
        const auto h1 = zb_h1_order(stage, pp, m);
        const auto h2 = zb_h2_order(stage, pp, m);
        check_chunked(h1, m, 1, true);
        check_chunked(h2, m, 1, true);
        EXPECT_EQ(peak_in_flight(h1, true), std::min(pp, m))
            << "pp=" << pp << " m=" << m << " stage=" << stage;
        EXPECT_EQ(peak_in_flight(h2, true), std::min(2 * pp - 1, m))
            << "pp=" << pp << " m=" << m << " stage=" << stage;
        EXPECT_EQ(peak_in_flight(h1, true),
                  model::in_flight_passes(schedule_workload(Schedule::ZB_H1, pp, m, 1), stage).passes);
        EXPECT_EQ(peak_in_flight(h2, true),
                  model::in_flight_passes(schedule_workload(Schedule::ZB_H2, pp, m, 1), stage).passes);
        // Forward/B order is 1F1B's (ZB-H1) and all passes of stage_order agree.
        const auto via = stage_order(Schedule::ZB_H1, stage, pp, m);
        ASSERT_EQ(via.size(), h1.size());
        for (size_t k = 0; k < via.size(); ++k)
          EXPECT_TRUE(via[k].phase == h1[k].phase && via[k].micro_batch == h1[k].micro_batch);
      }
  EXPECT_TRUE(splits_backward(Schedule::ZB_H1));
  EXPECT_TRUE(splits_backward(Schedule::ZB_H2));
  EXPECT_FALSE(splits_backward(Schedule::INTERLEAVED));
}

// Abstract unit-time replays (uniform stages, free communication), m >= 2pp:
//  GPipe/1F1B: makespan (m + p - 1)(t_f + t_b)                         (MODEL.md §5)
//  interleaved: makespan (m v + p - 1)(t_f + t_b)/v: bubble/ideal (p - 1)/(v m)
//  ZB-H1 (t_f = t_b = t_w = 1): makespan 3m + (p - 1): bubble a third of 1F1B's 3(p - 1)
//  ZB-H2: every stage busy without a gap, period exactly 3m (zero steady-state bubble); its
//  single-step makespan is 3m + (p - 1), the floor for any schedule in one isolated step.
TEST(Schedule, UnitReplayBubbles) {
  for (int pp : {2, 4, 8})
    for (int m : {2 * pp, 4 * pp}) {
      const Replayed f1b = unit_replay(Schedule::ONE_F_ONE_B, pp, m, 1, 1, 2, 0);
      EXPECT_DOUBLE_EQ(f1b.makespan, (m + pp - 1) * 3.0);
      EXPECT_DOUBLE_EQ(unit_replay(Schedule::GPIPE, pp, m, 1, 1, 2, 0).makespan, (m + pp - 1) * 3.0);
      for (int vp : {2, 4}) {
        const Replayed il = unit_replay(Schedule::INTERLEAVED, pp, m, vp, 1.0 / vp, 2.0 / vp, 0);
        EXPECT_NEAR(il.makespan, (m * vp + pp - 1) * 3.0 / vp, 1e-9)
            << "pp=" << pp << " vp=" << vp << " m=" << m;
        EXPECT_NEAR((il.makespan - 3.0 * m) / (3.0 * m), (pp - 1.0) / (vp * m), 1e-9);
      }
      const Replayed h1 = unit_replay(Schedule::ZB_H1, pp, m, 1, 1, 1, 1);
      EXPECT_DOUBLE_EQ(h1.makespan, 3.0 * m + (pp - 1));
      EXPECT_NEAR((h1.makespan - 3.0 * m) / (f1b.makespan - 3.0 * m), 1.0 / 3.0, 1e-12);
      const Replayed h2 = unit_replay(Schedule::ZB_H2, pp, m, 1, 1, 1, 1);
      EXPECT_DOUBLE_EQ(h2.period, 3.0 * m) << "pp=" << pp << " m=" << m;
      EXPECT_DOUBLE_EQ(h2.makespan, 3.0 * m + (pp - 1));
    }
}

// ---- the builder with the new schedules ----------------------------------------------------

#include "graph/step_builder.hpp"
#include "model/transformer.hpp"

namespace {

StepProgram build_with(const WorkloadSpec& w) {
  BuildOptions o;
  o.fold_dp = false;
  o.compute_time = [](const ComputeQuery&) { return Seconds(1e-3); };
  return build_step(w, o);
}

size_t pp_sends(const StepProgram& prog) {
  size_t n = 0;
  for (const Task& t : prog.graph.tasks())
    n += t.group == CommGroup::PP && t.op == CollectiveOp::SEND ? 1 : 0;
  return n;
}

} // namespace

// MODEL.md §5: interleaving multiplies the pipeline p2p messages: 2m(p v - 1) sends per TP rank
// and replica instead of 2m(p - 1), a factor (p v - 1)/(p - 1) (-> v for large p). The chunk
// boundary from the last stage wraps to stage 0.
TEST(ScheduleBuild, InterleavingMultipliesPipelineMessages) {
  const int pp = 4, m = 8;
  const size_t base = pp_sends(build_with(schedule_workload(Schedule::ONE_F_ONE_B, pp, m, 1)));
  EXPECT_EQ(base, static_cast<size_t>(2 * m * (pp - 1)));
  for (int vp : {2, 4}) {
    const StepProgram prog = build_with(schedule_workload(Schedule::INTERLEAVED, pp, m, vp));
    EXPECT_EQ(pp_sends(prog), static_cast<size_t>(2 * m * (pp * vp - 1)));
    size_t wraps = 0;
    for (const Task& t : prog.graph.tasks()) {
      if (t.group != CommGroup::PP)
        continue;
      const auto ranks = prog.graph.participants(t);
      if (t.phase == Phase::FORWARD && t.stage == pp - 1) {
        EXPECT_EQ(prog.grid.pp_of(ranks[1]), 0);
        ++wraps;
      }
    }
    EXPECT_EQ(wraps, static_cast<size_t>(m * (vp - 1)));
  }
}

// Every compute task of a stage is placed on its chunk's layers: chunk c holds layers
// [c L/(p v), (c + 1) L/(p v)) and sits on stage c mod p.
TEST(ScheduleBuild, InterleavedChunkPlacement) {
  const int pp = 2, vp = 3;
  const WorkloadSpec w = schedule_workload(Schedule::INTERLEAVED, pp, 4, vp);
  const int per_chunk = static_cast<int>(w.model.layers) / (pp * vp);
  const StepProgram prog = build_with(w);
  for (const Task& t : prog.graph.tasks()) {
    if (t.kind == TaskKind::COMPUTE && t.layer >= 0) {
      EXPECT_EQ((t.layer / per_chunk) % pp, t.stage) << "layer " << t.layer;
    }
  }
}

// Zero-bubble schedules: backward compute is split into B and W with W = the weight-gradient
// GEMMs (B + W = the unsplit backward, in time and FLOPs); DP gradient buckets start only after W
// tasks, the reduced bytes equal the stage's gradients, and the last bucket waits for the last W.
TEST(ScheduleBuild, ZeroBubbleSplitAndGradientBuckets) {
  WorkloadSpec w = schedule_workload(Schedule::ZB_H1, 2, 4, 1);
  w.parallel.dp = 2;
  w.batch.global_batch *= 2;
  w.training.dp_bucket = Bytes(8.0 * 1024 * 1024);
  BuildOptions o;
  o.fold_dp = false;
  o.compute_time = [](const ComputeQuery& q) { return Seconds(q.flops.value() * 1e-15); };
  const StepProgram zb = build_step(w, o);
  WorkloadSpec plain = w;
  plain.parallel.schedule = Schedule::ONE_F_ONE_B;
  const StepProgram one = build_step(plain, o);
  auto sum = [](const StepProgram& p, Phase ph) {
    double s = 0;
    for (const Task& t : p.graph.tasks())
      if (t.kind == TaskKind::COMPUTE && t.phase == ph)
        s += t.duration.value();
    return s;
  };
  const double bw = sum(zb, Phase::BACKWARD) + sum(zb, Phase::WEIGHT_GRAD);
  EXPECT_NEAR(bw, sum(one, Phase::BACKWARD), 1e-9 * bw);
  EXPECT_GT(sum(zb, Phase::WEIGHT_GRAD), 0.3 * bw);
  EXPECT_LT(sum(zb, Phase::WEIGHT_GRAD), 0.5 * bw + 1e-12);

  std::map<int, double> reduced; // stage -> bytes
  for (TaskId id = 0; id < zb.graph.size(); ++id) {
    const Task& t = zb.graph.task(id);
    if (t.group != CommGroup::DP || t.op != CollectiveOp::ALL_REDUCE)
      continue;
    reduced[t.stage] += t.bytes.value();
    bool after_w = false;
    for (TaskId p : zb.graph.predecessors(id)) {
      const Task& pt = zb.graph.task(p);
      if (pt.kind == TaskKind::COMPUTE) {
        EXPECT_EQ(pt.phase, Phase::WEIGHT_GRAD);
        EXPECT_EQ(pt.micro_batch, 3) << "gradients are final only after the last micro-batch's W";
        after_w = true;
      }
    }
    EXPECT_TRUE(after_w);
  }
  for (int s = 0; s < 2; ++s)
    EXPECT_NEAR(reduced[s], model::dp_gradient_bytes(w, s).value(), 1.0) << "stage " << s;
}
