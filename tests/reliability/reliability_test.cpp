// Hostile and careless input, interrupted runs and failed writes, run against the `stepsim`
// binary (docs/reliability.md): every case ends promptly with a clear message, and an output
// folder never holds a partial file or files of two runs.

#include "common/cli.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace fs = std::filesystem;
using stepsim::test::listing;
using stepsim::test::run_shell;
using stepsim::test::run_stepsim;
using stepsim::test::src;

namespace {

/// Every command below runs under this limit: a hang fails the test instead of blocking it.
const std::string kLimit = "timeout -s KILL 60 ";

void write(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
}

/// `stepsim ARGS` under the time limit.
stepsim::test::CommandResult stepsim_limited(const std::string& args) {
  return run_shell(kLimit + STEPSIM_BINARY + " " + args);
}

const std::string kTiny = "--workload " + src("workloads/tiny-gpt.yaml");
const std::string kH100 = "--cluster " + src("topologies/dgx-h100.yaml");
const std::string kOneNode = " --set cluster.nodes=1";

// The inputs that made yaml-cpp 0.7's LoadAll loop forever, allocating without bound.
const std::vector<std::string> kParserHangs = {",", ",,", ", a", "!a ,", ">\n,", "name: x\n---\n,"};

TEST(ParserHang, ClusterWorkloadSweepAndRunsFilesAnswerPromptly) {
  const fs::path dir = stepsim::test::fresh_temp_dir("hang");
  for (const std::string& text : kParserHangs) {
    const fs::path file = dir / "input.yaml";
    write(file, text);
    const std::vector<std::string> commands = {
        "memory --cluster " + file.string() + " " + kTiny,
        "memory " + kH100 + " --workload " + file.string(),
        "sweep " + file.string() + " --out " + (dir / "sweep").string(),
        "validate " + file.string() + " --out " + (dir / "validate").string(),
    };
    for (const std::string& command : commands) {
      const auto r = stepsim_limited(command);
      EXPECT_EQ(r.code, 2) << command << " on '" << text << "': " << r.out;
      EXPECT_NE(r.out.find("input.yaml:"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("YAML syntax error"), std::string::npos)
          << command << " on '" << text << "': " << r.out;
    }
  }
}

TEST(ParserHang, SetValuesAnswerPromptly) {
  for (const std::string value : {",", ",,", "!a ,"}) {
    const auto r =
        stepsim_limited("memory " + kH100 + " " + kTiny + kOneNode + " --set 'model.name=" + value + "'");
    EXPECT_EQ(r.code, 2) << value << ": " << r.out;
    EXPECT_NE(r.out.find("--set model.name=" + value + ": the value is not valid YAML"), std::string::npos)
        << r.out;
  }
}

TEST(ParserHang, DeepNestingIsNamed) {
  const fs::path dir = stepsim::test::fresh_temp_dir("nesting");
  const fs::path file = dir / "deep.yaml";
  write(file, "name: " + std::string(5000, '[') + std::string(5000, ']') + "\n");
  const auto r = stepsim_limited("memory --cluster " + file.string() + " " + kTiny);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("deep.yaml:1:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nested deeper than 64 levels"), std::string::npos) << r.out;
}

TEST(NotARegularFile, FifoInputsAreRefusedWithoutBlocking) {
  const fs::path dir = stepsim::test::fresh_temp_dir("fifo");
  const fs::path fifo = dir / "input.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string f = fifo.string();
  const std::vector<std::string> commands = {
      "memory --cluster " + f + " " + kTiny,
      "memory " + kH100 + " --workload " + f,
      "memory " + kH100 + " " + kTiny + kOneNode + " --set model.from_hf=" + f,
      "memory " + kH100 + " " + kTiny + kOneNode + " --set cluster.gpu.profile=" + f,
      "sweep " + f + " --out " + (dir / "sweep").string(),
      "validate " + f + " --out " + (dir / "validate").string(),
  };
  for (const std::string& command : commands) {
    const auto r = stepsim_limited(command);
    EXPECT_EQ(r.code, 2) << command << ": " << r.out;
    EXPECT_NE(r.out.find("input.fifo"), std::string::npos) << command << ": " << r.out;
    EXPECT_NE(r.out.find("FIFO"), std::string::npos) << command << ": " << r.out;
  }
  // A directory and a device are refused as well.
  for (const std::string& path : {dir.string(), std::string("/dev/zero")}) {
    const auto r = stepsim_limited("memory --cluster " + path + " " + kTiny);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("not a regular file") == std::string::npos ? r.out.find("is a directory") : 0,
              std::string::npos)
        << r.out;
  }
}

