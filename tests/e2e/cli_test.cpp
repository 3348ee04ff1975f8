// End-to-end tests of the `stepsim` binary: every bundled topology x workload runs, outputs are
// byte-identical across runs, summary.json carries the documented keys, bad input exits 2 with
// a message naming the file and key.

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
#include <vector>

namespace fs = std::filesystem;
using stepsim::test::fresh_temp_dir;
using stepsim::test::run_stepsim;
using stepsim::test::slurp;
using stepsim::test::src;
using Result = stepsim::test::CommandResult;

namespace {

std::string tiny_args(const fs::path& out) {
  return "run --cluster " + src("topologies/dgx-h100.yaml") + " --workload " +
         src("workloads/tiny-gpt.yaml") + " --set cluster.nodes=1 --out " + out.string();
}

} // namespace

// Every bundled topology x workload pair simulates (tiny-gpt on one node, the others at their
// bundled node counts) and reports a positive step time.
TEST(EndToEnd, EveryBundledPairRuns) {
  const std::vector<std::string> topologies = {"dgx-a100-superpod", "dgx-h100"};
  const std::vector<std::pair<std::string, std::string>> workloads = {
      {"gpt3-175b", ""}, {"llama2-70b", ""}, {"tiny-gpt", " --set cluster.nodes=1"}};
  for (const auto& t : topologies) {
    for (const auto& [w, extra] : workloads) {
      const fs::path out = fresh_temp_dir(t + "-" + w);
      const Result r =
          run_stepsim("run --quiet --no-trace --cluster " + src("topologies/" + t + ".yaml") +
                      " --workload " + src("workloads/" + w + ".yaml") + extra + " --out " + out.string());
      ASSERT_EQ(r.code, 0) << t << " x " << w << ":\n" << r.out;
      const auto j = nlohmann::json::parse(slurp(out / "summary.json"));
      EXPECT_GT(j["step_time_s"].get<double>(), 0.0) << t << " x " << w;
      EXPECT_GT(j["mfu"].get<double>(), 0.0);
      EXPECT_LT(j["mfu"].get<double>(), 1.0);
      fs::remove_all(out);
    }
  }
}

// Every topology file bundled in topologies/ (found by listing the folder, so a new one is covered)
// simulates the tiny model on one node with its kernel profile: no roofline time.
TEST(EndToEnd, EveryBundledTopologyRunsOnItsProfile) {
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(src("topologies"))) {
    if (entry.path().extension() != ".yaml")
      continue;
    ++seen;
    const std::string t = entry.path().stem().string();
    const fs::path out = fresh_temp_dir("topology-" + t);
    // 144 sequences: divisible by every node's data-parallel size (8, 16 or 72 GPUs over tp 2, pp 2).
    // A GPU without bf16 tensor cores (V100) trains in fp16.
    const bool bf16 = slurp(entry.path()).find("bf16:") != std::string::npos;
    const Result r =
        run_stepsim("run --quiet --no-trace --cluster " + entry.path().string() + " --workload " +
                    src("workloads/tiny-gpt.yaml") + " --set cluster.nodes=1 --set batch.global_batch=144" +
                    (bf16 ? "" : " --set precision=fp16") + " --out " + out.string());
    ASSERT_EQ(r.code, 0) << t << ":\n" << r.out;
    const auto j = nlohmann::json::parse(slurp(out / "summary.json"));
    EXPECT_GT(j["step_time_s"].get<double>(), 0.0) << t;
    EXPECT_DOUBLE_EQ(j["compute_source"]["roofline"].get<double>(), 0.0) << t;
    fs::remove_all(out);
  }
  EXPECT_GE(seen, 10);
}

