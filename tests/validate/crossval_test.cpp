// stepsim validate --cross-validate: groups, the refit without a group and its known answer, the
// group holding every fit run, and the fit record's errors (docs/validation.md, "Cross-validation").
//
// The known answer: four small runs on 8 A100s whose measured step times are the simulator's own
// at a GEMM efficiency of 0.7 (source A) and 0.9 (source B). Refitted without source A, the knob
// lands at 0.9, where B's runs have no error, so A's out-of-group error is T_A(0.9) / T_A(0.7) - 1;
// without every fit run (grouped by GPU) it is the uncalibrated T_A(1) / T_A(0.7) - 1.

#include "common/cli.hpp"
#include "config/runs_config.hpp"
#include "core/error.hpp"
#include "validate/crossval.hpp"
#include "validate/validate.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace stepsim;

namespace {

using test::run_stepsim;
using test::src;

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

/// A small GPT run on 8 A100s (tensor parallel 8) in the measured-runs schema.
std::string tiny_run(const std::string& id, const std::string& group, int layers, int hidden, int batch,
                     double step_s, const std::string& framework = "Megatron-LM") {
  std::ostringstream o;
  o << std::setprecision(10);
  o << "- id: " << id << "\n  group: " << group << "\n"
    << "  model: {name: GPT-tiny, layers: " << layers << ", hidden: " << hidden
    << ", ffn_hidden: " << 4 * hidden
    << ", attn_heads: 16, kv_heads: 16, vocab: 51200, seq_len: 1024, moe_experts: null}\n"
    << "  hardware: {gpu: A100-SXM4-80GB, num_gpus: 8, gpus_per_node: 8, peak_tflops_assumed: 312}\n"
    << "  parallelism: {tp: 8, pp: 1, dp: 1, cp: null, ep: null, sp: 1, zero_stage: 0, fsdp: null, "
       "virtual_pp: null, schedule: 1F1B}\n"
    << "  batch: {micro_batch: 1, global_batch_seqs: " << batch
    << ", global_batch_tokens: null, grad_accum: null}\n"
    << "  recompute: none\n  precision: bf16\n  framework: " << framework << "\n"
    << "  measured: {tflops_per_gpu: null, tflops_basis: null, mfu_pct: null, hfu_pct: null, "
       "iteration_time_s: "
    << step_s << "}\n";
  return o.str();
}

struct Shape {
  std::string id, group;
  int layers, hidden, batch;
};

const std::vector<Shape> SHAPES = {{"a1", "SourceA", 4, 1024, 4},
                                   {"a2", "SourceA", 2, 2048, 8},
                                   {"b1", "SourceB", 4, 1536, 4},
                                   {"b2", "SourceB", 2, 1024, 16},
                                   {"c1", "SourceC", 3, 1024, 8}};

std::string runs_text(const std::map<std::string, double>& step) {
  std::string text = "runs:\n";
  for (const Shape& s : SHAPES)
    text += tiny_run(s.id, s.group, s.layers, s.hidden, s.batch, step.count(s.id) ? step.at(s.id) : 1.0);
  return text;
}

/// A topologies folder of the bundled files (its profiles found through a link beside it) with
/// `record` as the A100's only calibration file.
fs::path topologies_with(const fs::path& d, const std::string& record) {
  fs::create_directories(d / "topologies" / "calibration");
  for (const auto& e : fs::directory_iterator(src("topologies")))
    if (e.is_regular_file())
      fs::copy_file(e.path(), d / "topologies" / e.path().filename());
  if (!fs::exists(d / "kernels_profiles"))
    fs::create_directory_symlink(src("kernels_profiles"), d / "kernels_profiles");
  write(d / "topologies" / "calibration" / "A100-SXM4-80GB.yaml", record);
  return d / "topologies";
}

/// Simulated step times of the shapes at a GEMM efficiency (the topology's other knobs).
std::map<std::string, double> step_times(const fs::path& d, const fs::path& topologies, double efficiency) {
  write(d / "probe.yaml", runs_text({}));
  validate::ValidateOptions o;
  o.topologies = topologies;
  o.work_dir = d / "probe";
  o.jobs = 2;
  o.calibration = false;
  o.extra = {{"cluster.gpu.gemm_efficiency", std::to_string(efficiency)}};
  std::map<std::string, double> out;
  for (const validate::RunResult& r :
       validate::validate_runs(config::load_runs(d / "probe.yaml"), o, nullptr)) {
    EXPECT_EQ(r.status, RunStatus::OK) << r.plan.id << ": " << r.reason;
    out[r.plan.id] = r.step_time_s;
  }
  return out;
}

const char* RECORD = R"(gpu_kind: A100-SXM4-80GB
knobs:
  gpu.gemm_efficiency: 0.8
fit:
  runs: [a1, a2, b1, b2]
  objective: rms_error_pct
  knobs: [gpu.gemm_efficiency]
  ranges:
    gpu.gemm_efficiency: "0.5:1"
  tolerance: 0.001
)";

