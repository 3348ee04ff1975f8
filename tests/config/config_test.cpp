// Tests for config/: unit parsing, cluster and workload files, --set overrides and layout checks.
// Every fixture is YAML written inline (to a temporary directory). Negative tests change one
// line of a valid base file and check that the message names file:line:col (or the --set
// override), the dotted key and what was expected.

#include "config/config.hpp"
#include "config/schema.hpp"
#include "config_inputs.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using stepsim::ClusterSpec;
using stepsim::ConfigError;
using stepsim::ModelError;
using stepsim::WorkloadSpec;
using stepsim::config::Override;

using config_inputs::CLUSTER;

using config_inputs::WORKLOAD;

/// `text` with the single occurrence of `from` replaced by `to`.
std::string replace(const std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "fixture has no '" << from << "'";
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "fixture has '" << from << "' twice";
  if (at == std::string::npos) {
    return text;
  }
  std::string out = text;
  out.replace(at, from.size(), to);
  return out;
}

/// "LINE:COL" (1-based) of the '^' in `marked`, which (without the '^') occurs once in `text`.
std::string line_col(const std::string& text, const std::string& marked) {
  const auto caret = marked.find('^');
  EXPECT_NE(caret, std::string::npos) << "no ^ in '" << marked << "'";
  std::string needle = marked;
  needle.erase(caret, 1);
  const auto at = text.find(needle);
  EXPECT_NE(at, std::string::npos) << "'" << needle << "' not in fixture";
  EXPECT_EQ(text.find(needle, at + 1), std::string::npos) << "'" << needle << "' twice in fixture";
  const std::size_t pos = at + caret;
  int line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return std::to_string(line) + ":" + std::to_string(pos - line_start + 1);
}

void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const auto& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nlacks: " << part;
  }
}

/// The message of the E that `f` throws (a test failure when it throws nothing or else).
template <class E> std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "threw nothing";
  return "";
}

class ConfigTest : public ::testing::Test {
protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("stepsim_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path write(const std::string& name, const std::string& text) const {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }
  fs::path cluster_path() const { return dir_ / "cluster.yaml"; }
  fs::path workload_path() const { return dir_ / "workload.yaml"; }

  ClusterSpec cluster(const std::string& text, const std::vector<Override>& overrides = {}) const {
    return stepsim::config::load_cluster(write("cluster.yaml", text), overrides);
  }
  WorkloadSpec workload(const std::string& text, const std::vector<Override>& overrides = {}) const {
    return stepsim::config::load_workload(write("workload.yaml", text), overrides);
  }
  std::string cluster_error(const std::string& text, const std::vector<Override>& overrides = {}) const {
    return message_of<ConfigError>([&] { (void)cluster(text, overrides); });
  }
  std::string workload_error(const std::string& text, const std::vector<Override>& overrides = {}) const {
    return message_of<ConfigError>([&] { (void)workload(text, overrides); });
  }
  /// "CLUSTER_PATH:LINE:COL: " of the '^' in `marked`.
  std::string in_cluster(const std::string& text, const std::string& marked) const {
    return cluster_path().string() + ":" + line_col(text, marked) + ": ";
  }
  std::string in_workload(const std::string& text, const std::string& marked) const {
    return workload_path().string() + ":" + line_col(text, marked) + ": ";
  }
  /// The ModelError message of check_layout on the two inline files.
  std::string layout_error(const std::string& cluster_text, const std::string& workload_text) const {
    const ClusterSpec c = cluster(cluster_text);
    WorkloadSpec w = workload(workload_text);
    return message_of<ModelError>([&] { (void)stepsim::config::check_layout(c, w); });
  }

  fs::path dir_;
};

Override set(const std::string& text) {
  return stepsim::config::parse_override(text);
}

// ---- units ---------------------------------------------------------------------------------

TEST(Units, ParsesBytes1000And1024Based) {
  using stepsim::config::parse_bytes;
  EXPECT_DOUBLE_EQ(parse_bytes("80GiB", "").value(), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_bytes("25MiB", "").value(), 25.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_bytes("1KiB", "").value(), 1024.0);
  EXPECT_DOUBLE_EQ(parse_bytes("2TiB", "").value(), 2.0 * 1024 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_bytes("1024B", "").value(), 1024.0);
  EXPECT_DOUBLE_EQ(parse_bytes("40MB", "").value(), 40e6);
  EXPECT_DOUBLE_EQ(parse_bytes("1.5KB", "").value(), 1500.0);
  EXPECT_DOUBLE_EQ(parse_bytes("2 GB", "").value(), 2e9);
  EXPECT_DOUBLE_EQ(parse_bytes("3TB", "").value(), 3e12);
  EXPECT_DOUBLE_EQ(parse_bytes(".5GB", "").value(), 0.5e9);
}

TEST(Units, ParsesBandwidthInBytesAndBits) {
  using stepsim::config::parse_bandwidth;
  EXPECT_DOUBLE_EQ(parse_bandwidth("200Gbps", "").value(), 25e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("400Gbps", "").value(), 50e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("300GBps", "").value(), 300e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("2039GBps", "").value(), 2039e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("3.35TBps", "").value(), 3.35e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth("100Mbps", "").value(), 12.5e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("8bps", "").value(), 1.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1Tbps", "").value(), 125e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth("10 KBps", "").value(), 1e4);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1MBps", "").value(), 1e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1Bps", "").value(), 1.0);
  EXPECT_DOUBLE_EQ(parse_bandwidth("8Kbps", "").value(), 1e3);
}

TEST(Units, ParsesTimeAndFlopRates) {
  using stepsim::config::parse_flops_rate;
  using stepsim::config::parse_time;
  EXPECT_DOUBLE_EQ(parse_time("3us", "").value(), 3e-6);
  EXPECT_DOUBLE_EQ(parse_time("0.5us", "").value(), 0.5e-6);
  EXPECT_DOUBLE_EQ(parse_time("1.5 ms", "").value(), 1.5e-3);
  EXPECT_DOUBLE_EQ(parse_time("100ns", "").value(), 100e-9);
  EXPECT_DOUBLE_EQ(parse_time("2s", "").value(), 2.0);
  EXPECT_DOUBLE_EQ(parse_time("0s", "").value(), 0.0);
  EXPECT_DOUBLE_EQ(parse_flops_rate("312TFLOPS", "").value(), 312e12);
  EXPECT_DOUBLE_EQ(parse_flops_rate("989 TFLOPS", "").value(), 989e12);
  EXPECT_DOUBLE_EQ(parse_flops_rate("1.979PFLOPS", "").value(), 1.979e15);
  EXPECT_DOUBLE_EQ(parse_flops_rate("500GFLOPS", "").value(), 500e9);
  EXPECT_DOUBLE_EQ(parse_flops_rate("7FLOPS", "").value(), 7.0);
}

TEST(Units, BareNumberNeedsAUnit) {
  const auto msg =
      message_of<ConfigError>([] { (void)stepsim::config::parse_bandwidth("200", "f.yaml:3:7: key 'x'"); });
  EXPECT_EQ(msg,
            "f.yaml:3:7: key 'x': expected a bandwidth with a unit, e.g. 200Gbps, found '200' (no unit)");
  expect_contains(message_of<ConfigError>([] { (void)stepsim::config::parse_bytes("80", "w"); }),
                  {"w: expected a byte size with a unit, e.g. 80GiB, found '80'"});
  expect_contains(message_of<ConfigError>([] { (void)stepsim::config::parse_time("3", "w"); }),
                  {"w: expected a time with a unit, e.g. 2us, found '3'"});
  expect_contains(message_of<ConfigError>([] { (void)stepsim::config::parse_flops_rate("312", "w"); }),
                  {"w: expected a FLOP rate with a unit, e.g. 312TFLOPS, found '312'"});
}

TEST(Units, UnitsAreCaseSensitive) {
  expect_contains(message_of<ConfigError>([] { (void)stepsim::config::parse_bandwidth("200gbps", "w"); }),
                  {"unknown unit 'gbps'", "case-sensitive", "'GBps' or 'Gbps'"});
  expect_contains(message_of<ConfigError>([] { (void)stepsim::config::parse_bytes("80gib", "w"); }),
                  {"unknown unit 'gib'", "did you mean 'GiB'?"});
  expect_contains(message_of<ConfigError>([] { (void)stepsim::config::parse_time("3US", "w"); }),
                  {"unknown unit 'US'", "did you mean 'us'?"});
  expect_contains(message_of<ConfigError>([] { (void)stepsim::config::parse_flops_rate("312Tflops", "w"); }),
                  {"did you mean 'TFLOPS'?"});
}

TEST(Units, RejectsNegativeNanAndGarbage) {
  using stepsim::config::parse_bytes;
  using stepsim::config::parse_time;
  expect_contains(message_of<ConfigError>([] { (void)parse_bytes("-80GiB", "w"); }),
                  {"found '-80GiB'", "must not be negative"});
  expect_contains(message_of<ConfigError>([] { (void)parse_time("-1us", "w"); }), {"must not be negative"});
  expect_contains(message_of<ConfigError>([] { (void)parse_bytes("nanGB", "w"); }),
                  {"found 'nanGB'", "not a number"});
  expect_contains(message_of<ConfigError>([] { (void)parse_bytes("infGB", "w"); }), {"not a number"});
  expect_contains(message_of<ConfigError>([] { (void)parse_bytes(".nan", "w"); }), {"not a number"});
  expect_contains(message_of<ConfigError>([] { (void)parse_bytes("lotsGB", "w"); }), {"not a number"});
  expect_contains(message_of<ConfigError>([] { (void)parse_bytes("", "w"); }),
                  {"expected a byte size with a unit"});
  expect_contains(message_of<ConfigError>([] { (void)parse_bytes("80GiBs", "w"); }),
                  {"unknown unit 'GiBs'", "known units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"});
  expect_contains(message_of<ConfigError>([] { (void)parse_bytes("1e400GB", "w"); }), {"out of range"});
  expect_contains(message_of<ConfigError>([] { (void)parse_bytes("8 0GB", "w"); }), {"unknown unit '0GB'"});
}

// ---- did you mean --------------------------------------------------------------------------

TEST(DidYouMean, SuggestsOnlyCloseCandidates) {
  using stepsim::config::did_you_mean;
  const std::vector<std::string> keys{"hbm_capacity", "hbm_bandwidth", "kind", "peak_flops"};
  EXPECT_EQ(did_you_mean("hbm_capcity", keys), "hbm_capacity");
  EXPECT_EQ(did_you_mean("hbm_bandwith", keys), "hbm_bandwidth");
  EXPECT_EQ(did_you_mean("knid", keys), "kind");             // transposition
  EXPECT_EQ(did_you_mean("Peak_Flops", keys), "peak_flops"); // case
  EXPECT_EQ(did_you_mean("colour", keys), "");
  EXPECT_EQ(did_you_mean("x", keys), "");
  EXPECT_EQ(did_you_mean("anything", {}), "");
}

// ---- overrides: parsing --------------------------------------------------------------------

TEST(ParseOverride, SplitsAtTheFirstEquals) {
  const Override o = set("cluster.nodes=1");
  EXPECT_EQ(o.path, "cluster.nodes");
  EXPECT_EQ(o.value, "1");
  const Override name = set("model.name=a=b");
  EXPECT_EQ(name.path, "model.name");
  EXPECT_EQ(name.value, "a=b");
}

TEST(ParseOverride, RejectsMissingEqualsAndEmptyPaths) {
  expect_contains(message_of<ConfigError>([] { (void)set("parallel.pp"); }),
                  {"--set parallel.pp: ", "expected PATH=VALUE"});
  expect_contains(message_of<ConfigError>([] { (void)set("=4"); }), {"--set =4: ", "non-empty PATH"});
  expect_contains(message_of<ConfigError>([] { (void)set("parallel..pp=4"); }),
                  {"--set parallel..pp=4: ", "empty key in path 'parallel..pp'"});
  expect_contains(message_of<ConfigError>([] { (void)set("parallel.=4"); }), {"empty key"});
}

// ---- cluster: positive ---------------------------------------------------------------------

TEST_F(ConfigTest, LoadsClusterWithUnitsAndDefaults) {
  const ClusterSpec c = cluster(CLUSTER);
  EXPECT_EQ(c.name, "test-cluster");
  EXPECT_EQ(c.source, cluster_path().string());
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_EQ(c.num_gpus(), 16);
  EXPECT_EQ(c.gpu.kind, "A100-SXM4-80GB");
  EXPECT_DOUBLE_EQ(c.gpu.peak_bf16.value(), 312e12);
  EXPECT_DOUBLE_EQ(c.gpu.peak_fp16.value(), 312e12);
  EXPECT_DOUBLE_EQ(c.gpu.hbm_capacity.value(), 80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(c.gpu.hbm_bandwidth.value(), 2039e9);
  EXPECT_DOUBLE_EQ(c.gpu.compute_efficiency, 0.70);
  EXPECT_DOUBLE_EQ(c.gpu.memory_efficiency, 0.85);
  EXPECT_DOUBLE_EQ(c.nvswitch.bandwidth.value(), 300e9);
  EXPECT_DOUBLE_EQ(c.nvswitch.latency.value(), 3e-6);
  EXPECT_DOUBLE_EQ(c.nvswitch.efficiency, 0.80);
  EXPECT_EQ(c.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(c.nic.bandwidth.value(), 25e9);
  EXPECT_DOUBLE_EQ(c.nic.latency.value(), 2e-6);
  EXPECT_DOUBLE_EQ(c.nic.efficiency, 0.96);
  // fabric defaults
  EXPECT_EQ(c.fabric.kind, stepsim::FabricKind::FAT_TREE);
  EXPECT_EQ(c.fabric.nodes_per_leaf, 1);
  EXPECT_DOUBLE_EQ(c.fabric.oversubscription, 1.0);
  EXPECT_DOUBLE_EQ(c.fabric.switch_latency.value(), 0.5e-6);
}

TEST_F(ConfigTest, LoadsExplicitFabric) {
  const std::string yaml =
      CLUSTER + "  nodes_per_leaf: 16\n  oversubscription: 2.5\n  switch_latency: 130ns\n";
  const ClusterSpec c = cluster(yaml);
  EXPECT_EQ(c.fabric.nodes_per_leaf, 16);
  EXPECT_DOUBLE_EQ(c.fabric.oversubscription, 2.5);
  EXPECT_DOUBLE_EQ(c.fabric.switch_latency.value(), 130e-9);
}

TEST_F(ConfigTest, PeakFlopsMayGiveOnlyOnePrecision) {
  const ClusterSpec c = cluster(replace(CLUSTER, "{bf16: 312TFLOPS, fp16: 312TFLOPS}", "{fp16: 125TFLOPS}"));
  EXPECT_DOUBLE_EQ(c.gpu.peak_bf16.value(), 0.0);
  EXPECT_DOUBLE_EQ(c.gpu.peak_fp16.value(), 125e12);
}

TEST_F(ConfigTest, ReadsFp8PeakAndPrecision) {
  const ClusterSpec c = cluster(replace(CLUSTER, "fp16: 312TFLOPS}", "fp16: 312TFLOPS, fp8: 624TFLOPS}"));
  EXPECT_DOUBLE_EQ(c.gpu.peak_fp8.value(), 624e12);
  EXPECT_DOUBLE_EQ(stepsim::peak_flops(c.gpu, stepsim::Precision::FP8).value(), 624e12);
  EXPECT_DOUBLE_EQ(cluster(CLUSTER).gpu.peak_fp8.value(), 0.0); // absent: no fp8 tensor cores
  EXPECT_EQ(workload(replace(WORKLOAD, "precision: bf16", "precision: fp8")).precision,
            stepsim::Precision::FP8);
}

TEST_F(ConfigTest, ReadsPassOverhead) {
  EXPECT_DOUBLE_EQ(cluster(CLUSTER).gpu.pass_overhead.value(), 0.0); // default: none
  const ClusterSpec c =
      cluster(replace(CLUSTER, "memory_efficiency: 0.85", "memory_efficiency: 0.85\n  pass_overhead: 543us"));
  EXPECT_DOUBLE_EQ(c.gpu.pass_overhead.value(), 543e-6);
  const std::string bad =
      replace(CLUSTER, "memory_efficiency: 0.85", "memory_efficiency: 0.85\n  pass_overhead: soon");
  expect_contains(cluster_error(bad), {in_cluster(bad, "pass_overhead: ^soon"), "key 'gpu.pass_overhead'"});
}

// training.variability (docs/variability.md): kernel_cv in [0, 1] and a seed; unset, the CV is
// the GPU kind's gpu.kernel_cv (default 0). Bad values name file:line:col and the key.
TEST_F(ConfigTest, ReadsVariability) {
  const WorkloadSpec plain = workload(WORKLOAD);
  EXPECT_LT(plain.training.variability.kernel_cv, 0.0); // unset
  EXPECT_EQ(plain.training.variability.seed, 0);
  EXPECT_DOUBLE_EQ(cluster(CLUSTER).gpu.kernel_cv, 0.0);
  const std::string yaml = WORKLOAD + "training:\n  variability: {kernel_cv: 0.05, seed: 12}\n";
  const WorkloadSpec w = workload(yaml);
  EXPECT_DOUBLE_EQ(w.training.variability.kernel_cv, 0.05);
  EXPECT_EQ(w.training.variability.seed, 12);
  EXPECT_DOUBLE_EQ(w.training.variability.cv_or(0.3), 0.05);
  EXPECT_DOUBLE_EQ(plain.training.variability.cv_or(0.3), 0.3);
  const WorkloadSpec overridden = workload(WORKLOAD, {set("training.variability.kernel_cv=0.1")});
  EXPECT_DOUBLE_EQ(overridden.training.variability.kernel_cv, 0.1);
  const ClusterSpec c =
      cluster(replace(CLUSTER, "memory_efficiency: 0.85", "memory_efficiency: 0.85\n  kernel_cv: 0.02"));
  EXPECT_DOUBLE_EQ(c.gpu.kernel_cv, 0.02);

  const std::string negative = WORKLOAD + "training:\n  variability: {kernel_cv: -0.1}\n";
  expect_contains(workload_error(negative),
                  {in_workload(negative, "kernel_cv: ^-0.1"), "key 'training.variability.kernel_cv'"});
  const std::string seed = WORKLOAD + "training:\n  variability: {seed: 1.5}\n";
  expect_contains(workload_error(seed), {in_workload(seed, "seed: ^1.5"), "key 'training.variability.seed'"});
  const std::string unknown = WORKLOAD + "training:\n  variability: {kernel_vc: 0.1}\n";
  expect_contains(workload_error(unknown), {in_workload(unknown, "{^kernel_vc"), "kernel_cv"});
  const std::string gpu =
      replace(CLUSTER, "memory_efficiency: 0.85", "memory_efficiency: 0.85\n  kernel_cv: 2");
  expect_contains(cluster_error(gpu), {in_cluster(gpu, "kernel_cv: ^2"), "key 'gpu.kernel_cv'"});
}

TEST_F(ConfigTest, LocationsAreOneBased) {
  // "nodes: 0" is on the 2nd line, its value in the 8th column.
  const std::string msg = cluster_error(replace(CLUSTER, "nodes: 2\n", "nodes: 0\n"));
  EXPECT_EQ(msg.rfind(cluster_path().string() + ":2:8: key 'nodes': ", 0), 0u) << msg;
}

// ---- cluster: negative, one per rule -------------------------------------------------------

TEST_F(ConfigTest, RejectsMissingFile) {
  const fs::path missing = dir_ / "no-such-cluster.yaml";
  expect_contains(message_of<ConfigError>([&] { (void)stepsim::config::load_cluster(missing); }),
                  {missing.string() + ": ", "does not exist"});
  expect_contains(message_of<ConfigError>([&] { (void)stepsim::config::load_workload(missing); }),
                  {missing.string() + ": ", "does not exist"});
}

// A directory or a device (endless /dev/zero) is refused before anything is read.
TEST_F(ConfigTest, RejectsWhatIsNotAFile) {
  expect_contains(message_of<ConfigError>([&] { (void)stepsim::config::load_cluster(dir_); }),
                  {dir_.string() + ": ", "it is a directory"});
  expect_contains(message_of<ConfigError>([&] { (void)stepsim::config::load_workload("/dev/zero"); }),
                  {"/dev/zero: ", "not a regular file"});
}

TEST_F(ConfigTest, RejectsYamlSyntaxErrorWithLocation) {
  const std::string yaml = "name: x\n"
                           "nodes: 2\n"
                           "gpu: {kind: A100]\n";
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "A100^]"), "YAML syntax error"});
  const std::string tab = "name: x\nnodes: 2\n\tgpus_per_node: 8\n";
  expect_contains(cluster_error(tab), {cluster_path().string() + ":3:1: ", "YAML syntax error", "tab"});
}

