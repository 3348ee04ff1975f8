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
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

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
// 2.5x less, so the summary's exposed TP communication must grow by well over 2x.
TEST(CollectiveCli, TpAcrossNodesExposesTpCommunication) {
  const auto exposed_tp = [](const std::string& name, int nodes, int per_node) {
    const fs::path dir = fresh_temp_dir(name);
    const Result r =
        run_stepsim("run --quiet --no-trace --cluster " + src("topologies/dgx-a100-superpod.yaml") +
                    " --workload " + src("workloads/gpt3-175b.yaml") +
                    " --set model.layers=8 --set batch.global_batch=8 --set training.recompute=none" +
                    " --set cluster.nodes=" + std::to_string(nodes) + " --set cluster.gpus_per_node=" +
                    std::to_string(per_node) + " --set cluster.nics.count=" + std::to_string(per_node) +
                    " --set parallel.tp=8 --set parallel.pp=1 --out " + dir.string());
    EXPECT_EQ(r.code, 0) << r.out;
    std::ifstream in(dir / "summary.json");
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    fs::remove_all(dir);
    return j.is_discarded() ? -1.0 : j["exposed_comm_s"]["tp"].get<double>();
  };
  const double inside = exposed_tp("tp-in", 1, 8), across = exposed_tp("tp-across", 2, 4);
  ASSERT_GT(inside, 0.0);
  EXPECT_GT(across, 2.0 * inside) << inside << " vs " << across;
}