TEST(NotARegularFile, ProcessSubstitutionIsStillRead) {
  const auto r = run_shell("bash -c '" + kLimit + STEPSIM_BINARY + " memory --cluster <(cat " +
                           src("topologies/dgx-h100.yaml") + " | grep -v profile) " + kTiny + kOneNode + "'");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(InputSize, OversizedInputsAreRefusedBeforeReading) {
  const fs::path dir = stepsim::test::fresh_temp_dir("size");
  const fs::path big = dir / "big.yaml";
  { std::ofstream out(big); }
  fs::resize_file(big, std::uintmax_t{3} << 30); // sparse: 3 GiB that takes no disk
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"memory --cluster " + big.string() + " " + kTiny, "16 MiB"},
      {"memory " + kH100 + " " + kTiny + kOneNode + " --set model.from_hf=" + big.string(), "16 MiB"},
      {"run " + kH100 + " " + kTiny + kOneNode + " --set cluster.gpu.profile=" + big.string(), "64 MiB"},
  };
  for (const auto& [command, cap] : cases) {
    const auto r = stepsim_limited(command);
    EXPECT_EQ(r.code, 2) << command << ": " << r.out;
    EXPECT_NE(r.out.find("big.yaml"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("larger than the " + cap + " accepted"), std::string::npos)
        << command << ": " << r.out;
  }
}

TEST(Outputs, PlantedSymlinksAtOldTemporaryNamesAreNotFollowed) {
  const fs::path dir = stepsim::test::fresh_temp_dir("symlink");
  const fs::path out = dir / "out";
  const fs::path victim = dir / "victim";
  fs::create_directories(out);
  // `exec` keeps the shell's pid, the pid the old names used.
  std::string plant;
  for (const std::string name :
       {"summary.json.tmp.", "summary.json.probe.", "trace.json.tmp.", "trace.json.probe."})
    plant += "ln -s " + victim.string() + " " + (out / name).string() + "$$; ";
  const auto r = run_shell("bash -c '" + plant + "exec " + kLimit + STEPSIM_BINARY + " run " + kH100 + " " +
                           kTiny + kOneNode + " --quiet --out " + out.string() + "'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(fs::symlink_status(victim))) << "a planted symlink was followed";
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out / "summary.json")));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out / "trace.json")));
}