/// The CSV's rows by run id: column name -> text.
std::map<std::string, std::map<std::string, std::string>> read_csv(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string c; std::getline(hs, c, ',');)
    header.push_back(c);
  std::map<std::string, std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    std::stringstream ls(line);
    std::map<std::string, std::string> row;
    std::size_t i = 0;
    for (std::string c; i < header.size() && std::getline(ls, c, ',');)
      row[header[i++]] = c;
    rows[row["id"]] = row;
  }
  return rows;
}

double pct(double predicted_s, double measured_s) {
  return (predicted_s - measured_s) / measured_s * 100.0;
}

class CrossValidation : public ::testing::Test {
protected:
  void SetUp() override {
    d = fs::temp_directory_path() / ("stepsim-crossval-test-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    topologies = topologies_with(d, RECORD);
    at07 = step_times(d, topologies, 0.7);
    at09 = step_times(d, topologies, 0.9);
    std::map<std::string, double> measured = {
        {"a1", at07["a1"]}, {"a2", at07["a2"]}, {"b1", at09["b1"]}, {"b2", at09["b2"]}, {"c1", at07["c1"]}};
    write(d / "runs.yaml", runs_text(measured));
    measured_ = measured;
  }
  void TearDown() override { fs::remove_all(d); }

  fs::path d, topologies;
  std::map<std::string, double> at07, at09, measured_;
};

} // namespace

// Leaving source A out refits the knob on B's runs alone: it lands at B's 0.9, and A's runs are
// predicted there. Source C holds no fit run: no refit, its two errors are the same. In-sample,
// every run is predicted at the stored 0.8.
TEST_F(CrossValidation, LeavingOneSourceOutLandsOnTheOthersKnob) {
  const test::CommandResult r =
      run_stepsim("validate " + (d / "runs.yaml").string() + " --cross-validate source --topologies " +
                  topologies.string() + " --out " + (d / "out").string() + " -j2");
  ASSERT_EQ(r.code, 0) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(SourceA: A100-SXM4-80GB without 2 fit runs: gpu.gemm_efficiency=([0-9.]+))")))
      << r.out;
  EXPECT_NEAR(std::stod(m[1]), 0.9, 0.003) << r.out;
  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(SourceB: A100-SXM4-80GB without 2 fit runs: gpu.gemm_efficiency=([0-9.]+))")))
      << r.out;
  EXPECT_NEAR(std::stod(m[1]), 0.7, 0.003) << r.out;
  EXPECT_NE(r.out.find("SourceC: no fit run in the group: out-of-group = in-sample"), std::string::npos)
      << r.out;

  const auto rows = read_csv(d / "out" / "cross_validation.csv");
  ASSERT_EQ(rows.size(), 5u);
  const std::map<std::string, double> at08 = step_times(d, topologies, 0.8);
  for (const Shape& s : SHAPES) {
    const auto& row = rows.at(s.id);
    EXPECT_EQ(row.at("group"), s.group);
    EXPECT_EQ(row.at("status"), "ok") << s.id;
    // In-sample: the stored 0.8.
    EXPECT_NEAR(std::stod(row.at("in_sample_error_pct")), pct(at08.at(s.id), measured_.at(s.id)), 1e-3)
        << s.id;
  }
  // Out of group: A at B's knob, B at A's (within the search grid: a knob 0.003 off moves a step by
  // well under 0.5 % here), C as in-sample.
  for (const std::string id : {"a1", "a2"}) {
    const double want = pct(at09.at(id), at07.at(id));
    EXPECT_LT(want, -5.0) << id; // the knob matters: 0.7 -> 0.9 is a clearly faster step
    EXPECT_NEAR(std::stod(rows.at(id).at("out_of_group_error_pct")), want, 0.5) << id;
    EXPECT_EQ(rows.at(id).at("refit"), "1");
  }
  for (const std::string id : {"b1", "b2"})
    EXPECT_NEAR(std::stod(rows.at(id).at("out_of_group_error_pct")), pct(at07.at(id), at09.at(id)), 0.5)
        << id;
  EXPECT_EQ(rows.at("c1").at("refit"), "0");
  EXPECT_EQ(rows.at("c1").at("out_of_group_error_pct"), rows.at("c1").at("in_sample_error_pct"));
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(
          R"(cross-validated 5 runs in 3 groups by source: in_sample median_abs_error_pct=[0-9.]+ )"
          R"(max_abs_error_pct=[0-9.]+; out_of_group median_abs_error_pct=[0-9.]+ max_abs_error_pct=[0-9.]+\n)")))
      << r.out;
}

