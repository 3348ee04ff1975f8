// The planner under a degradation (docs/planner.md, "Under a degradation"; docs/degraded.md):
// the estimate's inputs change as the closed forms stated at each test say, and the ranking
// changes where they say it must.

#include "planner/planner.hpp"

#include "config/config.hpp"
#include "graph/compute_cost.hpp"
#include "runner/simulate.hpp"

#include "common/specs.hpp"
#include "common/subprocess.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace stepsim;

namespace {

/// A small GPT (4 layers, hidden 1024, 1024 tokens) in `tp` x `pp` x `dp`, 4 micro-batches of 2.
WorkloadSpec small(const ClusterSpec& c, int tp, int pp, int dp) {
  return config::check_layout(c, test::workload(test::small_gpt(4, 1024, 1024), tp, pp, dp, 4, 2)).workload;
}

planner::Estimate estimate(const ClusterSpec& c, const WorkloadSpec& w) {
  return planner::estimate_step(c, w, runner::compute_time_model(c, w));
}

/// Compute is free: the estimate is its communication alone.
planner::Estimate comm_only(const ClusterSpec& c, const WorkloadSpec& w) {
  const graph::ComputeTimeFn free = [](const graph::ComputeQuery&) {
    return graph::ComputeCost(Seconds(0.0));
  };
  return planner::estimate_step(c, w, free);
}

/// The bandwidth term of a ring all-reduce of `w`'s gradients over its dp ranks across nodes as
/// the estimate charges it with free compute (ZeRO-0: all of it exposed): its time less the
/// latency term 2(n - 1) alpha.
double dp_bandwidth_term(const ClusterSpec& c, const WorkloadSpec& w) {
  const double n = w.parallel.dp;
  const double alpha = c.nic.latency.value() + 2.0 * c.fabric.switch_latency.value();
  return comm_only(c, w).dp_exposed.value() - 2.0 * (n - 1) * alpha;
}

double rel(double a, double b) {
  return std::abs(a / b - 1.0);
}

} // namespace

// Pure data parallelism, one GPU at speed s: every replica waits for the slow one at the gradient
// reduction, so the estimate's compute and optimizer are those of the slow GPU, C / s (to 1e-12),
// nothing else changes, and the step grows by C x (1/s - 1), C the compute and optimizer of the
// healthy estimate (to 1e-9). The simulated step grows by its compute time x (1/s - 1)
// (tests/degraded): the estimate's growth is within 2 % of the simulated one.
TEST(PlannerDegraded, PureDpEstimateGrowsByComputeShare) {
  const double s = 0.5;
  const ClusterSpec healthy = test::dgx_cluster(2, 8, 8);
  ClusterSpec slow = healthy;
  slow.degraded.gpus = {{.node = 1, .gpu = 5, .speed = s}};
  const WorkloadSpec w = small(healthy, 1, 1, 16);
  const planner::Estimate a = estimate(healthy, w), b = estimate(slow, w);
  const double c = a.compute.value() + a.optimizer.value();
  EXPECT_LT(rel(b.compute.value(), a.compute.value() / s), 1e-12);
  EXPECT_LT(rel(b.optimizer.value(), a.optimizer.value() / s), 1e-12);
  EXPECT_EQ(b.tp_comm.value(), a.tp_comm.value());
  EXPECT_EQ(b.bubble.value(), a.bubble.value());
  EXPECT_EQ(b.dp_exposed.value(), a.dp_exposed.value());
  const double grown = b.step.value() - a.step.value();
  EXPECT_LT(rel(grown, c * (1 / s - 1)), 1e-9);

  const double before = planner::simulate_all(healthy, {w}, 1).at(0).step_s;
  const double after = planner::simulate_all(slow, {w}, 1).at(0).step_s;
  ASSERT_GT(after - before, 0.05 * before);
  EXPECT_LT(rel(grown, after - before), 0.02) << grown << " estimated, " << after - before << " simulated";
}

// A pipeline with one slow GPU: its stage's passes run at speed s and set the pace of the steady
// state, the fill and drain cross the other stages at theirs. On the last stage (it holds the
// output layer) the estimate's compute is C / s and its bubble as healthy; on the first, whose
// passes are the last's without the output layer, C x max(1, (C - C_out) / (s C)) with C_out
// the output layer's share. The second slow GPU of a stage does not add to the first.
TEST(PlannerDegraded, PipelineRunsAtTheSlowestStagesPace) {
  const double s = 0.5;
  const ClusterSpec healthy = test::dgx_cluster(2, 8, 8);
  const WorkloadSpec w = small(healthy, 2, 2, 4); // stage 0 on node 0, stage 1 on node 1
  const planner::Estimate a = estimate(healthy, w);
  ClusterSpec last = healthy;
  last.degraded.gpus = {{.node = 1, .gpu = 2, .speed = s}, {.node = 1, .gpu = 6, .speed = 0.9}};
  const planner::Estimate b = estimate(last, w);
  EXPECT_LT(rel(b.compute.value(), a.compute.value() / s), 1e-12);
  EXPECT_EQ(b.bubble.value(), a.bubble.value());

  ClusterSpec first = healthy;
  first.degraded.gpus = {{.node = 0, .gpu = 2, .speed = s}};
  const planner::Estimate f = estimate(first, w);
  // The output layer's share of the last stage's compute: its forward and backward blocks.
  const auto model = runner::compute_time_model(healthy, w);
  const auto block = [&](graph::Phase ph) {
    return graph::gpu_compute_cost(w, model, graph::block_query(w, graph::Block::LOGITS, ph, 1)).time.value();
  };
  const double m = static_cast<double>(w.micro_batches());
  const double out = m * (block(graph::Phase::FORWARD) + block(graph::Phase::BACKWARD));
  const double c = a.compute.value();
  ASSERT_GT(out, 0.05 * c);
  EXPECT_LT(rel(f.compute.value(), std::max(c, (c - out) / s)), 1e-9);
  EXPECT_LT(f.compute, b.compute);
}

