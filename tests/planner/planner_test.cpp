// The planner (docs/planner.md): every enumerated layout passes config::check_layout, none the
// static ledger rejects is ever proposed, the schedule validation rules reject what they should,
// and for GPT-3 175B on 1024 A100s the best simulated layout is at least as fast as Megatron's
// published TP8 PP8 (the bundled workload: 1F1B, full recomputation) in our own simulation.

#include "planner/planner.hpp"

#include "config/config.hpp"
#include "core/error.hpp"
#include "model/memory.hpp"
#include "runner/simulate.hpp"

#include "common/specs.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>

using namespace stepsim;

namespace {

const std::string SRC = STEPSIM_SOURCE_DIR;

ClusterSpec superpod() { return config::load_cluster(SRC + "/topologies/dgx-a100-superpod.yaml"); }

WorkloadSpec gpt3(const ClusterSpec& c) {
  WorkloadSpec w = config::load_workload(SRC + "/workloads/gpt3-175b.yaml");
  config::check_layout(c, w);
  return w;
}

} // namespace

// Enumeration proposes only layouts check_layout accepts, each once, covering every schedule.
TEST(Planner, EnumeratesOnlyValidLayouts) {
  const ClusterSpec c = superpod();
  const WorkloadSpec base = gpt3(c);
  const auto all = planner::enumerate_layouts(c, base);
  ASSERT_GT(all.size(), 1000u);
  std::set<std::string> seen;
  std::set<Schedule> schedules;
  for (const WorkloadSpec& w : all) {
    WorkloadSpec copy = w;
    EXPECT_NO_THROW(config::check_layout(c, copy)) << planner::describe(w);
    EXPECT_EQ(w.num_gpus(), c.num_gpus());
    EXPECT_TRUE(seen.insert(planner::describe(w)).second) << "twice: " << planner::describe(w);
    schedules.insert(w.parallel.schedule);
  }
  EXPECT_EQ(schedules.size(), 5u);
}

