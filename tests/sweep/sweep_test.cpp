// `stepsim sweep`: grid and list expansion, stable ids, bad sweep files (exit 2 with file:line),
// skipped rows with reasons, resume after SIGKILL with nothing lost or duplicated, a torn last
// line repaired, shards merged into the unsharded result, mpirun with two ranks.

#include "config/sweep_config.hpp"
#include "core/error.hpp"
#include "sweep/plan.hpp"
#include "sweep/results.hpp"

#include "common/cli.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using stepsim::test::run_shell;
using stepsim::test::run_stepsim;
using stepsim::test::slurp;
using stepsim::test::src;
using Result = stepsim::test::CommandResult;

namespace {

void spit(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    out.push_back(l);
  return out;
}

class SweepTest : public ::testing::Test {
protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("stepsim-sweep-" + std::string(info->name()) + "-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure())
      fs::remove_all(dir_);
  }

  /// A sweep of tiny-gpt on one DGX H100 node; `body` holds grid/points/set (with `set:`
  /// cluster.nodes=1 added unless the body has its own `set:`).
  fs::path write_sweep(const std::string& name, const std::string& body) {
    std::string text = "name: " + name + "\ncluster: " + src("topologies/dgx-h100.yaml") +
                       "\nworkload: " + src("workloads/tiny-gpt.yaml") + "\n";
    if (body.find("set:") == std::string::npos)
      text += "set:\n  cluster.nodes: 1\n";
    text += body;
    const fs::path p = dir_ / (name + ".yaml");
    spit(p, text);
    return p;
  }

  /// 96 configurations, some of them invalid on 8 GPUs.
  fs::path big_sweep() {
    return write_sweep("big", "grid:\n"
                              "  parallel.tp: [1, 2, 4, 8]\n"
                              "  parallel.pp: [1, 2, 4]\n"
                              "  parallel.schedule: [gpipe, 1f1b]\n"
                              "  batch.micro_batch: [1, 2]\n"
                              "  batch.global_batch: [16, 32]\n");
  }

  fs::path dir_;
};

std::vector<nlohmann::json> jsonl_rows(const fs::path& file) {
  std::vector<nlohmann::json> rows;
  for (const auto& l : lines(slurp(file)))
    rows.push_back(nlohmann::json::parse(l));
  return rows;
}

} // namespace

// ---- expansion (library) -------------------------------------------------------------------

// A grid is the cartesian product of its axes, the first axis varying slowest; ids are unique.
TEST_F(SweepTest, GridExpandsToTheCartesianProduct) {
  const fs::path f = write_sweep("grid", "grid:\n  parallel.tp: [1, 2, 4]\n  parallel.pp: [1, 2]\n"
                                         "  parallel.schedule: [gpipe, 1f1b]\n");
  const auto plan = stepsim::sweep::expand(stepsim::config::load_sweep(f));
  ASSERT_EQ(plan.configs.size(), 12u);
  EXPECT_EQ(plan.columns, (std::vector<std::string>{"parallel.tp", "parallel.pp", "parallel.schedule"}));
  std::set<std::string> ids;
  for (const auto& c : plan.configs)
    ids.insert(c.id);
  EXPECT_EQ(ids.size(), 12u);
  EXPECT_EQ(plan.configs[0].swept[0].second, "1");
  EXPECT_EQ(plan.configs[0].swept[2].second, "gpipe");
  EXPECT_EQ(plan.configs[1].swept[2].second, "1f1b");
  EXPECT_EQ(plan.configs[11].swept[0].second, "4");
  EXPECT_EQ(plan.configs[5].index, 5u);
  // Every configuration carries the fixed override too.
  EXPECT_EQ(plan.configs[3].overrides.front().path, "cluster.nodes");

  const Result r = run_stepsim("sweep " + f.string() + " --dry-run");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(lines(r.out).size(), 13u) << r.out;
}