// The same input twice gives byte-identical summary.json and trace.json.
TEST(EndToEnd, OutputsAreByteIdentical) {
  const fs::path a = fresh_temp_dir("det-a"), b = fresh_temp_dir("det-b");
  ASSERT_EQ(run_stepsim(tiny_args(a)).code, 0);
  ASSERT_EQ(run_stepsim(tiny_args(b)).code, 0);
  EXPECT_EQ(slurp(a / "summary.json"), slurp(b / "summary.json"));
  EXPECT_EQ(slurp(a / "trace.json"), slurp(b / "trace.json"));
  EXPECT_FALSE(slurp(a / "trace.json").empty());
  fs::remove_all(a);
  fs::remove_all(b);
}

// --log-level: off by default (a quiet run prints nothing at all); debug adds the engine's and
// the planner's diagnostics on stderr, as `stepsim: <level>: ...` lines, and changes no output
// file; an unknown level is a usage error (exit 2) listing the levels.
TEST(EndToEnd, LogLevelWritesDiagnosticsOnStderrOnly) {
  const fs::path quiet = fresh_temp_dir("log-off"), loud = fresh_temp_dir("log-debug");
  const Result off = run_stepsim(tiny_args(quiet) + " --quiet");
  ASSERT_EQ(off.code, 0) << off.out;
  EXPECT_EQ(off.out, "");
  const Result debug = run_stepsim(tiny_args(loud) + " --quiet --log-level debug");
  ASSERT_EQ(debug.code, 0) << debug.out;
  EXPECT_NE(debug.out.find("stepsim: info: engine: replaying "), std::string::npos) << debug.out;
  EXPECT_NE(debug.out.find("stepsim: debug: engine: "), std::string::npos) << debug.out;
  EXPECT_NE(debug.out.find(" tasks done, "), std::string::npos) << debug.out;
  EXPECT_EQ(debug.out.find("stepsim: trace:"), std::string::npos) << debug.out;
  EXPECT_EQ(slurp(quiet / "summary.json"), slurp(loud / "summary.json"));
  EXPECT_EQ(slurp(quiet / "trace.json"), slurp(loud / "trace.json"));
  const Result trace = run_stepsim(tiny_args(loud) + " --quiet --log-level=trace");
  ASSERT_EQ(trace.code, 0) << trace.out;
  EXPECT_NE(trace.out.find(" start #0 "), std::string::npos) << trace.out;
  EXPECT_NE(trace.out.find(" done #0"), std::string::npos) << trace.out;

  const Result plan =
      run_stepsim("plan --cluster " + src("topologies/dgx-h100.yaml") + " --workload " +
                  src("workloads/tiny-gpt.yaml") + " --set cluster.nodes=1 --top 1 --log-level debug");
  ASSERT_EQ(plan.code, 0) << plan.out;
  for (const char* says : {"stepsim: info: plan: ", " layouts enumerated in ",
                           "stepsim: debug: plan: estimated ", " layouts fit in memory, ",
                           "plan: simulating ", " candidates, 1 at once", "stepsim: debug: plan: simulated "})
    EXPECT_NE(plan.out.find(says), std::string::npos) << says << "\n" << plan.out;

  const Result bad = run_stepsim(tiny_args(loud) + " --log-level loud");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("option --log-level: 'loud' is not a level (trace, debug, info, warn, error, off)"),
            std::string::npos)
      << bad.out;
  fs::remove_all(quiet);
  fs::remove_all(loud);
}