TEST_F(ConfigTest, RejectsEmptyFile) {
  expect_contains(cluster_error(""), {cluster_path().string() + ":1:1: ", "the document is empty",
                                      "expected a mapping with keys name, nodes, gpus_per_node"});
}

TEST_F(ConfigTest, RejectsTopLevelThatIsNotAMapping) {
  const std::string yaml = "- name: x\n- nodes: 2\n";
  expect_contains(cluster_error(yaml),
                  {in_cluster(yaml, "^- name"), "expected a mapping with keys name, nodes",
                   "at the top level, found a list"});
}

TEST_F(ConfigTest, RejectsUnknownKeyWithSuggestion) {
  const std::string yaml = replace(CLUSTER, "  hbm_capacity: 80GiB", "  hbm_capcity: 80GiB");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "  ^hbm_capcity"), "unknown key 'gpu.hbm_capcity'",
                                        "did you mean 'gpu.hbm_capacity'?"});
}

TEST_F(ConfigTest, RejectsUnknownKeyListingTheKnownOnes) {
  const std::string yaml = CLUSTER + "colour: blue\n";
  const std::string msg = cluster_error(yaml);
  expect_contains(msg, {in_cluster(yaml, "^colour"), "unknown key 'colour'",
                        "expected one of name, nodes, gpus_per_node, gpu, nvswitch, pcie, nics, fabric"});
  EXPECT_EQ(msg.find("did you mean"), std::string::npos) << msg;
}

TEST_F(ConfigTest, RejectsDuplicateKey) {
  const std::string yaml = CLUSTER + "nodes: 4\n";
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "^nodes: 4"), "key 'nodes' is given twice",
                                        "first at " + cluster_path().string() + ":2:1"});
}

TEST_F(ConfigTest, RejectsMissingRequiredKeyAtParentLocation) {
  const std::string yaml = replace(CLUSTER, "  hbm_capacity: 80GiB\n", "");
  expect_contains(cluster_error(yaml),
                  {in_cluster(yaml, "^gpu:"), "key 'gpu': missing required key 'gpu.hbm_capacity'"});
}