// A list of points gives one configuration each; points combine with a grid as a product.
TEST_F(SweepTest, PointsAreAListAndCombineWithAGrid) {
  const std::string points =
      "points:\n  - {parallel.tp: 2, parallel.pp: 2}\n  - {parallel.tp: 4, parallel.pp: 2}\n"
      "  - {parallel.tp: 8, parallel.sp: true}\n";
  const auto list = stepsim::sweep::expand(stepsim::config::load_sweep(write_sweep("list", points)));
  ASSERT_EQ(list.configs.size(), 3u);
  EXPECT_EQ(list.columns, (std::vector<std::string>{"parallel.tp", "parallel.pp", "parallel.sp"}));
  EXPECT_EQ(list.configs[2].swept.size(), 2u); // tp and sp; pp is left to the workload

  const auto both = stepsim::sweep::expand(
      stepsim::config::load_sweep(write_sweep("both", points + "grid:\n  batch.micro_batch: [1, 2]\n")));
  ASSERT_EQ(both.configs.size(), 6u);
  EXPECT_EQ(both.columns.back(), "batch.micro_batch");
  EXPECT_EQ(both.configs[1].swept.front().second, "2"); // point 0, second grid value
  EXPECT_EQ(both.configs[1].swept.back().second, "2");
}

// `cases:` is the list's name, `points:` its older one: the same list gives the same
// configurations (ids included) under either name; giving both is an error at the second.
TEST_F(SweepTest, CasesIsTheNameOfPoints) {
  const std::string list = "  - {parallel.tp: 2, parallel.pp: 2}\n  - {parallel.tp: 8, parallel.sp: true}\n"
                           "grid:\n  batch.micro_batch: [1, 2]\n";
  const auto cases =
      stepsim::sweep::expand(stepsim::config::load_sweep(write_sweep("cases", "cases:\n" + list)));
  const auto points =
      stepsim::sweep::expand(stepsim::config::load_sweep(write_sweep("points", "points:\n" + list)));
  ASSERT_EQ(cases.configs.size(), 4u); // two cases x two micro-batch sizes
  ASSERT_EQ(points.configs.size(), cases.configs.size());
  EXPECT_EQ(cases.columns, points.columns);
  for (size_t i = 0; i < cases.configs.size(); ++i) {
    EXPECT_EQ(cases.configs[i].id, points.configs[i].id);
    EXPECT_EQ(cases.configs[i].swept, points.configs[i].swept);
  }
  EXPECT_EQ(cases.configs[3].swept,
            (std::vector<stepsim::sweep::KeyValue>{
                {"parallel.tp", "8"}, {"parallel.sp", "true"}, {"batch.micro_batch", "2"}}));
  const fs::path both = write_sweep("both", "cases:\n  - {parallel.tp: 2}\npoints:\n  - {parallel.tp: 4}\n");
  const Result r = run_stepsim("sweep " + both.string() + " --out " + (dir_ / "out").string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(both.string() + ":9:3:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("`points` is the older name of `cases`"), std::string::npos) << r.out;
  // A malformed case names the list as written.
  const fs::path bad = write_sweep("bad", "cases: {parallel.tp: 2}\n");
  const Result b = run_stepsim("sweep " + bad.string() + " --out " + (dir_ / "out").string());
  EXPECT_EQ(b.code, 2) << b.out;
  EXPECT_NE(b.out.find("key 'cases': expected a non-empty list of mappings"), std::string::npos) << b.out;
}

// The id depends on what the configuration is, not on the order the keys are written in.
TEST(SweepIds, StableAndOrderIndependent) {
  using stepsim::config::Override;
  const std::string a = stepsim::sweep::config_id(
      "c.yaml", "w.yaml", {Override{"parallel.tp", "2"}, Override{"parallel.pp", "4"}});
  const std::string b = stepsim::sweep::config_id(
      "c.yaml", "w.yaml", {Override{"parallel.pp", "4"}, Override{"parallel.tp", "2"}});
  const std::string c = stepsim::sweep::config_id(
      "c.yaml", "w.yaml", {Override{"parallel.pp", "4"}, Override{"parallel.tp", "4"}});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.size(), 16u);
  // FNV-1a 64 of "cluster=c.yaml\nworkload=w.yaml\nparallel.pp=4\nparallel.tp=2\n": fixed forever,
  // since result files of earlier runs are matched by it.
  EXPECT_EQ(a, stepsim::sweep::config_id("c.yaml", "w.yaml",
                                         {Override{"parallel.tp", "2"}, Override{"parallel.pp", "4"}}));
}

// CSV lines are derived from the JSON record and survive a round trip unchanged.
TEST(SweepResults, JsonRoundTripGivesTheSameLines) {
  stepsim::sweep::Row row;
  row.id = "0123456789abcdef";
  row.index = 7;
  row.config = {{"parallel.tp", "2"}, {"parallel.schedule", "1f1b"}};
  row.status = stepsim::RunStatus::OK;
  row.hbm_capacity_bytes = 85899345920.0;
  row.summary_json = R"({"step_time_s":1.25,"mfu":0.5,"exposed_comm_s":{"tp":0.1,"pp":0.0,"dp":0.2},)"
                     R"("memory":{"peak_bytes":123,"fits":true}})";
  const std::string line = stepsim::sweep::json_line(row);
  ASSERT_EQ(line.back(), '\n');
  const auto back = stepsim::sweep::parse_json_line(std::string_view(line).substr(0, line.size() - 1));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(stepsim::sweep::json_line(*back), line);
  const std::vector<std::string> columns = {"parallel.tp", "parallel.pp", "parallel.schedule"};
  const std::string csv = stepsim::sweep::csv_line(*back, columns);
  EXPECT_EQ(csv, stepsim::sweep::csv_line(row, columns));
  EXPECT_NE(csv.find("0123456789abcdef,7,2,,1f1b,ok,,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",1.25,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",123,true,85899345920\n"), std::string::npos) << csv;
  EXPECT_FALSE(stepsim::sweep::parse_json_line(R"({"id":"x","index":1,"conf)").has_value());
}

// `zip` pairs its lists by position (one axis of tuples) and crosses them with the grid, which
// varies faster; the zipped keys are columns after the points' and before the grid's.
TEST_F(SweepTest, ZipPairsKeysByPositionAndCrossesTheGrid) {
  const fs::path f = write_sweep("zip", "zip:\n  parallel.schedule: [1f1b, interleaved, interleaved]\n"
                                        "  parallel.vp: [1, 2, 4]\n"
                                        "grid:\n  batch.micro_batch: [1, 2]\n");
  const auto plan = stepsim::sweep::expand(stepsim::config::load_sweep(f));
  ASSERT_EQ(plan.configs.size(), 6u); // 3 pairs x 2, not 3 x 3 x 2
  EXPECT_EQ(plan.columns,
            (std::vector<std::string>{"parallel.schedule", "parallel.vp", "batch.micro_batch"}));
  const std::vector<std::vector<std::string>> expected = {
      {"1f1b", "1", "1"},        {"1f1b", "1", "2"},        {"interleaved", "2", "1"},
      {"interleaved", "2", "2"}, {"interleaved", "4", "1"}, {"interleaved", "4", "2"}};
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(plan.configs[i].swept.size(), 3u);
    for (size_t k = 0; k < 3; ++k)
      EXPECT_EQ(plan.configs[i].swept[k].second, expected[i][k]) << i << " " << k;
  }
}

// JSONL rows carry swept values typed: integers and numbers as JSON numbers, booleans as JSON
// booleans, anything else as the text; each reads back to the same text (and CSV cell).
TEST(SweepResults, JsonlValuesAreTyped) {
  stepsim::sweep::Row row;
  row.id = "00000000000000aa";
  row.config = {{"parallel.tp", "8"},           {"parallel.sp", "true"}, {"training.x", "0.25"},
                {"parallel.schedule", "zb-h1"}, {"cluster.y", "1e3"},    {"cluster.z", "08"}};
  row.status = stepsim::RunStatus::SKIPPED;
  row.reason = "r";
  const std::string line = stepsim::sweep::json_line(row);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_TRUE(j["config"]["parallel.tp"].is_number_integer()) << line;
  EXPECT_EQ(j["config"]["parallel.tp"].get<int>(), 8);
  EXPECT_TRUE(j["config"]["parallel.sp"].is_boolean()) << line;
  EXPECT_TRUE(j["config"]["training.x"].is_number_float()) << line;
  EXPECT_EQ(j["config"]["training.x"].get<double>(), 0.25);
  EXPECT_EQ(j["config"]["parallel.schedule"], "zb-h1");
  // Texts a number would not spell back the same way stay strings.
  EXPECT_EQ(j["config"]["cluster.y"], "1e3");
  EXPECT_EQ(j["config"]["cluster.z"], "08");
  const auto back = stepsim::sweep::parse_json_line(std::string_view(line).substr(0, line.size() - 1));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->config, row.config);
}

