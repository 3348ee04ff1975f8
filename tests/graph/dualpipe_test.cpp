// DualPipe and DualPipeV (docs/schedules.md, "DualPipe and DualPipeV"): the orders (every pass of
// a chunk's micro-batches once, B after F, W after B, the overlapped pairs), the peak activation
// count against DeepSeek-V3's Table 2 (pp + 1 chunk passes; DualPipeV 2pp + 1 half-size ones), and
// the bubbles of an abstract replay of the orders against the Table's closed forms:
//   1F1B (PP - 1)(F + B), ZB1P (PP - 1)(F + B - 2W), DualPipe (PP/2 - 1)(F&B + B - 3W),
// B the full backward, F&B one overlapped forward-and-backward pair. The chunk placement and the
// pipeline sends of the builder follow the two directions.

#include "graph/schedule.hpp"
#include "graph/step_builder.hpp"
#include "model/memory.hpp"
#include "model/transformer.hpp"

#include "common/specs.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;

namespace {

/// Each (chunk, micro-batch) of `order` has one F, one B and one W in that order; chunk c runs
/// micro-batches [first[c], first[c] + n); a paired pass is a backward right after a forward of
/// the other chunk. Returns the number of pairs.
int check_dual(const std::vector<PassRef>& order, int n, const int (&first)[2]) {
  std::map<std::pair<int, int>, std::vector<Phase>> seen;
  int pairs = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const PassRef& p = order[k];
    EXPECT_TRUE(p.chunk == 0 || p.chunk == 1);
    if (p.chunk != 0 && p.chunk != 1)
      return 0;
    EXPECT_GE(p.micro_batch, first[p.chunk]);
    EXPECT_LT(p.micro_batch, first[p.chunk] + n);
    auto& phases = seen[{p.chunk, p.micro_batch}];
    const size_t expected = p.phase == Phase::FORWARD ? 0 : p.phase == Phase::BACKWARD ? 1 : 2;
    EXPECT_EQ(phases.size(), expected) << "chunk " << p.chunk << " mb " << p.micro_batch;
    phases.push_back(p.phase);
    if (p.paired) {
      ++pairs;
      EXPECT_EQ(p.phase, Phase::BACKWARD);
      EXPECT_GT(k, 0u);
      if (k > 0) {
        EXPECT_EQ(order[k - 1].phase, Phase::FORWARD);
        EXPECT_NE(order[k - 1].chunk, p.chunk);
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(2 * n));
  for (const auto& [key, phases] : seen)
    EXPECT_EQ(phases.size(), 3u) << "chunk " << key.first << " mb " << key.second;
  return pairs;
}

WorkloadSpec dual_workload(Schedule s, int pp, int m) {
  return test::workload(test::small_gpt(4 * pp), 1, pp, 1, m, 1, s);
}

} // namespace

// DualPipe: chunk 0 (fed at stage 0) runs micro-batches 0..m/2-1, chunk 1 (fed at stage pp-1)
// m/2..m-1; every stage holds at most pp + 1 chunk passes (forward started, W not done), the
// Table's "PP + 1", as model::in_flight_passes says; DualPipeV 2pp + 1 chunks of half a stage.
TEST(DualPipe, OrdersAndPeakActivations) {
  for (int pp : {2, 4, 6, 8})
    for (int m : {2 * pp, 2 * pp + 2, 4 * pp}) {
      const WorkloadSpec w = dual_workload(Schedule::DUALPIPE, pp, m);
      for (int stage = 0; stage < pp; ++stage) {
        const auto order = stage_order(Schedule::DUALPIPE, stage, pp, m);
        const int pairs = check_dual(order, m / 2, {0, m / 2});
        // The steady state pairs two passes per step; the middle stages run their first pair apart.
        const int h = std::min(stage, pp - 1 - stage);
        EXPECT_EQ(pairs, 2 * (m / 2 - pp + h + 1) + (pp / 2 - h - 1) - (h == pp / 2 - 1 ? 1 : 0))
            << "pp=" << pp << " m=" << m << " stage=" << stage;
        EXPECT_EQ(peak_in_flight(order, true), pp + 1) << "pp=" << pp << " m=" << m << " stage=" << stage;
        EXPECT_EQ(model::in_flight_passes(w, stage).passes, pp + 1);
      }
    }
  for (int pp : {1, 2, 4, 8})
    for (int m : {2 * pp, 2 * pp + 1, 4 * pp}) {
      const WorkloadSpec w = dual_workload(Schedule::DUALPIPE_V, pp, m);
      for (int stage = 0; stage < pp; ++stage) {
        const auto order = stage_order(Schedule::DUALPIPE_V, stage, pp, m);
        check_dual(order, m, {0, 0});
        EXPECT_EQ(peak_in_flight(order, true), 2 * pp + 1) << "pp=" << pp << " m=" << m << " stage=" << stage;
        EXPECT_EQ(model::in_flight_passes(w, stage).passes, 2 * pp + 1);
      }
    }
  EXPECT_THROW(dualpipe_order(0, 3, 12), ModelError); // odd pp
  EXPECT_THROW(dualpipe_order(0, 4, 6), ModelError);  // m/2 < pp
  EXPECT_THROW(dualpipe_order(0, 4, 9), ModelError);  // odd m
  EXPECT_THROW(dualpipe_v_order(0, 4, 7), ModelError);
  EXPECT_TRUE(splits_backward(Schedule::DUALPIPE));
  EXPECT_TRUE(splits_backward(Schedule::DUALPIPE_V));
}

// The stage holding a direction's last chunk keeps one pass of logits at the peak (the others
// none): in_flight_passes's output_passes.
TEST(DualPipe, OutputPassesAtThePeak) {
  const int pp = 4, m = 12;
  for (Schedule s : {Schedule::DUALPIPE, Schedule::DUALPIPE_V}) {
    ParallelSpec par;
    par.pp = pp;
    par.schedule = s;
    for (int stage = 0; stage < pp; ++stage) {
      const auto order = stage_order(s, stage, pp, m);
      int now = 0, peak = 0, out_now = 0, out_at_peak = 0;
      for (const PassRef& p : order) {
        const bool out = par.global_chunk(stage, p.chunk) == par.model_chunks() - 1 ||
                         (s == Schedule::DUALPIPE && par.global_chunk(stage, p.chunk) == pp - 1);
        if (p.phase == Phase::FORWARD) {
          ++now;
          out_now += out ? 1 : 0;
          if (now >= peak)
            out_at_peak = now > peak ? out_now : std::max(out_at_peak, out_now);
          peak = std::max(peak, now);
        } else if (p.phase == Phase::WEIGHT_GRAD) {
          --now;
          out_now -= out ? 1 : 0;
        }
      }
      const bool holds_output = s == Schedule::DUALPIPE ? stage == 0 || stage == pp - 1 : stage == 0;
      EXPECT_EQ(out_at_peak, holds_output ? 1 : 0) << "stage " << stage;
      EXPECT_EQ(model::stage_layout(dual_workload(s, pp, m), stage).has_output, holds_output);
    }
  }
}

namespace {

/// Replays the orders with fixed pass times and free communication: a pass starts when its stage
/// is free and its input arrived (the forward after the previous chunk's forward, the backward
/// after the next chunk's backward or its own forward on the last chunk, W after its B); a pair
/// starts when both its passes' inputs arrived and lasts the sum of the two (F&B = F + B: the
/// GPU shares its time between them). Returns the bubble: the makespan minus a stage's busy time
/// (equal on every stage).
double replay_bubble(Schedule schedule, int pp, int m, double tf, double tb, double tw) {
  ParallelSpec par;
  par.pp = pp;
  par.schedule = schedule;
  par.vp = 1;
  std::vector<std::vector<PassRef>> orders;
  for (int s = 0; s < pp; ++s)
    orders.push_back(stage_order(schedule, s, pp, m));
  std::map<std::tuple<int, int, int, int>, double> done; // (phase, stage, chunk, mb) -> end
  auto input = [&](int s, const PassRef& p) -> double {
    auto at = [&](Phase ph, int stage, int chunk) {
      const auto it = done.find({static_cast<int>(ph), stage, chunk, p.micro_batch});
      return it == done.end() ? -1.0 : it->second;
    };
    if (p.phase == Phase::FORWARD) {
      // The previous chunk: the neighbour whose forward output comes here.
      for (int src = 0; src < pp; ++src)
        for (int c = 0; c < par.chunks_per_stage(); ++c) {
          const auto to = pipeline_neighbour(par, src, c, true);
          if (to && to->stage == s && to->chunk == p.chunk)
            return at(Phase::FORWARD, src, c);
        }
      return 0.0;
    }
    if (p.phase == Phase::BACKWARD) {
      const auto next = pipeline_neighbour(par, s, p.chunk, true);
      return next ? at(Phase::BACKWARD, next->stage, next->chunk) : at(Phase::FORWARD, s, p.chunk);
    }
    return at(Phase::BACKWARD, s, p.chunk);
  };
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::vector<double> free_at(static_cast<size_t>(pp), 0), busy(static_cast<size_t>(pp), 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      const auto& o = orders[static_cast<size_t>(s)];
      size_t& k = next[static_cast<size_t>(s)];
      while (k < o.size()) {
        const size_t n = k + 1 < o.size() && o[k + 1].paired ? 2 : 1;
        double start = free_at[static_cast<size_t>(s)], dur = 0;
        bool ready = true;
        for (size_t j = k; j < k + n; ++j) {
          const double in = input(s, o[j]);
          ready = ready && in >= 0;
          start = std::max(start, in);
          dur += o[j].phase == Phase::FORWARD ? tf : o[j].phase == Phase::BACKWARD ? tb : tw;
        }
        if (!ready)
          break;
        for (size_t j = k; j < k + n; ++j)
          done[{static_cast<int>(o[j].phase), s, o[j].chunk, o[j].micro_batch}] = start + dur;
        free_at[static_cast<size_t>(s)] = start + dur;
        busy[static_cast<size_t>(s)] += dur;
        k += n;
        progress = true;
      }
    }
  }
  for (int s = 0; s < pp; ++s) {
    EXPECT_EQ(next[static_cast<size_t>(s)], orders[static_cast<size_t>(s)].size()) << "deadlock";
    EXPECT_DOUBLE_EQ(busy[static_cast<size_t>(s)], busy[0]);
  }
  return *std::max_element(free_at.begin(), free_at.end()) - busy[0];
}

} // namespace