TEST_F(ConfigTest, RejectsMissingTopLevelKeyAtDocumentStart) {
  const std::string yaml = replace(CLUSTER, "nodes: 2\n", "");
  expect_contains(cluster_error(yaml), {cluster_path().string() + ":1:1: missing required key 'nodes'"});
  const std::string no_fabric = replace(CLUSTER, "fabric:\n  kind: fat_tree\n", "");
  expect_contains(cluster_error(no_fabric), {"missing required key 'fabric'"});
}

TEST_F(ConfigTest, RejectsScalarWhereMappingExpected) {
  const std::string yaml =
      replace(CLUSTER, "nvswitch:\n  bandwidth: 300GBps\n  latency: 3us\n  efficiency: 0.80\n",
              "nvswitch: 300GBps\n");
  expect_contains(cluster_error(yaml),
                  {in_cluster(yaml, "nvswitch: ^300GBps"), "key 'nvswitch'",
                   "expected a mapping with keys bandwidth, latency, efficiency", "found '300GBps'"});
}

TEST_F(ConfigTest, RejectsListWhereIntegerExpected) {
  const std::string yaml = replace(CLUSTER, "nodes: 2\n", "nodes: [2]\n");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "nodes: ^[2]"), "key 'nodes'",
                                        "expected a positive integer, found a list"});
}

TEST_F(ConfigTest, RejectsEmptyValueAtTheKey) {
  const std::string yaml = replace(CLUSTER, "nodes: 2\n", "nodes:\n");
  expect_contains(cluster_error(yaml),
                  {in_cluster(yaml, "^nodes:"), "key 'nodes'", "expected a positive integer, found nothing"});
}

TEST_F(ConfigTest, RejectsNonIntegerCount) {
  const std::string yaml = replace(CLUSTER, "gpus_per_node: 8\n", "gpus_per_node: 8.5\n");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "gpus_per_node: ^8.5"), "key 'gpus_per_node'",
                                        "expected a positive integer, found '8.5' (not an integer)"});
}

TEST_F(ConfigTest, RejectsNonPositiveIntegers) {
  const std::string zero = replace(CLUSTER, "nodes: 2\n", "nodes: 0\n");
  expect_contains(cluster_error(zero),
                  {in_cluster(zero, "nodes: ^0"), "key 'nodes'", "expected a positive integer, found 0"});
  const std::string negative = replace(CLUSTER, "  count: 8\n", "  count: -8\n");
  expect_contains(cluster_error(negative), {in_cluster(negative, "count: ^-8"), "key 'nics.count'",
                                            "expected a positive integer, found -8"});
  const std::string leaf = CLUSTER + "  nodes_per_leaf: 0\n";
  expect_contains(cluster_error(leaf), {in_cluster(leaf, "nodes_per_leaf: ^0"), "key 'fabric.nodes_per_leaf'",
                                        "expected a positive integer, found 0"});
}

TEST_F(ConfigTest, RejectsTooManyGpus) {
  const std::string yaml = replace(CLUSTER, "nodes: 2\n", "nodes: 1000000\n");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "gpus_per_node: ^8"), "key 'gpus_per_node'",
                                        "nodes * gpus_per_node = 1000000*8 exceeds 1048576 GPUs"});
  // `nodes` alone is bounded by the same limit, as docs/schema.md says.
  const std::string huge = replace(CLUSTER, "nodes: 2\n", "nodes: 1000000000\n");
  expect_contains(cluster_error(huge), {in_cluster(huge, "nodes: ^1000000000"), "key 'nodes'", "1048576"});
}

TEST_F(ConfigTest, RejectsEfficiencyOutsideZeroToOne) {
  const std::string high = replace(CLUSTER, "compute_efficiency: 0.70", "compute_efficiency: 1.2");
  expect_contains(cluster_error(high),
                  {in_cluster(high, "compute_efficiency: ^1.2"), "key 'gpu.compute_efficiency'",
                   "expected a number in [0.001, 1] (the sanity limit), found 1.2"});
  const std::string zero = replace(CLUSTER, "  efficiency: 0.80", "  efficiency: 0");
  expect_contains(cluster_error(zero), {in_cluster(zero, "  efficiency: ^0\n"), "key 'nvswitch.efficiency'",
                                        "expected a number in [0.001, 1] (the sanity limit), found 0"});
  // Below 0.001 a time would overflow or round to nonsense (an NVSwitch at 1e-300 of its rate once
  // gave a 63-digit step time): the sanity limit.
  const std::string tiny = replace(CLUSTER, "  efficiency: 0.80", "  efficiency: 1e-300");
  expect_contains(cluster_error(tiny),
                  {in_cluster(tiny, "  efficiency: ^1e-300"), "key 'nvswitch.efficiency'",
                   "expected a number in [0.001, 1] (the sanity limit), found 1e-300"});
  const std::string text = replace(CLUSTER, "memory_efficiency: 0.85", "memory_efficiency: high");
  expect_contains(cluster_error(text),
                  {in_cluster(text, "memory_efficiency: ^high"), "key 'gpu.memory_efficiency'",
                   "expected a number in [0.001, 1] (the sanity limit), found 'high' (not a number)"});
  const std::string nan = replace(CLUSTER, "  efficiency: 0.96", "  efficiency: .nan");
  expect_contains(cluster_error(nan),
                  {in_cluster(nan, "efficiency: ^.nan"), "key 'nics.efficiency'", "not a number"});
}

TEST_F(ConfigTest, RejectsMissingLinkEfficiency) {
  const std::string yaml = replace(CLUSTER, "  efficiency: 0.96\n", "");
  expect_contains(cluster_error(yaml),
                  {in_cluster(yaml, "^nics:"), "missing required key 'nics.efficiency'"});
}

TEST_F(ConfigTest, RejectsOversubscriptionBelowOne) {
  const std::string yaml = CLUSTER + "  oversubscription: 0.5\n";
  expect_contains(cluster_error(yaml),
                  {in_cluster(yaml, "oversubscription: ^0.5"), "key 'fabric.oversubscription'",
                   "expected a number >= 1, found 0.5"});
}

TEST_F(ConfigTest, RejectsUnknownFabricKindListingAllowedValues) {
  const std::string yaml = replace(CLUSTER, "kind: fat_tree", "kind: dragonfly");
  expect_contains(cluster_error(yaml),
                  {in_cluster(yaml, "kind: ^dragonfly"), "key 'fabric.kind'",
                   "expected one of fat_tree, rail_optimized, graph, found 'dragonfly'"});
  const std::string close = replace(CLUSTER, "kind: fat_tree", "kind: fattree");
  expect_contains(cluster_error(close), {"did you mean 'fat_tree'?"});
}

TEST_F(ConfigTest, RejectsBandwidthWithoutUnit) {
  const std::string yaml = replace(CLUSTER, "bandwidth: 200Gbps", "bandwidth: 200");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "bandwidth: ^200\n"), "key 'nics.bandwidth'",
                                        "expected a bandwidth with a unit, e.g. 200Gbps", "found '200'"});
}

TEST_F(ConfigTest, RejectsBandwidthWithWrongCaseUnit) {
  const std::string yaml = replace(CLUSTER, "bandwidth: 200Gbps", "bandwidth: 200gbps");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "bandwidth: ^200gbps"), "key 'nics.bandwidth'",
                                        "expected a bandwidth with a unit", "unknown unit 'gbps'"});
}

TEST_F(ConfigTest, RejectsZeroBandwidth) {
  const std::string yaml = replace(CLUSTER, "bandwidth: 300GBps", "bandwidth: 0GBps");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "bandwidth: ^0GBps"), "key 'nvswitch.bandwidth'",
                                        "expected a positive bandwidth of at least 1bps, found '0GBps'"});
  // A vanishing rate (flows that never end) is refused the same way.
  const std::string tiny = replace(CLUSTER, "bandwidth: 300GBps", "bandwidth: 1e-320Gbps");
  expect_contains(cluster_error(tiny), {in_cluster(tiny, "bandwidth: ^1e-320Gbps"),
                                        "key 'nvswitch.bandwidth'", "at least 1bps, found '1e-320Gbps'"});
}

TEST_F(ConfigTest, RejectsNegativeByteSize) {
  const std::string yaml = replace(CLUSTER, "hbm_capacity: 80GiB", "hbm_capacity: -80GiB");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "hbm_capacity: ^-80GiB"), "key 'gpu.hbm_capacity'",
                                        "expected a byte size with a unit", "must not be negative"});
}

TEST_F(ConfigTest, RejectsByteSizeWithoutUnit) {
  const std::string yaml = replace(CLUSTER, "hbm_capacity: 80GiB", "hbm_capacity: 80");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "hbm_capacity: ^80\n"), "key 'gpu.hbm_capacity'",
                                        "expected a byte size with a unit, e.g. 80GiB, found '80'"});
}

TEST_F(ConfigTest, RejectsGarbageBandwidth) {
  const std::string yaml = replace(CLUSTER, "hbm_bandwidth: 2039GBps", "hbm_bandwidth: fastGBps");
  expect_contains(cluster_error(yaml),
                  {in_cluster(yaml, "hbm_bandwidth: ^fastGBps"), "key 'gpu.hbm_bandwidth'",
                   "expected a bandwidth with a unit", "not a number"});
}

TEST_F(ConfigTest, RejectsTimeWithoutUnit) {
  const std::string yaml = replace(CLUSTER, "latency: 2us", "latency: 2");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "latency: ^2\n"), "key 'nics.latency'",
                                        "expected a time with a unit, e.g. 2us, found '2'"});
  const std::string neg = CLUSTER + "  switch_latency: -1us\n";
  expect_contains(cluster_error(neg), {in_cluster(neg, "switch_latency: ^-1us"),
                                       "key 'fabric.switch_latency'", "must not be negative"});
}

TEST_F(ConfigTest, RejectsFlopRateWithoutUnit) {
  const std::string yaml = replace(CLUSTER, "bf16: 312TFLOPS", "bf16: 312");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "bf16: ^312,"), "key 'gpu.peak_flops.bf16'",
                                        "expected a FLOP rate with a unit, e.g. 312TFLOPS, found '312'"});
}

TEST_F(ConfigTest, RejectsPeakFlopsWithNeitherPrecision) {
  const std::string yaml = replace(CLUSTER, "{bf16: 312TFLOPS, fp16: 312TFLOPS}", "{}");
  expect_contains(cluster_error(yaml), {in_cluster(yaml, "  ^peak_flops"), "key 'gpu.peak_flops'",
                                        "expected at least one of bf16, fp16"});
  const std::string int8 = replace(CLUSTER, "fp16: 312TFLOPS", "int8: 624TFLOPS");
  expect_contains(cluster_error(int8), {in_cluster(int8, "^int8"), "unknown key 'gpu.peak_flops.int8'"});
}

TEST_F(ConfigTest, RejectsEmptyName) {
  const std::string yaml = replace(CLUSTER, "name: test-cluster", "name: ''");
  expect_contains(cluster_error(yaml),
                  {in_cluster(yaml, "name: ^''"), "key 'name'", "expected a non-empty string"});
  const std::string map = replace(CLUSTER, "kind: A100-SXM4-80GB", "kind: {a: 1}");
  expect_contains(cluster_error(map), {in_cluster(map, "kind: ^{a: 1}"), "key 'gpu.kind'",
                                       "expected a non-empty string, found a mapping"});
}

// ---- workload: positive --------------------------------------------------------------------