// ---- bad sweep files -----------------------------------------------------------------------

// A malformed sweep file exits 2 naming file:line:col.
TEST_F(SweepTest, MalformedSweepFileExits2WithFileLine) {
  struct Case {
    std::string body;
    std::string expect; ///< in the message after "FILE:"
  };
  const std::vector<Case> cases = {
      {"grid:\n  parallel.tp: 4\n", ".yaml:7:16: key 'grid.parallel.tp': expected a non-empty list"},
      {"grid:\n  parallel.tp: []\n", ".yaml:7:16: key 'grid.parallel.tp': expected a non-empty list"},
      {"gird:\n  parallel.tp: [1]\n", ".yaml:6:1: unknown key 'gird'; did you mean 'grid'?"},
      {"grid:\n  parallel..tp: [1]\n", ".yaml:7:3: key 'grid': expected a dotted key"},
      {"grid:\n  parallel.tp: [1, 1]\n", ".yaml:7:20: key 'grid.parallel.tp': value '1' is listed twice"},
      {"points:\n  - {parallel.tp: 2}\n  - {parallel.tp: 2}\n", ".yaml:8:5: configuration 1 repeats"},
      {"grid:\n  cluster.nodes: [1, 2]\n", "also under `set`"},
      {"grid: [\n", ".yaml:"},
      {"zip:\n  parallel.tp: [1, 2]\n  parallel.pp: [1]\n",
       ".yaml:8:16: key 'zip.parallel.pp': expected 2 values, as many as zip.parallel.tp"},
      {"zip:\n  parallel.tp: [1, 2]\ngrid:\n  parallel.tp: [4]\n", "also a grid axis"},
  };
  for (const Case& c : cases) {
    const fs::path f = write_sweep("bad", c.body);
    const Result r = run_stepsim("sweep " + f.string() + " --out " + (dir_ / "out").string());
    EXPECT_EQ(r.code, 2) << c.body << r.out;
    EXPECT_NE(r.out.find(f.string()), std::string::npos) << c.body << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.body << r.out;
  }
  const Result missing =
      run_stepsim("sweep " + (dir_ / "nope.yaml").string() + " --out " + (dir_ / "out").string());
  EXPECT_EQ(missing.code, 2) << missing.out;
  // A cluster or workload file that cannot be read is the sweep file's error, not one skipped row
  // per configuration.
  for (const std::string& cluster : {std::string("/nonexistent.yaml"), dir_.string(), std::string("5")}) {
    std::string text = slurp(write_sweep("nocluster", "grid:\n  parallel.tp: [1, 2]\n"));
    text.replace(text.find("cluster: "), 9 + src("topologies/dgx-h100.yaml").size(), "cluster: " + cluster);
    spit(dir_ / "nocluster.yaml", text);
    const Result r =
        run_stepsim("sweep " + (dir_ / "nocluster.yaml").string() + " --out " + (dir_ / "out").string());
    EXPECT_EQ(r.code, 2) << cluster << "\n" << r.out;
    EXPECT_NE(r.out.find("nocluster.yaml:2:10: key 'cluster'"), std::string::npos) << r.out;
  }
  const Result empty_jobs = run_stepsim("sweep " + big_sweep().string() + " --out x -j ''");
  EXPECT_EQ(empty_jobs.code, 2) << empty_jobs.out;
  EXPECT_NE(empty_jobs.out.find("-j/--jobs: expected a positive integer"), std::string::npos)
      << empty_jobs.out;
  const Result bad_shard = run_stepsim("sweep " + big_sweep().string() + " --out x --shard 2/2");
  EXPECT_EQ(bad_shard.code, 2) << bad_shard.out;
  EXPECT_NE(bad_shard.out.find("--shard"), std::string::npos) << bad_shard.out;
}