// The planner never proposes (ranks or simulates) a layout the static ledger says does not fit,
// and it drops some here (GPipe holds every micro-batch).
TEST(Planner, NeverProposesWhatDoesNotFit) {
  const ClusterSpec c = superpod();
  const WorkloadSpec base = gpt3(c);
  planner::PlanOptions o;
  o.simulate = false;
  o.top = 5;
  const planner::PlanResult r = planner::plan(c, base, o);
  EXPECT_LT(r.fit, r.enumerated);
  ASSERT_FALSE(r.ranked.empty());
  for (const planner::Candidate& cand : r.ranked)
    for (int s = 0; s < cand.workload.parallel.pp; ++s)
      ASSERT_LE(model::static_memory(cand.workload, c.gpu, s).peak().value(), c.gpu.hbm_capacity.value())
          << planner::describe(cand.workload) << " stage " << s;
  for (size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_LE(r.ranked[i - 1].estimate.step.value(), r.ranked[i].estimate.step.value());
}

// The schedule rules of check_layout (each one's negative case).
TEST(Planner, ScheduleValidation) {
  const ClusterSpec c = superpod();
  const WorkloadSpec base = gpt3(c);
  auto rejects = [&](WorkloadSpec w, const std::string& needle) {
    w.parallel.dp = 0;
    try {
      config::check_layout(c, w);
      ADD_FAILURE() << "accepted, expected: " << needle;
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  WorkloadSpec w = base;
  w.parallel.vp = 2; // vp without interleaving
  rejects(w, "needs parallel.schedule = interleaved");
  w.parallel.schedule = Schedule::INTERLEAVED;
  w.parallel.vp = 1;
  rejects(w, "vp >= 2");
  w.parallel.vp = 5; // 96 % (8*5) != 0
  rejects(w, "does not divide model.layers");
  w.parallel.vp = 2;
  w.batch.global_batch = 16 * 12; // 12 micro-batches, not a multiple of pp = 8
  rejects(w, "multiple of parallel.pp");
  w = base;
  w.parallel.schedule = Schedule::INTERLEAVED;
  w.parallel.vp = 2;
  w.parallel.pp = 1;
  w.parallel.tp = 8;
  rejects(w, "pp >= 2");
  w = base;
  w.parallel.schedule = Schedule::ZB_H1; // the bundled workload uses full recomputation
  rejects(w, "recompute = full");
  w.training.recompute = Recompute::SELECTIVE;
  w.parallel.dp = 0;
  EXPECT_NO_THROW(config::check_layout(c, w));
}

// GPT-3 175B on 1024 A100s: the planner's best simulated layout is at least as fast as Megatron's
// TP8 PP8 1F1B with full recomputation (simulated too, as the reference row), the best simulated
// layout fits, and the whole search takes well under a minute.
TEST(Planner, Gpt3BeatsMegatronLayout) {
  const ClusterSpec c = superpod();
  const WorkloadSpec base = gpt3(c);
  planner::PlanOptions o;
  o.top = 3;
  o.jobs = 2;
  const auto t0 = std::chrono::steady_clock::now();
  const planner::PlanResult r = planner::plan(c, base, o);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.simulated.size(), r.outcomes.size());
  ASSERT_GE(r.outcomes.size(), 2u);
  double megatron = 0, best = 1e30;
  std::string best_name;
  for (size_t i = 0; i < r.outcomes.size(); ++i) {
    ASSERT_TRUE(r.outcomes[i].ok) << r.outcomes[i].error;
    if (r.simulated[i].given) {
      megatron = r.outcomes[i].step_s;
      continue;
    }
    EXPECT_TRUE(r.outcomes[i].fits) << planner::describe(r.simulated[i].workload);
    if (r.outcomes[i].step_s < best) {
      best = r.outcomes[i].step_s;
      best_name = planner::describe(r.simulated[i].workload);
    }
    // The estimate is within 15 % of the simulation for the candidates it picked.
    EXPECT_NEAR(r.simulated[i].estimate.step.value(), r.outcomes[i].step_s, 0.15 * r.outcomes[i].step_s);
  }
  ASSERT_GT(megatron, 0.0) << "the workload's own layout was not simulated";
  EXPECT_LE(best, megatron) << best_name;
  EXPECT_LT(wall, 60.0);
  std::printf("planner: %zu layouts, %zu fit; best %s %.3f s vs Megatron TP8 PP8 1F1B full %.3f s; %.1f s wall\n",
              r.enumerated, r.fit, best_name.c_str(), best, megatron, wall);
}

// ZeRO-3 with gradient accumulation, with and without a pipeline: the estimate's exposed DP time
// follows the simulation's (each micro-batch and chunk exposes the next forward's first gather
// behind the previous backward's last reduce-scatter), and the step estimate stays within 10 %.
TEST(Planner, Zero3ExposureTracksSimulation) {
  const ClusterSpec c = superpod();
  WorkloadSpec w = gpt3(c);
  w.parallel.tp = 8;
  w.parallel.sp = true;
  w.parallel.zero_stage = 3;
  w.training.recompute = Recompute::SELECTIVE;
  w.batch.micro_batch = 4;
  std::vector<WorkloadSpec> specs;
  for (const int pp : {1, 2}) {
    WorkloadSpec s = w;
    s.parallel.pp = pp;
    s.parallel.dp = 0;
    s.parallel.schedule = pp > 1 ? Schedule::INTERLEAVED : Schedule::ONE_F_ONE_B;
    s.parallel.vp = pp > 1 ? 6 : 1;
    config::check_layout(c, s);
    specs.push_back(s);
  }
  const auto sims = planner::simulate_all(c, specs, 2);
  ASSERT_EQ(sims.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(sims[i].ok) << sims[i].error;
    const auto time_model = runner::compute_time_model(c, specs[i]);
    const planner::Estimate e = planner::estimate_step(c, specs[i], time_model);
    const std::string name = planner::describe(specs[i]);
    EXPECT_GT(sims[i].exposed_dp_s, 0.05) << name;
    EXPECT_NEAR(e.dp_exposed.value(), sims[i].exposed_dp_s, 0.35 * sims[i].exposed_dp_s) << name;
    EXPECT_NEAR(e.step.value(), sims[i].step_s, 0.10 * sims[i].step_s) << name;
    std::printf("%s: exposed DP estimated %.3f s, simulated %.3f s; step %.3f s vs %.3f s\n", name.c_str(),
                e.dp_exposed.value(), sims[i].exposed_dp_s, e.step.value(), sims[i].step_s);
  }
}
