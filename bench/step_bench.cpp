// Speed and memory of whole-step simulations. SimGrid allows one simulation per process, so each
// iteration runs `stepsim` in a child process and measures its CPU time (user + system), wall time
// and peak RSS (wait4's rusage). Each benchmark reports the counters cpu_s, peak_rss_MB and gpus,
// and, where docs/performance.md sets one, its targets (target_cpu_s, target_rss_MB);
// tools/bench_table.py turns the JSON output into the table of docs/performance.md. `make bench`
// runs the everyday cases; `make bench-scale` adds the 16 k to 100 k GPU ones (minutes).

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
  double cpu_s = 0; ///< user + system
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
  r.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
            static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  return r;
}

/// What docs/performance.md asks of a case (0: reported only).
struct Target {
  double cpu_s = 0;
  double rss_mb = 0;
};

/// Runs `args` once per iteration; the iteration's time is the child's CPU time (user + system:
/// on a shared machine the wall time measures the neighbours too). Reports the CPU and wall time,
/// peak RSS, the GPU count and the case's targets.
void measure(benchmark::State& state, const std::vector<std::string>& args, int gpus, Target target = {}) {
  double rss = 0, cpu = 0, wall = 0;
  int runs = 0;
  for (auto _ : state) {
    const ChildRun r = run_child(args);
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
      state.SkipWithError("stepsim failed");
      return;
    }
    state.SetIterationTime(r.cpu_s);
    rss = std::max(rss, r.max_rss_mb);
    cpu += r.cpu_s;
    wall += r.wall_s;
    ++runs;
  }
  state.counters["cpu_s"] = runs > 0 ? cpu / runs : 0.0;
  state.counters["wall_s"] = runs > 0 ? wall / runs : 0.0;
  state.counters["peak_rss_MB"] = rss;
  state.counters["gpus"] = gpus;
  if (target.cpu_s > 0)
    state.counters["target_cpu_s"] = target.cpu_s;
  if (target.rss_mb > 0)
    state.counters["target_rss_MB"] = target.rss_mb;
}