// ---- running -------------------------------------------------------------------------------

// Invalid combinations are rows with status skipped and the reason, not errors.
TEST_F(SweepTest, SkippedConfigurationsCarryAReason) {
  const fs::path f = write_sweep("skip", "points:\n  - {parallel.tp: 2}\n  - {parallel.tp: 16}\n"
                                         "  - {parallel.tpp: 2}\n  - {parallel.schedule: zigzag}\n");
  const fs::path out = dir_ / "out";
  const Result r = run_stepsim("sweep " + f.string() + " --out " + out.string() + " -j 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = jsonl_rows(out / "results.jsonl");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["status"], "ok");
  EXPECT_EQ(rows[0]["reason"], "");
  EXPECT_GT(rows[0]["summary"]["step_time_s"].get<double>(), 0.0);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(rows[i]["status"], "skipped") << rows[i];
    EXPECT_FALSE(rows[i]["reason"].get<std::string>().empty()) << rows[i];
    EXPECT_TRUE(rows[i]["summary"].is_null());
  }
  EXPECT_NE(rows[1]["reason"].get<std::string>().find("16"), std::string::npos) << rows[1];
  EXPECT_NE(rows[2]["reason"].get<std::string>().find("did you mean 'parallel.tp'"), std::string::npos)
      << rows[2];
  EXPECT_NE(rows[3]["reason"].get<std::string>().find("zigzag"), std::string::npos) << rows[3];
  const auto csv = lines(slurp(out / "results.csv"));
  ASSERT_EQ(csv.size(), 5u);
  EXPECT_EQ(csv[0].rfind("id,index,parallel.tp,parallel.tpp,parallel.schedule,status,reason,", 0), 0u)
      << csv[0];
  EXPECT_NE(csv[2].find(",skipped,"), std::string::npos) << csv[2];
}