// Where the ranking must change. Communication free, a small GPT whose output layer is heavy
// (vocabulary 32000 against hidden 1024: about half of a layer's 4 blocks): pure DP (A, pp 1 dp 16)
// beats a 2-stage pipeline (B, pp 2 dp 8), which has a bubble and twice A's micro-batches through
// a last stage holding half the layers and the whole output layer. One GPU of node 0 at speed s:
// in A every replica waits for it, A' = A + C_A x (1/s - 1) (C_A: compute and optimizer); in B it
// is on stage 0, whose passes lack the output layer, B' = m_B x (T_B - G_B) / s + bubble_B +
// optimizer' (T_B the last stage's pass, G_B its output layer's). With G_B / T_B near one half and
// s = 0.5, B's compute stays at its healthy value while A's doubles: B must win. The same GPU on
// node 1 (B's last stage) slows B as much as A, and A stays the best.
TEST(PlannerDegraded, SlowGpuOffTheOutputStageChangesTheBest) {
  const double s = 0.5;
  const ClusterSpec healthy = test::free_comm_cluster(2, 8);
  const WorkloadSpec a = small(healthy, 1, 1, 16);
  WorkloadSpec b = a; // the same global batch: 8 micro-batches per pipeline
  b.parallel.pp = 2;
  b.parallel.dp = 8;
  b = config::check_layout(healthy, b).workload;
  const planner::Estimate ha = estimate(healthy, a), hb = estimate(healthy, b);
  EXPECT_LT(ha.step, hb.step);
  ClusterSpec first = healthy;
  first.degraded.gpus = {{.node = 0, .gpu = 2, .speed = s}};
  const planner::Estimate da = estimate(first, a), db = estimate(first, b);
  EXPECT_LT(rel(da.step.value(), (ha.step + (ha.compute + ha.optimizer) * (1 / s - 1)).value()), 1e-9);
  EXPECT_LT(rel(db.compute.value(), hb.compute.value()), 1e-9) << "stage 0's passes / s stay below stage 1's";
  EXPECT_EQ(db.bubble.value(), hb.bubble.value());
  EXPECT_LT(db.step, da.step) << "B must win with the slow GPU off its output stage";
  // The simulations on the degraded cluster agree (each within 5 % of its estimate).
  const std::vector<planner::Simulated> sim = planner::simulate_all(first, {a, b}, 2);
  ASSERT_TRUE(sim.at(0).ok && sim.at(1).ok) << sim[0].error << sim[1].error;
  EXPECT_LT(sim[1].step_s, sim[0].step_s);
  EXPECT_LT(rel(sim[0].step_s, da.step.value()), 0.05);
  EXPECT_LT(rel(sim[1].step_s, db.step.value()), 0.05);

  ClusterSpec last = healthy;
  last.degraded.gpus = {{.node = 1, .gpu = 2, .speed = s}};
  const planner::Estimate la = estimate(last, a), lb = estimate(last, b);
  EXPECT_LT(rel(lb.compute.value(), hb.compute.value() / s), 1e-9);
  EXPECT_LT(la.step, lb.step);

  // plan() ranks so: its best estimate (pipeline depth varied, the rest fixed) moves to pp 2.
  planner::PlanOptions o;
  o.simulate = false;
  o.space.micro_batches = {2};
  o.space.max_tp = 1;
  o.space.vary_zero = o.space.vary_recompute = o.space.vary_sp = o.space.vary_schedule = false;
  EXPECT_EQ(planner::plan(healthy, a, o).ranked.at(0).workload.parallel.pp, 1);
  EXPECT_EQ(planner::plan(first, a, o).ranked.at(0).workload.parallel.pp, 2);
}

