// `stepsim jobs` end to end (docs/jobs.md): bad jobs files refused with FILE:LINE:COL and exit 2,
// jobs.json's fields, the table, and byte-identical outputs for the same input.
#include "common/cli.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace stepsim::test {
namespace {

namespace fs = std::filesystem;

/// The head of a jobs file on the 2:1 fat tree (32 nodes of 8 GPUs, 8 nodes per leaf).
std::string head() {
  return "cluster: " + src("topologies/fat-tree-2to1.yaml") + "\n";
}

/// A job of tiny-gpt with tp 8 (one node per DP replica), nodes as given.
std::string job(const std::string& name, const std::string& nodes, const std::string& extra = "") {
  return "  - {name: " + name + ", workload: " + src("workloads/tiny-gpt.yaml") + ", nodes: " + nodes +
         ", set: {parallel.tp: 8, parallel.pp: 1" + extra + "}}\n";
}

TEST(JobsCommand, BadJobsFilesAreRefusedWithTheirLine) {
  const fs::path dir = fresh_temp_dir("jobs-bad");
  const fs::path file = dir / "jobs.yaml";
  // (file text, line of the error, what the message says)
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {head() + "jobz:\n" + job("a", "0-1"), 2, "unknown key 'jobz'"},
      {head() + "jobs:\n  - {name: a, workload: w.yaml, nodez: 0-1}\n", 3, "unknown key 'jobs[0].nodez'"},
      {head() + "jobs:\n" + job("a", "0-1") + job("b", "[1, 2]"), 4, "node 1 is already given to job 'a'"},
      {head() + "jobs:\n" + job("a", "30-33"), 3, "node 32 does not exist: the cluster has 32 nodes"},
      {head() + "jobs:\n" + job("a", "[0]", ", parallel.dp: 4"), 3, "job 'a' on 1 nodes (8 GPUs)"},
      {head() + "jobs:\n" + job("a", "0-1") + job("a", "2-3"), 4, "job 'a' is named twice"},
      {head() + "background: {share: 1}\njobs:\n" + job("a", "0-1"), 2,
       "expected a share of the bandwidth in [0, 1)"},
      {head() + "jobs:\n" + job("a", "7-3"), 3, "expected a range such as 0-7"},
      {head() + "jobs:\n" + job("a", "0-29") + job("b", "packed", ", parallel.dp: 4"), 4,
       "the job needs 4 nodes (32 GPUs), only 2 are free"},
      {head() + "jobs:\n" + job("a", "packed"), 3, "packed and spread need the job's GPU count"},
      {head() + "jobs:\n" + job("a/b", "0-1"), 3, "it names the job's output folder"},
      {head() + "jobs:\n" + job("a", "0-1", ", cluster.nodes: 2"), 3, "the cluster is shared by every job"},
  };
  for (const auto& [text, line, message] : cases) {
    std::ofstream(file) << text;
    const CommandResult r = run_stepsim("jobs " + file.string() + " --out " + (dir / "out").string());
    EXPECT_EQ(r.code, 2) << text << r.out;
    EXPECT_NE(r.out.find(file.string() + ":" + std::to_string(line) + ":"), std::string::npos)
        << text << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << text << r.out;
    EXPECT_FALSE(fs::exists(dir / "out" / "jobs.json")) << text;
  }
  fs::remove_all(dir);
}