// A layout that was simulated but does not fit in GPU memory is an `oom` row: its summary and
// metrics are kept (results.csv has them, fits_in_memory false) with the reason, and the sweep
// exits 0. The CSV has the exposed EP and CP columns.
TEST_F(SweepTest, LayoutsThatDoNotFitAreOomRows) {
  const fs::path f = write_sweep("oom", "set:\n  cluster.nodes: 1\n"
                                        "points:\n  - {cluster.gpu.hbm_capacity: 80GiB}\n"
                                        "  - {cluster.gpu.hbm_capacity: 1GiB}\n");
  const fs::path out = dir_ / "out";
  const Result r = run_stepsim("sweep " + f.string() + " --out " + out.string() + " -j 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("1 ok, 1 oom, 0 skipped, 0 failed"), std::string::npos) << r.out;
  const auto rows = jsonl_rows(out / "results.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["status"], "ok") << rows[0];
  EXPECT_EQ(rows[1]["status"], "oom") << rows[1];
  EXPECT_NE(rows[1]["reason"].get<std::string>().find("does not fit"), std::string::npos) << rows[1];
  EXPECT_FALSE(rows[1]["summary"]["fits_in_memory"].get<bool>());
  // The same step either way: the capacity moves only the verdict.
  EXPECT_EQ(rows[0]["summary"]["step_time_s"], rows[1]["summary"]["step_time_s"]);
  const auto csv = lines(slurp(out / "results.csv"));
  ASSERT_EQ(csv.size(), 3u);
  EXPECT_NE(csv[0].find(",exposed_dp_s,exposed_ep_s,exposed_cp_s,"), std::string::npos) << csv[0];
  EXPECT_NE(csv[2].find(",oom,"), std::string::npos) << csv[2];
  EXPECT_TRUE(csv[2].ends_with(",false,1073741824")) << csv[2]; // fits_in_memory, hbm_capacity_bytes
}

// Killing the sweep with SIGKILL mid-run and running it again loses nothing, duplicates
// nothing and leaves no torn line; the result is the same as an uninterrupted run.
TEST_F(SweepTest, ResumeAfterSigkillLosesAndDuplicatesNothing) {
  const fs::path f = big_sweep();
  const fs::path full = dir_ / "full";
  const Result ref = run_stepsim("sweep " + f.string() + " --out " + full.string() + " -j 2");
  ASSERT_EQ(ref.code, 0) << ref.out;
  const size_t total = lines(slurp(full / "results.jsonl")).size();
  ASSERT_EQ(total, 96u);

  const fs::path out = dir_ / "killed";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(STEPSIM_BINARY, STEPSIM_BINARY, "sweep", f.c_str(), "--out", out.c_str(), "-j", "2", nullptr);
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  size_t seen = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    seen = lines(slurp(out / "results.jsonl")).size();
    if (seen >= 10)
      break;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the sweep finished before it could be killed";
  const size_t before = lines(slurp(out / "results.jsonl")).size();
  EXPECT_GE(before, 10u);
  EXPECT_LT(before, total);

  const Result again = run_stepsim("sweep " + f.string() + " --out " + out.string() + " -j 2");
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("resuming"), std::string::npos) << again.out;
  const auto rows = jsonl_rows(out / "results.jsonl");
  std::set<std::string> ids;
  for (const auto& r : rows)
    ids.insert(r["id"].get<std::string>());
  EXPECT_EQ(rows.size(), total);
  EXPECT_EQ(ids.size(), total);
  const std::string text = slurp(out / "results.jsonl");
  EXPECT_EQ(text.back(), '\n');
  // Same bytes as the uninterrupted run (rows are sorted by index once all are done).
  EXPECT_EQ(text, slurp(full / "results.jsonl"));
  EXPECT_EQ(slurp(out / "results.csv"), slurp(full / "results.csv"));

  // A third run finds everything done and runs nothing.
  const Result third = run_stepsim("sweep " + f.string() + " --out " + out.string());
  ASSERT_EQ(third.code, 0) << third.out;
  EXPECT_NE(third.out.find("96 already done"), std::string::npos) << third.out;
  EXPECT_EQ(slurp(out / "results.jsonl"), slurp(full / "results.jsonl"));
}

// A partial last line (a write cut short) is dropped on resume and its configuration runs again;
// a CSV behind the JSON record is rebuilt from it.
TEST_F(SweepTest, TornLastLineIsRepairedOnResume) {
  const fs::path f =
      write_sweep("torn", "grid:\n  parallel.tp: [1, 2, 4]\n  parallel.schedule: [gpipe, 1f1b]\n");
  const fs::path out = dir_ / "out";
  ASSERT_EQ(run_stepsim("sweep " + f.string() + " --out " + out.string()).code, 0);
  const std::string jsonl = slurp(out / "results.jsonl");
  const std::string csv = slurp(out / "results.csv");
  const auto rows = lines(jsonl);
  ASSERT_EQ(rows.size(), 6u);
  // Keep four rows, then half of the fifth; the CSV keeps only three rows.
  std::string cut;
  for (size_t i = 0; i < 4; ++i)
    cut += rows[i] + "\n";
  cut += rows[4].substr(0, rows[4].size() / 2);
  spit(out / "results.jsonl", cut);
  const auto csv_lines = lines(csv);
  spit(out / "results.csv",
       csv_lines[0] + "\n" + csv_lines[1] + "\n" + csv_lines[2] + "\n" + csv_lines[3] + "\n");

  const Result r = run_stepsim("sweep " + f.string() + " --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("partial last line"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4 already done"), std::string::npos) << r.out;
  EXPECT_EQ(slurp(out / "results.jsonl"), jsonl);
  EXPECT_EQ(slurp(out / "results.csv"), csv);
}

