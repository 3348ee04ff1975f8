// End to end through the `stepsim` binary: `stepsim collective` (nccl-tests-style table, CSV
// columns, exit 2 on bad arguments) and a training step whose TP group spans two nodes instead
// of one: much larger exposed TP communication in summary.json.

#include "common/cli.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using stepsim::test::fresh_temp_dir;
using stepsim::test::run_stepsim;
using stepsim::test::src;
using Result = stepsim::test::CommandResult;

namespace {} // namespace

TEST(CollectiveCli, TableAndCsv) {
  const fs::path dir = fresh_temp_dir("csv");
  const Result r =
      run_stepsim("collective --cluster " + src("topologies/dgx-h100.yaml") +
                  " --op all_reduce --gpus 8 --sizes 1MiB:4MiB --csv " + (dir / "out.csv").string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("algbw(GB/s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("busbw(GB/s)"), std::string::npos) << r.out;
  std::ifstream in(dir / "out.csv");
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header, "op,size_bytes,gpus,algorithm,time_s,algbw_GBps,busbw_GBps");
  int rows = 0;
  while (std::getline(in, line)) {
    ++rows;
    EXPECT_EQ(line.rfind("all_reduce,", 0), 0u) << line;
    EXPECT_NE(line.find(",8,nvls,"), std::string::npos) << line;
  }
  EXPECT_EQ(rows, 3); // 1, 2, 4 MiB
  fs::remove_all(dir);
}

TEST(CollectiveCli, BadArgumentsExitTwo) {
  const std::string cluster = " --cluster " + src("topologies/dgx-h100.yaml");
  EXPECT_EQ(run_stepsim("collective" + cluster + " --op allreduce --gpus 8").code, 2);
  EXPECT_EQ(run_stepsim("collective" + cluster + " --op all_reduce --gpus 0").code, 2);
  EXPECT_EQ(run_stepsim("collective" + cluster + " --op all_reduce --gpus 100000").code, 2);
  EXPECT_EQ(run_stepsim("collective" + cluster + " --op all_reduce --gpus 8 --sizes 1XB").code, 2);
  EXPECT_EQ(run_stepsim("collective" + cluster + " --op all_to_all --gpus 8 --algorithm ring").code, 2);
  EXPECT_EQ(run_stepsim("collective --op all_reduce --gpus 8").code, 2);
  // Only cluster keys can be overridden here; a workload key is an error, not ignored.
  const Result r = run_stepsim("collective" + cluster + " --op all_reduce --gpus 8 --set parallel.tp=2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--set parallel.tp=2: `stepsim collective` reads only a cluster"), std::string::npos)
      << r.out;
  EXPECT_EQ(run_stepsim("collective" + cluster + " --op all_reduce --gpus 8 --set cluster.=1").code, 2);
}

// TP = 8 inside one 8-GPU node vs across two 4-GPU nodes (4 NICs each), everything else equal:
// GPT-3 175B's shapes (8 layers, micro-batch 1), so each TP all-reduce carries b*s*h*2 = 48 MiB
// and is bandwidth-bound. Inside a node its bus bandwidth is the NVLink port (300 GB/s x 0.8 =
// 240 GB/s); across two nodes it is bound by the node's NICs (4 x 25 GB/s x 0.96 = 96 GB/s):
// 2.5x less, so the summary's exposed TP communication must grow by well over 2x. The argument
// is the ring's (2(n-1)/n of the buffer through each node's NICs), so the ring is forced; left to
// the automatic choice, the two-node group runs the double binary tree, which sends each node's
// buffer across once (1x instead of 1.75x), and must then be faster than the ring.
TEST(CollectiveCli, TpAcrossNodesExposesTpCommunication) {
  const auto exposed_tp = [](const std::string& name, int nodes, int per_node, const std::string& algorithm) {
    const fs::path dir = fresh_temp_dir(name);
    const Result r =
        run_stepsim("run --quiet --no-trace --cluster " + src("topologies/dgx-a100-superpod.yaml") +
                    " --workload " + src("workloads/gpt3-175b.yaml") +
                    " --set model.layers=8 --set batch.global_batch=8 --set training.recompute=none" +
                    " --set cluster.nodes=" + std::to_string(nodes) + " --set cluster.gpus_per_node=" +
                    std::to_string(per_node) + " --set cluster.nics.count=" + std::to_string(per_node) +
                    " --set parallel.tp=8 --set parallel.pp=1 --set collectives.tp=" + algorithm + " --out " +
                    dir.string());
    EXPECT_EQ(r.code, 0) << r.out;
    std::ifstream in(dir / "summary.json");
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    fs::remove_all(dir);
    return j.is_discarded() ? -1.0 : j["exposed_comm_s"]["tp"].get<double>();
  };
  const double inside = exposed_tp("tp-in", 1, 8, "ring"), across = exposed_tp("tp-across", 2, 4, "ring");
  ASSERT_GT(inside, 0.0);
  EXPECT_GT(across, 2.0 * inside) << inside << " vs " << across;
  const double across_auto = exposed_tp("tp-across-auto", 2, 4, "auto");
  EXPECT_GT(across_auto, inside);
  EXPECT_LT(across_auto, across);
}