TEST(Outputs, StaleTemporaryFilesOfDeadProcessesAreRemoved) {
  const fs::path dir = stepsim::test::fresh_temp_dir("stale");
  const fs::path out = dir / "out";
  fs::create_directories(out);
  const auto dead = run_shell("sh -c 'echo $$'"); // a pid whose process has ended
  const std::string pid = dead.out.substr(0, dead.out.find('\n'));
  const std::string stale = ".trace.json.stepsim-" + pid + "-0123456789abcdef.tmp";
  const std::string live = ".trace.json.stepsim-1-0123456789abcdef.tmp"; // init runs: kept
  write(out / stale, "partial");
  write(out / live, "partial");
  write(out / "notes.tmp", "the user's");
  const auto r = stepsim_limited("run " + kH100 + " " + kTiny + kOneNode + " --quiet --out " + out.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(listing(out), (std::vector<std::string>{live, "notes.tmp", "summary.json", "trace.json"}));
}

TEST(Outputs, OneRunsSetPerFolder) {
  const fs::path out = stepsim::test::fresh_temp_dir("set") / "out";
  const std::string run = "run " + kH100 + " " + kTiny + kOneNode + " --quiet --out " + out.string();
  ASSERT_EQ(stepsim_limited(run + " --csv").code, 0);
  EXPECT_EQ(listing(out), (std::vector<std::string>{"summary.json", "tasks.csv", "trace.json"}));
  // A later run without the trace and the CSV leaves no file of the earlier run beside its own.
  ASSERT_EQ(stepsim_limited(run + " --no-trace").code, 0);
  EXPECT_EQ(listing(out), (std::vector<std::string>{"summary.json"}));
}

TEST(Outputs, WriteFailureNamesFileAndReasonAndLeavesNothing) {
  const fs::path out = stepsim::test::fresh_temp_dir("full") / "out";
  // A file size limit of 20 KiB: the trace (about 55 kB: two simulated GPUs, TP folded) cannot be
  // written, as on a full disk; the summary (about 3 kB) could.
  const auto r = run_shell("bash -c 'trap \"\" XFSZ; ulimit -f 20; exec " + kLimit + STEPSIM_BINARY +
                           " run " + kH100 + " " + kTiny + kOneNode + " --quiet --out " + out.string() + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot write " + (out / "trace.json").string() + ": File too large"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(listing(out), std::vector<std::string>{}) << "no partial set, no temporary file";
}

TEST(Interrupt, SigintSaysSoAndLeavesNoTemporaryFile) {
  const fs::path out = stepsim::test::fresh_temp_dir("sigint") / "out";
  // GPT-3 on the 256 GPUs of the 2:1 tree takes seconds (384 micro-batches per pipeline, one
  // replica per placement class and every TP rank on an oversubscribed fabric, docs/engine.md):
  // the signal comes while it simulates.
  const auto r =
      run_shell("timeout -s INT 1 " + std::string(STEPSIM_BINARY) + " run --cluster " +
                src("topologies/fat-tree-2to1.yaml") + " --workload " + src("workloads/gpt3-175b.yaml") +
                " --out " + out.string() + " 2>&1; echo status=$?");
  EXPECT_NE(r.out.find("stepsim: interrupted (SIGINT)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("status=124"), std::string::npos) << r.out; // timeout's: the signal ended it
  if (fs::exists(out)) {
    EXPECT_EQ(listing(out), std::vector<std::string>{});
  }
}

TEST(Messages, LongValuesAreCutAndControlBytesEscaped) {
  const std::string value = "\x1b[31m" + std::string(100000, 'x');
  const auto r =
      stepsim_limited("memory " + kH100 + " " + kTiny + kOneNode + " --set 'precision=" + value + "'");
  EXPECT_EQ(r.code, 2) << r.out.substr(0, 2000);
  EXPECT_LT(r.out.size(), 4000u) << "a huge value is echoed whole";
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "a raw escape byte reached stderr";
  EXPECT_NE(r.out.find("\\x1b[31m"), std::string::npos) << r.out;
}

TEST(Messages, GpuCountLimitBlamesTheOverriddenKey) {
  const auto r = stepsim_limited("memory " + kH100 + " " + kTiny + " --set cluster.nodes=1000000");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(
      r.out.find(
          "--set cluster.nodes=1000000: key 'nodes': nodes * gpus_per_node = 1000000*8 exceeds 1048576"),
      std::string::npos)
      << r.out;
  const auto over = stepsim_limited("memory " + kH100 + " " + kTiny + " --set cluster.nodes=2000000");
  EXPECT_NE(over.out.find("key 'nodes'"), std::string::npos) << over.out;
  EXPECT_NE(over.out.find("1048576"), std::string::npos) << over.out;
}

TEST(OutOfMemory, FailOnOomAnswersFromTheLedgerWithoutSimulating) {
  // 100 000 layers on one node: 860 GiB per GPU. Simulating it took minutes; the ledger knows.
  const fs::path out = stepsim::test::fresh_temp_dir("oom") / "out";
  const auto r = stepsim_limited("run " + kH100 + " " + kTiny + kOneNode +
                                 " --set model.layers=100000 --fail-on-oom --out " + out.string());
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("does not fit in memory: pipeline stage 0 needs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not simulated, no output written"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST(OutOfMemory, ModelStatesThatCannotFitAreRefusedBeforeSimulating) {
  // The same 100 000 layers without any flag: the weights, gradients and optimizer states alone
  // exceed the H100's 80 GiB, which no schedule, micro-batch or recomputation changes, so `run`
  // answers at once (it simulated for 35 s before) and writes nothing.
  const fs::path out = stepsim::test::fresh_temp_dir("states") / "out";
  const auto r = stepsim_limited("run " + kH100 + " " + kTiny + kOneNode +
                                 " --set model.layers=100000 --out " + out.string());
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("does not fit in memory: pipeline stage 0 holds"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("before any activation, more than the 80.00 GiB of H100"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--simulate-oom simulates it anyway"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
  // tiny-gpt's states on a GPU of 64 MiB: refused; with --simulate-oom simulated and reported as
  // not fitting (exit 0, fits_in_memory false).
  const std::string small = "run " + kH100 + " " + kTiny + kOneNode + " --set cluster.gpu.hbm_capacity=64MiB";
  EXPECT_EQ(stepsim_limited(small + " --quiet --no-trace").code, 3);
  const auto forced = stepsim_limited(small + " --simulate-oom --no-trace --out " + out.string());
  EXPECT_EQ(forced.code, 0) << forced.out;
  EXPECT_NE(forced.out.find("warning: does not fit in memory"), std::string::npos) << forced.out;
  EXPECT_NE(stepsim::test::slurp(out / "summary.json").find("\"fits_in_memory\": false"), std::string::npos);
}

TEST(Progress, ShownWithTheFlagSilentWhenPiped) {
  const std::string run = "run " + kH100 + " " + kTiny + kOneNode + " --quiet";
  const auto shown = stepsim_limited(run + " --progress");
  EXPECT_EQ(shown.code, 0) << shown.out;
  // tiny-gpt on one node: tp 2, pp 2, one DP replica and one rank per TP group simulated.
  EXPECT_NE(shown.out.find("stepsim: simulated 206 / 206 tasks (100 %), ETA 0 s\n"), std::string::npos)
      << shown.out;
  const auto piped = stepsim_limited(run); // stderr is a pipe here, not a terminal
  EXPECT_EQ(piped.code, 0);
  EXPECT_EQ(piped.out, "");
}

} // namespace

namespace {

// Issue point 8: GPT-3 on 100 000 GPUs ran minutes without a word. With --progress its first
// progress line comes once the replay starts (seconds); `head` ends the run at its next line.
TEST(Progress, AHundredThousandGpuRunSaysHowFarItHasGot) {
  const auto r =
      run_shell(kLimit + STEPSIM_BINARY + " run --cluster " + src("topologies/dgx-a100-superpod.yaml") +
                " --workload " + src("workloads/gpt3-175b.yaml") +
                " --set cluster.nodes=12800 --set batch.global_batch=3200 --no-trace --quiet --progress "
                "2>&1 | head -n 1");
  const std::string head = "stepsim: simulated ";
  ASSERT_EQ(r.out.rfind(head, 0), 0u) << r.out;
  const std::size_t done = std::stoul(r.out.substr(head.size()));
  const std::size_t slash = r.out.find(" / ");
  ASSERT_NE(slash, std::string::npos) << r.out;
  const std::size_t total = std::stoul(r.out.substr(slash + 3));
  EXPECT_GE(done, 1u) << r.out;
  EXPECT_LT(done, total) << r.out;
  EXPECT_NE(r.out.find(" tasks ("), std::string::npos) << r.out;
}

struct Split {
  int code = -1;
  std::string out, err;
};

/// `stepsim ARGS` under the time limit with stdout and stderr kept apart (stderr is a file).
Split stepsim_split(const std::string& args, const fs::path& dir) {
  const auto r = run_shell("(" + kLimit + STEPSIM_BINARY + " " + args + " >" + (dir / "stdout").string() +
                           " 2>" + (dir / "stderr").string() + ")");
  return Split{r.code, stepsim::test::slurp(dir / "stdout"), stepsim::test::slurp(dir / "stderr")};
}

// plan, sweep and validate show the shared progress line with --progress, also into a file, and
// their stdout does not change; without it and without a terminal there is none.
TEST(Progress, PlanSweepAndValidateShowItWithTheFlagAndKeepStdout) {
  const fs::path dir = stepsim::test::fresh_temp_dir("progress");
  const fs::path sweep_file = dir / "s.yaml";
  write(sweep_file, "name: s\ncluster: " + src("topologies/dgx-h100.yaml") +
                        "\nworkload: " + src("workloads/tiny-gpt.yaml") +
                        "\nset:\n  cluster.nodes: 1\ngrid:\n  parallel.tp: [1, 2, 16]\n");
  struct Case {
    std::string args;    ///< the command, {OUT} replaced by a fresh folder
    std::string last;    ///< the progress line's last figures
    std::string results; ///< a file in {OUT} that must not change either, or ""
  };
  const std::vector<Case> cases = {
      {"plan " + kH100 + " " + kTiny + kOneNode + " --top 2 --json",
       "stepsim: simulated 3 / 3 layouts (100 %), ETA 0 s\n", ""},
      {"sweep " + sweep_file.string() + " -j 2 --out {OUT}",
       "stepsim: sweep ran 3 / 3 configurations (100 %), ETA 0 s, ok 2, oom 0, skipped 1, failed 0\n",
       "results.csv"},
      {"validate " + src("tests/validate/data/measured_runs.yaml") +
           " --only narayanan21_t1_1p7B --only narayanan21_t1_7p5B -j 2 --out {OUT}",
       "stepsim: validate simulated 2 / 2 runs (100 %), ETA 0 s, last ", "validation.csv"},
  };
  for (const Case& c : cases) {
    std::vector<Split> runs;
    std::vector<std::string> results;
    for (const std::string flag : {"", " --progress"}) {
      const fs::path out = dir / ("out" + std::to_string(runs.size()));
      std::string args = c.args;
      if (const auto at = args.find("{OUT}"); at != std::string::npos)
        args.replace(at, 5, out.string());
      runs.push_back(stepsim_split(args + flag, dir));
      EXPECT_EQ(runs.back().code, 0) << args << flag << "\n" << runs.back().err;
      if (!c.results.empty())
        results.push_back(stepsim::test::slurp(out / c.results));
    }
    const Split& plain = runs[0];
    const Split& shown = runs[1];
    EXPECT_EQ(plain.err.find("stepsim: "), std::string::npos) << c.args << "\n" << plain.err;
    EXPECT_NE(shown.err.find(c.last), std::string::npos) << c.args << "\n" << shown.err;
    EXPECT_EQ(shown.err.find('\r'), std::string::npos) << "redrawn in place into a file: " << shown.err;
    EXPECT_FALSE(plain.out.empty() && c.results.empty()) << c.args;
    EXPECT_EQ(shown.out, plain.out) << c.args;
    if (!c.results.empty()) {
      EXPECT_FALSE(results[0].empty()) << c.args;
      EXPECT_EQ(results[1], results[0]) << c.args;
    }
  }
}

} // namespace