TEST_F(ConfigTest, GeluDefaults) {
  const WorkloadSpec w = workload(WORKLOAD);
  EXPECT_EQ(w.name, "test-gpt");
  EXPECT_EQ(w.source, workload_path().string());
  EXPECT_EQ(w.model.name, "test-gpt"); // defaults to the file's name
  EXPECT_EQ(w.model.layers, 4);
  EXPECT_EQ(w.model.hidden, 256);
  EXPECT_EQ(w.model.heads, 8);
  EXPECT_EQ(w.model.kv_heads, 8); // defaults to heads
  EXPECT_EQ(w.model.ffn_hidden, 1024);
  EXPECT_EQ(w.model.vocab, 1024);
  EXPECT_EQ(w.model.seq_len, 256);
  EXPECT_EQ(w.model.mlp, stepsim::MlpKind::GELU);
  EXPECT_EQ(w.model.norm, stepsim::NormKind::LAYERNORM);
  EXPECT_EQ(w.model.position, stepsim::PositionEmbedding::LEARNED);
  EXPECT_TRUE(w.model.bias);
  EXPECT_TRUE(w.model.tied_embeddings);
  EXPECT_EQ(w.batch.global_batch, 16);
  EXPECT_EQ(w.batch.micro_batch, 2);
  EXPECT_EQ(w.parallel.tp, 2);
  EXPECT_EQ(w.parallel.pp, 2);
  EXPECT_EQ(w.parallel.dp, 0); // omitted: derived by check_layout
  EXPECT_EQ(w.parallel.schedule, stepsim::Schedule::ONE_F_ONE_B);
  EXPECT_FALSE(w.parallel.sp);
  EXPECT_FALSE(w.parallel.pp_scatter_gather);
  EXPECT_TRUE(w.parallel.tp_grad_overlap);
  EXPECT_EQ(w.parallel.zero_stage, 0);
  EXPECT_EQ(w.precision, stepsim::Precision::BF16);
  EXPECT_DOUBLE_EQ(w.training.dp_bucket.value(), 25.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(w.training.optimizer_bytes_per_param, 12.0);
  EXPECT_EQ(w.training.recompute, stepsim::Recompute::NONE);
  EXPECT_EQ(w.training.cross_entropy, stepsim::CrossEntropy::FP32);
}

TEST_F(ConfigTest, SwigluDefaults) {
  const std::string yaml =
      replace(replace(WORKLOAD, "mlp: gelu", "mlp: swiglu"), "  heads: 8\n", "  heads: 8\n  kv_heads: 2\n");
  const WorkloadSpec w = workload(yaml);
  EXPECT_EQ(w.model.kv_heads, 2);
  EXPECT_EQ(w.model.head_dim(), 32);
  EXPECT_EQ(w.model.mlp, stepsim::MlpKind::SWIGLU);
  EXPECT_EQ(w.model.norm, stepsim::NormKind::RMSNORM);
  EXPECT_EQ(w.model.position, stepsim::PositionEmbedding::ROTARY);
  EXPECT_FALSE(w.model.bias);
  EXPECT_TRUE(w.model.dropout); // dropout stays on unless the file says otherwise
  EXPECT_FALSE(w.model.tied_embeddings);
}

TEST_F(ConfigTest, ExplicitValuesOverrideFamilyDefaults) {
  const std::string yaml =
      replace(WORKLOAD, "  mlp: gelu\n",
              "  name: Custom\n  mlp: swiglu\n  norm: layernorm\n  position_embedding: learned\n"
              "  bias: true\n  tied_embeddings: True\n  dropout: false\n");
  const WorkloadSpec w = workload(yaml + "training:\n  dp_bucket: 40MB\n  optimizer_bytes_per_param: 8\n"
                                         "  recompute: selective\n  cross_entropy: fused\n");
  EXPECT_EQ(w.model.name, "Custom");
  EXPECT_EQ(w.model.norm, stepsim::NormKind::LAYERNORM);
  EXPECT_EQ(w.model.position, stepsim::PositionEmbedding::LEARNED);
  EXPECT_TRUE(w.model.bias);
  EXPECT_TRUE(w.model.tied_embeddings);
  EXPECT_FALSE(w.model.dropout);
  EXPECT_DOUBLE_EQ(w.training.dp_bucket.value(), 40e6);
  EXPECT_DOUBLE_EQ(w.training.optimizer_bytes_per_param, 8.0);
  EXPECT_EQ(w.training.recompute, stepsim::Recompute::SELECTIVE);
  EXPECT_EQ(w.training.cross_entropy, stepsim::CrossEntropy::FUSED);
}

TEST_F(ConfigTest, ReadsAllParallelKeys) {
  const std::string yaml =
      replace(WORKLOAD, "  schedule: 1f1b\n",
              "  dp: 4\n  schedule: gpipe\n  sp: true\n  pp_scatter_gather: true\n  zero_stage: 3\n");
  const WorkloadSpec w = workload(replace(yaml, "precision: bf16", "precision: fp16"));
  EXPECT_EQ(w.parallel.dp, 4);
  EXPECT_EQ(w.parallel.schedule, stepsim::Schedule::GPIPE);
  EXPECT_TRUE(w.parallel.sp);
  EXPECT_TRUE(w.parallel.pp_scatter_gather);
  EXPECT_EQ(w.parallel.zero_stage, 3);
  EXPECT_EQ(w.precision, stepsim::Precision::FP16);
}

TEST_F(ConfigTest, CheckLayoutDerivesDp) {
  const ClusterSpec c = cluster(CLUSTER);
  WorkloadSpec w = workload(WORKLOAD);
  w = stepsim::config::check_layout(c, w).workload;
  EXPECT_EQ(w.parallel.dp, 4); // 16 GPUs / (tp 2 * pp 2)
  EXPECT_EQ(w.num_gpus(), 16);
  EXPECT_EQ(w.micro_batches(), 2); // 16 / (2 * 4)
}

TEST_F(ConfigTest, CheckLayoutAcceptsMatchingExplicitDp) {
  const ClusterSpec c = cluster(CLUSTER);
  WorkloadSpec w = workload(replace(WORKLOAD, "  schedule: 1f1b\n", "  dp: 4\n  schedule: 1f1b\n"));
  w = stepsim::config::check_layout(c, w).workload;
  EXPECT_EQ(w.parallel.dp, 4);
}

// ---- workload: negative, one per rule ------------------------------------------------------

TEST_F(ConfigTest, RejectsHiddenNotDivisibleByHeads) {
  const std::string yaml = replace(WORKLOAD, "heads: 8", "heads: 7");
  expect_contains(workload_error(yaml), {in_workload(yaml, "heads: ^7"), "key 'model.heads'",
                                         "expected a divisor of model.hidden = 256, found 7"});
}

TEST_F(ConfigTest, RejectsHeadsNotDivisibleByKvHeads) {
  const std::string yaml = replace(WORKLOAD, "  heads: 8\n", "  heads: 8\n  kv_heads: 3\n");
  expect_contains(workload_error(yaml), {in_workload(yaml, "kv_heads: ^3"), "key 'model.kv_heads'",
                                         "expected a divisor of model.heads = 8, found 3"});
}

TEST_F(ConfigTest, RejectsUnknownMlpListingAllowedValues) {
  const std::string yaml = replace(WORKLOAD, "mlp: gelu", "mlp: relu");
  expect_contains(workload_error(yaml), {in_workload(yaml, "mlp: ^relu"), "key 'model.mlp'",
                                         "expected one of gelu, swiglu, found 'relu'"});
  const std::string upper = replace(WORKLOAD, "mlp: gelu", "mlp: GELU");
  expect_contains(workload_error(upper), {"found 'GELU'; did you mean 'gelu'?"});
}

struct EnumCase {
  std::string from;     ///< line in WORKLOAD (or appended)
  std::string to;       ///< replacement
  std::string marked;   ///< where the error points, '^' at the column
  std::string key;      ///< dotted key
  std::string expected; ///< "one of ..."
};

class WorkloadEnumTest : public ConfigTest, public ::testing::WithParamInterface<EnumCase> {};

TEST_P(WorkloadEnumTest, RejectsBadValueListingAllowedOnes) {
  const EnumCase& c = GetParam();
  const std::string yaml = replace(WORKLOAD, c.from, c.to);
  expect_contains(workload_error(yaml),
                  {in_workload(yaml, c.marked), "key '" + c.key + "'", "expected one of " + c.expected});
}

INSTANTIATE_TEST_SUITE_P(
    AllEnums, WorkloadEnumTest,
    ::testing::Values(
        EnumCase{"schedule: 1f1b", "schedule: chimera", "schedule: ^chimera", "parallel.schedule",
                 "gpipe, 1f1b, interleaved, zb-h1, zb-h2, dualpipe, dualpipev, found 'chimera'"},
        EnumCase{"precision: bf16", "precision: fp4", "precision: ^fp4", "precision",
                 "bf16, fp16, fp8, found 'fp4'"},
        EnumCase{"precision: bf16\n", "precision: bf16\ntraining:\n  recompute: some\n", "recompute: ^some",
                 "training.recompute", "none, selective, full, found 'some'"},
        EnumCase{"precision: bf16\n", "precision: bf16\ntraining:\n  cross_entropy: fp16\n",
                 "cross_entropy: ^fp16", "training.cross_entropy", "fp32, fused, found 'fp16'"},
        EnumCase{"  mlp: gelu\n", "  mlp: gelu\n  norm: batchnorm\n", "norm: ^batchnorm", "model.norm",
                 "layernorm, rmsnorm, found 'batchnorm'"},
        EnumCase{"  mlp: gelu\n", "  mlp: gelu\n  position_embedding: alibi\n", "position_embedding: ^alibi",
                 "model.position_embedding", "learned, rotary, found 'alibi'"}),
    [](const ::testing::TestParamInfo<EnumCase>& info) {
      std::string name;
      for (char ch : info.param.key) {
        name += std::isalnum(static_cast<unsigned char>(ch)) != 0 ? ch : '_';
      }
      return name;
    });

TEST_F(ConfigTest, RejectsZeroStageOutOfRange) {
  const std::string yaml = replace(WORKLOAD, "  schedule: 1f1b\n", "  schedule: 1f1b\n  zero_stage: 4\n");
  expect_contains(workload_error(yaml), {in_workload(yaml, "zero_stage: ^4"), "key 'parallel.zero_stage'",
                                         "expected an integer in 0..3, found 4"});
}

TEST_F(ConfigTest, RejectsNonPositiveBatch) {
  const std::string yaml = replace(WORKLOAD, "micro_batch: 2", "micro_batch: 0");
  expect_contains(workload_error(yaml), {in_workload(yaml, "micro_batch: ^0"), "key 'batch.micro_batch'",
                                         "expected a positive integer, found 0"});
}

TEST_F(ConfigTest, RejectsNonPositiveModelDimension) {
  const std::string yaml = replace(WORKLOAD, "layers: 4", "layers: -4");
  expect_contains(workload_error(yaml), {in_workload(yaml, "layers: ^-4"), "key 'model.layers'",
                                         "expected a positive integer, found -4"});
}

// Sizes beyond any real model or cluster are refused where they are written (docs/schema.md,
// "Size limits"), before a product of them can overflow or a graph exhaust memory.
TEST_F(ConfigTest, RejectsSizesBeyondTheLimits) {
  const std::string layers = replace(WORKLOAD, "layers: 4", "layers: 4611686018427387904");
  expect_contains(workload_error(layers),
                  {in_workload(layers, "layers: ^4611686018427387904"), "key 'model.layers'",
                   "expected a positive integer up to 100000 (the size limit), found "
                   "4611686018427387904"});
  const std::string seq = replace(WORKLOAD, "seq_len: 256", "seq_len: 9223372036854775807");
  expect_contains(workload_error(seq), {in_workload(seq, "seq_len: ^9223372036854775807"),
                                        "key 'model.seq_len'", "up to 134217728"});
  // Each size within its limit, their product not: tokens per micro-batch, attention scores.
  const std::string tokens =
      replace(replace(WORKLOAD, "seq_len: 256", "seq_len: 134217728"), "micro_batch: 2", "micro_batch: 64");
  expect_contains(workload_error(tokens),
                  {in_workload(tokens, "micro_batch: ^64"), "key 'batch.micro_batch'",
                   "64 x 134217728 tokens per micro-batch, more than the 2^32 accepted"});
  const std::string scores = replace(
      replace(replace(WORKLOAD, "seq_len: 256", "seq_len: 134217728"), "hidden: 256", "hidden: 65536"),
      "heads: 8", "heads: 65536");
  expect_contains(workload_error(scores),
                  {in_workload(scores, "micro_batch: ^2"),
                   "2 x 65536 x 134217728^2 attention scores, more than the 2^62 accepted"});
  const std::string nics = replace(CLUSTER, "count: 8", "count: 100000000");
  expect_contains(cluster_error(nics), {in_cluster(nics, "count: ^100000000"), "key 'nics.count'",
                                        "up to 1024 (the size limit), found 100000000"});
}

// Physical figures beyond any hardware by orders of magnitude are refused (docs/schema.md, "Size
// limits"): a vanishing peak would make every kernel infinite, an enormous latency makes times
// that double precision cannot resolve.
TEST_F(ConfigTest, RejectsFiguresBeyondTheSanityLimits) {
  const std::string tiny = replace(CLUSTER, "bf16: 312TFLOPS", "bf16: 1e-320TFLOPS");
  expect_contains(cluster_error(tiny), {in_cluster(tiny, "bf16: ^1e-320TFLOPS"), "key 'gpu.peak_flops.bf16'",
                                        "expected at least 1GFLOPS (the sanity limit)"});
  const std::string slow = replace(CLUSTER, "latency: 3us", "latency: 1e308us");
  expect_contains(cluster_error(slow), {in_cluster(slow, "latency: ^1e308us"), "key 'nvswitch.latency'",
                                        "expected at most 10s (the sanity limit), found '1e308us'"});
  const std::string big = replace(CLUSTER, "hbm_capacity: 80GiB", "hbm_capacity: 99999999999999999999999GiB");
  expect_contains(cluster_error(big), {"key 'gpu.hbm_capacity'", "expected at most 1PiB (the sanity limit)"});
}

TEST_F(ConfigTest, RejectsNonIntegerDp) {
  const std::string yaml = replace(WORKLOAD, "  schedule: 1f1b\n", "  dp: 2.5\n  schedule: 1f1b\n");
  expect_contains(workload_error(yaml), {in_workload(yaml, "dp: ^2.5"), "key 'parallel.dp'",
                                         "expected a positive integer, found '2.5' (not an integer)"});
  const std::string exp = replace(WORKLOAD, "global_batch: 16", "global_batch: 1e3");
  expect_contains(workload_error(exp),
                  {in_workload(exp, "global_batch: ^1e3"), "key 'batch.global_batch'", "(not an integer)"});
}

// model.mla: multi-head latent attention's latent ranks and head widths; it needs kv_heads =
// heads, no model.head_dim and no linear biases, each refusal naming the key.
TEST_F(ConfigTest, MlaKeysAndTheirRules) {
  const std::string mla =
      "  mla: {q_lora_rank: 64, kv_lora_rank: 32, qk_nope_head_dim: 32, qk_rope_head_dim: 16, "
      "v_head_dim: 32}\n";
  const std::string yaml = replace(WORKLOAD, "  mlp: gelu\n", "  mlp: gelu\n  bias: false\n" + mla);
  const WorkloadSpec w = workload(yaml);
  EXPECT_TRUE(w.model.mla.enabled());
  EXPECT_EQ(w.model.mla.q_lora_rank, 64);
  EXPECT_EQ(w.model.qk_head_dim(), 48);
  EXPECT_EQ(w.model.v_head_dim(), 32);
  const std::string with_bias = replace(WORKLOAD, "  mlp: gelu\n", "  mlp: gelu\n" + mla);
  expect_contains(workload_error(with_bias), {"key 'model.mla'", "biases are not modelled with model.mla"});
  expect_contains(workload_error(replace(yaml, "  heads: 8\n", "  heads: 8\n  kv_heads: 2\n")),
                  {"key 'model.kv_heads'", "expected kv_heads = heads = 8, found 2"});
  expect_contains(workload_error(replace(yaml, "  heads: 8\n", "  heads: 8\n  head_dim: 64\n")),
                  {"key 'model.head_dim'", "cannot be combined with model.mla"});
  expect_contains(workload_error(replace(yaml, "kv_lora_rank: 32, ", "")),
                  {"model.mla.kv_lora_rank", "missing"});
}

TEST_F(ConfigTest, RejectsNonBooleanSp) {
  const std::string yaml = replace(WORKLOAD, "  schedule: 1f1b\n", "  schedule: 1f1b\n  sp: yes\n");
  expect_contains(workload_error(yaml), {in_workload(yaml, "sp: ^yes"), "key 'parallel.sp'",
                                         "expected true or false, found 'yes'"});
}

TEST_F(ConfigTest, RejectsNonBooleanPpScatterGather) {
  const std::string yaml =
      replace(WORKLOAD, "  schedule: 1f1b\n", "  schedule: 1f1b\n  pp_scatter_gather: 1\n");
  expect_contains(workload_error(yaml),
                  {in_workload(yaml, "pp_scatter_gather: ^1"), "key 'parallel.pp_scatter_gather'",
                   "expected true or false, found '1'"});
}

TEST_F(ConfigTest, RejectsNegativeOptimizerBytes) {
  const std::string yaml = WORKLOAD + "training:\n  optimizer_bytes_per_param: -4\n";
  expect_contains(workload_error(yaml),
                  {in_workload(yaml, "optimizer_bytes_per_param: ^-4"),
                   "key 'training.optimizer_bytes_per_param'", "expected a number >= 0, found -4"});
}

TEST_F(ConfigTest, RejectsBucketWithoutUnit) {
  const std::string yaml = WORKLOAD + "training:\n  dp_bucket: 25\n";
  expect_contains(workload_error(yaml), {in_workload(yaml, "dp_bucket: ^25"), "key 'training.dp_bucket'",
                                         "expected a byte size with a unit, e.g. 80GiB, found '25'"});
}

TEST_F(ConfigTest, RejectsTrainingThatIsNotAMapping) {
  const std::string yaml = WORKLOAD + "training: full\n";
  expect_contains(workload_error(yaml),
                  {in_workload(yaml, "training: ^full"), "key 'training'",
                   "expected a mapping with keys dp_bucket, optimizer_bytes_per_param, recompute"});
}

TEST_F(ConfigTest, RejectsUnknownWorkloadKeyWithSuggestion) {
  const std::string yaml = replace(WORKLOAD, "  layers: 4", "  layer: 4");
  expect_contains(workload_error(yaml), {in_workload(yaml, "  ^layer:"), "unknown key 'model.layer'",
                                         "did you mean 'model.layers'?"});
  const std::string top = replace(WORKLOAD, "parallel:", "paralel:");
  expect_contains(workload_error(top),
                  {in_workload(top, "^paralel"), "unknown key 'paralel'", "did you mean 'parallel'?"});
}

TEST_F(ConfigTest, RejectsMissingModelKeyAtParentLocation) {
  const std::string yaml = replace(WORKLOAD, "  vocab: 1024\n", "");
  expect_contains(workload_error(yaml),
                  {in_workload(yaml, "^model:"), "key 'model': missing required key 'model.vocab'"});
  const std::string no_tp = replace(WORKLOAD, "  tp: 2\n", "");
  expect_contains(workload_error(no_tp),
                  {in_workload(no_tp, "^parallel:"), "missing required key 'parallel.tp'"});
}

// ---- overrides -----------------------------------------------------------------------------

TEST_F(ConfigTest, OverridesClusterNodes) {
  const ClusterSpec c = cluster(CLUSTER, {set("cluster.nodes=1")});
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.num_gpus(), 8);
}