// DeepSeek-V3's Table 2, F and B the forward and the full backward of one stage's chunk, W its
// weight-gradient part. 1F1B and ZB1P hold for any pass times; DualPipe's closed form holds where
// the Table's cells are alike: a chunk's forward as long as its full backward, B and W halves
// (F = B, W = B/2); DualPipeV is DualPipe over 2pp chunks of half a stage.
TEST(DualPipe, ReplayedBubblesMatchTable2) {
  for (int pp : {2, 4, 6, 8})
    for (int m : {2 * pp, 2 * pp + 4, 4 * pp}) {
      for (const auto& [f, b, w] : {std::tuple{1.0, 2.0, 1.0}, std::tuple{1.0, 1.0, 1.0},
                                    std::tuple{2.0, 1.0, 1.0}, std::tuple{1.0, 0.5, 0.5}}) {
        EXPECT_NEAR(replay_bubble(Schedule::ONE_F_ONE_B, pp, m, f, b + w, 0), (pp - 1) * (f + b + w), 1e-9);
        if (b == w) { // ZB-H1's deferred W fills the 1F1B gaps exactly when B and W are alike
          EXPECT_NEAR(replay_bubble(Schedule::ZB_H1, pp, m, f, b, w), (pp - 1) * (f + (b + w) - 2 * w), 1e-9)
              << "pp=" << pp << " m=" << m;
        }
      }
      for (const double f : {1.0, 2.0, 4.0}) {
        const double full = f, w = f / 2, fb = f + full; // F&B: the pair's F + B on a shared GPU
        EXPECT_NEAR(replay_bubble(Schedule::DUALPIPE, pp, m, f, full - w, w),
                    (pp / 2 - 1) * (fb + full - 3 * w), 1e-9)
            << "pp=" << pp << " m=" << m << " F=" << f;
        // DualPipeV's chunks are half a stage: F/2 each.
        const double h = f / 2;
        EXPECT_NEAR(replay_bubble(Schedule::DUALPIPE_V, pp, m, h, h / 2, h / 2),
                    (pp - 1) * (2 * h + h - 3 * h / 2), 1e-9)
            << "pp=" << pp << " m=" << m << " F=" << f;
      }
    }
}