// summary.json has the documented keys; compute + bubble + exposed communication account for the
// whole step (the attribution leaves nothing out).
TEST(EndToEnd, SummaryKeysAndAccounting) {
  const fs::path out = fresh_temp_dir("keys");
  ASSERT_EQ(run_stepsim(tiny_args(out)).code, 0);
  const auto j = nlohmann::json::parse(slurp(out / "summary.json"));
  for (const char* k : {"num_gpus", "step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "hfu",
                        "bubble_fraction", "exposed_comm_s", "compute_s", "flops_formula"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* g : {"tp", "pp", "dp"})
    EXPECT_TRUE(j["exposed_comm_s"].contains(g)) << g;
  EXPECT_EQ(j["num_gpus"].get<int>(), 8);
  const double T = j["step_time_s"].get<double>();
  const double sum = j["compute_s"].get<double>() + j["bubble_fraction"].get<double>() * T +
                     j["exposed_comm_s"]["tp"].get<double>() + j["exposed_comm_s"]["pp"].get<double>() +
                     j["exposed_comm_s"]["dp"].get<double>() + j["other_idle_s"].get<double>();
  EXPECT_NEAR(sum, T, 1e-9 * T + 1e-12);
  // tokens/s = global batch * seq_len / step time (tiny-gpt: 16 x 256).
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 16.0 * 256.0 / T, 1e-6 * 16.0 * 256.0 / T);
  // It fits: the headroom is the capacity left at the worst GPU's peak, positive.
  EXPECT_TRUE(j["fits_in_memory"].get<bool>());
  EXPECT_EQ(j["memory"]["headroom_bytes"].get<double>(),
            j["memory"]["capacity_bytes"].get<double>() - j["memory"]["peak_bytes"].get<double>());
  EXPECT_GT(j["memory"]["headroom_bytes"].get<double>(), 0.0);
  fs::remove_all(out);
}

// summary.json's critical_path: its length is the step time, its parts (compute per block,
// collectives and sends per group, wait) add up to it, and on a tensor-parallel step it holds
// compute and TP collectives.
TEST(EndToEnd, CriticalPathAccountsForTheStep) {
  const fs::path out = fresh_temp_dir("critical-path");
  ASSERT_EQ(run_stepsim(tiny_args(out) + " --quiet").code, 0);
  const auto j = nlohmann::json::parse(slurp(out / "summary.json"));
  const auto& cp = j["critical_path"];
  const double T = j["step_time_s"].get<double>();
  EXPECT_EQ(cp["length_s"].get<double>(), T);
  double sum = cp["wait_s"].get<double>();
  for (const char* part : {"compute_s", "collectives_s", "p2p_s"})
    for (const auto& [kind, s] : cp[part].items())
      sum += s.get<double>();
  EXPECT_NEAR(sum, T, 1e-9 * T);
  EXPECT_GT(cp["tasks"].get<int>(), 0);
  EXPECT_GT(cp["compute_s"]["attention"].get<double>(), 0.0);
  EXPECT_GT(cp["collectives_s"]["tp"].get<double>(), 0.0);
  EXPECT_EQ(cp["wait_s"].get<double>(), 0.0);
  fs::remove_all(out);
}

// Bad input: exit code 2 and a message naming the file, line:col and key.
TEST(EndToEnd, BadInputExitsTwoWithLocation) {
  const fs::path dir = fresh_temp_dir("bad");
  fs::create_directories(dir);
  const fs::path bad = dir / "bad.yaml";
  std::ofstream(bad) << slurp(src("workloads/tiny-gpt.yaml")) << "\nbatchh: {}\n";
  const Result r = run_stepsim("run --cluster " + src("topologies/dgx-h100.yaml") + " --workload " +
                               bad.string() + " --set cluster.nodes=1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(bad.string() + ":"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("batchh"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("did you mean"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

TEST(EndToEnd, BadOverrideExitsTwo) {
  const Result r =
      run_stepsim("run --cluster " + src("topologies/dgx-h100.yaml") + " --workload " +
                  src("workloads/tiny-gpt.yaml") + " --set cluster.nodes=1 --set parallel.tp=abc");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("parallel.tp"), std::string::npos) << r.out;
}

TEST(EndToEnd, ImpossibleLayoutIsRefusedWithReason) {
  const Result r = run_stepsim("run --cluster " + src("topologies/dgx-h100.yaml") + " --workload " +
                               src("workloads/tiny-gpt.yaml") + " --set cluster.nodes=1 --set parallel.dp=3");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("8 GPUs"), std::string::npos) << r.out;
}

