// Machine-readable output (docs/output.md): every command's JSON names its schema, --json and
// --out DIR write the same document, parameter counts match the published model sizes, and
// `plan --headroom` keeps the share of GPU memory it is asked to.

#include "common/cli.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace stepsim::test; // run_stepsim, slurp, src, fresh_temp_dir
using Result = CommandResult;

namespace {

std::string pair(const std::string& topology, const std::string& workload) {
  return " --cluster " + src("topologies/" + topology + ".yaml") + " --workload " +
         src("workloads/" + workload + ".yaml");
}

/// `stepsim ARGS` with its stderr dropped: stdout alone.
Result stdout_of(const std::string& args) {
  return stepsim::test::run_shell(std::string("( ") + STEPSIM_BINARY + " " + args + " 2>/dev/null )");
}

/// Runs `args`, expects exit 0 and a JSON document on stdout.
json json_of(const std::string& args) {
  const Result r = stdout_of(args);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
  return json::parse(r.out, nullptr, false);
}

} // namespace

// The memory ledger's parameter counts are the published model sizes: GPT-3 175B (Brown et al.
// 2020: 175 billion; 174.6 B counted exactly), Mixtral 8x7B (Mistral AI: 46.7 B total, 12.9 B
// active per token). One GPU of each stage holds 1/tp of its layers: over the stages, times tp,
// that is the whole model (plus the tied output layer's copy on the last stage).
TEST(Output, MemoryJsonCarriesParameterCounts) {
  const json gpt = json_of("memory" + pair("dgx-a100-superpod", "gpt3-175b") + " --json");
  ASSERT_FALSE(gpt.is_discarded());
  EXPECT_EQ(gpt["schema"], "stepsim.memory/1");
  const double total = gpt["parameters"]["total"].get<double>();
  EXPECT_NEAR(total / 175e9, 1.0, 0.005) << total;
  EXPECT_EQ(gpt["parameters"]["active"], gpt["parameters"]["total"]); // dense
  const int tp = gpt["layout"]["tp"].get<int>();
  double held = 0;
  for (const json& n : gpt["parameters"]["per_gpu_by_stage"])
    held += n.get<double>() * tp;
  const double vocab_copy = 50257.0 * 12288.0; // the output layer's copy of the embedding
  EXPECT_NEAR(held, total + vocab_copy, 0.002 * total) << held;
  ASSERT_EQ(gpt["stages"].size(), gpt["layout"]["pp"].get<size_t>());
  bool all_fit = true;
  for (const json& s : gpt["stages"]) {
    EXPECT_EQ(s["fits"].get<bool>(), s["peak_bytes"].get<double>() <= gpt["capacity_bytes"].get<double>());
    all_fit = all_fit && s["fits"].get<bool>();
  }
  EXPECT_EQ(gpt["fits_in_memory"].get<bool>(), all_fit);

  const json moe = json_of("memory" + pair("h200-cluster", "mixtral-8x7b") + " --set cluster.nodes=8 --json");
  EXPECT_NEAR(moe["parameters"]["total"].get<double>() / 46.7e9, 1.0, 0.01) << moe["parameters"];
  EXPECT_NEAR(moe["parameters"]["active"].get<double>() / 12.9e9, 1.0, 0.01) << moe["parameters"];

  // The table prints them too.
  const Result table =
      run_stepsim("memory" + pair("h200-cluster", "mixtral-8x7b") + " --set cluster.nodes=8");
  EXPECT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("parameters: 46.70 B total, 12.88 B active per token"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("params/GPU"), std::string::npos) << table.out;
}

// --out DIR writes the document --json prints, and summary.json names its schema and carries
// the same parameter counts as the memory ledger.
TEST(Output, OutDirHoldsTheJsonDocumentAndSummaryNamesItsSchema) {
  const fs::path dir = fresh_temp_dir("output-memory");
  const std::string tiny = pair("dgx-h100", "tiny-gpt") + " --set cluster.nodes=1";
  const Result printed = stdout_of("memory" + tiny + " --json --out " + dir.string());
  ASSERT_EQ(printed.code, 0) << printed.out;
  EXPECT_EQ(slurp(dir / "memory.json"), printed.out);
  const json memory = json::parse(printed.out);

  const Result run = run_stepsim("run" + tiny + " --no-trace --out " + dir.string() + " --quiet");
  ASSERT_EQ(run.code, 0) << run.out;
  const nlohmann::ordered_json summary = nlohmann::ordered_json::parse(slurp(dir / "summary.json"));
  EXPECT_EQ(summary.begin().key(), "schema");
  EXPECT_EQ(summary["schema"], "stepsim.summary/2");
  EXPECT_EQ(json::parse(summary["parameters"].dump()), memory["parameters"]);
  // run --json prints the same summary.json on stdout, instead of the table.
  const Result json_run = stdout_of("run" + tiny + " --no-trace --json");
  ASSERT_EQ(json_run.code, 0) << json_run.out;
  EXPECT_EQ(json_run.out, slurp(dir / "summary.json"));
  fs::remove_all(dir);
}