TEST_F(ConfigTest, OverridesWorkloadValues) {
  const WorkloadSpec w = workload(WORKLOAD, {set("parallel.pp=4"), set("batch.micro_batch=4"),
                                             set("cluster.nodes=1") /* ignored: addresses the cluster */});
  EXPECT_EQ(w.parallel.pp, 4);
  EXPECT_EQ(w.batch.micro_batch, 4);
}

TEST_F(ConfigTest, ClusterIgnoresWorkloadOverrides) {
  const ClusterSpec c = cluster(CLUSTER, {set("parallel.pp=4"), set("cluster.gpu.hbm_capacity=40GiB")});
  EXPECT_DOUBLE_EQ(c.gpu.hbm_capacity.value(), 40.0 * (1 << 30));
}

TEST_F(ConfigTest, OverrideMaySetKeysTheFileOmitted) {
  const WorkloadSpec w =
      workload(WORKLOAD, {set("parallel.dp=4"), set("training.recompute=full"), set("model.kv_heads=2")});
  EXPECT_EQ(w.parallel.dp, 4);
  EXPECT_EQ(w.training.recompute, stepsim::Recompute::FULL);
  EXPECT_EQ(w.model.kv_heads, 2);
  const ClusterSpec c = cluster(CLUSTER, {set("cluster.fabric.switch_latency=1us")});
  EXPECT_DOUBLE_EQ(c.fabric.switch_latency.value(), 1e-6);
}

TEST_F(ConfigTest, LaterOverrideWins) {
  const ClusterSpec c = cluster(CLUSTER, {set("cluster.nodes=4"), set("cluster.nodes=3")});
  EXPECT_EQ(c.nodes, 3);
}

TEST_F(ConfigTest, OverrideAcceptsFlowMapping) {
  const ClusterSpec c = cluster(CLUSTER, {set("cluster.gpu.peak_flops={bf16: 989TFLOPS}")});
  EXPECT_DOUBLE_EQ(c.gpu.peak_bf16.value(), 989e12);
  EXPECT_DOUBLE_EQ(c.gpu.peak_fp16.value(), 0.0);
}

TEST_F(ConfigTest, BadOverrideValueNamesTheOverride) {
  const std::string msg = cluster_error(CLUSTER, {set("cluster.nodes=abc")});
  EXPECT_EQ(msg.rfind("--set cluster.nodes=abc: key 'nodes': expected a positive integer, found 'abc'", 0),
            0u)
      << msg;
  const std::string pp = workload_error(WORKLOAD, {set("parallel.pp=2.5")});
  EXPECT_EQ(pp.rfind("--set parallel.pp=2.5: key 'parallel.pp': expected a positive integer, found '2.5'", 0),
            0u)
      << pp;
  const std::string bw = cluster_error(CLUSTER, {set("cluster.nics.bandwidth=200")});
  EXPECT_EQ(
      bw.rfind("--set cluster.nics.bandwidth=200: key 'nics.bandwidth': expected a bandwidth with a unit, "
               "e.g. 200Gbps, found '200'",
               0),
      0u)
      << bw;
  const std::string sp = workload_error(WORKLOAD, {set("parallel.sp=maybe")});
  EXPECT_EQ(sp.rfind("--set parallel.sp=maybe: key 'parallel.sp': expected true or false", 0), 0u) << sp;
}

TEST_F(ConfigTest, OverrideCrossCheckNamesTheOverride) {
  const std::string msg = workload_error(WORKLOAD, {set("model.heads=7")});
  EXPECT_EQ(msg.rfind("--set model.heads=7: key 'model.heads': expected a divisor of model.hidden = 256", 0),
            0u)
      << msg;
}