// Errors found only while the step runs are still bad input with a clear message and exit 2,
// never a crash: a forced collective algorithm that cannot run its group's operation, and an
// efficiency so small that a kernel would take forever. Neither leaves output behind.
TEST(EndToEnd, ErrorsFoundWhileRunningExitTwo) {
  const fs::path out = fresh_temp_dir("midrun");
  const std::string base = "run --no-trace --cluster " + src("topologies/dgx-h100.yaml") + " --workload " +
                           src("workloads/tiny-gpt.yaml") + " --set cluster.nodes=1 --out " + out.string();
  const Result forced = run_stepsim(base + " --set parallel.zero_stage=2 --set collectives.dp=tree");
  EXPECT_EQ(forced.code, 2) << forced.out;
  EXPECT_NE(forced.out.find("'collectives.dp' = tree: cannot run reduce_scatter"), std::string::npos)
      << forced.out;
  // An efficiency so small that a kernel would take forever is refused as the value it is.
  const Result tiny = run_stepsim(base + " --set cluster.gpu.gemm_efficiency=1e-320");
  EXPECT_EQ(tiny.code, 2) << tiny.out;
  EXPECT_NE(tiny.out.find(
                "--set cluster.gpu.gemm_efficiency=1e-320: key 'gpu.gemm_efficiency': expected a number in "
                "[0.001, 1] (the sanity limit)"),
            std::string::npos)
      << tiny.out;
  EXPECT_FALSE(fs::exists(out / "summary.json"));
  fs::remove_all(out);
}