// `plan --headroom 15%` keeps every layout's static peak within 85 % of GPU memory (recomputing
// or offloading more where that makes a layout fit the budget) and drops the layouts that fit
// only without it; the JSON names the budget. The tiny model on GPUs of
// 1.25 GiB puts its layouts' peaks between 80 and 90 % of the capacity.
TEST(Output, PlanHeadroomKeepsTheShareFree) {
  const std::string base = "plan" + pair("dgx-h100", "tiny-gpt") +
                           " --set cluster.nodes=1 --set cluster.gpu.hbm_capacity=1.25GiB --top 0 "
                           "--estimates 100000 --json";
  const json none = json_of(base);
  const json kept = json_of(base + " --headroom 15%");
  ASSERT_FALSE(none.is_discarded());
  ASSERT_FALSE(kept.is_discarded());
  EXPECT_EQ(kept["schema"], "stepsim.plan/1");
  const double cap = none["capacity_bytes"].get<double>();
  EXPECT_DOUBLE_EQ(kept["budget_bytes"].get<double>(), 0.85 * cap);
  EXPECT_DOUBLE_EQ(kept["headroom"].get<double>(), 0.15);
  size_t within = 0;
  for (const json& e : none["estimates"])
    within += e["peak_bytes"].get<double>() <= 0.85 * cap ? 1 : 0;
  ASSERT_GT(within, 0u);
  ASSERT_LT(within, none["estimates"].size()) << "the case must have layouts between 85 and 100 % of memory";
  for (const json& e : kept["estimates"])
    EXPECT_LE(e["peak_bytes"].get<double>(), 0.85 * cap) << e["name"];
  EXPECT_LT(kept["fit"].get<int>(), none["fit"].get<int>());

  const Result bad = run_stepsim("plan" + pair("dgx-h100", "llama2-70b") + " --headroom 120%");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--headroom: expected a percentage"), std::string::npos) << bad.out;
}

// collective --json: nccl-tests' bus bandwidth of an all-reduce over n GPUs is its algorithm
// bandwidth times 2(n-1)/n, for every size.
TEST(Output, CollectiveJson) {
  const json j = json_of("collective --cluster " + src("topologies/dgx-h100.yaml") +
                         " --op all_reduce --gpus 8 --sizes 1MiB:4MiB --json");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["schema"], "stepsim.collective/1");
  ASSERT_EQ(j["sizes"].size(), 3u);
  double size = 1 << 20;
  for (const json& row : j["sizes"]) {
    EXPECT_EQ(row["size_bytes"].get<double>(), size);
    EXPECT_NEAR(row["algbw_GBps"].get<double>(), size / row["time_s"].get<double>() / 1e9, 1e-9);
    EXPECT_NEAR(row["busbw_GBps"].get<double>(), row["algbw_GBps"].get<double>() * 2 * 7 / 8, 1e-9);
    size *= 2;
  }
}