// Grouped by GPU, the one group holds every fit run: nothing is left to fit, and the runs are
// predicted with the knob's uncalibrated default (gemm_efficiency 1), as the output says.
TEST_F(CrossValidation, AGroupHoldingEveryFitRunPredictsUncalibrated) {
  const test::CommandResult r =
      run_stepsim("validate " + (d / "runs.yaml").string() + " --cross-validate gpu --topologies " +
                  topologies.string() + " --out " + (d / "out").string() + " -j2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("A100: A100-SXM4-80GB without 4 fit runs: gpu.gemm_efficiency=1 (no fit run left: "
                       "uncalibrated default)"),
            std::string::npos)
      << r.out;
  const auto rows = read_csv(d / "out" / "cross_validation.csv");
  const std::map<std::string, double> at1 = step_times(d, topologies, 1.0);
  for (const Shape& s : SHAPES)
    EXPECT_NEAR(std::stod(rows.at(s.id).at("out_of_group_error_pct")), pct(at1.at(s.id), measured_.at(s.id)),
                1e-3)
        << s.id;
}

// A record that cannot be repeated, or fit runs missing from the files given, is an error naming
// the file and the key.
TEST_F(CrossValidation, UnrepeatableRecordsAndMissingFitRunsAreErrors) {
  std::string no_range = RECORD;
  no_range = no_range.substr(0, no_range.find("  ranges:"));
  write(topologies / "calibration" / "A100-SXM4-80GB.yaml", no_range);
  test::CommandResult r = run_stepsim("validate " + (d / "runs.yaml").string() +
                                      " --cross-validate source --topologies " + topologies.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("A100-SXM4-80GB.yaml:5:3: key 'fit': "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("knob 'gpu.gemm_efficiency' has no range under ranges"), std::string::npos) << r.out;

  write(topologies / "calibration" / "A100-SXM4-80GB.yaml", RECORD);
  std::string text = runs_text(measured_);
  text = text.substr(0, text.find("- id: b2")); // b2 (a fit run) and c1 left out
  write(d / "partial.yaml", text);
  r = run_stepsim("validate " + (d / "partial.yaml").string() + " --cross-validate source --topologies " +
                  topologies.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("fit run 'b2' is not in the runs files given (partial.yaml)"), std::string::npos)
      << r.out;

  r = run_stepsim("validate " + (d / "runs.yaml").string() + " --cross-validate paper");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--cross-validate paper: expected source, framework or gpu"), std::string::npos)
      << r.out;
}

TEST(CrossValidationGroups, FrameworkTextIsNormalisedAndSourcesAreTheRecordsGroup) {
  EXPECT_EQ(validate::normalised_framework("NeMo (24.09 / 24.11 containers)"), "nemo");
  EXPECT_EQ(validate::normalised_framework("NeMo 24.07"), "nemo");
  EXPECT_EQ(validate::normalised_framework("NeMo Megatron-Bridge (25.11 container)"), "nemo megatron-bridge");
  EXPECT_EQ(validate::normalised_framework("  Megatron-LM  v2.5 "), "megatron-lm");
  EXPECT_EQ(validate::normalised_framework("Composer + PyTorch FSDP"), "composer + pytorch fsdp");
  EXPECT_EQ(validate::normalised_framework(""), "(none)");
  config::MeasuredRun run;
  run.id = "x";
  run.group = "Narayanan2021_Table1_weak_scaling";
  run.framework = "DeepSpeed ZeRO-3";
  run.hardware.gpu = "a100_80gb";
  EXPECT_EQ(validate::group_key(run, validate::GroupBy::SOURCE), "Narayanan2021_Table1_weak_scaling");
  EXPECT_EQ(validate::group_key(run, validate::GroupBy::FRAMEWORK), "deepspeed zero-3");
  EXPECT_EQ(validate::group_key(run, validate::GroupBy::GPU), "A100");
  run.group.clear();
  EXPECT_EQ(validate::group_key(run, validate::GroupBy::SOURCE), "id:x");
  EXPECT_THROW((void)validate::parse_group_by("paper"), ConfigError);
}

// Every bundled record with fit runs says how it searched, so each can be refitted: its stages
// have their knobs' ranges, in the order fit, then.
TEST(CrossValidationGroups, BundledRecordsCanBeRefitted) {
  const validate::FitRecord a100 =
      validate::fit_record(config::load_calibration(src("topologies/calibration/A100-SXM4-80GB.yaml")));
  ASSERT_EQ(a100.stages.size(), 2u);
  ASSERT_EQ(a100.stages[0].knobs.size(), 1u);
  EXPECT_EQ(a100.stages[0].knobs[0].key, "gpu.gemm_efficiency");
  EXPECT_EQ(a100.stages[1].knobs.at(0).key, "gpu.list_collective_per_rank");
  EXPECT_EQ(a100.stages[1].knobs[0].unit, "us");
  EXPECT_EQ(a100.stages[1].objective, validate::Objective::RMS);
  const validate::FitRecord h100 =
      validate::fit_record(config::load_calibration(src("topologies/calibration/H100-SXM5-80GB.yaml")));
  ASSERT_EQ(h100.stages.size(), 1u);
  EXPECT_EQ(h100.stages[0].knobs.size(), 3u);
  EXPECT_EQ(h100.stages[0].rounds, 2);
  const validate::FitRecord gb200 =
      validate::fit_record(config::load_calibration(src("topologies/calibration/GB200-186GB.yaml")));
  ASSERT_EQ(gb200.stages.size(), 1u);
  EXPECT_EQ(gb200.stages[0].knobs.size(), 1u); // the other two are the H100's, transferred
  EXPECT_TRUE(
      validate::fit_record(config::load_calibration(src("topologies/calibration/H200-SXM-141GB.yaml")))
          .stages.empty());
}

// A record's search must name its own knobs, each fitted once, with ranges --knob accepts; each
// refusal names the file, the line and the key.
TEST(CrossValidationGroups, RecordSearchErrorsNameFileAndKey) {
  const fs::path d = fs::temp_directory_path() / ("stepsim-crossval-record-" + std::to_string(::getpid()));
  fs::create_directories(d);
  const auto error_of = [&](const std::string& text) {
    write(d / "c.yaml", text);
    try {
      (void)validate::fit_record(config::load_calibration(d / "c.yaml"));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string head = "gpu_kind: X\nknobs:\n  gpu.gemm_efficiency: 0.8\n  gpu.pass_overhead: 5us\n";
  std::string e = error_of(head + "fit:\n  runs: [a]\n  ranges:\n    gpu.launch_overhead: \"0:20:us\"\n");
  EXPECT_NE(e.find("c.yaml:8:"), std::string::npos) << e;
  EXPECT_NE(e.find("'gpu.launch_overhead' is not a key of knobs"), std::string::npos) << e;
  e = error_of(
      head +
      "fit:\n  runs: [a]\n  knobs: [gpu.gemm_efficiency]\n  ranges:\n    gpu.gemm_efficiency: \"1:0.5\"\n");
  EXPECT_NE(e.find("c.yaml:6:3: key 'fit': ranges.gpu.gemm_efficiency: --knob gpu.gemm_efficiency=1:0.5: "
                   "expected LO < HI"),
            std::string::npos)
      << e;
  e = error_of(
      head + "fit:\n  runs: [a]\n  knobs: [gpu.gemm_efficiency]\n  ranges: {gpu.gemm_efficiency: \"0.5:1\"}\n"
             "then:\n  - knobs: [gpu.gemm_efficiency]\n    runs: [b]\n");
  EXPECT_NE(e.find("'gpu.gemm_efficiency' is fitted again by then[0]"), std::string::npos) << e;
  // Without fit.knobs the first fit searches what no later fit names: here the GEMM efficiency,
  // then the pass overhead on runs of its own.
  const std::string ok =
      head + "fit:\n  runs: [a]\n  ranges: {gpu.gemm_efficiency: \"0.5:1\"}\n  tolerance: 0.01\n"
             "then:\n  - knobs: [gpu.pass_overhead]\n    runs: [b]\n    objective: rms_error_pct\n"
             "    ranges: {gpu.pass_overhead: \"0:100:us\"}\n    rounds: 2\n";
  EXPECT_EQ(error_of(ok), "(accepted)");
  const validate::FitRecord r = validate::fit_record(config::load_calibration(d / "c.yaml"));
  ASSERT_EQ(r.stages.size(), 2u);
  EXPECT_EQ(r.stages[0].knobs.at(0).key, "gpu.gemm_efficiency");
  EXPECT_DOUBLE_EQ(r.stages[0].tolerance, 0.01);
  EXPECT_EQ(r.stages[1].knobs.at(0).unit, "us");
  EXPECT_DOUBLE_EQ(r.stages[1].knobs[0].hi, 100.0);
  EXPECT_EQ(r.stages[1].rounds, 2);
  EXPECT_EQ(r.stages[1].objective, validate::Objective::RMS);
  fs::remove_all(d);
}

// `stepsim calibrate --out` records how it searched, and the record reads back as a refit's
// stages: the knob, its range and unit, the rounds and the grid step it was given. Fitted on B's
// runs (measured at 0.9), the knob lands there.
TEST_F(CrossValidation, CalibrateRecordsItsSearchForARefit) {
  const fs::path out = d / "fitted.yaml";
  const test::CommandResult r =
      run_stepsim("calibrate " + (d / "runs.yaml").string() +
                  " --fit b1,b2 --knob gpu.gemm_efficiency=0.6:1 --tolerance 0.002 --topologies " +
                  topologies.string() + " --out " + out.string() + " -j2");
  ASSERT_EQ(r.code, 0) << r.out;
  const config::CalibrationFile file = config::load_calibration(out);
  const validate::FitRecord rec = validate::fit_record(file);
  ASSERT_EQ(rec.stages.size(), 1u);
  ASSERT_EQ(rec.stages[0].knobs.size(), 1u);
  EXPECT_EQ(rec.stages[0].knobs[0].key, "gpu.gemm_efficiency");
  EXPECT_DOUBLE_EQ(rec.stages[0].knobs[0].lo, 0.6);
  EXPECT_DOUBLE_EQ(rec.stages[0].knobs[0].hi, 1.0);
  EXPECT_DOUBLE_EQ(rec.stages[0].tolerance, 0.002);
  EXPECT_EQ(rec.stages[0].rounds, 1);
  EXPECT_EQ(rec.stages[0].runs, (std::vector<std::string>{"b1", "b2"}));
  ASSERT_EQ(file.knobs.size(), 1u);
  EXPECT_NEAR(std::stod(file.knobs[0].value), 0.9, 0.004) << file.knobs[0].value;
}