namespace {

/// Simulated time per size of an all-reduce over `gpus` GPUs of `cluster` with `algorithm`
/// (`stepsim collective --json`), and the algorithm each size ran with.
std::map<double, std::pair<double, std::string>>
simulated(const std::string& cluster, const std::string& sets, int gpus, const std::string& algorithm) {
  const Result r = run_stepsim("collective --cluster " + cluster + sets + " --op all_reduce --gpus " +
                               std::to_string(gpus) + " --sizes 64KiB:1GiB --json --algorithm " + algorithm);
  EXPECT_EQ(r.code, 0) << r.out;
  std::map<double, std::pair<double, std::string>> out;
  if (r.code != 0)
    return out;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  for (const auto& row : doc.at("sizes"))
    out[row["size_bytes"].get<double>()] = {row["time_s"].get<double>(), row["algorithm"].get<std::string>()};
  return out;
}

/// At each of `sizes`, AUTO ran the algorithm that the simulation of each forced algorithm shows
/// fastest (within 1 %, the ties of the estimate). Returns AUTO's choices.
std::vector<std::string> expect_auto_is_fastest(const std::string& cluster, const std::string& sets, int gpus,
                                                const std::vector<double>& sizes) {
  const auto chosen = simulated(cluster, sets, gpus, "auto");
  std::map<std::string, std::map<double, std::pair<double, std::string>>> forced;
  for (const char* a : {"ring", "tree", "hierarchical"})
    forced[a] = simulated(cluster, sets, gpus, a);
  std::vector<std::string> picks;
  for (const double size : sizes) {
    std::string fastest;
    double best = 1e300;
    for (const auto& [name, times] : forced)
      if (times.count(size) != 0 && times.at(size).first < best) {
        best = times.at(size).first;
        fastest = name;
      }
    EXPECT_EQ(chosen.count(size), 1u) << size;
    if (chosen.count(size) == 0)
      continue;
    const auto& [time, algorithm] = chosen.at(size);
    EXPECT_LE(time, best * 1.01) << size << " B: auto ran " << algorithm << " (" << time << " s), " << fastest
                                 << " takes " << best << " s";
    picks.push_back(algorithm);
  }
  return picks;
}

} // namespace

// A ring of switches (graph fabric): tree edges between distant nodes cross several cables and
// share them, so past small sizes the tree is the slowest; the choice, costed on each algorithm's
// own routes, runs the tree only where it is fastest (it used to run it at every size to 1 GiB).
TEST(CollectiveCli, AutoPicksTheFasterOnARingGraph) {
  const std::string ring = src("tests/collectives/data/ring-graph-16.yaml");
  const auto picks =
      expect_auto_is_fastest(ring, "", 128, {64.0 * 1024, 16.0 * 1024 * 1024, 1024.0 * 1024 * 1024});
  EXPECT_EQ(picks, (std::vector<std::string>{"tree", "hierarchical", "ring"}));
  // The reason: at 1 GiB the simulated tree is several times slower than the ring here.
  const auto tree = simulated(ring, "", 128, "tree");
  const auto rings = simulated(ring, "", 128, "ring");
  EXPECT_GT(tree.at(1024.0 * 1024 * 1024).first, 3.0 * rings.at(1024.0 * 1024 * 1024).first);
}

// A 2:1 oversubscribed fat tree, 16 of its DGX A100 nodes (two leaves): tree for small sizes, the
// hierarchical all-reduce in the middle, the ring at 1 GiB.
TEST(CollectiveCli, AutoPicksTheFasterOnAFatTree) {
  const auto picks = expect_auto_is_fastest(src("topologies/fat-tree-2to1.yaml"), "", 128,
                                            {64.0 * 1024, 16.0 * 1024 * 1024, 1024.0 * 1024 * 1024});
  EXPECT_EQ(picks, (std::vector<std::string>{"tree", "hierarchical", "ring"}));
}