// A node the cluster's degraded section marks down is given to no job: listed, it is refused at
// the job's `nodes` with the down entry's place; `packed` and `spread` pass it by.
TEST(JobsCommand, DownNodesAreGivenToNoJob) {
  const fs::path dir = fresh_temp_dir("jobs-down");
  const fs::path file = dir / "jobs.yaml";
  const std::string down = " --set 'cluster.degraded.nodes=[{node: 1, down: true}, {node: 8, down: true}]'";
  std::ofstream(file) << head() << "jobs:\n" << job("a", "0-1");
  const CommandResult listed = run_stepsim("jobs " + file.string() + down + " --out " + (dir / "x").string());
  EXPECT_EQ(listed.code, 2) << listed.out;
  EXPECT_NE(listed.out.find(file.string() + ":3:"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("node 1 is down (degraded.nodes at "), std::string::npos) << listed.out;

  std::ofstream(file) << head() << "jobs:\n"
                      << job("a", "packed", ", parallel.dp: 4") << job("b", "spread", ", parallel.dp: 2");
  const CommandResult placed =
      run_stepsim("jobs " + file.string() + down + " --no-trace --json --out " + (dir / "y").string());
  ASSERT_EQ(placed.code, 0) << placed.out;
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir / "y" / "jobs.json"));
  EXPECT_EQ(doc["jobs"][0]["nodes"], nlohmann::json::parse("[0, 2, 3, 4]")); // 1 is down
  EXPECT_EQ(doc["jobs"][1]["nodes"], nlohmann::json::parse("[5, 9]"));       // node 8 is down: leaf 1 gives 9
  fs::remove_all(dir);
}

// Two jobs whose ranks alternate between leaves 0 and 1 (list order is rank order), so every hop
// of their DP rings crosses the leaves: alone, a job's four nodes per leaf fill that leaf's
// uplinks exactly (2:1: four nodes' NICs); together they ask twice that, and the shared runs are
// slower than alone. jobs.json's slowdown is shared / alone.
TEST(JobsCommand, JobsJsonTableAndSameBytes) {
  // tiny-gpt widened, so that its DP all-reduces are bandwidth-bound.
  const std::string wide = ", model.hidden: 2048, model.heads: 16, model.ffn_hidden: 8192";
  const fs::path dir = fresh_temp_dir("jobs-out");
  const fs::path file = dir / "jobs.yaml";
  std::ofstream(file) << head() << "jobs:\n"
                      << job("a", "[0, 8, 1, 9, 2, 10, 3, 11]", wide)
                      << job("b", "[4, 12, 5, 13, 6, 14, 7, 15]", wide);
  const CommandResult first = run_stepsim("jobs " + file.string() + " --out " + (dir / "one").string());
  ASSERT_EQ(first.code, 0) << first.out;
  const CommandResult second = run_stepsim("jobs " + file.string() + " --out " + (dir / "two").string());
  ASSERT_EQ(second.code, 0) << second.out;
  for (const std::string name : {"jobs.json", "trace.json", "a/summary.json", "b/summary.json"}) {
    const std::string one = slurp(dir / "one" / name);
    EXPECT_FALSE(one.empty()) << name;
    EXPECT_EQ(one, slurp(dir / "two" / name)) << name;
  }
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir / "one" / "jobs.json"));
  EXPECT_EQ(doc["schema"], "stepsim.jobs/1");
  ASSERT_EQ(doc["jobs"].size(), 2u);
  for (const auto& j : doc["jobs"]) {
    const double alone = j["step_time_alone_s"], shared = j["step_time_shared_s"];
    EXPECT_GT(shared, alone) << j;
    EXPECT_DOUBLE_EQ(j["slowdown"].get<double>(), shared / alone);
    const nlohmann::json summary =
        nlohmann::json::parse(slurp(dir / "one" / j["summary"].get<std::string>()));
    EXPECT_EQ(summary["step_time_s"].get<double>(), shared);
  }
  ASSERT_FALSE(doc["contended_links"].empty());
  for (const auto& l : doc["contended_links"]) {
    EXPECT_GT(l["bytes_per_job"]["a"].get<double>(), 0) << l;
    EXPECT_GT(l["bytes_per_job"]["b"].get<double>(), 0) << l;
  }
  EXPECT_NE(first.out.find("slowdown"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("contended links"), std::string::npos) << first.out;
  EXPECT_NE(slurp(dir / "one" / "trace.json").find("\"b: node 4 / GPU 0"), std::string::npos);
  fs::remove_all(dir);
}

} // namespace
} // namespace stepsim::test
