// Several jobs on one fabric (runner::simulate_jobs, docs/jobs.md), against closed forms. Each
// replay runs in a child process (one SimGrid simulation per process).
#include "common/specs.hpp"
#include "common/subprocess.hpp"
#include "runner/jobs.hpp"
#include "runner/simulate.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace stepsim {
namespace {

constexpr double NIC_RATE = 25e9 * 0.96; // dgx_cluster's NIC bandwidth x efficiency

/// Four single-GPU nodes, two under each leaf, leaf uplinks 2:1 oversubscribed: an uplink
/// carries exactly one NIC's rate.
ClusterSpec two_leaves() {
  ClusterSpec c = test::dgx_cluster(4, 1, 1);
  c.fabric.nodes_per_leaf = 2;
  c.fabric.oversubscription = 2.0;
  return c;
}

/// Pure data parallelism over two GPUs, the gradients in one bucket: the step is the compute,
/// then one DP all-reduce that nothing hides.
JobPlacement dp_job(const std::string& name, std::vector<int> nodes,
                    const ClusterSpec& shared = two_leaves()) {
  JobPlacement p;
  p.name = name;
  p.cluster = job_view(shared, nodes);
  p.workload = test::workload(test::small_gpt(2), 1, 1, 2, 1);
  p.workload.training.dp_bucket = Bytes(1e12);
  p.nodes = std::move(nodes);
  return p;
}

/// A job's DP all-reduces: their payloads summed and their simulated durations summed.
struct DpTraffic {
  double bytes = 0;
  double seconds = 0;
};

DpTraffic dp_traffic(const runner::JobRun& run) {
  DpTraffic t;
  for (graph::TaskId id = 0; id < run.program.graph.size(); ++id) {
    const graph::Task& task = run.program.graph.task(id);
    if (task.kind != TaskKind::COMPUTE && task.group == CommGroup::DP) {
      t.bytes += task.bytes.value();
      t.seconds += run.end[id].value() - run.start[id].value();
    }
  }
  return t;
}

/// Step times of every job, then the first job's DP payload, DP time and exposed DP time.
std::vector<double> simulate(std::vector<JobPlacement> jobs, double share = 0.0,
                             const ClusterSpec& shared = two_leaves()) {
  const test::ChildResult r = test::run_in_child([&] {
    JobsSpec spec{.source = "test", .cluster = shared, .background_share = share, .jobs = jobs};
    const runner::JobsSimulation sim = runner::simulate_jobs(spec);
    std::vector<double> out;
    for (const runner::JobRun& run : sim.jobs)
      out.push_back(run.summary.step_time.value());
    const DpTraffic dp = dp_traffic(sim.jobs.front());
    out.insert(out.end(), {dp.bytes, dp.seconds, sim.jobs.front().summary.exposed.dp.value()});
    return out;
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.values;
}

// A two-rank ring all-reduce sends S bytes each way over the route between the two nodes. Alone,
// a job's route crosses its leaf's uplink at exactly the NIC's rate; two jobs placed across the
// leaves share both uplinks, so each all-reduce runs at half the rate: the step grows by S / rate,
// the all-reduce's alone transfer time again, as long as nothing hides it (its exposed time).
TEST(Jobs, CrossLeafJobsSlowEachOtherByTheHalvedUplink) {
  const std::vector<double> alone = simulate({dp_job("a", {0, 2})});
  const std::vector<double> shared = simulate({dp_job("a", {0, 2}), dp_job("b", {1, 3})});
  ASSERT_EQ(alone.size(), 4u);
  ASSERT_EQ(shared.size(), 5u);
  const double bytes = alone[1];
  ASSERT_GT(bytes, 1e8); // comm-heavy enough for latency to be negligible
  const double transfer = bytes / NIC_RATE;
  // Alone: the all-reduce is exposed whole and runs at the NIC's rate.
  EXPECT_NEAR(alone[2], transfer, 0.01 * transfer);
  EXPECT_NEAR(alone[3], alone[2], 0.01 * alone[2]);
  // Shared: the same jobs, identical, each slowed by the all-reduce's alone transfer time.
  EXPECT_EQ(shared[0], shared[1]);
  EXPECT_NEAR(shared[0] - alone[0], alone[3], 0.02 * transfer);
  EXPECT_NEAR(shared[3], 2.0 * alone[2], 0.02 * alone[2]);
}

// Placed inside separate leaves, the jobs share no link: each runs as it does alone, exactly.
TEST(Jobs, JobsInSeparateLeavesDoNotSlowEachOther) {
  const std::vector<double> alone = simulate({dp_job("a", {0, 1})});
  const std::vector<double> shared = simulate({dp_job("a", {0, 1}), dp_job("b", {2, 3})});
  ASSERT_EQ(shared.size(), 5u);
  EXPECT_EQ(shared[0], alone[0]);
  EXPECT_EQ(shared[1], alone[0]);
}

// Background share 0.5: every inter-node link runs at half its bandwidth, so the comm-bound
// all-reduce between two nodes takes twice as long (its latency, microseconds, aside).
TEST(Jobs, HalfBackgroundShareDoublesTheInterNodeCollective) {
  const std::vector<double> free = simulate({dp_job("a", {0, 1})});
  const std::vector<double> busy = simulate({dp_job("a", {0, 1})}, 0.5);
  ASSERT_EQ(busy.size(), 4u);
  EXPECT_NEAR(busy[2] / free[2], 2.0, 0.01);
  EXPECT_NEAR(busy[0] - free[0], free[2], 0.01 * free[2]);
}

// The shared replay counts each job's bytes on the links both cross: both leaf uplinks carry each
// job's all-reduce payload (S each way, one direction per uplink).
TEST(Jobs, ContendedLinksCarryEachJobsPayload) {
  const test::ChildResult r = test::run_in_child([] {
    JobsSpec spec{.source = "test",
                  .cluster = two_leaves(),
                  .background_share = 0.0,
                  .jobs = {dp_job("a", {0, 2}), dp_job("b", {1, 3})}};
    const runner::JobsSimulation sim = runner::simulate_jobs(spec);
    std::vector<double> out = {dp_traffic(sim.jobs[0]).bytes};
    for (const engine::LinkLoad& l : sim.result.link_loads)
      if (l.link == "leaf0-up" || l.link == "leaf1-up")
        out.insert(out.end(), l.bytes.begin(), l.bytes.end());
    return out;
  });
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.values.size(), 5u);
  for (size_t i = 1; i < 5; ++i)
    EXPECT_NEAR(r.values[i], r.values[0], 1e-6 * r.values[0]);
}

// A GPU at speed s on job b's second node (its rank 1): in pure data parallelism the step grows
// by the compute x (1/s - 1) (the all-reduce waits for it), job a in its own leaf does not move,
// and b's summary names the slow GPU by b's own rank.
TEST(Jobs, ASlowGpuSlowsOnlyTheJobOnIt) {
  constexpr double SPEED = 0.5;
  ClusterSpec shared = two_leaves();
  shared.degraded.gpus.push_back(DegradedSpec::Gpu{.node = 3, .gpu = 0, .speed = SPEED, .where = "test"});
  const std::vector<double> perfect = simulate({dp_job("a", {0, 1}), dp_job("b", {2, 3})});
  const std::vector<double> slow =
      simulate({dp_job("a", {0, 1}, shared), dp_job("b", {2, 3}, shared)}, 0.0, shared);
  ASSERT_EQ(slow.size(), 5u);
  const double compute = perfect[0] - perfect[4]; // the step less its exposed all-reduce
  EXPECT_EQ(slow[0], perfect[0]);
  EXPECT_NEAR(slow[1] - perfect[1], compute * (1.0 / SPEED - 1.0), 0.01 * compute);

  const JobPlacement b = dp_job("b", {2, 3}, shared);
  ASSERT_EQ(b.cluster.degraded.gpus.size(), 1u);
  EXPECT_EQ(b.cluster.degraded.gpus.front().node, 1); // node 3 is b's node 1
  EXPECT_TRUE(dp_job("a", {0, 1}, shared).cluster.degraded.gpus.empty());
}

// A node down is given to no job and moves no rank: the jobs beside it run as on the perfect
// cluster, exactly (a single job's ranks would fill the nodes that are up, here they must not:
// job a's ranks are the GPUs of nodes 2 and 3 whatever is down).
TEST(Jobs, ADownNodeMovesNoRankOfTheJobsBesideIt) {
  ClusterSpec shared = two_leaves();
  shared.degraded.nodes.push_back(DegradedSpec::Node{.node = 0, .where = "test"});
  const std::vector<double> alone = simulate({dp_job("a", {2, 3})});
  const std::vector<double> beside = simulate({dp_job("a", {2, 3}, shared)}, 0.0, shared);
  ASSERT_EQ(beside.size(), 4u);
  EXPECT_EQ(beside, alone);
  // A job given the down node is refused.
  const test::ChildResult r = test::run_in_child([&] {
    JobsSpec spec{
        .source = "test", .cluster = shared, .background_share = 0.0, .jobs = {dp_job("a", {0, 1}, shared)}};
    (void)runner::simulate_jobs(spec);
    return std::vector<double>{};
  });
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("node 0 is not a free node (up, not given to another job)"), std::string::npos)
      << r.error;
}

/// Sixteen 8-GPU nodes, four under each leaf, uplinks 2:1 oversubscribed.
ClusterSpec four_leaves() {
  ClusterSpec c = test::dgx_cluster(16, 8, 8);
  c.fabric.nodes_per_leaf = 4;
  c.fabric.oversubscription = 2.0;
  return c;
}

/// tp 8, pp 2, dp 4 on 8 nodes: each replica's stage is one node, and its pipeline sends and the
/// DP all-reduces cross the leaves.
JobPlacement pipeline_job(const std::string& name, std::vector<int> nodes) {
  JobPlacement p;
  p.name = name;
  p.cluster = job_view(four_leaves(), nodes);
  p.workload = test::workload(test::small_gpt(8, 4096, 2048), 8, 2, 4, 4);
  p.nodes = std::move(nodes);
  return p;
}

/// Per job: step time, exposed DP time, simulated GPUs; folded or every replica simulated.
std::vector<double> pipeline_jobs(const std::vector<JobPlacement>& jobs, bool fold) {
  const test::ChildResult r = test::run_in_child([&] {
    JobsSpec spec{.source = "test", .cluster = four_leaves(), .background_share = 0.0, .jobs = jobs};
    const runner::JobsSimulation sim = runner::simulate_jobs(spec, {.fold = fold});
    std::vector<double> out;
    for (const runner::JobRun& run : sim.jobs)
      out.insert(out.end(), {run.summary.step_time.value(), run.summary.exposed.dp.value(),
                             static_cast<double>(run.summary.simulated_gpus)});
    return out;
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.values;
}

// Folding replicas by their placement (one simulated per class of leaf pattern and leaf load, the
// others' pipeline sends copied) gives the step of simulating every replica: within 0.5 %, and
// the exposed DP time within 2 % (the accuracy bound of every folding, docs/engine.md). Spread
// and packed jobs fold to one replica each; in the mixed placement each job's replicas sit under
// leaves of two loads (3 + 1 and 1 + 3 nodes of the two jobs), which makes two classes.
TEST(Jobs, FoldedJobsGiveTheStepOfEveryReplicaSimulated) {
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> placements = {
      {{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}, // spread
      {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}, // packed
      {{0, 1, 2, 4, 8, 9, 10, 12}, {3, 5, 6, 7, 11, 13, 14, 15}}, // mixed
  };
  const std::vector<double> simulated_gpus = {16, 16, 32}; // of a job's 64
  for (size_t k = 0; k < placements.size(); ++k) {
    const std::vector<JobPlacement> both = {pipeline_job("a", placements[k].first),
                                            pipeline_job("b", placements[k].second)};
    for (const std::vector<JobPlacement>& jobs : {both, std::vector<JobPlacement>{both.front()}}) {
      const std::vector<double> folded = pipeline_jobs(jobs, true);
      const std::vector<double> every = pipeline_jobs(jobs, false);
      ASSERT_EQ(folded.size(), 3 * jobs.size());
      ASSERT_EQ(every.size(), folded.size());
      for (size_t j = 0; j < jobs.size(); ++j) {
        SCOPED_TRACE("placement " + std::to_string(k) + ", job " + std::to_string(j) + " of " +
                     std::to_string(jobs.size()));
        EXPECT_NEAR(folded[3 * j], every[3 * j], 0.005 * every[3 * j]);
        EXPECT_NEAR(folded[3 * j + 1], every[3 * j + 1], 0.02 * every[3 * j + 1]);
        EXPECT_GT(every[3 * j + 1], 0.01 * every[3 * j]); // the DP all-reduce shows
        EXPECT_EQ(every[3 * j + 2], 64);
        if (jobs.size() == 2) {
          EXPECT_EQ(folded[3 * j + 2], simulated_gpus[k]);
        }
      }
    }
  }
}

// `run` on an oversubscribed tree folds by placement too: tp 8, pp 2, dp 4 on two leaves of four
// nodes, each pipeline send crossing the 2:1 uplinks beside the other replicas' sends. One
// replica's sends alone would find the uplinks idle (the step 2 % short, its exposed pipeline
// time halved); with the other replicas' sends copied the folded step is the unfolded one.
TEST(Jobs, RunOnAnOversubscribedTreeFoldsByPlacement) {
  ClusterSpec c = four_leaves();
  c.nodes = 8;
  const WorkloadSpec w = pipeline_job("a", {0}).workload;
  std::vector<double> v; // per run, folded first: step, exposed PP time, simulated GPUs
  for (const bool fold : {true, false}) {
    const test::ChildResult r = test::run_in_child([&] {
      const runner::Simulation sim = runner::simulate(c, w, {.fold_dp = fold});
      return std::vector<double>{sim.summary.step_time.value(), sim.summary.exposed.pp.value(),
                                 static_cast<double>(sim.summary.simulated_gpus)};
    });
    ASSERT_TRUE(r.ok) << r.error;
    v.insert(v.end(), r.values.begin(), r.values.end());
  }
  ASSERT_EQ(v.size(), 6u);
  EXPECT_NEAR(v[0], v[3], 0.005 * v[3]);
  EXPECT_NEAR(v[1], v[4], 0.02 * v[4]);
  EXPECT_EQ(v[2], 16);
  EXPECT_EQ(v[5], 64);
}

} // namespace
} // namespace stepsim
