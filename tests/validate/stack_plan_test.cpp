// The generated workloads of the validation records name their training stack
// (training.stack, docs/stacks.md): rerun, the stack's preset gives each mechanism the value the
// mapping wrote. For every run of the three runs files the workload expands to the same
// mechanisms with its `training.stack` line as without it.

#include "config/config.hpp"
#include "config/runs_config.hpp"
#include "config/stacks.hpp"
#include "validate/plan.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <unistd.h>

using namespace stepsim;
namespace fs = std::filesystem;

namespace {

fs::path src(const std::string& rel) {
  return fs::path(STEPSIM_SOURCE_DIR) / rel;
}

/// Each mechanism's value as --explain prints it, without the origin.
std::vector<std::string> values(const WorkloadSpec& w) {
  std::vector<std::string> out;
  for (const std::string& line : config::explain_stack(w))
    out.push_back(line.substr(0, line.find("  (")));
  out.erase(out.begin()); // the stack's own line
  return out;
}

} // namespace

TEST(StackPlan, GeneratedWorkloadsExpandToTheMappedMechanisms) {
  const fs::path d = fs::temp_directory_path() / ("stepsim_stack_plan_" + std::to_string(::getpid()));
  fs::create_directories(d);
  const std::regex stack_line(R"(\n  stack:\n    name: [a-z-]+\n    version: "[^"]+"\n)");
  int with_stack = 0;
  for (const char* file : {"tests/validate/data/measured_runs.yaml", "tests/validate/data/fit_runs.yaml",
                           "tests/validate/data/heldout_runs.yaml"}) {
    for (const config::MeasuredRun& run : config::load_runs(src(file)).runs) {
      const validate::RunPlan p =
          validate::plan_run(run, {.topologies = src("topologies"), .calibration = true, .extra = {}});
      if (!p.skip_reason.empty())
        continue;
      const std::string text = config::workload_yaml(p.workload);
      const bool named = std::regex_search(text, stack_line);
      EXPECT_TRUE(named) << run.id << " (framework '" << run.framework << "') names no stack";
      with_stack += named ? 1 : 0;
      std::ofstream(d / "with.yaml") << text;
      std::ofstream(d / "without.yaml") << std::regex_replace(text, stack_line, "\n");
      const ClusterSpec cluster = validate::plan_cluster(p);
      const WorkloadSpec a =
          config::check_layout(cluster, config::load_workload(d / "with.yaml", p.overrides)).workload;
      const WorkloadSpec b =
          config::check_layout(cluster, config::load_workload(d / "without.yaml", p.overrides)).workload;
      EXPECT_FALSE(a.stack.name.empty()) << run.id;
      EXPECT_EQ(values(a), values(b)) << run.id;
    }
  }
  EXPECT_GE(with_stack, 90); // 108 runs, a few skipped
  fs::remove_all(d);
}
