// Degraded clusters (docs/degraded.md). Each simulation runs in a child (one SimGrid engine per
// process); the closed forms are stated at each test.

#include "common/cli.hpp"
#include "common/specs.hpp"
#include "common/subprocess.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "runner/simulate.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace stepsim {
namespace {

using test::run_in_child;

/// A pure data-parallel or TP x DP job of a small GPT on `nodes` DGX-like nodes (roofline compute).
struct Case {
  int nodes = 2;
  int tp = 1;
  int pp = 1;
  std::vector<DegradedSpec::Gpu> slow{};
  bool fold = true;
  bool free_comm = false; ///< communication (almost) free: the step is the compute chain
};

/// In a child: {step time, simulated GPUs, compute seconds of rank 0, summary's TP straggler
/// wait (-1 without a degraded report)}.
std::vector<double> simulate_case(const Case& k) {
  const auto r = run_in_child([&k] {
    ClusterSpec c = k.free_comm ? test::free_comm_cluster(k.nodes, 8) : test::dgx_cluster(k.nodes, 8, 8);
    c.degraded.gpus = k.slow;
    const int gpus = k.nodes * 8;
    const WorkloadSpec w =
        test::workload(test::small_gpt(4, 1024, 1024), k.tp, k.pp, gpus / (k.tp * k.pp), 4, 2);
    const runner::Simulation sim = runner::simulate(c, w, {.fold_dp = k.fold});
    double compute = 0;
    for (graph::TaskId id = 0; id < sim.program.graph.size(); ++id) {
      const graph::Task& t = sim.program.graph.task(id);
      if (t.kind == graph::TaskKind::COMPUTE && t.rank == 0)
        compute += t.duration.value();
    }
    const double waited = sim.summary.degraded ? sim.summary.degraded->wait_s[0] : -1.0;
    return std::vector<double>{sim.result.step_time.value(), static_cast<double>(sim.summary.simulated_gpus),
                               compute, waited};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values : std::vector<double>{NAN, NAN, NAN, NAN};
}

// Pure data parallelism, one GPU at speed s: the replicas wait for the slow one at the gradient
// all-reduce, so the step grows by its compute time C x (1/s - 1) (the all-reduce after the last
// backward is the same), within 1 %.
TEST(DegradedGpu, PureDpStepGrowsByComputeTimesInverseSpeed) {
  const double s = 0.8;
  const std::vector<double> base = simulate_case({});
  const std::vector<double> slow = simulate_case({.slow = {{.node = 1, .gpu = 5, .speed = s}}});
  const double expected = base[2] * (1.0 / s - 1.0);
  ASSERT_GT(expected, 0.05 * base[0]);
  EXPECT_NEAR(slow[0] - base[0], expected, 0.01 * expected);
}

// TP 8 inside the slow GPU's node, communication free: every layer's TP all-reduce waits for
// it, so the whole TP group (and with it the step, the compute chain) runs at its pace: the step
// grows by C x (1/s - 1), within 1 %.
TEST(DegradedGpu, TpGroupWaitsForTheSlowGpu) {
  const double s = 0.5;
  const std::vector<double> base = simulate_case({.tp = 8, .free_comm = true});
  const std::vector<double> slow =
      simulate_case({.tp = 8, .slow = {{.node = 1, .gpu = 2, .speed = s}}, .free_comm = true});
  const double expected = base[2] * (1.0 / s - 1.0);
  ASSERT_GT(expected, 0.05 * base[0]);
  EXPECT_NEAR(slow[0] - base[0], expected, 0.01 * expected);
  // The report: a healthy GPU of the group waited at the TP collectives for the slow one's extra
  // compute before each of them, all of it but what follows the last one (the output layer's
  // backward, the optimizer): at most the whole, at least half here.
  EXPECT_EQ(base[3], -1.0);
  EXPECT_LE(slow[3], expected * (1 + 1e-9));
  EXPECT_GE(slow[3], 0.5 * expected);
}

/// `slow` with each slow GPU's TP group (tp consecutive GPUs) at its slowest member's speed.
std::vector<DegradedSpec::Gpu> paced(const std::vector<DegradedSpec::Gpu>& slow, int tp) {
  std::map<std::pair<int, int>, double> pace; // (node, first GPU of the group) -> speed
  for (const DegradedSpec::Gpu& g : slow) {
    const auto key = std::make_pair(g.node, g.gpu - g.gpu % tp);
    pace[key] = pace.contains(key) ? std::min(pace[key], g.speed) : g.speed;
  }
  std::vector<DegradedSpec::Gpu> out;
  for (const auto& [group, speed] : pace)
    for (int g = group.second; g < group.second + tp; ++g)
      out.push_back({.node = group.first, .gpu = g, .speed = speed});
  return out;
}

/// Folded runs of `slow` simulate `folded_gpus` and give the step time of every GPU simulated at
/// its own speed (1e-9), and of every GPU simulated with each slow GPU's TP group at that group's
/// pace (1e-9); the TP straggler wait agrees within 1 % (folded, the healthy members' waits are
/// replayed from their group's simulated rank, docs/degraded.md "Folding").
void expect_folding_exact(const Case& slow, double folded_gpus) {
  Case all = slow;
  all.fold = false;
  Case all_paced = all;
  all_paced.slow = paced(slow.slow, slow.tp);
  const std::vector<double> folded = simulate_case(slow);
  const std::vector<double> full = simulate_case(all);
  const std::vector<double> full_paced = simulate_case(all_paced);
  EXPECT_EQ(folded[1], folded_gpus);
  EXPECT_EQ(full[1], 8.0 * slow.nodes);
  EXPECT_NEAR(folded[0], full[0], 1e-9 * full[0]);
  EXPECT_NEAR(folded[0], full_paced[0], 1e-9 * full[0]);
  EXPECT_NEAR(folded[3], full[3], 0.01 * full[3]);
}

// Folding stays exact: with one slow GPU in DP replica 13, the folded run simulates that replica
// and one representative (2 GPUs of 16) and gives the step time of every replica simulated.
TEST(DegradedFolding, SlowReplicaFoldedEqualsUnfolded) {
  expect_folding_exact({.slow = {{.node = 1, .gpu = 5, .speed = 0.7}}}, 2.0);
}

// The same with TP: each TP collective waits for the slow GPU, so its group (a node) runs at the
// slow GPU's pace and folds to one rank at that speed, as replica 0's folds to one rank at full
// speed (docs/engine.md, "Folding TP"): 2 GPUs of 24.
TEST(DegradedFolding, SlowTpGroupFoldedEqualsUnfolded) {
  expect_folding_exact({.nodes = 3, .tp = 8, .slow = {{.node = 2, .gpu = 1, .speed = 0.6}}}, 2.0);
}

// With a pipeline (tp 8, pp 2, dp 2 on 4 nodes): the slow GPU's group at its pace, each replica
// one rank per TP group: 2 + 2 GPUs. With tp 4 (two replicas' groups per node, dp 4), a group
// does not fill its node: the DP rings' NVLink hops cross its GPUs' ports, and its healthy
// members' buckets reach them before the slow one's (paced, the step came out 0.5 % short), so
// the slow GPU's replica keeps every rank of every stage: 4 x 2 + 2 GPUs.
TEST(DegradedFolding, SlowReplicaInAPipelineFoldedEqualsUnfolded) {
  expect_folding_exact({.nodes = 4, .tp = 8, .pp = 2, .slow = {{.node = 3, .gpu = 5, .speed = 0.7}}}, 4.0);
  Case whole = {.nodes = 4, .tp = 4, .pp = 2, .slow = {{.node = 3, .gpu = 5, .speed = 0.7}}};
  Case all = whole;
  all.fold = false;
  const std::vector<double> folded = simulate_case(whole);
  const std::vector<double> full = simulate_case(all);
  EXPECT_EQ(folded[1], 10.0);
  EXPECT_NEAR(folded[0], full[0], 1e-9 * full[0]);
}

// Two slow GPUs in one TP group, at different speeds: the group runs at the slower one's pace.
TEST(DegradedFolding, TpGroupAtItsSlowestMembersPace) {
  expect_folding_exact({.nodes = 3,
                        .tp = 8,
                        .slow = {{.node = 1, .gpu = 3, .speed = 0.9}, {.node = 1, .gpu = 6, .speed = 0.6}}},
                       2.0);
}

// Replicas whose slow GPUs sit at the same places at the same speed are alike: one stands for
// the others. Pure DP with two slow GPUs at 0.8 (replicas 9 and 19 of 32): 2 GPUs, the slow
// replica's and the representative's; at two speeds, 3. With TP 8, slow GPUs at 0.7 at different
// places of two nodes' groups pace both groups alike: 2 GPUs.
TEST(DegradedFolding, AlikeSlowReplicasFoldTogether) {
  expect_folding_exact(
      {.nodes = 4, .slow = {{.node = 1, .gpu = 1, .speed = 0.8}, {.node = 2, .gpu = 3, .speed = 0.8}}}, 2.0);
  expect_folding_exact(
      {.nodes = 4, .slow = {{.node = 1, .gpu = 1, .speed = 0.8}, {.node = 2, .gpu = 3, .speed = 0.7}}}, 3.0);
  expect_folding_exact({.nodes = 4,
                        .tp = 8,
                        .slow = {{.node = 1, .gpu = 1, .speed = 0.7}, {.node = 3, .gpu = 6, .speed = 0.7}}},
                       2.0);
}

// runner::paced_tp_groups: every member of a TP group holding a slow GPU at the group's slowest
// speed, the other groups untouched; ranks fill the nodes that are up (a node down shifts them);
// nothing to pace gives nullopt.
TEST(DegradedFolding, PacedTpGroupsSlowEveryMemberToTheSlowest) {
  ClusterSpec c = test::dgx_cluster(4, 8, 8);
  c.degraded.gpus = {{.node = 1, .gpu = 2, .speed = 0.9}, {.node = 1, .gpu = 6, .speed = 0.5}};
  const auto speeds = [](const ClusterSpec& x) {
    std::map<std::pair<int, int>, double> out;
    for (const DegradedSpec::Gpu& g : x.degraded.gpus)
      out[{g.node, g.gpu}] = g.speed;
    return out;
  };
  // tp 4: GPUs 0-3 of node 1 at 0.9, GPUs 4-7 at 0.5.
  const std::optional<ClusterSpec> four = runner::paced_tp_groups(c, 4, 32);
  ASSERT_TRUE(four.has_value());
  std::map<std::pair<int, int>, double> expected;
  for (int g = 0; g < 8; ++g)
    expected[{1, g}] = g < 4 ? 0.9 : 0.5;
  EXPECT_EQ(speeds(*four), expected);
  // tp 8: the whole node at 0.5.
  const std::optional<ClusterSpec> eight = runner::paced_tp_groups(c, 8, 32);
  ASSERT_TRUE(eight.has_value());
  for (auto& [gpu, speed] : expected)
    speed = 0.5;
  EXPECT_EQ(speeds(*eight), expected);
  // Node 0 down: node 1's GPUs hold ranks 0-7, and a job of 8 GPUs still meets them.
  c.degraded.nodes = {{.node = 0}};
  EXPECT_TRUE(runner::paced_tp_groups(c, 8, 8).has_value());
  // A job of 8 GPUs on nodes 0 and 1 (none down) does not reach node 1.
  c.degraded.nodes.clear();
  EXPECT_FALSE(runner::paced_tp_groups(c, 8, 8).has_value());
  c.degraded.gpus.clear();
  EXPECT_FALSE(runner::paced_tp_groups(c, 8, 32).has_value());
}

/// `stepsim collective` all-reduce bus bandwidth (GB/s) of 1 GiB over 2 DGX H100 nodes, ring.
double busbw(const std::string& sets) {
  const test::CommandResult r = test::run_stepsim(
      "collective --cluster " + test::src("topologies/dgx-h100.yaml") +
      " --set cluster.nodes=2 --set cluster.fabric.nodes_per_leaf=1 --op all_reduce --gpus 16 --sizes 1GiB "
      "--algorithm ring --json " +
      sets);
  EXPECT_EQ(r.code, 0) << r.out;
  const auto at = r.out.find("\"busbw_GBps\":");
  EXPECT_NE(at, std::string::npos) << r.out;
  return at == std::string::npos ? NAN : std::stod(r.out.substr(at + 13));
}

// One of 8 NICs down on both nodes: the node's traffic shares the 7 working NICs, so the
// all-reduce's bus bandwidth is 7/8 of the healthy one's, within 2 %.
TEST(DegradedNic, OneOfEightDownGivesSevenEighths) {
  const double healthy = busbw("");
  const double degraded =
      busbw("--set 'cluster.degraded.nics=[{node: 0, nic: 2, down: true}, {node: 1, nic: 6, down: true}]'");
  EXPECT_NEAR(degraded / healthy, 7.0 / 8.0, 0.02 * 7.0 / 8.0);
}

// A NIC at half its rate on every node: the ring runs at the slowest edge, half the bandwidth.
TEST(DegradedNic, SlowerNicSetsTheRingsPace) {
  const double healthy = busbw("");
  const double slow = busbw("--set 'cluster.degraded.nics=[{node: 0, nic: 1, bandwidth: 200Gbps}]'");
  EXPECT_NEAR(slow / healthy, 0.5, 0.02 * 0.5);
}

// A leaf (one node each) with half its 8 uplinks down: the cross-leaf all-reduce's bandwidth
// halves (its uplinks carry 4 NICs' worth instead of 8), within 2 %.
TEST(DegradedLeaf, HalfTheUplinksHalvesCrossLeafBandwidth) {
  const double healthy = busbw("");
  const double half = busbw("--set 'cluster.degraded.links=[{leaf: 1, uplinks_down: 4}]'");
  EXPECT_NEAR(half / healthy, 0.5, 0.02 * 0.5);
}

/// A cluster file of config_test's shape (2 nodes x 8 A100s, 8 NICs, fat tree) plus `extra`.
std::filesystem::path cluster_file(const std::filesystem::path& dir, const std::string& extra) {
  const std::filesystem::path p = dir / "cluster.yaml";
  std::ofstream(p) << "name: c\nnodes: 3\ngpus_per_node: 8\ngpu:\n  kind: A100\n"
                      "  peak_flops: {bf16: 312TFLOPS}\n  hbm_capacity: 80GiB\n  hbm_bandwidth: 2039GBps\n"
                      "  compute_efficiency: 0.7\n  memory_efficiency: 0.85\n"
                      "nvswitch: {bandwidth: 300GBps, latency: 3us, efficiency: 0.8}\n"
                      "nics: {count: 8, bandwidth: 200Gbps, latency: 2us, efficiency: 0.96}\n"
                      "fabric: {kind: fat_tree, nodes_per_leaf: 1}\n"
                   << extra;
  return p;
}

/// The ConfigError message of loading the cluster with `extra` ("" when it loads).
std::string load_error(const std::string& extra) {
  const std::filesystem::path dir = test::fresh_temp_dir("degraded-config");
  try {
    (void)config::load_cluster(cluster_file(dir, extra));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DegradedConfig, ReadsEveryKind) {
  const std::filesystem::path dir = test::fresh_temp_dir("degraded-read");
  const ClusterSpec c = config::load_cluster(cluster_file(dir, R"(degraded:
  gpus: [{node: 2, gpu: 7, speed: 0.8}]
  nics: [{node: 0, nic: 1, bandwidth: 100Gbps}, {node: 1, nic: 2, down: true}]
  nodes: [{node: 1, down: true}]
  links: [{leaf: 2, uplinks_down: 3}]
)"));
  ASSERT_EQ(c.degraded.gpus.size(), 1u);
  EXPECT_EQ(c.degraded.gpus[0].speed, 0.8);
  ASSERT_EQ(c.degraded.nics.size(), 2u);
  EXPECT_EQ(c.degraded.nics[0].bandwidth.value(), 100e9 / 8);
  EXPECT_TRUE(c.degraded.nics[1].down);
  EXPECT_EQ(c.up_nodes(), (std::vector<int>{0, 2}));
  ASSERT_EQ(c.degraded.leaves.size(), 1u);
  EXPECT_EQ(c.degraded.leaves[0].uplinks_down, 3);
  EXPECT_NE(c.degraded.gpus[0].where.find("cluster.yaml:15:10"), std::string::npos)
      << c.degraded.gpus[0].where;
}

// Bad entries: file:line:col, the key and the reason.
TEST(DegradedConfig, RefusesBadEntriesWithFileLineAndReason) {
  const struct {
    std::string yaml, expected;
  } cases[] = {
      {"degraded:\n  gpus: [{node: 3, gpu: 0, speed: 0.5}]\n",
       "cluster.yaml:15:17: key 'degraded.gpus[0].node': expected a node below 3, found 3"},
      {"degraded:\n  gpus: [{node: 0, gpu: 8, speed: 0.5}]\n",
       "cluster.yaml:15:25: key 'degraded.gpus[0].gpu'"},
      {"degraded:\n  gpus: [{node: 0, gpu: 1, speed: 0}]\n", "key 'degraded.gpus[0].speed'"},
      {"degraded:\n  gpus: [{node: 0, gpu: 1, speed: 1.2}]\n", "key 'degraded.gpus[0].speed'"},
      {"degraded:\n  gpus: [{node: 0, gpu: 1, speed: 0.5}, {node: 0, gpu: 1, speed: 0.9}]\n",
       "key 'degraded.gpus[1]': GPU 1 of node 0 is listed twice (also at "},
      {"degraded:\n  nics: [{node: 0, nic: 9, down: true}]\n", "key 'degraded.nics[0].nic': expected a NIC"},
      {"degraded:\n  nics: [{node: 0, nic: 1}]\n", "expected exactly one of 'bandwidth', 'down'"},
      {"degraded:\n  nics: [{node: 0, nic: 1, bandwidth: 400Gbps}]\n", "expected at most nics.bandwidth"},
      {"degraded:\n  nics: [" +
           [] {
             std::string s;
             for (int k = 0; k < 8; ++k)
               s += (k ? ", " : "") + std::string("{node: 1, nic: ") + std::to_string(k) + ", down: true}";
             return s;
           }() +
           "]\n",
       "every NIC of node 1 is down"},
      {"degraded:\n  nodes: [{node: 5, down: true}]\n",
       "key 'degraded.nodes[0].node': expected a node below 3"},
      {"degraded:\n  nodes: [{node: 1, down: false}]\n", "expected true"},
      {"degraded:\n  links: [{leaf: 0, uplinks_down: 8}]\n", "expected fewer than the leaf's 8 uplinks"},
      {"degraded:\n  links: [{leaf: 4, uplinks_down: 1}]\n",
       "key 'degraded.links[0].leaf': expected a leaf below 3"},
      {"degraded:\n  gpu: []\n", "unknown key 'degraded.gpu'"},
  };
  for (const auto& k : cases) {
    const std::string error = load_error(k.yaml);
    EXPECT_NE(error.find(k.expected), std::string::npos) << k.yaml << " gave: " << error;
  }
}

// degraded.random_gpus: round(share x eligible GPUs) drawn without replacement from the GPUs of
// the nodes that are up and not listed under degraded.gpus; the same seed draws the same GPUs,
// and over many seeds every GPU is drawn about equally often.
TEST(DegradedConfig, RandomGpusDrawTheShareBySeed) {
  const std::filesystem::path dir = test::fresh_temp_dir("degraded-random");
  const auto draw = [&](const std::string& random) {
    const ClusterSpec c = config::load_cluster(cluster_file(
        dir, "degraded:\n  gpus: [{node: 0, gpu: 0, speed: 0.9}]\n  nodes: [{node: 1, down: true}]\n"
             "  random_gpus: " +
                 random + "\n"));
    std::vector<std::pair<int, int>> drawn;
    for (size_t i = 1; i < c.degraded.gpus.size(); ++i) {
      const DegradedSpec::Gpu& g = c.degraded.gpus[i];
      EXPECT_EQ(g.speed, 0.5);
      EXPECT_NE(g.node, 1);                    // down
      EXPECT_FALSE(g.node == 0 && g.gpu == 0); // listed
      EXPECT_NE(g.where.find("drawn with seed"), std::string::npos) << g.where;
      drawn.emplace_back(g.node, g.gpu);
    }
    return drawn;
  };
  // 15 eligible GPUs (nodes 0 and 2, less GPU 0 of node 0): 0.25 x 15 = 3.75 draws 4.
  const auto a = draw("{share: 0.25, speed: 0.5, seed: 7}");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  const std::set<std::pair<int, int>> distinct(a.begin(), a.end());
  EXPECT_EQ(distinct.size(), 4u); // without replacement
  EXPECT_EQ(draw("{share: 0.25, speed: 0.5, seed: 7}"), a);
  EXPECT_NE(draw("{share: 0.25, speed: 0.5, seed: 8}"), a);
  EXPECT_EQ(draw("{share: 1, speed: 0.5}").size(), 15u);
  // One GPU of 15 over 300 seeds: each about 20 times (binomial, sd 4.3).
  std::map<std::pair<int, int>, int> times;
  for (int seed = 0; seed < 300; ++seed)
    for (const auto& g : draw("{share: 0.0667, speed: 0.5, seed: " + std::to_string(seed) + "}"))
      ++times[g];
  EXPECT_EQ(times.size(), 15u);
  for (const auto& [gpu, n] : times) {
    EXPECT_GE(n, 5) << gpu.first << "/" << gpu.second;
    EXPECT_LE(n, 40) << gpu.first << "/" << gpu.second;
  }
  EXPECT_NE(
      load_error("degraded:\n  random_gpus: {share: 0.01, speed: 0.5}\n")
          .find("key 'degraded.random_gpus.share': expected a share that draws at least one of the 24 GPUs"),
      std::string::npos);
  EXPECT_NE(load_error("degraded:\n  random_gpus: {share: 0.5}\n").find("degraded.random_gpus"),
            std::string::npos);
}

// --degrade FILE: the second file's entries join the cluster's; its errors name that file.
TEST(DegradedConfig, DegradeFileAddsEntriesAndNamesItsLines) {
  const std::filesystem::path dir = test::fresh_temp_dir("degraded-file");
  const std::filesystem::path extra = dir / "broken.yaml";
  std::ofstream(extra) << "# one slow GPU, one down NIC\ndegraded:\n  gpus: [{node: 0, gpu: 2, speed: 0.9}]\n"
                          "  nics:\n    - {node: 2, nic: 3, down: true}\n";
  const ClusterSpec c = config::load_cluster(
      cluster_file(dir, "degraded:\n  gpus: [{node: 1, gpu: 2, speed: 0.5}]\n"), {}, extra);
  EXPECT_EQ(c.degraded.gpus.size(), 2u);
  EXPECT_EQ(c.degraded.nics.size(), 1u);
  std::ofstream(extra) << "degraded:\n  gpus: [{node: 1, gpu: 2, speed: 0.9}]\n";
  try {
    (void)config::load_cluster(cluster_file(dir, "degraded:\n  gpus: [{node: 1, gpu: 2, speed: 0.5}]\n"), {},
                               extra);
    ADD_FAILURE() << "a GPU listed in both files was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "broken.yaml:2:10: key 'degraded.gpus[0]': GPU 2 of node 1 is listed twice"),
              std::string::npos)
        << e.what();
  }
}

// A job that needs a down node: exit 2 naming the entry's file:line and the reason; with the
// node's GPUs not needed (dp derived from the nodes up) it runs.
TEST(DegradedNodes, JobNeedingADownNodeIsRefusedElseRuns) {
  const std::filesystem::path dir = test::fresh_temp_dir("degraded-nodes");
  const std::string cluster =
      cluster_file(dir, "degraded:\n  nodes:\n    - {node: 1, down: true}\n").string();
  const std::string run = "run --cluster " + cluster + " --workload " + test::src("workloads/tiny-gpt.yaml") +
                          " --no-trace --set parallel.tp=8 --set parallel.pp=1 --set batch.global_batch=48";
  const test::CommandResult refused = test::run_stepsim(run + " --set parallel.dp=3");
  EXPECT_EQ(refused.code, 2) << refused.out;
  EXPECT_NE(
      refused.out.find("cluster.yaml:16:7: key 'degraded.nodes': node 1 is down and the job needs 3 nodes"),
      std::string::npos)
      << refused.out;
  const test::CommandResult ran = test::run_stepsim(run);
  EXPECT_EQ(ran.code, 0) << ran.out;
  EXPECT_NE(ran.out.find("(16 GPUs"), std::string::npos) << ran.out;
}

/// In a child: a small GPT whose compute is almost free (a GPU of 10^21 FLOP/s and 10^18 B/s) in
/// tp x dp on `nodes` DGX-like nodes with `nics` degraded: {step time, the summary's exposed time
/// on degraded links for TP and DP (or -1 each without a degraded report), its exposed DP}.
std::vector<double> link_case(int nodes, int tp, int dp, const std::vector<DegradedSpec::Nic>& nics) {
  const auto r = run_in_child([&] {
    ClusterSpec c = test::dgx_cluster(nodes, 8, 8);
    c.gpu.peak_bf16 = c.gpu.peak_fp16 = FlopsPerSec(1e21);
    c.gpu.hbm_bandwidth = BytesPerSec(1e18);
    c.degraded.nics = nics;
    const WorkloadSpec w = test::workload(test::small_gpt(4, 1024, 1024), tp, 1, dp, 1, 1);
    const runner::Simulation sim = runner::simulate(c, w);
    const auto& d = sim.summary.degraded;
    return std::vector<double>{sim.result.step_time.value(), d ? d->link_exposed_s[0] : -1.0,
                               d ? d->link_exposed_s[2] : -1.0, sim.summary.exposed.dp.value()};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values : std::vector<double>{NAN, NAN, NAN, NAN};
}

// The exposed time on degraded links. With compute almost free, the step is the gradient
// all-reduce across the two nodes: with a NIC of node 1 down, every DP collective crosses it
// and none is hidden, so the DP figure is the whole step (within 1 %). With TP 8 inside each
// node, TP crosses no NIC (0) and, every DP all-reduce crossing the NIC, the DP figure is the
// summary's exposed DP time within 5 % (two accountings: the summary gives each idle stretch to
// the task that ended it, this figure counts the DP spans wherever TP runs beside them). The
// same NIC down on a third node the job does not use: no report at all.
TEST(DegradedReport, ExposedTimeOnDegradedLinks) {
  const std::vector<DegradedSpec::Nic> down = {{.node = 1, .nic = 3, .down = true}};
  const std::vector<double> dp = link_case(2, 1, 16, down);
  EXPECT_GT(dp[2], 0.0);
  EXPECT_NEAR(dp[2], dp[0], 0.01 * dp[0]);
  const std::vector<double> tp = link_case(2, 8, 2, down);
  EXPECT_EQ(tp[1], 0.0);
  EXPECT_GT(tp[2], 0.0);
  EXPECT_NEAR(tp[2], tp[3], 0.05 * tp[3]);
  const std::vector<double> elsewhere = link_case(3, 1, 16, {{.node = 2, .nic = 3, .down = true}});
  EXPECT_EQ(elsewhere[1], -1.0);
  EXPECT_EQ(elsewhere[2], -1.0);
}

// The trace names the degraded parts: a slow GPU's process ends with "[slow: speed S]", a GPU
// whose NIC is down with "[NIC k down]", one behind a slower NIC with its rate; the others
// with neither.
TEST(DegradedReport, TraceMarksDegradedGpusAndNics) {
  const std::filesystem::path dir = test::fresh_temp_dir("degraded-trace");
  const test::CommandResult r = test::run_stepsim("run --cluster " + test::src("topologies/dgx-h100.yaml") +
                                                  " --workload " + test::src("workloads/tiny-gpt.yaml") +
                                                  " --set cluster.nodes=2 --quiet --out " + dir.string() +
                                                  " --set 'cluster.degraded={gpus: [{node: 1, gpu: 3, speed: "
                                                  "0.8}], nics: [{node: 0, nic: 2, down: true}, "
                                                  "{node: 1, nic: 5, bandwidth: 100Gbps}]}'");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string trace = test::slurp(dir / "trace.json");
  const auto named = [&](const std::string& process) {
    const auto at = trace.find(process + " (");
    return at == std::string::npos ? std::string() : trace.substr(at, trace.find('"', at) - at);
  };
  EXPECT_NE(named("node 1 / GPU 3").find("[slow: speed 0.8]"), std::string::npos) << named("node 1 / GPU 3");
  EXPECT_NE(named("node 0 / GPU 2").find("[NIC 2 down]"), std::string::npos) << named("node 0 / GPU 2");
  EXPECT_NE(named("node 1 / GPU 5").find("[NIC 5 at 100 Gbps]"), std::string::npos)
      << named("node 1 / GPU 5");
  EXPECT_EQ(named("node 0 / GPU 1").find('['), std::string::npos) << named("node 0 / GPU 1");

  // Only the slow GPU, tp 8: its TP group (node 1) folds to GPU 0, which runs at the group's pace
  // and says whose.
  const std::filesystem::path paced = dir / "paced";
  const test::CommandResult p =
      test::run_stepsim("run --cluster " + test::src("topologies/dgx-h100.yaml") + " --workload " +
                        test::src("workloads/tiny-gpt.yaml") +
                        " --set cluster.nodes=2 --set parallel.tp=8 --set parallel.pp=1 --quiet --out " +
                        paced.string() + " --set 'cluster.degraded.gpus=[{node: 1, gpu: 3, speed: 0.8}]'");
  ASSERT_EQ(p.code, 0) << p.out;
  const std::string folded = test::slurp(paced / "trace.json");
  const auto at = folded.find("node 1 / GPU 0 (");
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(folded.substr(at, folded.find('"', at) - at).find("[TP group paced by GPU 3 at speed 0.8]"),
            std::string::npos);
  EXPECT_EQ(folded.find("node 1 / GPU 3 ("), std::string::npos);
}

// A degraded section that changes nothing (speed 1, a NIC at its own rate, empty lists) writes
// the same bytes as none.
TEST(DegradedOutputs, NoChangeGivesByteIdenticalOutputs) {
  const std::filesystem::path dir = test::fresh_temp_dir("degraded-same");
  const std::string base = "run --cluster " + test::src("topologies/dgx-h100.yaml") + " --workload " +
                           test::src("workloads/tiny-gpt.yaml") + " --set cluster.nodes=2 --quiet --out ";
  const std::filesystem::path none = dir / "none", same = dir / "same";
  ASSERT_EQ(test::run_stepsim(base + none.string()).code, 0);
  const test::CommandResult r = test::run_stepsim(
      base + same.string() +
      " --set 'cluster.degraded={gpus: [{node: 1, gpu: 3, speed: 1}], nics: [{node: 0, nic: 2, bandwidth: "
      "400Gbps}], nodes: [], links: []}'");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* file : {"summary.json", "trace.json"}) {
    const std::string a = test::slurp(none / file);
    EXPECT_FALSE(a.empty()) << file;
    EXPECT_TRUE(a == test::slurp(same / file)) << file << " differs";
  }
}

} // namespace
} // namespace stepsim
