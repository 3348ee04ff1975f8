// Speed and memory of whole-step simulations. SimGrid allows one simulation per process, so each
// iteration runs `stepsim run` in a child process and measures its wall time and peak RSS
// (wait4's rusage). Targets (docs/performance.md): GPT-3 175B on 1024 A100s (TP8 PP8 DP16)
// in <= 5 s wall and <= 1 GB; 4096 GPUs (DP64), a 2048-GPU MoE (EP 64), one with EP 64 inside
// GB200 NVL72 racks and a 256-GPU MoE with folded expert groups and combined 1F1B reported.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

struct ChildRun {
  double wall_s = 0;
  double max_rss_mb = 0;
  int status = -1;
};

ChildRun run_child(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ChildRun r;
  struct rusage ru {};
  wait4(pid, &r.status, 0, &ru);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.max_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;
  return r;
}

/// Runs `args` once per iteration; reports wall time (manual), peak RSS and the GPU count.
void measure(benchmark::State& state, const std::vector<std::string>& args, int gpus) {
  double rss = 0;
  for (auto _ : state) {
    const ChildRun r = run_child(args);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
      state.SkipWithError("stepsim run failed");
      return;
    }
    state.SetIterationTime(r.wall_s);
    rss = std::max(rss, r.max_rss_mb);
  }
  state.counters["peak_rss_MB"] = rss;
  state.counters["gpus"] = gpus;
}

void gpt3_step(benchmark::State& state, int nodes, bool trace) {
  const std::string src = STEPSIM_SOURCE_DIR;
  std::vector<std::string> args = {STEPSIM_BINARY, "run",
                                   "--cluster",    src + "/topologies/dgx-a100-superpod.yaml",
                                   "--workload",   src + "/workloads/gpt3-175b.yaml",
                                   "--set",        "cluster.nodes=" + std::to_string(nodes),
                                   "--quiet"};
  if (trace) {
    args.push_back("--out");
    args.push_back("/tmp/stepsim-bench-out");
  }
  measure(state, args, nodes * 8);
}

/// The bundled DeepSeek-V3-like MoE (pp 8) on 2048 H200s with EP 64 across 8 nodes, 16 micro-batches;
/// `extra` adds a flag (--no-sampling: one whole EP group simulated instead of one EP rank).
void moe_step(benchmark::State& state, const char* extra) {
  const std::string src = STEPSIM_SOURCE_DIR;
  std::vector<std::string> args = {STEPSIM_BINARY, "run",
                                   "--cluster",    src + "/topologies/h200-cluster.yaml",
                                   "--workload",   src + "/workloads/deepseek-v3-like.yaml",
                                   "--set",        "cluster.nodes=256",
                                   "--set",        "parallel.ep=64",
                                   "--set",        "batch.global_batch=4096",
                                   "--quiet"};
  if (extra[0] != '\0')
    args.push_back(extra);
  measure(state, args, 2048);
}

/// The DeepSeek-V3-like MoE with EP 64 inside GB200 NVL72 racks (64 GPUs each, 4 racks), pp 4 x
/// vp 4, 64 micro-batches: the in-node expert all-to-all sampling (docs/engine.md).
void moe_step_nvl72(benchmark::State& state) {
  const std::string src = STEPSIM_SOURCE_DIR;
  const std::vector<std::string> args = {STEPSIM_BINARY, "run",
                                         "--cluster",    src + "/topologies/gb200-nvl72.yaml",
                                         "--workload",   src + "/workloads/deepseek-v3-like.yaml",
                                         "--set",        "cluster.gpus_per_node=64",
                                         "--set",        "cluster.nodes=4",
                                         "--set",        "parallel.pp=4",
                                         "--set",        "parallel.vp=4",
                                         "--set",        "parallel.schedule=interleaved",
                                         "--set",        "parallel.ep=64",
                                         "--set",        "batch.global_batch=4096",
                                         "--quiet"};
  measure(state, args, 256);
}