// Traces (docs/output.md, "Traces"): json.gz is the same trace compressed; --trace-ranks draws
// the GPUs whose coordinates match, and the table and summary.json name them; --trace-window
// keeps only what overlaps the window.
TEST(Output, TraceFormatRanksAndWindow) {
  const fs::path dir = fresh_temp_dir("output-trace");
  const std::string tiny = "run" + pair("dgx-h100", "tiny-gpt") + " --set cluster.nodes=1 --out ";
  ASSERT_EQ(run_stepsim(tiny + (dir / "plain").string()).code, 0);
  const Result gz = run_stepsim(tiny + (dir / "gz").string() + " --trace-format json.gz");
  ASSERT_EQ(gz.code, 0) << gz.out;
  EXPECT_FALSE(fs::exists(dir / "gz" / "trace.json"));
  const Result unzipped = run_shell("gzip -dc " + (dir / "gz" / "trace.json.gz").string());
  ASSERT_EQ(unzipped.code, 0) << unzipped.out;
  const std::string plain = slurp(dir / "plain" / "trace.json");
  EXPECT_EQ(unzipped.out, plain);
  EXPECT_LT(fs::file_size(dir / "gz" / "trace.json.gz") * 5, plain.size());

  // tiny-gpt: tp 2, pp 2, dp 2 with one DP replica simulated and, without sampling, every rank of
  // its TP groups (docs/engine.md, "Folding TP"): ranks 0, 1 (stage 0) and 4, 5.
  const Result picked =
      run_stepsim(tiny + (dir / "ranks").string() + " --no-sampling --trace-ranks pp=*,tp=0,dp=0");
  ASSERT_EQ(picked.code, 0) << picked.out;
  EXPECT_NE(picked.out.find("trace: trace.json holds 2 of the 4 simulated GPUs (ranks 0, 4)"),
            std::string::npos)
      << picked.out;
  const json summary = json::parse(slurp(dir / "ranks" / "summary.json"));
  EXPECT_EQ(summary["trace"]["gpus"], 2);
  EXPECT_EQ(summary["trace"]["ranks"], "0, 4");
  const json trace = json::parse(slurp(dir / "ranks" / "trace.json"));
  std::set<int> pids;
  for (const json& e : trace["traceEvents"])
    pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 4}));

  const json full = json::parse(plain);
  const double step_us = full["metadata"]["step_time_s"].get<double>() * 1e6;
  const double lo = step_us / 4, hi = step_us / 2;
  char window[64];
  std::snprintf(window, sizeof window, "%.9f:%.9f", lo * 1e-6, hi * 1e-6);
  const Result windowed = run_stepsim(tiny + (dir / "window").string() + " --trace-window " + window);
  ASSERT_EQ(windowed.code, 0) << windowed.out;
  const json part = json::parse(slurp(dir / "window" / "trace.json"));
  size_t slices = 0, all_slices = 0;
  for (const json& e : full["traceEvents"])
    all_slices += e["ph"] == "X" ? 1 : 0;
  for (const json& e : part["traceEvents"]) {
    if (e["ph"] != "X")
      continue;
    ++slices;
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    EXPECT_GE(ts + dur, lo - 1e-3) << e;
    EXPECT_LE(ts, hi + 1e-3) << e;
  }
  EXPECT_GT(slices, 0u);
  EXPECT_LT(slices, all_slices);

  for (const std::string bad : {"pp=9", "pp", "zz=1", "tp=2-1"}) {
    const Result r = run_stepsim(tiny + (dir / "bad").string() + " --trace-ranks " + bad);
    EXPECT_EQ(r.code, 2) << bad << r.out;
    EXPECT_NE(r.out.find("--trace-ranks '" + bad + "'"), std::string::npos) << r.out;
  }
  // With one rank per TP group simulated, a spec of another TP rank says how to draw it.
  const Result folded = run_stepsim(tiny + (dir / "bad").string() + " --trace-ranks tp=1");
  EXPECT_EQ(folded.code, 2) << folded.out;
  EXPECT_NE(folded.out.find("selects none of the 2 simulated GPUs (0, 4); one rank of each TP group is "
                            "simulated, --no-fold-tp simulates them all"),
            std::string::npos)
      << folded.out;
  EXPECT_EQ(run_stepsim(tiny + (dir / "bad").string() + " --trace-window 2:1").code, 2);
  EXPECT_EQ(
      run_stepsim("run" + pair("dgx-h100", "tiny-gpt") + " --set cluster.nodes=1 --trace-format json.gz")
          .code,
      2); // nothing to shape without --out
  fs::remove_all(dir);
}

// `run --steps N` and per-kernel noise (docs/variability.md): summary.json's `variability` holds
// N step times whose mean and nearest-rank quantiles it states (p50 of 4 values: the 2nd
// smallest; p90, p99 and max: the 4th), and the same seed gives the same bytes. Without it (one
// noiseless step) the key is absent. A bad --steps or CV exits 2 naming the option or key.
TEST(Output, StepsGiveTheStepTimeDistribution) {
  const std::string base = "run" + pair("dgx-h100", "tiny-gpt") + " --set cluster.nodes=1 --json";
  const std::string noisy = base + " --set training.variability.kernel_cv=0.05 --steps 4";
  const Result a = stdout_of(noisy);
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(stdout_of(noisy).out, a.out);
  EXPECT_NE(stdout_of(noisy + " --set training.variability.seed=1").out, a.out);
  const json j = json::parse(a.out);
  ASSERT_TRUE(j.contains("variability"));
  const json& v = j["variability"];
  EXPECT_EQ(v["steps"], 4);
  EXPECT_EQ(v["kernel_cv"], 0.05);
  std::vector<double> times = v["step_times_s"].get<std::vector<double>>();
  ASSERT_EQ(times.size(), 4u);
  EXPECT_EQ(j["step_time_s"].get<double>(), times[0]);
  double sum = 0;
  for (const double t : times)
    sum += t;
  EXPECT_DOUBLE_EQ(v["step_time_s"]["mean"].get<double>(), sum / 4);
  std::sort(times.begin(), times.end());
  EXPECT_EQ(v["step_time_s"]["p50"].get<double>(), times[1]);
  EXPECT_EQ(v["step_time_s"]["p90"].get<double>(), times[3]);
  EXPECT_EQ(v["step_time_s"]["max"].get<double>(), times[3]);
  int counted = 0;
  for (const json& s : v["slowest_gpus"])
    counted += s["steps"].get<int>();
  EXPECT_EQ(counted, 4);
  EXPECT_EQ(j["simulated_gpus"], 8); // noise: nothing folded
  EXPECT_FALSE(json_of(base).contains("variability"));

  const Result zero = run_stepsim(base + " --steps 0");
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.out.find("--steps: expected an integer in [1, 100000], got '0'"), std::string::npos)
      << zero.out;
  const Result cv = run_stepsim(base + " --set training.variability.kernel_cv=1.5");
  EXPECT_EQ(cv.code, 2);
  EXPECT_NE(cv.out.find("training.variability.kernel_cv"), std::string::npos) << cv.out;
}
