// The backward's TP collectives beside the weight-gradient GEMMs (parallel.tp_grad_overlap,
// docs/model.md "TP in the backward"), replayed: the step shortens by exactly the part of each
// backward collective its GEMM covers.

#include "common/specs.hpp"
#include "common/subprocess.hpp"
#include "engine/helpers.hpp"
#include "model/transformer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;
using stepsim::test::run_in_child;

namespace {

constexpr double T_F = 1e-3;     // attention or MLP forward
constexpr double T_B = 2e-3;     // attention or MLP backward
constexpr double T_DGRAD = 4e-4; // of which the input linear's data gradient
constexpr int LAYERS = 3;
constexpr int MICRO_BATCHES = 2;

/// tp 2 on one node, no pipeline or DP; blocks of fixed times, the logits and optimizer free.
WorkloadSpec tp_workload(bool sp, bool overlap) {
  WorkloadSpec w =
      stepsim::test::workload(stepsim::test::small_gpt(LAYERS, 4096, 2048), 2, 1, 1, MICRO_BATCHES);
  w.parallel.sp = sp;
  w.parallel.tp_grad_overlap = overlap;
  return w;
}

struct Replayed {
  double step = 0;
  double hidden = 0;   ///< Σ over the backward blocks' summing collectives of min(its time, wgrad)
  double regather = 0; ///< Σ of the re-gathers' times
};

/// Replays tp_workload with the input linear's weight gradient `wgrad` s long. `hidden` is
/// measured on the run itself: the summing collective (all-reduce, or SP's reduce-scatter) of
/// each backward attention or MLP block.
Replayed replay(bool sp, bool overlap, double wgrad) {
  const auto r = run_in_child([=] {
    const WorkloadSpec w = tp_workload(sp, overlap);
    BuildOptions o;
    o.compute_time = [wgrad](const ComputeQuery& q) {
      if (q.block != Block::ATTENTION && q.block != Block::MLP)
        return ComputeCost(Seconds(0.0));
      ComputeCost c(Seconds(q.phase == Phase::BACKWARD ? T_B : T_F));
      if (q.phase == Phase::BACKWARD) {
        c.input_dgrad = Seconds(T_DGRAD);
        c.input_wgrad = Seconds(wgrad);
      }
      return c;
    };
    const StepProgram prog = build_step(w, o);
    ClusterSpec cluster = stepsim::test::dgx_cluster(1, 2, 1);
    engine::Replay replay(prog, cluster);
    const engine::ReplayResult res = replay.run();
    // Per layer and micro-batch, the backward's TP collectives in issue order: two all-reduces
    // (MLP, attention); with SP per block the re-gather, the reduce-scatter, the all-gather below.
    std::map<std::pair<int, int>, std::vector<TaskId>> issued;
    for (TaskId id = 0; id < prog.graph.size(); ++id) {
      const Task& t = prog.graph.task(id);
      if (t.kind == TaskKind::COLLECTIVE && t.group == CommGroup::TP && t.phase == Phase::BACKWARD &&
          t.layer >= 0)
        issued[{t.layer, t.micro_batch}].push_back(id);
    }
    double hidden = 0, regather = 0;
    for (const auto& [key, ids] : issued) {
      if (ids.size() != (sp ? 6u : 2u))
        throw std::runtime_error("unexpected backward TP collectives: " + std::to_string(ids.size()));
      for (size_t i = 0; i < ids.size(); ++i) {
        const double d = res.end[ids[i]].value() - res.start[ids[i]].value();
        if (!sp || i % 3 == 1) // the all-reduce, or the reduce-scatter
          hidden += std::min(d, wgrad);
        else if (i % 3 == 0)
          regather += d;
      }
    }
    return std::vector<double>{res.step_time.value(), hidden, regather};
  });
  EXPECT_TRUE(r.ok) << r.error;
  if (!r.ok)
    return {};
  return Replayed{r.values[0], r.values[1], r.values[2]};
}

} // namespace

// Without SP: each backward block's all-reduce runs beside the weight gradient, so the step is
// shorter by Σ min(all-reduce, wgrad): all of it with a long GEMM, the GEMM's length with a short one.
TEST(TpGradOverlap, AllReduceHiddenUpToTheWeightGradient) {
  for (const double wgrad : {6e-4, 2e-5}) {
    const Replayed off = replay(false, false, wgrad);
    const Replayed on = replay(false, true, wgrad);
    ASSERT_GT(on.hidden, 0.0);
    EXPECT_NEAR(off.step - on.step, on.hidden, 1e-9 + 1e-6 * off.step) << "wgrad " << wgrad;
    if (wgrad < 1e-4) { // the short GEMM covers only itself: 2 blocks x layers x micro-batches
      EXPECT_NEAR(on.hidden, 2.0 * LAYERS * MICRO_BATCHES * wgrad, 1e-12);
    }
  }
}

// With SP: the re-gather of each input linear's input (an all-gather of the b·s·h activation) is
// new traffic in both modes. Without the overlap it is exposed, with it it runs beside the data
// gradient (400 µs, longer); the reduce-scatter hides behind the weight gradient; the all-gather
// into the block below stays exposed in both.
TEST(TpGradOverlap, SequenceParallelRegatherBesideTheDataGradient) {
  const double wgrad = 6e-4;
  const Replayed off = replay(true, false, wgrad);
  const Replayed on = replay(true, true, wgrad);
  ASSERT_GT(off.regather, 0.0);
  EXPECT_NEAR(on.regather, off.regather, 1e-6 * off.regather); // same traffic, same time alone on NVLink
  EXPECT_NEAR(off.step - on.step, off.regather + on.hidden, 1e-9 + 1e-6 * off.step);
}