// Shards (--shard I/K) merged with --merge give exactly the unsharded result files.
TEST_F(SweepTest, ShardsMergeIntoTheUnshardedResult) {
  const fs::path f = write_sweep("shards", "grid:\n  parallel.tp: [1, 2, 4, 8]\n  parallel.pp: [1, 2]\n"
                                           "  parallel.schedule: [gpipe, 1f1b]\n");
  const fs::path full = dir_ / "full";
  ASSERT_EQ(run_stepsim("sweep " + f.string() + " --out " + full.string()).code, 0);
  const fs::path out = dir_ / "sharded";
  size_t rows = 0;
  for (int i = 0; i < 3; ++i) {
    const Result r = run_stepsim("sweep " + f.string() + " --out " + out.string() + " --shard " +
                                 std::to_string(i) + "/3 -j 1");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto shard_rows = jsonl_rows(out / ("results.shard-" + std::to_string(i) + ".jsonl"));
    for (const auto& row : shard_rows)
      EXPECT_EQ(row["index"].get<int>() % 3, i);
    rows += shard_rows.size();
  }
  EXPECT_EQ(rows, 16u);
  EXPECT_FALSE(fs::exists(out / "results.jsonl"));
  const Result m = run_stepsim("sweep --merge " + out.string());
  ASSERT_EQ(m.code, 0) << m.out;
  EXPECT_NE(m.out.find("merged 16 row(s) from 3 shard file(s)"), std::string::npos) << m.out;
  EXPECT_EQ(slurp(out / "results.jsonl"), slurp(full / "results.jsonl"));
  EXPECT_EQ(slurp(out / "results.csv"), slurp(full / "results.csv"));
  // Merging again changes nothing.
  ASSERT_EQ(run_stepsim("sweep --merge " + out.string()).code, 0);
  EXPECT_EQ(slurp(out / "results.csv"), slurp(full / "results.csv"));
}