TEST(EndToEnd, UnknownOptionAndMissingFile) {
  EXPECT_EQ(run_stepsim("run --cluster x.yaml --workload y.yaml --bogus").code, 2);
  const Result r =
      run_stepsim("run --cluster /nonexistent.yaml --workload " + src("workloads/tiny-gpt.yaml"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("/nonexistent.yaml"), std::string::npos) << r.out;
  EXPECT_EQ(run_stepsim("frobnicate").code, 2);
}

// Command-line misuse is a usage error (exit 2) that says what is wrong, never a silent default:
// an option twice, an empty value, --csv without --out, an extra word after `version`, a cluster
// override without a cluster, a bound crossed (the planner's --max-vp, calibrate's --tolerance,
// collective sizes), a forced algorithm for a point-to-point send.
TEST(EndToEnd, CommandLineMisuseExitsTwo) {
  const std::string tiny = "--cluster " + src("topologies/dgx-h100.yaml") + " --workload " +
                           src("workloads/tiny-gpt.yaml") + " --set cluster.nodes=1";
  const auto expect = [](const std::string& args, const std::string& says) {
    const Result r = run_stepsim(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << "\n" << r.out;
  };
  expect("run " + tiny + " --cluster " + src("topologies/dgx-b200.yaml"),
         "option --cluster is given 2 times");
  expect("run " + tiny + " --out ''", "option --out needs a non-empty value");
  expect("run " + tiny + " --csv", "--csv writes DIR/tasks.csv: give --out DIR");
  expect("version extra", "unexpected argument 'extra' for `stepsim version`");
  expect("kernels --workload " + src("workloads/tiny-gpt.yaml") + " --set cluster.nodes=2",
         "--set cluster.nodes=2: a cluster key needs --cluster FILE");
  expect("plan " + tiny + " --top 0 --max-vp 2147483647", "--max-vp: expected an integer in [1, 128]");
  expect("plan " + tiny + " --top 0 --max-tp 0", "--max-tp: expected an integer in [1,");
  const std::string collective = "collective --cluster " + src("topologies/dgx-h100.yaml") + " --gpus 8 ";
  expect(collective + "--op all_reduce --sizes 1.5B", "expected whole bytes from 1B to 1TiB, found '1.5B'");
  expect(collective + "--op all_reduce --sizes 0B:1MiB", "expected whole bytes from 1B to 1TiB, found '0B'");
  expect(collective + "--op all_reduce --sizes 1e30B", "expected whole bytes from 1B to 1TiB");
  expect(collective + "--op p2p --algorithm tree", "a point-to-point send has no algorithm to choose");
  expect("calibrate " + src("tests/validate/data/measured_runs.yaml") +
             " --fit narayanan21_t1_1p7B --knob gpu.pass_overhead=0:1:ms --tolerance 1e-300",
         "would be more than 10^6 grid steps");
  const std::string calibrate =
      "calibrate " + src("tests/validate/data/measured_runs.yaml") + " --fit narayanan21_t1_1p7B";
  // A knob range the cluster refuses is named before anything is simulated.
  expect(calibrate + " --knob gpu.gemm_efficiency=0:2",
         "--knob gpu.gemm_efficiency=0:2: the cluster refuses 0: --set cluster.gpu.gemm_efficiency=0");
  expect(calibrate + " --knob gpu.gemm_efficiency=1:0.5", "expected LO < HI, found 1 and 0.5");
  expect(calibrate + ",narayanan21_t1_1p7B", "fit run 'narayanan21_t1_1p7B' is given twice");
  expect(calibrate + " --knob gpu.gemm_efficiency=0.5:1 --knob gpu.gemm_efficiency=0.6:0.9",
         "--knob gpu.gemm_efficiency is given twice");
  expect(calibrate + " --rounds 1.5", "--rounds/--tolerance: expected an integer and a number");
  expect(calibrate + " --objective median", "--objective median: expected mean or rms");
  expect(calibrate + " --knob gpu.gemm_efficiency=0.5:1 --tolerance 2", "holds fewer than two grid steps");
  expect(calibrate + " --knob nodes=1:4", "the cluster refuses 2.5");
  expect("validate " + src("tests/validate/data/measured_runs.yaml") + " --timeout 0",
         "--timeout: expected seconds > 0");
  expect(collective + "--op bogus", "--op bogus: expected all_reduce, all_gather, reduce_scatter, broadcast, "
                                    "reduce, all_to_all or p2p");
  // A precision the GPU lacks rules out every layout: the planner says why instead of "nothing fits".
  expect("plan --cluster " + src("topologies/dgx2-v100.yaml") + " --workload " +
             src("workloads/tiny-gpt.yaml") + " --top 0",
         "precision: bf16 needs gpu.peak_flops.bf16");
}

// Outputs are checked before the step is simulated: with a directory where trace.json would go,
// the run fails (exit 2, naming it) and writes no summary.json either.
TEST(EndToEnd, UnwritableOutputFailsBeforeWritingAny) {
  const fs::path out = fresh_temp_dir("blocked");
  fs::create_directories(out / "trace.json");
  const Result r = run_stepsim(tiny_args(out));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("trace.json: it is a directory"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out / "summary.json"));
  fs::remove_all(out);
}

// A second YAML document in a file is refused where it starts (it would be ignored unread), and a
// path the system refuses (a name over 255 bytes) is named at its key, exit 2.
TEST(EndToEnd, SecondYamlDocumentAndUnreadablePathsAreNamed) {
  const fs::path dir = fresh_temp_dir("docs");
  fs::create_directories(dir);
  const fs::path two = dir / "two.yaml";
  std::ofstream(two) << slurp(src("workloads/tiny-gpt.yaml")) << "---\nmodel: 7\n";
  const std::string cluster = " --cluster " + src("topologies/dgx-h100.yaml") + " --set cluster.nodes=1";
  Result r = run_stepsim("memory --workload " + two.string() + cluster);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("a second YAML document"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(two.string() + ":"), std::string::npos) << r.out;
  r = run_stepsim("memory --workload " + src("workloads/tiny-gpt.yaml") + cluster +
                  " --set model.from_hf=" + std::string(300, 'x'));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("key 'model.from_hf'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("File name too long"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

// A failed run leaves no partial output behind (outputs are written whole or not at all).
TEST(EndToEnd, FailedRunWritesNothing) {
  const fs::path out = fresh_temp_dir("fail");
  run_stepsim("run --cluster " + src("topologies/dgx-h100.yaml") + " --workload " +
              src("workloads/tiny-gpt.yaml") + " --set parallel.dp=3 --out " + out.string());
  EXPECT_FALSE(fs::exists(out / "summary.json"));
  EXPECT_FALSE(fs::exists(out / "trace.json"));
}

// Not fitting in memory is an answer, not an error: exit 0 with fits_in_memory false and the
// reason in summary.json; --fail-on-oom turns it into exit code 3. (GPT-3 175B, TP8 PP8,
// micro-batch 1 without recomputation needs ~100 GiB on stage 0: MODEL.md §3.)
TEST(EndToEnd, OutOfMemoryIsReportedAndFailOnOomExitsThree) {
  const fs::path out = fresh_temp_dir("oom");
  const std::string args =
      "run --no-trace --cluster " + src("topologies/dgx-a100-superpod.yaml") + " --workload " +
      src("workloads/gpt3-175b.yaml") +
      " --set training.recompute=none --set cluster.nodes=64 --set batch.global_batch=64";
  const Result r = run_stepsim(args + " --out " + out.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(out / "summary.json"));
  EXPECT_FALSE(j["fits_in_memory"].get<bool>());
  EXPECT_GT(j["memory"]["peak_bytes"].get<double>(), j["memory"]["capacity_bytes"].get<double>());
  EXPECT_TRUE(j["memory"].contains("oom"));
  EXPECT_GT(j["memory"]["oom"]["over_by_bytes"].get<double>(), 0.0);
  // The headroom is the GPU's excess with its sign: minus what the OOM reason says it is over by.
  EXPECT_EQ(j["memory"]["headroom_bytes"].get<double>(),
            j["memory"]["capacity_bytes"].get<double>() - j["memory"]["peak_bytes"].get<double>());
  EXPECT_DOUBLE_EQ(j["memory"]["headroom_bytes"].get<double>(),
                   -j["memory"]["oom"]["over_by_bytes"].get<double>());
  for (const char* k : {"weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                        "other_bytes", "peak_bytes", "capacity_bytes", "stage_peak_bytes"})
    EXPECT_TRUE(j["memory"].contains(k)) << k;
  EXPECT_EQ(run_stepsim(args + " --quiet --fail-on-oom").code, 3);
  fs::remove_all(out);
}

// `stepsim memory` prints the static ledger per stage without simulating, and agrees with the
// simulated peak of summary.json for the worst GPU.
TEST(EndToEnd, MemoryCommandMatchesSimulatedPeak) {
  const std::string common = "--cluster " + src("topologies/dgx-a100-superpod.yaml") + " --workload " +
                             src("workloads/gpt3-175b.yaml");
  const Result m = run_stepsim("memory " + common);
  ASSERT_EQ(m.code, 0) << m.out;
  EXPECT_NE(m.out.find("stage 7"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("fits in memory"), std::string::npos) << m.out;
  const fs::path out = fresh_temp_dir("mem");
  ASSERT_EQ(run_stepsim("run --quiet --no-trace " + common + " --out " + out.string()).code, 0);
  const auto j = nlohmann::json::parse(slurp(out / "summary.json"));
  const double peak_gib = j["memory"]["peak_bytes"].get<double>() / (1024.0 * 1024 * 1024);
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", peak_gib);
  EXPECT_NE(m.out.find(text), std::string::npos) << "simulated peak " << text << " GiB not in:\n" << m.out;
  EXPECT_EQ(run_stepsim("memory " + common + " --set training.recompute=none --fail-on-oom").code, 3);
  fs::remove_all(out);
}

// Activation offloading: with training.offload_layers = 2 of tiny-gpt's 4 layers (pp 1, one
// micro-batch per replica) and a host link of 1 MB/s, each offloaded layer's copy out (forward)
// and back (backward) takes far longer than its compute, so the step grows by four copies of one
// layer's activations at the host rate; the ledger keeps the one layer in flight as a buffer and
// drops the two offloaded layers' activations. The memory command agrees with the simulated peak.
TEST(EndToEnd, OffloadedLayersCopyAtTheHostRate) {
  const std::string common =
      "--cluster " + src("topologies/dgx-h100.yaml") + " --workload " + src("workloads/tiny-gpt.yaml") +
      " --set cluster.nodes=1 --set parallel.tp=1 --set parallel.pp=1 --set parallel.schedule=1f1b";
  const fs::path base = fresh_temp_dir("offload-none");
  const fs::path off = fresh_temp_dir("offload-two");
  ASSERT_EQ(run_stepsim("run --quiet --no-trace " + common + " --out " + base.string()).code, 0);
  const std::string offload =
      common + " --set training.offload_layers=2 --set cluster.gpu.host_bandwidth=1MBps";
  const Result r = run_stepsim("run --quiet --no-trace " + offload + " --out " + off.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto a = nlohmann::json::parse(slurp(base / "summary.json"));
  const auto b = nlohmann::json::parse(slurp(off / "summary.json"));
  const double layer = b["memory"]["other"]["comm_buffers_bytes"].get<double>() -
                       a["memory"]["other"]["comm_buffers_bytes"].get<double>();
  ASSERT_GT(layer, 0.0);
  const double copies = 4.0 * layer / 1e6;
  EXPECT_NEAR(b["step_time_s"].get<double>() - a["step_time_s"].get<double>(), copies, 1e-3 * copies);
  EXPECT_NEAR(a["memory"]["activations_bytes"].get<double>() - b["memory"]["activations_bytes"].get<double>(),
              2.0 * layer, 1e-6 * layer);
  // The two offloaded layers of the one pass in flight wait in host memory; with less host memory
  // per GPU than that, the run does not fit and says why.
  EXPECT_NEAR(b["memory"]["host_offload_bytes"].get<double>(), 2.0 * layer, 1e-6 * layer);
  EXPECT_EQ(a["memory"]["host_offload_bytes"].get<double>(), 0.0);
  const fs::path tight = fresh_temp_dir("offload-tight");
  ASSERT_EQ(run_stepsim("run --quiet --no-trace " + offload + " --set cluster.gpu.host_memory=1KiB --out " +
                        tight.string())
                .code,
            0);
  const auto c = nlohmann::json::parse(slurp(tight / "summary.json"));
  EXPECT_FALSE(c["fits_in_memory"].get<bool>());
  EXPECT_NEAR(c["memory"]["oom"]["host_over_by_bytes"].get<double>(), 2.0 * layer - 1024.0, 1e-6 * layer);
  EXPECT_EQ(c["memory"]["oom"]["over_by_bytes"].get<double>(), 0.0);
  EXPECT_NE(c["memory"]["oom"]["reason"].get<std::string>().find("gpu.host_memory"), std::string::npos);
  EXPECT_EQ(run_stepsim("memory " + offload + " --set cluster.gpu.host_memory=1KiB --fail-on-oom").code, 3);
  fs::remove_all(tight);
  const Result m = run_stepsim("memory " + offload);
  ASSERT_EQ(m.code, 0) << m.out;
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", b["memory"]["peak_bytes"].get<double>() / (1024.0 * 1024 * 1024));
  EXPECT_NE(m.out.find(text), std::string::npos) << "simulated peak " << text << " GiB not in:\n" << m.out;
  // Offloading needs no recomputation and fewer layers than a model chunk holds.
  const Result all = run_stepsim("memory " + offload + " --set training.offload_layers=4");
  EXPECT_EQ(all.code, 2);
  EXPECT_NE(all.out.find("training.offload_layers = 4 must be fewer than a model chunk's layers (4)"),
            std::string::npos)
      << all.out;
  const Result rc = run_stepsim("memory " + offload + " --set training.recompute=full");
  EXPECT_EQ(rc.code, 2);
  EXPECT_NE(rc.out.find("training.offload_layers"), std::string::npos) << rc.out;
  fs::remove_all(base);
  fs::remove_all(off);
}