/// The bundled Qwen3-235B-A22B on 256 H200s: EP 32 folded over TP 2 (each expert all-to-all spans
/// four nodes) with combined 1F1B, whose paired passes run at once (docs/moe.md).
void moe_step_folded_overlap(benchmark::State& state) {
  const std::string src = STEPSIM_SOURCE_DIR;
  const std::vector<std::string> args = {STEPSIM_BINARY, "run",
                                         "--cluster",    src + "/topologies/h200-cluster.yaml",
                                         "--workload",   src + "/workloads/qwen3-235b-a22b.yaml",
                                         "--set",        "cluster.nodes=32",
                                         "--quiet"};
  measure(state, args, 256);
}

/// Llama 3.1 405B at 8192 tokens on 9216 H100s of the rail-optimised DGX H100 SuperPOD (1152 nodes;
/// tp 8, pp 9, dp 128, full recomputation, 16 micro-batches): a routed fabric at Llama 3 scale.
void llama_step_rail(benchmark::State& state) {
  const std::string src = STEPSIM_SOURCE_DIR;
  const std::vector<std::string> args = {STEPSIM_BINARY, "run",
                                         "--cluster",    src + "/topologies/dgx-h100-superpod.yaml",
                                         "--workload",   src + "/workloads/llama3-405b-128k.yaml",
                                         "--set",        "cluster.nodes=1152",
                                         "--set",        "model.seq_len=8192",
                                         "--set",        "parallel.cp=1",
                                         "--set",        "parallel.pp=9",
                                         "--set",        "batch.global_batch=2048",
                                         "--quiet"};
  measure(state, args, 9216);
}

/// The bundled Llama 3.1 405B at 128 k tokens (tp 8, cp 4, pp 7, full recomputation) on 28 H200
/// nodes: context parallelism, its CP ranks folded (docs/engine.md, "Folding of CP ranks").
void llama_step_long_context(benchmark::State& state) {
  const std::string src = STEPSIM_SOURCE_DIR;
  const std::vector<std::string> args = {STEPSIM_BINARY, "run",
                                         "--cluster",    src + "/topologies/h200-cluster.yaml",
                                         "--workload",   src + "/workloads/llama3-405b-128k.yaml",
                                         "--set",        "cluster.nodes=28",
                                         "--quiet"};
  measure(state, args, 224);
}

/// `stepsim plan` for GPT-3 175B on the 1024-A100 pod: enumerate and rank every layout, then
/// simulate the top 3 and the workload's own layout with 2 jobs (what Planner.Gpt3BeatsMegatronLayout
/// checks for correctness; its speed is measured here, not in the test).
void gpt3_plan(benchmark::State& state) {
  const std::string src = STEPSIM_SOURCE_DIR;
  const std::vector<std::string> args = {STEPSIM_BINARY, "plan",
                                         "--cluster",    src + "/topologies/dgx-a100-superpod.yaml",
                                         "--workload",   src + "/workloads/gpt3-175b.yaml",
                                         "--top",        "3",
                                         "--jobs",       "2"};
  measure(state, args, 1024);
}

} // namespace

// Each repetition is one child process; the median over repetitions is the figure to quote.
BENCHMARK_CAPTURE(gpt3_step, gpus1024_no_trace, 128, false)
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);
BENCHMARK_CAPTURE(gpt3_step, gpus1024_with_trace, 128, true)
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);
BENCHMARK_CAPTURE(gpt3_step, gpus4096_no_trace, 512, false)
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);
BENCHMARK_CAPTURE(moe_step, deepseek_like_2048_ep64, "")
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);
BENCHMARK_CAPTURE(moe_step, deepseek_like_2048_ep64_no_sampling, "--no-sampling")
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(1)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);
BENCHMARK(moe_step_nvl72)
    ->Name("moe_step/deepseek_like_256gb200_ep64_in_rack")
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);

BENCHMARK(moe_step_folded_overlap)
    ->Name("moe_step/qwen3_235b_256h200_ep32_folded_overlap")
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);

BENCHMARK(llama_step_rail)
    ->Name("llama_step/llama31_405b_9216h100_rail_optimized")
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);

BENCHMARK(llama_step_long_context)
    ->Name("llama_step/llama31_405b_128k_cp4_224h200")
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);

BENCHMARK(gpt3_plan)
    ->Name("plan/gpt3_175b_1024a100_top3_j2")
    ->UseManualTime()
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kSecond);

BENCHMARK_MAIN();