TEST_F(ConfigTest, OverrideToUnknownKeyGetsSuggestion) {
  const std::string msg = workload_error(WORKLOAD, {set("parallel.ppp=4")});
  EXPECT_EQ(msg.rfind("--set parallel.ppp=4: unknown key 'parallel.ppp'; did you mean 'parallel.pp'?", 0), 0u)
      << msg;
  const std::string top = workload_error(WORKLOAD, {set("modle.layers=8")});
  EXPECT_EQ(top.rfind("--set modle.layers=8: unknown key 'modle'; did you mean 'model'?", 0), 0u) << top;
  const std::string cl = cluster_error(CLUSTER, {set("cluster.gpu.hbm_capcity=40GiB")});
  EXPECT_EQ(cl.rfind("--set cluster.gpu.hbm_capcity=40GiB: unknown key 'gpu.hbm_capcity'; "
                     "did you mean 'gpu.hbm_capacity'?",
                     0),
            0u)
      << cl;
}

TEST_F(ConfigTest, OverrideThroughAScalarIsRejected) {
  const std::string msg = workload_error(WORKLOAD, {set("model.layers.count=2")});
  std::string file_location = in_workload(WORKLOAD, "layers: ^4");
  file_location.resize(file_location.size() - 2); // drop ": "
  EXPECT_EQ(msg, "--set model.layers.count=2: key 'model.layers' is '4' at " + file_location +
                     ", not a mapping, so it has no key 'count'");
}

TEST_F(ConfigTest, OverrideWithInvalidYamlIsRejected) {
  const std::string msg = workload_error(WORKLOAD, {set("model.name=[x")});
  EXPECT_EQ(msg.rfind("--set model.name=[x: the value is not valid YAML", 0), 0u) << msg;
}

TEST_F(ConfigTest, OverrideCreatingASectionReportsItsMissingKeys) {
  const std::string no_fabric = replace(CLUSTER, "fabric:\n  kind: fat_tree\n", "");
  const std::string msg = cluster_error(no_fabric, {set("cluster.fabric.nodes_per_leaf=4")});
  EXPECT_EQ(
      msg.rfind("--set cluster.fabric.nodes_per_leaf=4: key 'fabric': missing required key 'fabric.kind'", 0),
      0u)
      << msg;
}

TEST_F(ConfigTest, FileErrorsBesideAnOverrideStillPointIntoTheFile) {
  // gpu.kind comes from the override, gpu.hbm_capacity is still wrong in the file.
  const std::string yaml = replace(CLUSTER, "hbm_capacity: 80GiB", "hbm_capacity: 80");
  expect_contains(cluster_error(yaml, {set("cluster.gpu.kind=H100")}),
                  {in_cluster(yaml, "hbm_capacity: ^80\n"), "key 'gpu.hbm_capacity'"});
  const std::string no_kind = replace(CLUSTER, "  kind: A100-SXM4-80GB\n", "");
  expect_contains(cluster_error(no_kind, {set("cluster.gpu.hbm_capacity=40GiB")}),
                  {in_cluster(no_kind, "^gpu:"), "missing required key 'gpu.kind'"});
}

// ---- layout (ModelError) -------------------------------------------------------------------

TEST_F(ConfigTest, LayoutRejectsGpuCountMismatch) {
  const std::string yaml = replace(WORKLOAD, "  schedule: 1f1b\n", "  dp: 8\n  schedule: 1f1b\n");
  expect_contains(layout_error(CLUSTER, yaml),
                  {workload_path().string() + ": parallel: tp*pp*dp = 2*2*8 = 32 but the cluster has 16 GPUs",
                   cluster_path().string() + ": 2 nodes * 8 GPUs"});
}

TEST_F(ConfigTest, LayoutRejectsUnderivableDp) {
  const std::string yaml = replace(WORKLOAD, "tp: 2", "tp: 3");
  expect_contains(layout_error(CLUSTER, yaml),
                  {workload_path().string() + ": parallel: dp is omitted, but the cluster's 16 GPUs",
                   "not divisible by tp*pp = 3*2 = 6"});
}

TEST_F(ConfigTest, LayoutRejectsHeadsNotDivisibleByTp) {
  const std::string yaml = replace(replace(WORKLOAD, "tp: 2", "tp: 4"), "hidden: 256", "hidden: 264");
  const std::string six_heads = replace(yaml, "heads: 8", "heads: 6");
  expect_contains(layout_error(CLUSTER, six_heads),
                  {workload_path().string() + ": ", "parallel.tp = 4 does not divide model.heads = 6"});
}

TEST_F(ConfigTest, LayoutRejectsKvHeadsNotDivisibleByTp) {
  const std::string yaml =
      replace(replace(WORKLOAD, "tp: 2", "tp: 4"), "  heads: 8\n", "  heads: 8\n  kv_heads: 2\n");
  expect_contains(layout_error(CLUSTER, yaml),
                  {workload_path().string() + ": ", "parallel.tp = 4 does not divide model.kv_heads = 2"});
}

TEST_F(ConfigTest, LayoutRejectsFfnNotDivisibleByTp) {
  const std::string yaml = replace(WORKLOAD, "ffn_hidden: 1024", "ffn_hidden: 1025");
  expect_contains(layout_error(CLUSTER, yaml), {workload_path().string() + ": ",
                                                "parallel.tp = 2 does not divide model.ffn_hidden = 1025"});
}

TEST_F(ConfigTest, LayoutRejectsVocabNotDivisibleByTp) {
  const std::string yaml = replace(WORKLOAD, "vocab: 1024", "vocab: 1025");
  expect_contains(layout_error(CLUSTER, yaml),
                  {workload_path().string() + ": ", "parallel.tp = 2 does not divide model.vocab = 1025"});
}

TEST_F(ConfigTest, LayoutRejectsLayersNotDivisibleByPp) {
  const std::string yaml = replace(WORKLOAD, "layers: 4", "layers: 5");
  expect_contains(layout_error(CLUSTER, yaml),
                  {workload_path().string() + ": ", "parallel.pp = 2 does not divide model.layers = 5"});
}

// DualPipe: even pp, an even number of micro-batches, at least pp per direction; DualPipeV: at
// least 2pp micro-batches and 2pp model chunks; neither under full recomputation (deferred W).
TEST_F(ConfigTest, LayoutChecksDualPipe) {
  const std::string dual = replace(WORKLOAD, "schedule: 1f1b", "schedule: dualpipe"); // m = 2
  expect_contains(layout_error(CLUSTER, dual),
                  {workload_path().string() + ": ",
                   "parallel.schedule = dualpipe needs at least 2*pp = 4 micro-batches per pipeline (pp per "
                   "direction), found 2 = global_batch / (micro_batch*dp)"});
  expect_contains(
      layout_error(CLUSTER, replace(dual, "global_batch: 16", "global_batch: 40")), // m = 5
      {"parallel.schedule = dualpipe needs an even number of micro-batches per pipeline (half fed "
       "from each end), found 5"});
  expect_contains(
      layout_error(CLUSTER, replace(dual, "pp: 2", "pp: 1")),
      {"parallel.schedule = dualpipe needs an even parallel.pp >= 2 (stage i and pp-1-i hold each "
       "other's chunks), found pp = 1"});
  const std::string fits = replace(dual, "global_batch: 16", "global_batch: 32"); // m = 4
  EXPECT_NO_THROW((void)stepsim::config::check_layout(cluster(CLUSTER), workload(fits)));
  const std::string v = replace(fits, "schedule: dualpipe", "schedule: dualpipev");
  EXPECT_NO_THROW((void)stepsim::config::check_layout(cluster(CLUSTER), workload(v)));
  expect_contains(layout_error(CLUSTER, replace(v, "global_batch: 32", "global_batch: 24")), // m = 3
                  {"parallel.schedule = dualpipev needs at least 2*pp = 4 micro-batches per pipeline (the V "
                   "filled twice), found 3"});
  expect_contains(layout_error(CLUSTER, replace(v, "  schedule: dualpipev\n",
                                                "  schedule: dualpipev\n  chunk_layers: [2, 2]\n")),
                  {"parallel.chunk_layers lists 2 model chunks, expected 2*pp (dualpipev's V) = 4"});
  expect_contains(layout_error(CLUSTER, v + "training:\n  recompute: full\n"),
                  {"parallel.schedule = dualpipev cannot be combined with training.recompute = full"});
}

TEST_F(ConfigTest, LayoutRejectsGlobalBatchNotDivisible) {
  const std::string yaml = replace(WORKLOAD, "global_batch: 16", "global_batch: 18");
  expect_contains(
      layout_error(CLUSTER, yaml),
      {workload_path().string() + ": ",
       "batch.global_batch = 18 is not divisible by batch.micro_batch*parallel.dp = 2*4 (dp derived) = 8"});
}

TEST_F(ConfigTest, LayoutRejectsSequenceParallelWithoutTp) {
  const std::string yaml =
      replace(replace(WORKLOAD, "tp: 2", "tp: 1"), "  schedule: 1f1b\n", "  schedule: 1f1b\n  sp: true\n");
  expect_contains(layout_error(CLUSTER, yaml), {workload_path().string() + ": ",
                                                "parallel.sp = true needs parallel.tp > 1, found tp = 1"});
}

TEST_F(ConfigTest, LayoutRejectsSequenceParallelWithIndivisibleSeqLen) {
  const std::string yaml = replace(replace(WORKLOAD, "seq_len: 256", "seq_len: 255"), "  schedule: 1f1b\n",
                                   "  schedule: 1f1b\n  sp: true\n");
  expect_contains(layout_error(CLUSTER, yaml),
                  {workload_path().string() + ": ",
                   "parallel.sp = true needs model.seq_len = 255 divisible by parallel.tp = 2"});
}

/// The lines of `text` (one error or broken rule each).
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (from <= text.size()) {
    const auto to = text.find('\n', from);
    out.push_back(text.substr(from, to == std::string::npos ? std::string::npos : to - from));
    if (to == std::string::npos)
      break;
    from = to + 1;
  }
  return out;
}

// Every broken rule of a layout is reported at once, one per line in the order of the checks,
// each naming the workload file and its keys.
TEST_F(ConfigTest, LayoutReportsTwoBrokenRulesAtOnce) {
  const std::string yaml =
      replace(replace(WORKLOAD, "ffn_hidden: 1024", "ffn_hidden: 1025"), "layers: 4", "layers: 5");
  const auto lines = lines_of(layout_error(CLUSTER, yaml));
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_EQ(
      lines[0],
      workload_path().string() +
          ": parallel.tp = 2 does not divide model.ffn_hidden = 1025 (the MLP is split across TP ranks)");
  EXPECT_EQ(lines[1],
            workload_path().string() +
                ": parallel.pp = 2 does not divide model.layers = 5 (every pipeline stage holds the same "
                "number of layers; parallel.chunk_layers splits them unevenly)");
}

TEST_F(ConfigTest, LayoutReportsThreeBrokenRulesAtOnce) {
  const std::string yaml = replace(
      replace(replace(WORKLOAD, "vocab: 1024", "vocab: 1025"), "global_batch: 16", "global_batch: 18"),
      "  schedule: 1f1b\n", "  schedule: 1f1b\n  sp: true\n");
  const std::string sp_seq = replace(yaml, "seq_len: 256", "seq_len: 255");
  const auto lines = lines_of(layout_error(CLUSTER, sp_seq));
  ASSERT_EQ(lines.size(), 3U);
  const std::string at = workload_path().string() + ": ";
  EXPECT_EQ(lines[0], at + "parallel.tp = 2 does not divide model.vocab = 1025 (the embedding and logits are "
                           "split across TP ranks)");
  EXPECT_EQ(lines[1],
            at + "batch.global_batch = 18 is not divisible by batch.micro_batch*parallel.dp = 2*4 (dp "
                 "derived) = 8");
  EXPECT_EQ(
      lines[2],
      at + "parallel.sp = true needs model.seq_len = 255 divisible by parallel.tp = 2 (seq_len % tp = 1)");
}

