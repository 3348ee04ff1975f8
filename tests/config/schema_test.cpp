// Tests for the typed declaration of config/schema.cpp: every declared default is the spec
// struct's initialiser, every declared range and enum is what the readers enforce, and the
// document's columns come from the typed fields.

#include "config/config.hpp"
#include "config/schema.hpp"
#include "config_inputs.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace schema = stepsim::config::schema;
using schema::File;
using schema::Kind;
using stepsim::ClusterSpec;
using stepsim::WorkloadSpec;
using stepsim::config::Override;

using config_inputs::CLUSTER;

using config_inputs::WORKLOAD;

/// A graph fabric with one link, whose latency is `latency` (or absent when empty).
std::string graph_cluster(const std::string& latency) {
  std::string text = CLUSTER;
  text.replace(text.find("fabric:\n  kind: fat_tree\n"), std::string("fabric:\n  kind: fat_tree\n").size(),
               "fabric:\n  kind: graph\n  switches: [s0, s1]\n  links:\n    - {between: [s0, s1], bandwidth: "
               "100GBps" +
                   (latency.empty() ? std::string() : ", latency: " + latency) +
                   "}\n  attach:\n    - {nodes: [0, 1], switch: s0}\n");
  return text;
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
template <class E> std::string num(E e) {
  return std::to_string(static_cast<long long>(e));
}

/// The overrides a key needs around it to be read at all: the mapping it lies in complete enough
/// (MoE needs its experts, MLA its ranks and no biases, a pod spine three tiers).
std::vector<Override> context(File file, std::string_view path) {
  std::vector<Override> out;
  const auto add = [&](const std::string& p, const std::string& v) {
    if (p != path)
      out.push_back({(file == File::CLUSTER ? "cluster." : "") + p, v});
  };
  if (path.starts_with("model.moe."))
    add("model.moe.experts", "8");
  if (path.starts_with("model.mla.")) {
    add("model.mla.kv_lora_rank", "64");
    add("model.mla.qk_nope_head_dim", "16");
    add("model.mla.v_head_dim", "16");
    add("model.bias", "false");
  }
  if (path == "fabric.leaves_per_pod" || path == "fabric.spine_oversubscription") {
    add("fabric.tiers", "3");
    add("fabric.leaves_per_pod", "1");
  }
  if (path.starts_with("degraded.random_gpus.")) {
    add("degraded.random_gpus.share", "0.5");
    add("degraded.random_gpus.speed", "0.5");
  }
  if (path == "training.recompute_modules")
    add("training.recompute", "selective");
  return out;
}

/// Each declared default's spec field, as text that compares exactly.
const std::map<std::string_view, std::function<std::string(const ClusterSpec&)>, std::less<>> CLUSTER_FIELDS =
    {
        {"gpu.runtime_overhead", [](const ClusterSpec& c) { return num(c.gpu.runtime_overhead.value()); }},
        {"gpu.allocator_fragmentation",
         [](const ClusterSpec& c) { return num(c.gpu.allocator_fragmentation); }},
        {"gpu.profile", [](const ClusterSpec& c) { return c.gpu.profile; }},
        {"gpu.gemm_efficiency", [](const ClusterSpec& c) { return num(c.gpu.gemm_efficiency); }},
        {"gpu.memory_bound_efficiency",
         [](const ClusterSpec& c) { return num(c.gpu.memory_bound_efficiency); }},
        {"gpu.pass_overhead", [](const ClusterSpec& c) { return num(c.gpu.pass_overhead.value()); }},
        {"gpu.kernel_cv", [](const ClusterSpec& c) { return num(c.gpu.kernel_cv); }},
        {"gpu.list_collective_per_rank",
         [](const ClusterSpec& c) { return num(c.gpu.list_collective_per_rank.value()); }},
        {"degraded.random_gpus.seed",
         [](const ClusterSpec& c) {
           return num(static_cast<double>(
               c.degraded.random_gpus.value_or(stepsim::DegradedSpec::RandomGpus{}).seed));
         }},
        {"fabric.nodes_per_leaf", [](const ClusterSpec& c) { return num(c.fabric.nodes_per_leaf); }},
        {"fabric.oversubscription", [](const ClusterSpec& c) { return num(c.fabric.oversubscription); }},
        {"fabric.switch_latency", [](const ClusterSpec& c) { return num(c.fabric.switch_latency.value()); }},
        {"fabric.tiers", [](const ClusterSpec& c) { return num(c.fabric.tiers); }},
        {"fabric.spine_oversubscription",
         [](const ClusterSpec& c) { return num(c.fabric.spine_oversubscription); }},
        {"fabric.links[].latency",
         [](const ClusterSpec& c) {
           return num((c.fabric.links.empty() ? stepsim::FabricSpec::GraphLink{} : c.fabric.links[0])
                          .latency.value());
         }},
};

const std::map<std::string_view, std::function<std::string(const WorkloadSpec&)>, std::less<>>
    WORKLOAD_FIELDS = {
        {"model.mla.q_lora_rank", [](const WorkloadSpec& w) { return num(w.model.mla.q_lora_rank); }},
        {"model.mla.qk_rope_head_dim",
         [](const WorkloadSpec& w) { return num(w.model.mla.qk_rope_head_dim); }},
        {"model.dropout", [](const WorkloadSpec& w) { return num(w.model.dropout); }},
        {"model.moe.top_k", [](const WorkloadSpec& w) { return num(w.model.moe.top_k); }},
        {"model.moe.shared_experts", [](const WorkloadSpec& w) { return num(w.model.moe.shared_experts); }},
        {"model.moe.capacity_factor", [](const WorkloadSpec& w) { return num(w.model.moe.capacity_factor); }},
        {"model.moe.moe_layer_freq", [](const WorkloadSpec& w) { return num(w.model.moe.layer_freq); }},
        {"model.moe.first_dense_layers",
         [](const WorkloadSpec& w) { return num(w.model.moe.first_dense_layers); }},
        {"model.moe.routing.distribution",
         [](const WorkloadSpec& w) { return num(w.model.moe.routing.distribution); }},
        {"model.moe.routing.zipf_exponent",
         [](const WorkloadSpec& w) { return num(w.model.moe.routing.zipf_exponent); }},
        {"model.moe.routing.seed", [](const WorkloadSpec& w) { return num(w.model.moe.routing.seed); }},
        {"model.moe.routing.groups", [](const WorkloadSpec& w) { return num(w.model.moe.routing.groups); }},
        {"model.moe.routing.group_top_k",
         [](const WorkloadSpec& w) { return num(w.model.moe.routing.group_top_k); }},
        {"model.sliding_window", [](const WorkloadSpec& w) { return num(w.model.sliding_window); }},
        {"model.full_attention_every",
         [](const WorkloadSpec& w) { return num(w.model.full_attention_every); }},
        {"model.mtp_layers", [](const WorkloadSpec& w) { return num(w.model.mtp_layers); }},
        {"parallel.vp", [](const WorkloadSpec& w) { return num(w.parallel.vp); }},
        {"parallel.sp", [](const WorkloadSpec& w) { return num(w.parallel.sp); }},
        {"parallel.pp_scatter_gather",
         [](const WorkloadSpec& w) { return num(w.parallel.pp_scatter_gather); }},
        {"parallel.pp_p2p_blocking", [](const WorkloadSpec& w) { return num(w.parallel.pp_p2p_blocking); }},
        {"parallel.tp_grad_overlap", [](const WorkloadSpec& w) { return num(w.parallel.tp_grad_overlap); }},
        {"parallel.tp_comm_overlap", [](const WorkloadSpec& w) { return num(w.parallel.tp_comm_overlap); }},
        {"parallel.zero_stage", [](const WorkloadSpec& w) { return num(w.parallel.zero_stage); }},
        {"parallel.cp", [](const WorkloadSpec& w) { return num(w.parallel.cp); }},
        {"parallel.ep", [](const WorkloadSpec& w) { return num(w.parallel.ep); }},
        {"parallel.ep_overlap", [](const WorkloadSpec& w) { return num(w.parallel.ep_overlap); }},
        {"parallel.ep_dispatch", [](const WorkloadSpec& w) { return num(w.parallel.ep_dispatch); }},
        {"training.dp_bucket", [](const WorkloadSpec& w) { return num(w.training.dp_bucket.value()); }},
        {"training.optimizer_bytes_per_param",
         [](const WorkloadSpec& w) { return num(w.training.optimizer_bytes_per_param); }},
        {"training.recompute", [](const WorkloadSpec& w) { return num(w.training.recompute); }},
        {"training.recompute_modules",
         [](const WorkloadSpec& w) {
           const auto& m = w.training.recompute_modules;
           return num(m.core_attn) + num(m.layernorm) + num(m.mlp) + num(m.moe_act) + num(m.mla_up_proj);
         }},
        {"training.flash_attention", [](const WorkloadSpec& w) { return num(w.training.flash_attention); }},
        {"training.attention_kernel", [](const WorkloadSpec& w) { return num(w.training.attention_kernel); }},
        {"training.zero3_prefetch", [](const WorkloadSpec& w) { return num(w.training.zero3_prefetch); }},
        {"training.zero3_fetch", [](const WorkloadSpec& w) { return num(w.training.zero3_fetch); }},
        {"training.reshard_after_forward",
         [](const WorkloadSpec& w) { return num(w.training.reshard_after_forward); }},
        {"training.overlap_param_gather",
         [](const WorkloadSpec& w) { return num(w.training.overlap_param_gather); }},
        {"training.grad_reduce_in_fp32",
         [](const WorkloadSpec& w) { return num(w.training.grad_reduce_in_fp32); }},
        {"training.grad_accumulation",
         [](const WorkloadSpec& w) { return num(w.training.grad_accumulation); }},
        {"training.cross_entropy", [](const WorkloadSpec& w) { return num(w.training.cross_entropy); }},
        {"training.pointwise", [](const WorkloadSpec& w) { return num(w.training.pointwise); }},
        {"training.fp8_params", [](const WorkloadSpec& w) { return num(w.training.fp8_params); }},
        {"training.fp32_shards", [](const WorkloadSpec& w) { return num(w.training.fp32_shards); }},
        {"training.expandable_segments",
         [](const WorkloadSpec& w) { return num(w.training.expandable_segments); }},
        {"training.fp8_weight_cache", [](const WorkloadSpec& w) { return num(w.training.fp8_weight_cache); }},
        {"training.fp8_scaling", [](const WorkloadSpec& w) { return num(w.training.fp8_scaling); }},
        {"training.fused_projections",
         [](const WorkloadSpec& w) { return num(w.training.fused_projections); }},
        {"training.fp8_all_gather", [](const WorkloadSpec& w) { return num(w.training.fp8_all_gather); }},
        {"training.offload_layers", [](const WorkloadSpec& w) { return num(w.training.offload_layers); }},
        {"training.recompute_layers", [](const WorkloadSpec& w) { return num(w.training.recompute_layers); }},
        {"training.variability.seed", [](const WorkloadSpec& w) { return num(w.training.variability.seed); }},
        {"collectives.tp", [](const WorkloadSpec& w) { return num(w.collectives.tp); }},
        {"collectives.pp", [](const WorkloadSpec& w) { return num(w.collectives.pp); }},
        {"collectives.dp", [](const WorkloadSpec& w) { return num(w.collectives.dp); }},
        {"collectives.ep", [](const WorkloadSpec& w) { return num(w.collectives.ep); }},
        {"collectives.cp", [](const WorkloadSpec& w) { return num(w.collectives.cp); }},
};

class SchemaTest : public ::testing::Test {
protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("stepsim_schema_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
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
  ClusterSpec cluster(const std::string& text, const std::vector<Override>& overrides) const {
    return stepsim::config::load_cluster(write("cluster.yaml", text), overrides);
  }
  WorkloadSpec workload(const std::vector<Override>& overrides) const {
    return stepsim::config::load_workload(write("workload.yaml", WORKLOAD), overrides);
  }
  /// The ConfigError `file`'s base fixture gives with `path` set to `value`, "" when none.
  std::string error_with(File file, std::string_view path, const std::string& value) const {
    std::vector<Override> overrides = context(file, path);
    overrides.push_back({(file == File::CLUSTER ? "cluster." : "") + std::string(path), value});
    try {
      if (file == File::CLUSTER)
        (void)cluster(CLUSTER, overrides);
      else
        (void)workload(overrides);
    } catch (const stepsim::ConfigError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

// A declared default, read as the file would give it, is the spec struct's initialiser: the
// document (rendered from the declaration) and a spec built in code start from the same values.
// Every key with a default is compared, and none is left out.
TEST_F(SchemaTest, DefaultsAreTheSpecInitialisers) {
  int compared = 0;
  for (const schema::Key& k : schema::keys(File::CLUSTER)) {
    if (k.dflt.empty())
      continue;
    const auto field = CLUSTER_FIELDS.find(k.path);
    ASSERT_NE(field, CLUSTER_FIELDS.end()) << "no spec field named for the default of " << k.path;
    const ClusterSpec read = k.path == "fabric.links[].latency"
                                 ? cluster(graph_cluster(std::string(k.dflt)), {})
                                 : cluster(CLUSTER, [&] {
                                     auto o = context(File::CLUSTER, k.path);
                                     o.push_back({"cluster." + std::string(k.path), std::string(k.dflt)});
                                     return o;
                                   }());
    EXPECT_EQ(field->second(read), field->second(ClusterSpec{})) << k.path << ": " << k.dflt;
    ++compared;
  }
  for (const schema::Key& k : schema::keys(File::WORKLOAD)) {
    if (k.dflt.empty())
      continue;
    const auto field = WORKLOAD_FIELDS.find(k.path);
    ASSERT_NE(field, WORKLOAD_FIELDS.end()) << "no spec field named for the default of " << k.path;
    auto overrides = context(File::WORKLOAD, k.path);
    overrides.push_back({std::string(k.path), std::string(k.dflt)});
    EXPECT_EQ(field->second(workload(overrides)), field->second(WorkloadSpec{})) << k.path << ": " << k.dflt;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(CLUSTER_FIELDS.size() + WORKLOAD_FIELDS.size()))
      << "a field above names a key that declares no default";
  // The comparison can fail: a value other than the initialiser reads differently.
  EXPECT_NE(WORKLOAD_FIELDS.at("parallel.zero_stage")(workload({{"parallel.zero_stage", "1"}})),
            WORKLOAD_FIELDS.at("parallel.zero_stage")(WorkloadSpec{}));
}

/// Values just outside each declared bound of `value`'s range, with the text the message must
/// hold: the range's expected phrase for the key's own bounds, the limit for a limit.
std::vector<std::pair<std::string, std::string>> outside(const schema::Value& value) {
  const schema::Range& r = value.range;
  const std::string phrase = schema::expected(value);
  std::vector<std::pair<std::string, std::string>> out;
  switch (value.kind) {
  case Kind::INTEGER:
    if (r.min)
      out.emplace_back(num(r.min->value - 1), "expected " + phrase + ", found ");
    if (r.max)
      out.emplace_back(num(r.max->value + 1), "expected " + phrase + ", found ");
    if (r.limit_max)
      out.emplace_back(num(r.limit_max->value + 1), "(the size limit), found " + num(r.limit_max->value + 1));
    break;
  case Kind::NUMBER:
    if (r.min)
      out.emplace_back(num(r.min->value - 0.5), "expected " + phrase + ", found ");
    if (r.max)
      out.emplace_back(num(r.max->value + 0.5), "expected " + phrase + ", found ");
    if (r.limit_max)
      out.emplace_back(num(r.limit_max->value * 2),
                       "expected at most " + std::string(r.limit_max->text) + " (the sanity limit)");
    break;
  case Kind::BYTES:
    if (r.min)
      out.emplace_back("0B", "expected " + phrase + ", found '0B'");
    out.emplace_back("2048TiB", "expected at most 1PiB (the sanity limit), found '2048TiB'");
    break;
  case Kind::BANDWIDTH:
    out.emplace_back("0.5bps", "expected " + phrase + ", found '0.5bps'");
    out.emplace_back("2000TBps", "expected at most 1PBps (the sanity limit), found '2000TBps'");
    break;
  case Kind::DURATION:
    out.emplace_back("11s", "expected at most 10s (the sanity limit), found '11s'");
    break;
  case Kind::FLOPS:
    out.emplace_back("0FLOPS", "expected " + phrase + ", found '0FLOPS'");
    out.emplace_back("0.5GFLOPS", "expected at least 1GFLOPS (the sanity limit), found '0.5GFLOPS'");
    out.emplace_back("2e21FLOPS", "expected at most 1e21FLOPS (the sanity limit), found '2e21FLOPS'");
    break;
  case Kind::ENUM:
    out.emplace_back("zzzz", "expected " + phrase + ", found 'zzzz'");
    break;
  default:
    break;
  }
  return out;
}

// Every declared bound and enum is what the reader enforces: a value just outside it is refused
// with the key and the declared range (or limit) in the message, and a bound itself is not
// refused for its range.
TEST_F(SchemaTest, EveryDeclaredRangeIsEnforced) {
  int checked = 0;
  for (const File file : {File::CLUSTER, File::WORKLOAD}) {
    for (const schema::Key& k : schema::keys(file)) {
      if (std::string_view(k.path).find("[]") != std::string_view::npos)
        continue; // list items: not addressable by --set
      for (const auto& [value, wanted] : outside(k.value)) {
        const std::string message = error_with(file, k.path, value);
        EXPECT_NE(message.find("key '" + std::string(k.path) + "': expected"), std::string::npos)
            << k.path << " = " << value << " was not refused: " << message;
        EXPECT_NE(message.find(wanted), std::string::npos) << k.path << " = " << value << ": " << message;
        ++checked;
      }
      const schema::Range& r = k.value.range;
      for (const auto& bound : {r.min, r.max, r.limit_max})
        if (bound && bound->inclusive && (k.value.kind == Kind::INTEGER || k.value.kind == Kind::NUMBER)) {
          const std::string message = error_with(file, k.path, num(bound->value));
          EXPECT_EQ(message.find("key '" + std::string(k.path) + "': expected " + schema::expected(k.value)),
                    std::string::npos)
              << k.path << " = " << num(bound->value) << " was refused: " << message;
        }
    }
  }
  EXPECT_GT(checked, 100);
}

// The declaration reads as the document and the messages say.
TEST(SchemaDeclaration, ColumnsAndPhrasesFromTheTypedFields) {
  const schema::Key& tp = schema::key(File::WORKLOAD, "parallel.tp");
  EXPECT_EQ(schema::type_column(tp), "integer");
  EXPECT_EQ(schema::presence_column(tp), "required");
  EXPECT_EQ(schema::constraint_column(tp), "1..2^20 (size limit)");
  EXPECT_EQ(schema::expected(tp.value), "a positive integer");
  const schema::Key& eff = schema::key(File::CLUSTER, "nics.efficiency");
  EXPECT_EQ(schema::expected(eff.value), "a number in [0.001, 1] (the sanity limit)");
  const schema::Key& zero = schema::key(File::WORKLOAD, "parallel.zero_stage");
  EXPECT_EQ(schema::expected(zero.value), "an integer in 0..3");
  EXPECT_EQ(schema::presence_column(zero), "optional, **0**");
  EXPECT_EQ(schema::expected(schema::key(File::CLUSTER, "fabric.tiers").value), "2 or 3");
  const schema::Key& schedule = schema::key(File::WORKLOAD, "parallel.schedule");
  EXPECT_EQ(
      schema::constraint_column(schedule),
      "`gpipe`, `1f1b`, `interleaved`, `zb-h1`, `zb-h2`, `dualpipe`, `dualpipev`; dualpipe: even pp, an even "
      "number of micro-batches >= 2·pp; dualpipev: micro-batches >= 2·pp (layout check)");
  EXPECT_EQ(schema::expected(schema::key(File::CLUSTER, "gpu.hbm_bandwidth").value),
            "a positive bandwidth of at least 1bps");
  // List indices name the declaration of the items' keys.
  EXPECT_EQ(schema::key(File::CLUSTER, "fabric.links[12].latency").path, "fabric.links[].latency");
  EXPECT_THROW((void)schema::key(File::CLUSTER, "gpu.nope"), std::logic_error);
}

} // namespace