std::vector<std::string> stepsim_run(const std::string& cluster, const std::string& workload,
                                     const std::vector<std::string>& sets) {
  const std::string src = STEPSIM_SOURCE_DIR;
  std::vector<std::string> args = {STEPSIM_BINARY,      "run",        "--cluster",
                                   src + "/" + cluster, "--workload", src + "/" + workload,
                                   "--no-trace",        "--quiet"};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

/// GPT-3 175B (tp 8, pp 8) on `nodes` DGX A100 nodes of the fat-tree SuperPOD, `batch` sequences:
/// the scaling series from 1 k to 100 k GPUs (log-log slope at most 1.2).
void gpt3_scale(benchmark::State& state, int nodes, int batch, Target target) {
  measure(
      state,
      stepsim_run("topologies/dgx-a100-superpod.yaml", "workloads/gpt3-175b.yaml",
                  {"cluster.nodes=" + std::to_string(nodes), "batch.global_batch=" + std::to_string(batch)}),
      nodes * 8, target);
}

/// tiny-gpt (tp 2, pp 2) with dp 4096 on 2048 DGX A100 nodes: a step whose cost followed the
/// number of data-parallel ranks (a tree all-reduce over 4096 GPUs).
void tiny_dp4096(benchmark::State& state) {
  measure(state,
          stepsim_run("topologies/dgx-a100-superpod.yaml", "workloads/tiny-gpt.yaml",
                      {"cluster.nodes=2048", "batch.global_batch=16384"}),
          16384);
}

/// Llama 3.1 405B at 8 k tokens with Llama 3's layout (tp 8, pp 16 with 7 layers on the first and
/// last stage, dp 128) on 16 384 H100s of the DGX H100 SuperPOD, its rail-optimised fabric or a
/// fat tree: a fat tree costs at most 3x.
void llama_16k(benchmark::State& state, const char* fabric, Target target, const char* degraded = nullptr) {
  std::vector<std::string> sets = {
      "cluster.nodes=2048",     "cluster.fabric.kind=" + std::string(fabric),
      "model.seq_len=8192",     "parallel.cp=1",
      "parallel.pp=16",         "parallel.chunk_layers=[7,8,8,8,8,8,8,8,8,8,8,8,8,8,8,7]",
      "batch.global_batch=2048"};
  if (degraded != nullptr)
    sets.emplace_back(degraded);
  measure(state, stepsim_run("topologies/dgx-h100-superpod.yaml", "workloads/llama3-405b-128k.yaml", sets),
          16384, target);
}

/// Llama 3.1 405B at 8 k tokens (tp 8, pp 16 with 7 layers on the first and last stage, 16
/// micro-batches) on `dp` x 128 H100s of the rail-optimised SuperPOD, with per-kernel noise of CV
/// 0.05 over 5 steps (docs/variability.md): every GPU is simulated, nothing folded, or with
/// `replicas` > 0 that many DP replicas and the others' wait by order statistics ("Sampled
/// replicas"). dp 128 (16 384 GPUs) whole is beyond one core's minutes.
void llama_noisy(benchmark::State& state, int dp, int replicas, Target target) {
  std::vector<std::string> sets = {"cluster.nodes=" + std::to_string(16 * dp),
                                   "cluster.fabric.kind=rail_optimized",
                                   "model.seq_len=8192",
                                   "parallel.cp=1",
                                   "parallel.pp=16",
                                   "parallel.chunk_layers=[7,8,8,8,8,8,8,8,8,8,8,8,8,8,8,7]",
                                   "batch.global_batch=" + std::to_string(16 * dp),
                                   "training.variability.kernel_cv=0.05"};
  if (replicas > 0)
    sets.push_back("training.variability.replicas=" + std::to_string(replicas));
  std::vector<std::string> args =
      stepsim_run("topologies/dgx-h100-superpod.yaml", "workloads/llama3-405b-128k.yaml", sets);
  args.insert(args.end(), {"--steps", "5"});
  measure(state, args, 128 * dp, target);
}

/// `stepsim collective`: a 1 MiB all-reduce over 4096 A100s with `algorithm` (at most 2 s).
void all_reduce_4096(benchmark::State& state, const char* algorithm) {
  const std::string src = STEPSIM_SOURCE_DIR;
  measure(state,
          {STEPSIM_BINARY, "collective", "--cluster", src + "/topologies/dgx-a100-superpod.yaml", "--set",
           "cluster.nodes=512", "--op", "all_reduce", "--gpus", "4096", "--sizes", "1MiB", "--algorithm",
           algorithm},
          4096, {.cpu_s = 2.0});
}

/// `stepsim sweep` of the bundled GPT-3 schedules sweep (16 configurations, one job): CPU per
/// configuration is the figure (the sweep's own cost included).
void gpt3_sweep(benchmark::State& state) {
  const std::string src = STEPSIM_SOURCE_DIR;
  const std::string out = "/tmp/stepsim-bench-sweep";
  measure(state,
          {"/bin/sh", "-c",
           "rm -rf " + out + " && " + STEPSIM_BINARY + " sweep " + src +
               "/sweeps/gpt3-schedules.yaml --out " + out + " -j 1 >/dev/null"},
          1024);
  state.counters["configurations"] = 16;
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

/// GPT-3 175B on 1024 A100s with one straggler GPU at 80 % speed (docs/degraded.md): its DP
/// replica is simulated besides the representative, every flow runs. Target: <= 10 s, <= 1 GB.
void gpt3_straggler(benchmark::State& state) {
  measure(state,
          stepsim_run("topologies/dgx-a100-superpod.yaml", "workloads/gpt3-175b.yaml",
                      {"cluster.nodes=128", "cluster.degraded.gpus=[{node: 77, gpu: 5, speed: 0.8}]"}),
          1024, Target{.cpu_s = 10.0, .rss_mb = 1024.0});
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
  measure(state, args, 1024, {.cpu_s = 5.0});
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
BENCHMARK(gpt3_straggler)
    ->Name("gpt3_step/gpus1024_one_straggler")
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

/// `stepsim jobs`: two GPT-3 175B jobs of 1024 A100s spread over one 2:1 oversubscribed fat tree
/// (bench/gpt3-1024-pair.yaml): both alone runs and the shared replay, every replica simulated
/// (docs/jobs.md); at most 30 s.
void two_jobs_1024(benchmark::State& state) {
  const std::string src = STEPSIM_SOURCE_DIR;
  measure(state,
          {STEPSIM_BINARY, "jobs", src + "/bench/gpt3-1024-pair.yaml", "--set", "cluster.nodes=256", "--set",
           "cluster.fabric.oversubscription=2", "--quiet"},
          2048, Target{.cpu_s = 30.0});
}

/// One child process per case, timed by its CPU time.
void once(benchmark::internal::Benchmark* b) {
  b->UseManualTime()->Iterations(1)->Repetitions(1)->Unit(benchmark::kSecond);
}

// The scaling series and the targets. The largest cases take minutes: their names start
// with scale/ (make bench-scale); the default run leaves them out.
BENCHMARK_CAPTURE(gpt3_scale, gpus1024, 128, 1536, Target{})->Name("scale/gpt3_175b_1024")->Apply(once);
BENCHMARK_CAPTURE(gpt3_scale, gpus4096, 512, 1536, Target{})->Name("scale/gpt3_175b_4096")->Apply(once);
BENCHMARK_CAPTURE(gpt3_scale, gpus16384, 2048, 6144, Target{})->Name("scale/gpt3_175b_16384")->Apply(once);
BENCHMARK_CAPTURE(gpt3_scale, gpus32768, 4096, 12288, Target{})->Name("scale/gpt3_175b_32768")->Apply(once);
BENCHMARK_CAPTURE(gpt3_scale, gpus102400, 12800, 3200, Target{.cpu_s = 60.0, .rss_mb = 4096.0})
    ->Name("scale/gpt3_175b_102400")
    ->Apply(once);
BENCHMARK(tiny_dp4096)->Name("scale/tiny_gpt_dp4096")->Apply(once);
BENCHMARK(two_jobs_1024)->Name("scale/jobs_gpt3_175b_2x1024")->Apply(once);
BENCHMARK_CAPTURE(llama_16k, rail, "rail_optimized", Target{})
    ->Name("scale/llama31_405b_16384h100_rail_optimized")
    ->Apply(once);
BENCHMARK_CAPTURE(llama_16k, fat_tree, "fat_tree", Target{})
    ->Name("scale/llama31_405b_16384h100_fat_tree")
    ->Apply(once);
// 1 % of the GPUs at speed 0.8, drawn with seed 1: 164 GPUs in 92 of the 128 replicas, each
// slow TP group at its slowest GPU's pace (docs/degraded.md, "Folding"); at most 120 s and 8 GB.
BENCHMARK_CAPTURE(llama_16k, slow_1pct, "rail_optimized", Target{.cpu_s = 120.0, .rss_mb = 8192.0},
                  "cluster.degraded.random_gpus={share: 0.01, speed: 0.8, seed: 1}")
    ->Name("scale/llama31_405b_16384h100_slow_gpus_1pct")
    ->Apply(once);
BENCHMARK_CAPTURE(llama_noisy, dp2, 2, 0, Target{.cpu_s = 60.0, .rss_mb = 1024.0})
    ->Name("variability/llama31_405b_256h100_cv005_5steps")
    ->Apply(once);
// 16 384 GPUs, 8 of the 128 DP replicas simulated: at most 5 minutes.
BENCHMARK_CAPTURE(llama_noisy, dp128, 128, 8, Target{.cpu_s = 300.0})
    ->Name("scale/llama31_405b_16384h100_cv005_5steps_8_replicas")
    ->Apply(once);
BENCHMARK_CAPTURE(all_reduce_4096, tree, "tree")->Name("collective/all_reduce_1MiB_4096_tree")->Apply(once);
BENCHMARK_CAPTURE(all_reduce_4096, ring, "ring")->Name("collective/all_reduce_1MiB_4096_ring")->Apply(once);
BENCHMARK(gpt3_sweep)->Name("sweep/gpt3_schedules_16_configurations_j1")->Apply(once);

BENCHMARK_MAIN();