// A rule that needs an earlier one to hold is skipped when it does not: with dp underivable the
// batch split (over dp) is not checked, while the rules that do not need dp still are.
TEST_F(ConfigTest, LayoutSkipsRulesOverAnUnknownDp) {
  const std::string yaml =
      replace(replace(WORKLOAD, "tp: 2", "tp: 3"), "global_batch: 16", "global_batch: 18");
  const std::string message = layout_error(CLUSTER, yaml);
  const auto lines = lines_of(message);
  ASSERT_EQ(lines.size(), 5U) << message;
  EXPECT_EQ(lines[0], workload_path().string() + ": parallel: dp is omitted, but the cluster's 16 GPUs (" +
                          cluster_path().string() +
                          ": 2 nodes * 8 GPUs) are not divisible by tp*pp = 3*2 = 6");
  EXPECT_NE(lines[1].find("parallel.tp = 3 does not divide model.heads = 8"), std::string::npos);
  EXPECT_NE(lines[2].find("parallel.tp = 3 does not divide model.kv_heads = 8"), std::string::npos);
  EXPECT_NE(lines[3].find("parallel.tp = 3 does not divide model.ffn_hidden = 1024"), std::string::npos);
  EXPECT_NE(lines[4].find("parallel.tp = 3 does not divide model.vocab = 1024"), std::string::npos);
  EXPECT_EQ(message.find("batch.global_batch"), std::string::npos) << message;
}

// Degrees a spec built in code may hold (a file's reader refuses them): a rule dividing by an
// unusable degree is not run, so the message names the degree alone, and nothing divides by 0.
TEST_F(ConfigTest, LayoutSkipsRulesOverAnUnusableDegree) {
  const ClusterSpec c = cluster(CLUSTER);
  const WorkloadSpec base = workload(WORKLOAD);
  const std::string at = workload_path().string() + ": ";
  WorkloadSpec w = base;
  w.parallel.tp = 0; // with sp, seq_len % tp and every tp split would divide by 0
  w.parallel.sp = true;
  w.batch.global_batch = 0;
  auto lines = lines_of(message_of<ModelError>([&] { (void)stepsim::config::check_layout(c, w); }));
  ASSERT_EQ(lines.size(), 2U);
  EXPECT_EQ(lines[0],
            at + "parallel: tp and pp must be >= 1 and dp >= 1 (or 0 to derive it), found tp = 0, pp = "
                 "2, dp = 0");
  EXPECT_EQ(lines[1], at + "batch: global_batch and micro_batch must be >= 1, found 0 and 2");
  w = base;
  w.parallel.schedule = stepsim::Schedule::INTERLEAVED; // layers % (pp*vp) would divide by 0
  w.parallel.vp = 0;
  w.parallel.ep = 0;
  lines = lines_of(message_of<ModelError>([&] { (void)stepsim::config::check_layout(c, w); }));
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_EQ(lines[0], at + "parallel: cp and ep must be >= 1, found cp = 1, ep = 0");
  w.parallel.ep = 1;
  lines = lines_of(message_of<ModelError>([&] { (void)stepsim::config::check_layout(c, w); }));
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_EQ(lines[0], at + "parallel.vp = 0 must be >= 1");
}

TEST_F(ConfigTest, LayoutRejectsZeroStageOutOfRange) {
  // Out-of-range stages cannot come from a file (rejected on parsing); a spec built in code can.
  const ClusterSpec c = cluster(CLUSTER);
  WorkloadSpec w = workload(WORKLOAD);
  w.parallel.zero_stage = 5;
  expect_contains(
      message_of<ModelError>([&] { (void)stepsim::config::check_layout(c, w); }),
      {workload_path().string() + ": parallel.zero_stage = 5 but only stages 0, 1, 2 and 3 exist"});
}

TEST_F(ConfigTest, LayoutRejectsPrecisionTheGpuLacks) {
  const std::string v100 = replace(CLUSTER, "{bf16: 312TFLOPS, fp16: 312TFLOPS}", "{fp16: 125TFLOPS}");
  expect_contains(layout_error(v100, WORKLOAD),
                  {workload_path().string() + ": precision: bf16 needs gpu.peak_flops.bf16"});
  // fp8 training needs fp8 tensor cores, and bf16 for the rest of the step.
  const std::string fp8 = replace(WORKLOAD, "precision: bf16", "precision: fp8");
  expect_contains(layout_error(CLUSTER, fp8),
                  {workload_path().string() + ": precision: fp8 needs gpu.peak_flops.fp8, which "});
  const std::string fp8_only_fp16 =
      replace(CLUSTER, "{bf16: 312TFLOPS, fp16: 312TFLOPS}", "{fp16: 312TFLOPS, fp8: 624TFLOPS}");
  expect_contains(
      layout_error(fp8_only_fp16, fp8),
      {workload_path().string() + ": precision: fp8 runs the attention core, logits and norms in bf16"});
}

// ---- bundled inputs ------------------------------------------------------------------------

const fs::path SOURCE_DIR = STEPSIM_SOURCE_DIR;

TEST(Bundled, EveryTopologyAndWorkloadLoads) {
  int topologies = 0;
  for (const auto& entry : fs::directory_iterator(SOURCE_DIR / "topologies")) {
    if (entry.path().extension() == ".yaml") {
      EXPECT_NO_THROW((void)stepsim::config::load_cluster(entry.path())) << entry.path();
      ++topologies;
    }
  }
  int workloads = 0;
  for (const auto& entry : fs::directory_iterator(SOURCE_DIR / "workloads")) {
    if (entry.path().extension() == ".yaml") {
      EXPECT_NO_THROW((void)stepsim::config::load_workload(entry.path())) << entry.path();
      ++workloads;
    }
  }
  EXPECT_GE(topologies, 2);
  EXPECT_GE(workloads, 3);
}

