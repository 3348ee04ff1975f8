// The `stepsim` command line through the binary: -h/--help on every subcommand (exit 0, its
// options listed, even when a required option is missing), unknown subcommands, options and enum
// values reported first with the nearest name, flags anywhere among the arguments.

#include "common/cli.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

using stepsim::test::run_stepsim;
using stepsim::test::src;
using Result = stepsim::test::CommandResult;

namespace {

/// Each subcommand and options its help must list (from its documentation, docs/*.md).
const std::vector<std::pair<std::string, std::vector<std::string>>> COMMANDS = {
    {"run",
     {"--cluster FILE", "--workload FILE", "--out DIR", "--set PATH=VALUE", "--no-trace", "--csv",
      "--collectives", "--no-fold", "--no-sampling", "--quiet", "--progress", "--explain", "--fail-on-oom",
      "--simulate-oom", "--html"}},
    {"memory", {"--cluster FILE", "--workload FILE", "--set PATH=VALUE", "--fail-on-oom"}},
    {"kernels", {"--workload FILE", "--cluster FILE", "--set PATH=VALUE", "--out FILE"}},
    {"collective",
     {"--cluster FILE", "--op", "all_to_all", "--gpus N", "--sizes", "--algorithm", "--csv FILE",
      "--no-sampling"}},
    {"sweep",
     {"SWEEP.yaml", "--out DIR", "-j, --jobs N", "--shard I/K", "--merge DIR", "--timeout SECONDS",
      "--retry-failed", "--dry-run", "--no-fold"}},
    {"plan",
     {"--cluster FILE", "--workload FILE", "--gpus N", "--top K", "--jobs N", "--micro-batches", "--max-vp N",
      "--max-tp N", "--estimates N"}},
    {"validate",
     {"RUNS.yaml", "--out DIR", "-j, --jobs N", "--only ID", "--topologies DIR", "--no-calibration",
      "--timeout SECONDS", "--cross-validate"}},
    {"calibrate",
     {"RUNS.yaml", "--fit", "--fit-file FILE", "--knob", "--rounds N", "--tolerance X", "--objective",
      "--write", "--out FILE"}},
    {"compare", {"--measured TRACE", "--simulated FILE"}},
    {"report", {"DIR", "--html FILE"}},
};

std::string tiny() {
  return " --cluster " + src("topologies/dgx-h100.yaml") + " --workload " + src("workloads/tiny-gpt.yaml") +
         " --set cluster.nodes=1";
}

void expect_usage_error(const std::string& args, const std::string& says) {
  const Result r = run_stepsim(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(says), std::string::npos) << args << "\n" << r.out;
}

} // namespace