// With t_F = t_B = t_W (a full backward twice the forward) the replayed DualPipe bubble is
// (pp/2 - 1) t_F, against ZB-H1's (pp - 1) t_F and 1F1B's 3 (pp - 1) t_F.
TEST(DualPipe, ReplayedBubbleAtEqualPassTimes) {
  for (int pp : {4, 8})
    for (int m : {2 * pp, 4 * pp}) {
      EXPECT_NEAR(replay_bubble(Schedule::DUALPIPE, pp, m, 1, 1, 1), pp / 2 - 1.0, 1e-9);
      EXPECT_NEAR(replay_bubble(Schedule::ZB_H1, pp, m, 1, 1, 1), pp - 1.0, 1e-9);
      EXPECT_NEAR(replay_bubble(Schedule::ONE_F_ONE_B, pp, m, 1, 2, 0), 3.0 * (pp - 1), 1e-9);
    }
}

// The builder: DualPipe's stage i runs the layers of stage i (chunk 0) and of stage pp-1-i (chunk
// 1), twice the parameters of 1F1B's stage; DualPipeV's the layers of chunks i and 2pp-1-i of 2pp,
// one copy. Pipeline sends: DualPipe's 2m(pp-1) per TP rank as 1F1B's (each micro-batch crosses
// pp-1 boundaries), half of them towards stage 0; DualPipeV's 2m(2pp-1) - 2m (the V's tip turns
// on its own GPU).
TEST(DualPipe, BuilderPlacesBothDirections) {
  const int pp = 4, m = 8;
  auto build = [](const WorkloadSpec& w) {
    BuildOptions o;
    o.fold_dp = false;
    o.compute_time = [](const ComputeQuery&) { return Seconds(1e-3); };
    return build_step(w, o);
  };
  const WorkloadSpec one = dual_workload(Schedule::ONE_F_ONE_B, pp, m);
  const int per_stage = static_cast<int>(one.model.layers) / pp;
  for (Schedule s : {Schedule::DUALPIPE, Schedule::DUALPIPE_V}) {
    const WorkloadSpec w = dual_workload(s, pp, m);
    const StepProgram prog = build(w);
    std::map<int, std::set<int>> layers; // stage -> layers
    std::map<int, std::set<int>> logits; // stage -> micro-batches of its logits
    size_t sends = 0, upward = 0;
    for (const Task& t : prog.graph.tasks()) {
      if (t.kind == TaskKind::COMPUTE && t.layer >= 0)
        layers[t.stage].insert(t.layer);
      if (t.kind == TaskKind::COMPUTE && t.block == Block::LOGITS && t.phase == Phase::FORWARD)
        logits[t.stage].insert(t.micro_batch);
      if (t.group == CommGroup::PP && t.op == CollectiveOp::SEND) {
        ++sends;
        const auto ranks = prog.graph.participants(t);
        upward += prog.grid.pp_of(ranks[1]) < prog.grid.pp_of(ranks[0]) ? 1 : 0;
      }
    }
    for (int stage = 0; stage < pp; ++stage) {
      std::set<int> expected;
      const int half = per_stage / 2;
      for (int l = 0; l < per_stage; ++l) {
        if (s == Schedule::DUALPIPE) {
          expected.insert(stage * per_stage + l);
          expected.insert((pp - 1 - stage) * per_stage + l);
        } else {
          expected.insert(stage * half + l % half);
          expected.insert((2 * pp - 1 - stage) * half + l % half);
        }
      }
      EXPECT_EQ(layers[stage], expected) << "stage " << stage;
      const double ratio = model::params_on_rank(w, stage) / model::params_on_rank(one, stage);
      if (stage > 0 && stage < pp - 1) { // without the embedding and output
        EXPECT_NEAR(ratio, s == Schedule::DUALPIPE ? 2.0 : 1.0, 1e-12) << "stage " << stage;
      }
    }
    if (s == Schedule::DUALPIPE) {
      EXPECT_EQ(sends, static_cast<size_t>(2 * m * (pp - 1)));
      EXPECT_EQ(upward, sends / 2);
      EXPECT_EQ(logits[pp - 1].size(), static_cast<size_t>(m / 2)); // chunk 0's direction
      EXPECT_EQ(logits[0].size(), static_cast<size_t>(m / 2));      // chunk 1's
    } else {
      EXPECT_EQ(sends, static_cast<size_t>(2 * m * (2 * pp - 2)));
      EXPECT_EQ(upward, sends / 2);
      EXPECT_EQ(logits[0].size(), static_cast<size_t>(m));
      EXPECT_EQ(logits.count(pp - 1), 0u);
    }
  }
}