// `mpirun -np 2 stepsim sweep`: rank r runs shard r/2 and rank 0 merges.
TEST_F(SweepTest, MpirunTwoRanksGiveTheUnshardedResult) {
  const std::string mpiexec = STEPSIM_MPIEXEC;
  if (mpiexec.empty())
    GTEST_SKIP() << "stepsim was built without MPI";
  if (access(mpiexec.c_str(), X_OK) != 0)
    GTEST_SKIP() << mpiexec << " is not executable";
  const fs::path f =
      write_sweep("mpi", "grid:\n  parallel.tp: [1, 2, 4]\n  parallel.schedule: [gpipe, 1f1b]\n");
  const fs::path full = dir_ / "full";
  ASSERT_EQ(run_stepsim("sweep " + f.string() + " --out " + full.string()).code, 0);
  const fs::path out = dir_ / "mpi";
  const Result r =
      run_shell("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader " +
                mpiexec + " --allow-run-as-root --oversubscribe -np 2 " + STEPSIM_BINARY + " sweep " +
                f.string() + " --out " + out.string() + " -j 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(out / "results.shard-0.jsonl")) << r.out;
  EXPECT_TRUE(fs::exists(out / "results.shard-1.jsonl")) << r.out;
  EXPECT_EQ(slurp(out / "results.jsonl"), slurp(full / "results.jsonl")) << r.out;
  EXPECT_EQ(slurp(out / "results.csv"), slurp(full / "results.csv")) << r.out;
}

// A configuration that runs past --timeout is a failed row, and the sweep exits 1.
TEST_F(SweepTest, TimeoutGivesAFailedRow) {
  const std::string text = "name: slow\ncluster: " + src("topologies/dgx-a100-superpod.yaml") +
                           "\nworkload: " + src("workloads/gpt3-175b.yaml") +
                           "\npoints:\n  - {batch.micro_batch: 1}\n";
  spit(dir_ / "slow.yaml", text);
  const fs::path out = dir_ / "out";
  const Result r =
      run_stepsim("sweep " + (dir_ / "slow.yaml").string() + " --out " + out.string() + " --timeout 0.05");
  EXPECT_EQ(r.code, 1) << r.out;
  const auto rows = jsonl_rows(out / "results.jsonl");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["status"], "failed");
  EXPECT_NE(rows[0]["reason"].get<std::string>().find("timed out"), std::string::npos) << rows[0];
}

// A sweep takes a degraded cluster through its keys (`cluster.degraded...` as YAML flow values)
// and `--steps N` as `stepsim run` does: each row's summary is the summary.json of `run` with the
// same keys and steps (the degraded row's `degraded` report and every row's `variability` of N
// steps included), and a job that needs a down node is a skipped row naming the entry.
TEST_F(SweepTest, DegradedKeysAndStepsAsRunTakesThem) {
  const fs::path f = write_sweep("degraded", "cases:\n"
                                             "  - {parallel.tp: 2}\n"
                                             "  - {cluster.degraded.gpus: [{node: 0, gpu: 3, speed: 0.5}]}\n"
                                             "  - {cluster.degraded.nodes: [{node: 0, down: true}]}\n");
  const fs::path out = dir_ / "out";
  const Result r = run_stepsim("sweep " + f.string() + " --out " + out.string() + " -j 2 --steps 3");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = jsonl_rows(out / "results.jsonl");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["status"], "ok");
  EXPECT_EQ(rows[1]["status"], "ok");
  EXPECT_EQ(rows[2]["status"], "skipped");
  EXPECT_NE(rows[2]["reason"].get<std::string>().find("degraded.nodes"), std::string::npos) << rows[2];
  EXPECT_EQ(rows[0]["summary"]["variability"]["steps"], 3) << rows[0]["summary"];
  EXPECT_FALSE(rows[0]["summary"].contains("degraded"));
  EXPECT_GT(rows[1]["summary"]["step_time_s"].get<double>(), rows[0]["summary"]["step_time_s"].get<double>());
  const Result run = run_stepsim(
      "run --cluster " + src("topologies/dgx-h100.yaml") + " --workload " + src("workloads/tiny-gpt.yaml") +
      " --set cluster.nodes=1 --set 'cluster.degraded.gpus=[{node: 0, gpu: 3, speed: "
      "0.5}]' --steps 3 --json --no-trace --quiet");
  ASSERT_EQ(run.code, 0) << run.out;
  EXPECT_EQ(nlohmann::json::parse(run.out), rows[1]["summary"]);
  const Result bad = run_stepsim("sweep " + f.string() + " --out " + out.string() + " --steps 0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("--steps: expected an integer in [1, 100000], got '0'"), std::string::npos)
      << bad.out;
}