TEST(CommandLine, EverySubcommandHasHelp) {
  for (const auto& [command, options] : COMMANDS) {
    for (const char* flag : {"-h", "--help"}) {
      const Result r = run_stepsim(command + " " + flag);
      ASSERT_EQ(r.code, 0) << command << " " << flag << "\n" << r.out;
      EXPECT_EQ(r.out.rfind("usage: stepsim " + command, 0), 0u) << r.out;
      for (const std::string& option : options)
        EXPECT_NE(r.out.find(option), std::string::npos) << command << ": " << option << "\n" << r.out;
      EXPECT_NE(r.out.find("--log-level LEVEL"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("missing required"), std::string::npos) << r.out;
    }
    // `stepsim help CMD` is the same text.
    EXPECT_EQ(run_stepsim("help " + command).out, run_stepsim(command + " --help").out) << command;
  }
  // --help among other arguments, bad ones included, still only prints the help.
  const Result r = run_stepsim("run --clustr x --help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("usage: stepsim run", 0), 0u) << r.out;
  // The top-level help lists every subcommand.
  const Result top = run_stepsim("--help");
  ASSERT_EQ(top.code, 0) << top.out;
  for (const auto& [command, options] : COMMANDS)
    EXPECT_NE(top.out.find("\n  " + command + " "), std::string::npos) << command << "\n" << top.out;
}

TEST(CommandLine, UnknownNamesAreReportedFirstWithTheNearest) {
  expect_usage_error("rnu" + tiny(), "unknown command 'rnu' (try `stepsim help`); did you mean run?");
  expect_usage_error("frobnicate", "unknown command 'frobnicate' (try `stepsim help`)");
  // The unknown option, not the required one it misspells.
  const Result r = run_stepsim("run --clustr " + src("topologies/dgx-h100.yaml") + " --workload x.yaml");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown option --clustr for `stepsim run`; did you mean --cluster?"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("missing required"), std::string::npos) << r.out;
  expect_usage_error("run" + tiny() + " --fial-on-oom",
                     "unknown option --fial-on-oom for `stepsim run`; did you mean --fail-on-oom?");
  expect_usage_error("memory" + tiny() + " --fail-on-om=1",
                     "unknown option --fail-on-om for `stepsim memory`; "
                     "did you mean --fail-on-oom?");
  expect_usage_error("collective --cluster " + src("topologies/dgx-h100.yaml") + " --gpus 8 --op allreduce",
                     "--op allreduce: expected all_reduce, all_gather, reduce_scatter, broadcast, reduce, "
                     "all_to_all or p2p; did you mean all_reduce?");
  expect_usage_error("run" + tiny() + " --collectives corse",
                     "--collectives corse: expected auto, fine or coarse; "
                     "did you mean coarse?");
  expect_usage_error("validate x.yaml --cross-validate sorce",
                     "--cross-validate sorce: expected source, framework or gpu; did you mean source?");
  expect_usage_error("run" + tiny() + " extra.yaml", "unexpected argument 'extra.yaml' for `stepsim run`");
  expect_usage_error("run" + tiny() + " --quiet=yes", "option --quiet takes no value, got 'yes'");
  expect_usage_error("run" + tiny() + " --out --quiet",
                     "option --out needs a value, found the option --quiet");
  expect_usage_error("run --workload x.yaml", "missing required option --cluster (see `stepsim run --help`)");
}

// Flags and options anywhere: `sweep --dry-run FILE` lists what `sweep FILE --dry-run` does;
// -j takes `-j N`, `-jN` and `--jobs=N`.
TEST(CommandLine, FlagsAndOptionsGoAnywhere) {
  const std::string file = src("sweeps/gpt3-schedules.yaml");
  const Result before = run_stepsim("sweep --dry-run " + file);
  ASSERT_EQ(before.code, 0) << before.out;
  EXPECT_NE(before.out.find("gpt3-schedules: 16 configuration(s)"), std::string::npos) << before.out;
  EXPECT_EQ(run_stepsim("sweep " + file + " --dry-run").out, before.out);
  for (const char* jobs : {"-j 2", "-j2", "--jobs=2", "--jobs 2"})
    EXPECT_EQ(run_stepsim(std::string("sweep ") + jobs + " --dry-run " + file).out, before.out) << jobs;
  expect_usage_error("sweep " + file + " --dry-run -j 0", "-j/--jobs: expected a positive integer, got '0'");
}

// Kernel noise on 4,096 GPUs without sampled replicas: before simulating, a note on stderr names
// the key that samples them; with the key there is no note and the table names the sampling.
TEST(CommandLine, LargeNoisyRunSuggestsSampledReplicas) {
  const std::string noisy = " --cluster " + src("topologies/dgx-h100.yaml") + " --workload " +
                            src("workloads/tiny-gpt.yaml") +
                            " --set cluster.nodes=512 --set batch.global_batch=4096"
                            " --set training.variability.kernel_cv=0.05";
  const Result whole = run_stepsim("run" + noisy);
  EXPECT_EQ(whole.code, 0) << whole.out;
  EXPECT_NE(whole.out.find("stepsim: note: kernel noise simulates all 4096 GPUs; "
                           "training.variability.replicas: 8 would simulate 8 of the 1024"),
            std::string::npos)
      << whole.out;
  const Result sampled = run_stepsim("run" + noisy + " --set training.variability.replicas=8");
  EXPECT_EQ(sampled.code, 0) << sampled.out;
  EXPECT_EQ(sampled.out.find("stepsim: note:"), std::string::npos) << sampled.out;
  EXPECT_NE(sampled.out.find("8 of 1024 simulated; each step above adds"), std::string::npos) << sampled.out;
}