TEST(Bundled, DgxA100SuperpodFigures) {
  const ClusterSpec c = stepsim::config::load_cluster(SOURCE_DIR / "topologies/dgx-a100-superpod.yaml");
  EXPECT_EQ(c.name, "dgx-a100-superpod");
  EXPECT_EQ(c.num_gpus(), 1024);
  EXPECT_DOUBLE_EQ(c.gpu.peak_bf16.value(), 312e12);
  EXPECT_DOUBLE_EQ(c.gpu.hbm_capacity.value(), 80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(c.gpu.hbm_bandwidth.value(), 2039e9);
  EXPECT_DOUBLE_EQ(c.gpu.compute_efficiency, 0.70);
  EXPECT_DOUBLE_EQ(c.nvswitch.bandwidth.value(), 300e9);
  EXPECT_EQ(c.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(c.nic.bandwidth.value(), 25e9);
  EXPECT_DOUBLE_EQ(c.nic.efficiency, 0.96);
  EXPECT_DOUBLE_EQ(c.fabric.oversubscription, 1.0);
}

TEST(Bundled, DgxH100Figures) {
  const ClusterSpec c = stepsim::config::load_cluster(SOURCE_DIR / "topologies/dgx-h100.yaml");
  EXPECT_EQ(c.name, "dgx-h100");
  EXPECT_EQ(c.num_gpus(), 256);
  EXPECT_DOUBLE_EQ(c.gpu.peak_bf16.value(), 989e12);
  EXPECT_DOUBLE_EQ(c.gpu.hbm_bandwidth.value(), 3350e9);
  EXPECT_DOUBLE_EQ(c.gpu.compute_efficiency, 0.65);
  EXPECT_DOUBLE_EQ(c.nvswitch.bandwidth.value(), 450e9);
  EXPECT_DOUBLE_EQ(c.nic.bandwidth.value(), 50e9);
}

struct BundledLayout {
  std::string topology;
  std::string workload;
  std::vector<std::string> overrides;
  int dp;
  int64_t micro_batches;
};

class BundledLayoutTest : public ::testing::TestWithParam<BundledLayout> {};

TEST_P(BundledLayoutTest, FitsTheCluster) {
  const BundledLayout& p = GetParam();
  std::vector<Override> overrides;
  for (const auto& text : p.overrides) {
    overrides.push_back(stepsim::config::parse_override(text));
  }
  const ClusterSpec c = stepsim::config::load_cluster(SOURCE_DIR / "topologies" / p.topology, overrides);
  WorkloadSpec w = stepsim::config::load_workload(SOURCE_DIR / "workloads" / p.workload, overrides);
  ASSERT_NO_THROW(w = stepsim::config::check_layout(c, w).workload);
  EXPECT_EQ(w.parallel.dp, p.dp);
  EXPECT_EQ(w.micro_batches(), p.micro_batches);
}

INSTANTIATE_TEST_SUITE_P(
    Shipped, BundledLayoutTest,
    ::testing::Values(BundledLayout{"dgx-a100-superpod.yaml", "gpt3-175b.yaml", {}, 16, 96},
                      BundledLayout{"dgx-h100.yaml", "gpt3-175b.yaml", {}, 4, 384},
                      BundledLayout{"dgx-a100-superpod.yaml", "llama2-70b.yaml", {}, 32, 32},
                      BundledLayout{"dgx-h100.yaml", "llama2-70b.yaml", {}, 8, 128},
                      BundledLayout{"dgx-a100-superpod.yaml", "tiny-gpt.yaml", {"cluster.nodes=1"}, 2, 4},
                      BundledLayout{"dgx-h100.yaml", "tiny-gpt.yaml", {"cluster.nodes=1"}, 2, 4}),
    [](const ::testing::TestParamInfo<BundledLayout>& info) {
      std::string name = info.param.workload.substr(0, info.param.workload.find('.')) + "_on_" +
                         info.param.topology.substr(0, info.param.topology.find('.'));
      for (char& ch : name) {
        if (std::isalnum(static_cast<unsigned char>(ch)) == 0) {
          ch = '_';
        }
      }
      return name;
    });

TEST(Bundled, ModelFamiliesGetTheirDefaults) {
  const WorkloadSpec gpt = stepsim::config::load_workload(SOURCE_DIR / "workloads/gpt3-175b.yaml");
  EXPECT_EQ(gpt.model.name, "GPT-3 175B");
  EXPECT_EQ(gpt.model.kv_heads, 96);
  EXPECT_EQ(gpt.model.position, stepsim::PositionEmbedding::LEARNED);
  EXPECT_TRUE(gpt.model.tied_embeddings);
  const WorkloadSpec llama = stepsim::config::load_workload(SOURCE_DIR / "workloads/llama2-70b.yaml");
  EXPECT_EQ(llama.model.kv_heads, 8);
  EXPECT_EQ(llama.model.norm, stepsim::NormKind::RMSNORM);
  EXPECT_EQ(llama.model.position, stepsim::PositionEmbedding::ROTARY);
  EXPECT_FALSE(llama.model.bias);
  EXPECT_FALSE(llama.model.tied_embeddings);
  const WorkloadSpec tiny = stepsim::config::load_workload(SOURCE_DIR / "workloads/tiny-gpt.yaml");
  EXPECT_EQ(tiny.model.name, "tiny-gpt");
}

TEST(Bundled, TinyGptDoesNotFitAFullSuperpod) {
  const ClusterSpec c = stepsim::config::load_cluster(SOURCE_DIR / "topologies/dgx-a100-superpod.yaml");
  WorkloadSpec w = stepsim::config::load_workload(SOURCE_DIR / "workloads/tiny-gpt.yaml");
  // 1024 GPUs / (2*2) = dp 256, and 16 sequences cannot be split into 256 replicas of 2.
  EXPECT_THROW((void)stepsim::config::check_layout(c, w), ModelError);
}

// ---- every error at once ------------------------------------------------------------------

// A cluster with three unrelated errors (a zero node count on line 2, an efficiency above 1 in
// gpu, an unknown fabric key) is refused with one ConfigError of exactly three lines, in the
// order of the file, each the message that error alone gives.
TEST_F(ConfigTest, ClusterReportsEveryError) {
  std::string bad = replace(CLUSTER, "nodes: 2\n", "nodes: 0\n");
  bad = replace(bad, "compute_efficiency: 0.70", "compute_efficiency: 1.5");
  bad += "  nodes_per_lef: 4\n";
  const std::vector<std::string> lines = lines_of(cluster_error(bad));
  ASSERT_EQ(lines.size(), 3u) << cluster_error(bad);
  EXPECT_EQ(lines[0], in_cluster(bad, "nodes: ^0") + "key 'nodes': expected a positive integer, found 0");
  EXPECT_EQ(
      lines[1],
      in_cluster(bad, "compute_efficiency: ^1.5") +
          "key 'gpu.compute_efficiency': expected a number in [0.001, 1] (the sanity limit), found 1.5");
  EXPECT_EQ(lines[2], in_cluster(bad, "^nodes_per_lef") +
                          "unknown key 'fabric.nodes_per_lef'; did you mean 'fabric.nodes_per_leaf'?");
  // Each alone is the whole message.
  EXPECT_EQ(
      cluster_error(replace(CLUSTER, "compute_efficiency: 0.70", "compute_efficiency: 1.5")),
      in_cluster(CLUSTER, "compute_efficiency: ^0.70") +
          "key 'gpu.compute_efficiency': expected a number in [0.001, 1] (the sanity limit), found 1.5");
}

// A workload with errors in three mappings (model, parallel, training) and a --set reports all
// three file errors and the override's, the override located as "--set PATH=VALUE".
TEST_F(ConfigTest, WorkloadReportsEveryError) {
  std::string bad = replace(WORKLOAD, "heads: 8", "heads: eight");
  bad = replace(bad, "schedule: 1f1b", "schedule: 1F1B");
  bad += "training:\n  recompute: sometimes\n";
  const std::string msg = workload_error(bad, {stepsim::config::parse_override("batch.micro_batch=0")});
  const std::vector<std::string> lines = lines_of(msg);
  ASSERT_EQ(lines.size(), 4u) << msg;
  EXPECT_EQ(lines[0], in_workload(bad, "heads: ^eight") +
                          "key 'model.heads': expected a positive integer, found 'eight' (not an integer)");
  EXPECT_EQ(lines[1],
            "--set batch.micro_batch=0: key 'batch.micro_batch': expected a positive integer, found 0");
  EXPECT_EQ(lines[2],
            in_workload(bad, "schedule: ^1F1B") +
                "key 'parallel.schedule': expected one of gpipe, 1f1b, interleaved, zb-h1, zb-h2, dualpipe, "
                "dualpipev, found '1F1B'; did you mean '1f1b'?");
  EXPECT_EQ(lines[3],
            in_workload(bad, "recompute: ^sometimes") +
                "key 'training.recompute': expected one of none, selective, full, found 'sometimes'");
}

// Two unknown keys in one mapping and a key given twice: all three reported.
TEST_F(ConfigTest, MappingReportsEveryUnknownKey) {
  const std::string bad =
      replace(CLUSTER, "  kind: A100-SXM4-80GB\n",
              "  kind: A100-SXM4-80GB\n  colour: green\n  hbm_capcity: 80GiB\n  kind: A100\n");
  const std::vector<std::string> lines = lines_of(cluster_error(bad));
  ASSERT_EQ(lines.size(), 3u) << cluster_error(bad);
  EXPECT_NE(lines[0].find(in_cluster(bad, "^colour") + "unknown key 'gpu.colour'"), std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[1], in_cluster(bad, "^hbm_capcity") +
                          "unknown key 'gpu.hbm_capcity'; did you mean 'gpu.hbm_capacity'?");
  EXPECT_EQ(lines[2], in_cluster(bad, "^kind: A100\n") + "key 'gpu.kind' is given twice (first at " +
                          cluster_path().string() + ":" + line_col(bad, "^kind: A100-") + ")");
}

// A key that a bad key leaves unset is not checked against it: a non-integer model.hidden gives
// that one error, not also "heads do not divide hidden".
TEST_F(ConfigTest, NoFollowOnErrors) {
  const std::string bad = replace(WORKLOAD, "hidden: 256", "hidden: wide");
  const std::string msg = workload_error(bad);
  EXPECT_EQ(msg, in_workload(bad, "hidden: ^wide") +
                     "key 'model.hidden': expected a positive integer, found 'wide' (not an integer)");
}

// ---- one set of defaults -------------------------------------------------------------------

// The optional keys a file omits take the structs' initialisers: a minimal file loads to the
// values a default-constructed spec holds (1 GiB runtime overhead, fragmentation 1.10, 0.5 us
// per switch, dp 0 = derived, ...).
TEST_F(ConfigTest, OmittedKeysTakeTheStructDefaults) {
  const ClusterSpec c = cluster(CLUSTER);
  const stepsim::GpuSpec g;
  EXPECT_EQ(c.gpu.runtime_overhead.value(), 1024.0 * 1024 * 1024);
  EXPECT_EQ(g.runtime_overhead.value(), c.gpu.runtime_overhead.value());
  EXPECT_EQ(c.gpu.allocator_fragmentation, 1.10);
  EXPECT_EQ(g.allocator_fragmentation, c.gpu.allocator_fragmentation);
  EXPECT_EQ(g.overlap_slowdown, c.gpu.overlap_slowdown);
  EXPECT_EQ(g.gemm_efficiency, c.gpu.gemm_efficiency);
  EXPECT_EQ(g.launch_overhead.value(), c.gpu.launch_overhead.value());
  const stepsim::FabricSpec f;
  EXPECT_EQ(c.fabric.switch_latency.value(), 0.5e-6);
  EXPECT_EQ(f.switch_latency.value(), c.fabric.switch_latency.value());
  EXPECT_EQ(f.nodes_per_leaf, c.fabric.nodes_per_leaf);
  EXPECT_EQ(f.oversubscription, c.fabric.oversubscription);
  EXPECT_EQ(f.tiers, c.fabric.tiers);

  const WorkloadSpec w = workload(WORKLOAD);
  const stepsim::ParallelSpec p;
  EXPECT_EQ(w.parallel.dp, 0);
  EXPECT_EQ(p.dp, 0);
  EXPECT_EQ(p.vp, w.parallel.vp);
  EXPECT_EQ(p.sp, w.parallel.sp);
  EXPECT_EQ(p.zero_stage, w.parallel.zero_stage);
  EXPECT_EQ(p.cp, w.parallel.cp);
  EXPECT_EQ(p.tp_grad_overlap, w.parallel.tp_grad_overlap);
  const stepsim::TrainingSpec t;
  EXPECT_EQ(t.dp_bucket.value(), w.training.dp_bucket.value());
  EXPECT_EQ(t.optimizer_bytes_per_param, w.training.optimizer_bytes_per_param);
  EXPECT_EQ(t.recompute, w.training.recompute);
  EXPECT_EQ(t.recompute_modules, w.training.recompute_modules);
  EXPECT_EQ(t.zero3_prefetch, w.training.zero3_prefetch);
}

// ---- the layout ----------------------------------------------------------------------------

// check_layout leaves its argument alone and returns the checked workload with dp derived:
// 16 GPUs / (tp 2 * pp 2) = 4.
TEST_F(ConfigTest, CheckLayoutReturnsTheDerivedLayout) {
  const ClusterSpec c = cluster(CLUSTER);
  const WorkloadSpec w = workload(WORKLOAD);
  const stepsim::config::Layout layout = stepsim::config::check_layout(c, w);
  EXPECT_EQ(w.parallel.dp, 0);
  EXPECT_EQ(layout.workload.parallel.dp, 4);
  EXPECT_TRUE(layout.dp_derived);
  EXPECT_EQ(layout.workload.micro_batches(), 2); // 16 / (2 * 4)
  const WorkloadSpec given = workload(WORKLOAD, {stepsim::config::parse_override("parallel.dp=4")});
  EXPECT_FALSE(stepsim::config::check_layout(c, given).dp_derived);
}

// ---- the schema declaration ----------------------------------------------------------------

namespace schema = stepsim::config::schema;

// docs/schema.md's key tables are the declaration's (STEPSIM_WRITE_SCHEMA_DOC=1 rewrites them).
TEST(SchemaDoc, TablesMatchTheDeclaration) {
  const fs::path doc = SOURCE_DIR / "docs" / "schema.md";
  std::ifstream in(doc);
  ASSERT_TRUE(in) << doc;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string regenerated =
      schema::with_table(schema::with_table(text, schema::File::CLUSTER), schema::File::WORKLOAD);
  if (const char* write = std::getenv("STEPSIM_WRITE_SCHEMA_DOC");
      write != nullptr && std::string(write) == "1") {
    std::ofstream(doc) << regenerated;
    GTEST_SKIP() << "rewrote " << doc;
  }
  EXPECT_TRUE(text == regenerated) << "docs/schema.md's key tables differ from sim/config/schema.cpp; run "
                                      "STEPSIM_WRITE_SCHEMA_DOC=1 build/tests/config/config_test "
                                      "--gtest_filter='SchemaDoc.*'";
}

// Each mapping's keys in declaration order; a path names exactly one key; an undeclared mapping
// is a programming error.
TEST(SchemaDoc, ChildrenOfEachMapping) {
  EXPECT_EQ(schema::children(schema::File::CLUSTER, "nvswitch.nvls"),
            (std::vector<std::string_view>{"efficiency", "latency"}));
  EXPECT_EQ(schema::children(schema::File::CLUSTER, "fabric.links[]"),
            (std::vector<std::string_view>{"between", "bandwidth", "latency"}));
  EXPECT_EQ(schema::children(schema::File::WORKLOAD, "")[0], "name");
  EXPECT_THROW((void)schema::children(schema::File::WORKLOAD, "model.nope"), std::logic_error);
  for (const schema::File file : {schema::File::CLUSTER, schema::File::WORKLOAD}) {
    std::set<std::string_view> seen;
    for (const schema::Key& k : schema::keys(file)) {
      EXPECT_TRUE(seen.insert(k.path).second) << "declared twice: " << k.path;
      EXPECT_FALSE(schema::type_column(k).empty() || schema::presence_column(k).empty() || k.meaning.empty())
          << k.path;
    }
  }
}

// The unknown-key check takes its candidates from the declaration: an unknown key of a mapping
// with no close match lists the declared keys in order.
TEST_F(ConfigTest, UnknownKeyListsTheDeclaredKeys) {
  const std::string bad = WORKLOAD + "collectives: {zzzzzz: ring}\n";
  std::string keys;
  for (std::string_view k : schema::children(schema::File::WORKLOAD, "collectives"))
    keys += (keys.empty() ? "" : ", ") + std::string(k);
  EXPECT_EQ(workload_error(bad),
            in_workload(bad, "{^zzzzzz") + "unknown key 'collectives.zzzzzz'; expected one of " + keys);
  EXPECT_EQ(keys, "tp, pp, dp, ep, cp");
}

} // namespace