// One of 8 NICs down on a node the job uses: the node's GPUs share its 7 working NICs, so the
// cross-node gradient all-reduce of pure DP runs at 7/8 of the bandwidth (its bandwidth term
// x 8/7, to 1e-9); a NIC at half its rate: the GPU behind it, and in lock step the ring, at half
// (x 2). A TP group inside a node does not see either, nor does a job on nodes without them.
TEST(PlannerDegraded, NicsScaleCrossNodeBandwidth) {
  const ClusterSpec healthy = test::dgx_cluster(3, 8, 8);
  const WorkloadSpec dp = small(test::dgx_cluster(2, 8, 8), 1, 1, 16);
  ClusterSpec two = healthy;
  two.nodes = 2;
  const double base = dp_bandwidth_term(two, dp);
  ClusterSpec down = two;
  down.degraded.nics = {{.node = 1, .nic = 3, .down = true}};
  EXPECT_LT(rel(dp_bandwidth_term(down, dp), base * 8.0 / 7.0), 1e-9);
  ClusterSpec half = two;
  half.degraded.nics = {{.node = 0, .nic = 6, .bandwidth = healthy.nic.bandwidth * 0.5}};
  EXPECT_LT(rel(dp_bandwidth_term(half, dp), base * 2.0), 1e-9);

  const WorkloadSpec tp = small(test::dgx_cluster(2, 8, 8), 8, 1, 2);
  EXPECT_EQ(comm_only(down, tp).tp_comm.value(), comm_only(two, tp).tp_comm.value());
  // Node 2 is not among the job's: its 16 ranks fill nodes 0 and 1.
  ClusterSpec spare = healthy;
  spare.degraded.nics = {{.node = 2, .nic = 0, .down = true}};
  spare.degraded.gpus = {{.node = 2, .gpu = 0, .speed = 0.5}};
  EXPECT_EQ(comm_only(spare, dp).step.value(), comm_only(two, dp).step.value());
  EXPECT_EQ(estimate(spare, dp).step.value(), estimate(two, dp).step.value());
}

// A fat-tree leaf with half its uplinks down: a DP group across leaves crosses them at half the
// bandwidth (its bandwidth term x 2, to 1e-9); a group inside one leaf does not.
TEST(PlannerDegraded, HalfTheUplinksHalveCrossLeafBandwidth) {
  ClusterSpec across = test::dgx_cluster(2, 8, 8);
  across.fabric.nodes_per_leaf = 1; // a leaf per node: 8 uplinks each
  const WorkloadSpec dp = small(across, 1, 1, 16);
  const double base = dp_bandwidth_term(across, dp);
  ClusterSpec cut = across;
  cut.degraded.leaves = {{.leaf = 1, .uplinks_down = 4}};
  EXPECT_LT(rel(dp_bandwidth_term(cut, dp), base * 2.0), 1e-9);

  ClusterSpec inside = test::dgx_cluster(4, 8, 8);
  inside.fabric.nodes_per_leaf = 2;
  ClusterSpec job = inside;
  job.nodes = 2; // the job's 16 ranks fill leaf 0
  job.fabric.nodes_per_leaf = 2;
  inside.degraded.leaves = {{.leaf = 1, .uplinks_down = 8}};
  const WorkloadSpec w = small(job, 1, 1, 16);
  EXPECT_EQ(comm_only(inside, w).step.value(), comm_only(job, w).step.value());
}

// A node down: the planner enumerates layouts of the GPUs that are up only.
TEST(PlannerDegraded, DownNodesLeaveFewerGpus) {
  ClusterSpec c = test::dgx_cluster(3, 8, 8);
  c.degraded.nodes = {{.node = 1}};
  planner::SearchSpace space;
  space.vary_zero = space.vary_recompute = space.vary_sp = space.vary_schedule = false;
  const std::vector<WorkloadSpec> all =
      planner::enumerate_layouts(c, test::workload(test::small_gpt(4, 1024, 1024), 1, 1, 16, 4, 2), space);
  ASSERT_FALSE(all.empty());
  for (const WorkloadSpec& w : all)
    EXPECT_EQ(w.num_gpus(), 16) << planner::describe(w);
}

// `plan --steps N`: each candidate is simulated for N consecutive steps and its simulated step is
// their mean, the same as `run --steps N` gives for that layout (to 1e-12); without noise the N
// steps equal the single one (to 1e-9 of it: a step's time is a difference of two absolute times).
TEST(PlannerSteps, SimulatedStepIsTheMeanOfTheSteps) {
  const ClusterSpec c = test::dgx_cluster(1, 8, 8);
  WorkloadSpec w = small(c, 2, 2, 2);
  const double one = planner::simulate_all(c, {w}, 1).at(0).step_s;
  const double quiet = planner::simulate_all(c, {w}, {.jobs = 1, .steps = 3}).at(0).step_s;
  EXPECT_LT(rel(quiet, one), 1e-9);

  w.training.variability.kernel_cv = 0.05;
  const double noisy = planner::simulate_all(c, {w}, {.jobs = 1, .steps = 4}).at(0).step_s;
  const test::ChildResult run = test::run_in_child([&] {
    const runner::Simulation sim = runner::simulate(c, w, {.steps = 4});
    return std::vector<double>{sim.summary.variability.value().mean.value(),
                               sim.summary.variability.value().max.value()};
  });
  ASSERT_TRUE(run.ok) << run.error;
  EXPECT_LT(rel(noisy, run.values[0]), 1e-12);
  EXPECT_LT(noisy, run.values[1]); // a mean, not the slowest step
  EXPECT_GT(noisy, one);           // each step waits for its slowest GPU
}
