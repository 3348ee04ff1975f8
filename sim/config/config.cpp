#include "config/config.hpp"

#include "config/hf_config.hpp"
#include "config/yaml_tree.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

namespace stepsim::config {

namespace {

using detail::Document;
using detail::Field;
using detail::MapReader;

constexpr int64_t INT_MAX_VALUE = std::numeric_limits<int>::max();
constexpr int64_t INT64_MAX_VALUE = std::numeric_limits<int64_t>::max();
constexpr std::string_view CLUSTER_PREFIX = "cluster.";

/// "--set PATH=VALUE", as errors name an override.
std::string shown(const Override& o) {
  return "--set " + o.path + "=" + o.value;
}

// ---- field readers with the schema's ranges ------------------------------------------------

int64_t positive_int64(const Field& f) {
  return f.integer(1, INT64_MAX_VALUE, "a positive integer");
}

// Largest sizes accepted (docs/schema.md, "Size limits"): far above any real model or cluster,
// they keep every product of sizes the simulator forms inside int64 and a platform or a step
// graph inside memory.
constexpr int64_t MAX_GPUS = int64_t{1} << 20;   // nodes x gpus_per_node (building its platform: ~50 s, 7 GB)
constexpr int64_t MAX_NODES = int64_t{1} << 20;  // nodes under one leaf or pod
constexpr int64_t MAX_PER_NODE = 1024; // GPUs or NICs of one node (NVL576 is the largest domain)
constexpr int64_t MAX_DEGREE = int64_t{1} << 20; // a parallel degree
constexpr int64_t MAX_TOKENS_PER_MICRO_BATCH = int64_t{1} << 32;
constexpr double MAX_SCORE_ELEMENTS = 4.6e18; // micro_batch x heads x seq_len^2 < 2^62

/// Model sizes with their limits, in the order they are read.
struct SizeLimit {
  std::string_view key;
  int64_t ModelSpec::*field;
  int64_t max;
};
constexpr int64_t MAX_LAYERS = 100'000;
constexpr int64_t MAX_HEADS = int64_t{1} << 16;
constexpr int64_t MAX_EXPERTS = int64_t{1} << 16;
constexpr int64_t MAX_FFN = int64_t{1} << 22;
constexpr int64_t MAX_HEAD_DIM = int64_t{1} << 16;
constexpr int64_t MAX_HIDDEN = int64_t{1} << 20;
constexpr int64_t MAX_SEQ_LEN = int64_t{1} << 27;
constexpr SizeLimit MODEL_SIZE_LIMITS[] = {
    {"layers", &ModelSpec::layers, MAX_LAYERS},      {"hidden", &ModelSpec::hidden, MAX_HIDDEN},
    {"heads", &ModelSpec::heads, MAX_HEADS},         {"kv_heads", &ModelSpec::kv_heads, MAX_HEADS},
    {"ffn_hidden", &ModelSpec::ffn_hidden, MAX_FFN}, {"vocab", &ModelSpec::vocab, int64_t{1} << 27},
    {"seq_len", &ModelSpec::seq_len, MAX_SEQ_LEN}, {"head_dim", &ModelSpec::head_dim_set, MAX_HEAD_DIM}};

int64_t limited_int64(const Field& f, int64_t max) {
  const int64_t v = positive_int64(f);
  if (v > max)
    f.fail("expected a positive integer up to " + std::to_string(max) + " (the size limit), found " +
           std::to_string(v));
  return v;
}

int limited_int(const Field& f, int64_t max) { return static_cast<int>(limited_int64(f, max)); }

/// An efficiency: a fraction of a peak, at least 0.001 (the sanity limit: below it a time would
/// overflow to infinity or round to nonsense; docs/schema.md, "Size limits").
double fraction(const Field& f) {
  return f.number("a number in [0.001, 1] (the sanity limit)", [](double v) { return v >= 1e-3 && v <= 1.0; });
}

Bytes nonnegative_bytes(const Field& f) {
  return parse_bytes(f.scalar("a byte size with a unit, e.g. 1GiB"), f.where());
}

// Sanity limits of physical figures (docs/schema.md, "Size limits"): orders of magnitude beyond
// any hardware, they keep every time the engine forms finite and resolvable in double precision.
constexpr double MAX_BYTES = 1125899906842624.0;   // 1 PiB
constexpr double MAX_BANDWIDTH = 1e15;             // 1 PB/s
constexpr double MIN_FLOPS = 1e9, MAX_FLOPS = 1e21; // 1 GFLOP/s .. 1 ZFLOP/s
constexpr double MAX_LATENCY = 10.0;               // seconds

/// Fails unless `v` <= `max`, naming the limit.
void at_most(const Field& f, double v, double max, const std::string& text, const char* limit) {
  if (!(v <= max))
    f.fail("expected at most " + std::string(limit) + " (the sanity limit), found '" + text + "'");
}

Bytes positive_bytes(const Field& f) {
  const std::string text = f.scalar("a byte size with a unit, e.g. 80GiB");
  const Bytes b = parse_bytes(text, f.where());
  if (b.value() <= 0) {
    f.fail("expected a positive byte size, found '" + text + "'");
  }
  at_most(f, b.value(), MAX_BYTES, text, "1PiB");
  return b;
}

BytesPerSec positive_bandwidth(const Field& f) {
  const std::string text = f.scalar("a bandwidth with a unit, e.g. 200Gbps");
  const BytesPerSec bw = parse_bandwidth(text, f.where());
  // At least 1 bit/s: a flow over a vanishing rate never ends, which is no simulation at all.
  if (!(bw.value() >= 0.125)) {
    f.fail("expected a positive bandwidth of at least 1bps, found '" + text + "'");
  }
  at_most(f, bw.value(), MAX_BANDWIDTH, text, "1PBps");
  return bw;
}

Seconds latency(const Field& f) {
  const std::string text = f.scalar("a time with a unit, e.g. 2us");
  const Seconds t = parse_time(text, f.where());
  at_most(f, t.value(), MAX_LATENCY, text, "10s");
  return t;
}

FlopsPerSec positive_flops(const Field& f) {
  const std::string text = f.scalar("a FLOP rate with a unit, e.g. 312TFLOPS");
  const FlopsPerSec r = parse_flops_rate(text, f.where());
  if (r.value() <= 0) {
    f.fail("expected a positive FLOP rate, found '" + text + "'");
  }
  if (!(r.value() >= MIN_FLOPS))
    f.fail("expected at least 1GFLOPS (the sanity limit), found '" + text + "'");
  at_most(f, r.value(), MAX_FLOPS, text, "1e21FLOPS");
  return r;
}

LinkSpec read_link(const MapReader& m) {
  LinkSpec link;
  link.bandwidth = positive_bandwidth(m.require("bandwidth"));
  link.latency = latency(m.require("latency"));
  link.efficiency = fraction(m.require("efficiency"));
  return link;
}

// ---- cluster -------------------------------------------------------------------------------

/// A YAML list under `f`, else fails "expected WHAT, found ...". Returned by value (a node is a
/// handle): callers iterate it straight from a temporary Field in a range-for, whose lifetime
/// ends before the loop body runs.
YAML::Node list_of(const Field& f, const std::string& what) {
  if (!f.value().IsSequence() || f.value().size() == 0)
    f.fail("expected " + what + ", found " +
           (f.value().IsSequence() ? std::string("an empty list") : detail::describe(f.value())));
  return f.value();
}

/// Fabric keys beyond the two-tier fat tree (docs/schema.md): `tiers`, `leaves_per_pod`,
/// `spine_oversubscription` (fat_tree), and `switches`, `links`, `attach` (graph).
void read_fabric_extras(const Document& doc, const MapReader& fabric, ClusterSpec& c) {
  const bool graph = c.fabric.kind == FabricKind::GRAPH;
  for (std::string_view key : {"switches", "links", "attach"}) {
    if (!graph && fabric.has(key))
      fabric.require(key).fail("only for kind: graph");
    if (graph && !fabric.has(key))
      fabric.fail("missing required key 'fabric." + std::string(key) + "' (kind: graph)");
  }
  for (std::string_view key : {"tiers", "leaves_per_pod", "spine_oversubscription"})
    if (c.fabric.kind != FabricKind::FAT_TREE && fabric.has(key))
      fabric.require(key).fail("only for kind: fat_tree");
  // A graph's links give its capacities and its attachments the nodes' switches.
  for (std::string_view key : {"nodes_per_leaf", "oversubscription"})
    if (graph && fabric.has(key))
      fabric.require(key).fail("not for kind: graph (its links and attach entries give the capacities and leaves)");
  if (auto f = fabric.find("tiers"))
    c.fabric.tiers = static_cast<int>(f->integer(2, 3, "2 or 3"));
  for (std::string_view key : {"leaves_per_pod", "spine_oversubscription"})
    if (c.fabric.tiers != 3 && fabric.has(key))
      fabric.require(key).fail("only with tiers: 3");
  if (c.fabric.tiers == 3) {
    c.fabric.leaves_per_pod = limited_int(fabric.require("leaves_per_pod"), MAX_NODES);
    if (auto f = fabric.find("spine_oversubscription")) {
      c.fabric.spine_oversubscription = f->number("a number >= 1", [](double v) { return v >= 1.0; });
      at_most(*f, c.fabric.spine_oversubscription, 1e6, f->scalar("a number"), "1e6");
    }
  }
  if (!graph)
    return;

  // Switches: unique names, at most 4096 (a routed fabric's lookups cost its path lengths; a chain
  // of thousands of switches would make every route a long walk).
  const Field switches = fabric.require("switches");
  if (switches.value().IsSequence() && switches.value().size() > 4096)
    switches.fail("expected at most 4096 switches (the size limit), found " + std::to_string(switches.value().size()));
  std::size_t i = 0;
  for (const YAML::Node& node : list_of(switches, "a list of switch names")) {
    const Field name(doc, "fabric.switches[" + std::to_string(i++) + "]", node, node);
    const std::string text = name.string();
    if (std::find(c.fabric.switches.begin(), c.fabric.switches.end(), text) != c.fabric.switches.end())
      name.fail("switch '" + text + "' is listed twice");
    c.fabric.switches.push_back(text);
  }
  const auto switch_index = [&](const Field& f) {
    const std::string text = f.string();
    const auto it = std::find(c.fabric.switches.begin(), c.fabric.switches.end(), text);
    if (it == c.fabric.switches.end())
      f.fail("expected one of fabric.switches, found '" + text + "'");
    return static_cast<int>(it - c.fabric.switches.begin());
  };
  // Links: full duplex between two distinct switches.
  i = 0;
  for (const YAML::Node& node : list_of(fabric.require("links"), "a list of links")) {
    const std::string path = "fabric.links[" + std::to_string(i++) + "]";
    const MapReader link(doc, path, node, node, {"between", "bandwidth", "latency"});
    const Field between = link.require("between");
    if (!between.value().IsSequence() || between.value().size() != 2)
      between.fail("expected two switch names, found " + detail::describe(between.value()));
    FabricSpec::GraphLink l;
    l.a = switch_index(Field(doc, path + ".between[0]", between.value()[0], between.value()[0]));
    l.b = switch_index(Field(doc, path + ".between[1]", between.value()[1], between.value()[1]));
    if (l.a == l.b)
      between.fail("expected two different switches, found '" + c.fabric.switches[static_cast<std::size_t>(l.a)] +
                   "' twice");
    l.bandwidth = positive_bandwidth(link.require("bandwidth"));
    l.latency = Seconds(0.0);
    if (auto f = link.find("latency"))
      l.latency = latency(*f);
    c.fabric.links.push_back(l);
  }
  // Attachments: each entry puts the NICs of nodes [first, last] on one switch (`switch`) or
  // NIC k on rails[k] (`rails`, one switch per NIC). Every node exactly once.
  c.fabric.nic_switch.assign(static_cast<std::size_t>(c.nodes), {});
  i = 0;
  for (const YAML::Node& node : list_of(fabric.require("attach"), "a list of {nodes, switch or rails}")) {
    const std::string path = "fabric.attach[" + std::to_string(i++) + "]";
    const MapReader at(doc, path, node, node, {"nodes", "switch", "rails"});
    const Field nodes = at.require("nodes");
    if (!nodes.value().IsSequence() || nodes.value().size() != 2)
      nodes.fail("expected [first, last] node numbers, found " + detail::describe(nodes.value()));
    const int64_t first = Field(doc, path + ".nodes[0]", nodes.value()[0], nodes.value()[0])
                              .integer(0, c.nodes - 1, "a node number in [0, nodes)");
    const int64_t last = Field(doc, path + ".nodes[1]", nodes.value()[1], nodes.value()[1])
                             .integer(first, c.nodes - 1, "a node number in [first, nodes)");
    if (at.has("switch") == at.has("rails"))
      at.fail("expected exactly one of 'switch', 'rails'");
    std::vector<int> nic_sw;
    if (auto f = at.find("switch")) {
      nic_sw.assign(static_cast<std::size_t>(c.nics_per_node), switch_index(*f));
    } else {
      const Field rails = at.require("rails");
      if (!rails.value().IsSequence() || rails.value().size() != static_cast<std::size_t>(c.nics_per_node))
        rails.fail("expected one switch per NIC (" + std::to_string(c.nics_per_node) + "), found " +
                   detail::describe(rails.value()));
      for (std::size_t k = 0; k < rails.value().size(); ++k)
        nic_sw.push_back(switch_index(
            Field(doc, path + ".rails[" + std::to_string(k) + "]", rails.value()[k], rails.value()[k])));
    }
    for (int64_t n = first; n <= last; ++n) {
      if (!c.fabric.nic_switch[static_cast<std::size_t>(n)].empty())
        nodes.fail("node " + std::to_string(n) + " is attached twice");
      c.fabric.nic_switch[static_cast<std::size_t>(n)] = nic_sw;
    }
  }
  for (int n = 0; n < c.nodes; ++n)
    if (c.fabric.nic_switch[static_cast<std::size_t>(n)].empty())
      fabric.require("attach").fail("node " + std::to_string(n) + " is not attached to any switch");
  // Connectivity: every switch that holds a NIC reaches every other one.
  std::vector<std::vector<int>> adj(c.fabric.switches.size());
  for (const auto& l : c.fabric.links) {
    adj[static_cast<std::size_t>(l.a)].push_back(l.b);
    adj[static_cast<std::size_t>(l.b)].push_back(l.a);
  }
  std::vector<char> seen(c.fabric.switches.size(), 0);
  std::vector<int> pending{c.fabric.nic_switch[0][0]};
  seen[static_cast<std::size_t>(pending[0])] = 1;
  while (!pending.empty()) {
    const int s = pending.back();
    pending.pop_back();
    for (int t : adj[static_cast<std::size_t>(s)])
      if (!seen[static_cast<std::size_t>(t)]) {
        seen[static_cast<std::size_t>(t)] = 1;
        pending.push_back(t);
      }
  }
  for (const auto& per_node : c.fabric.nic_switch)
    for (int s : per_node)
      if (!seen[static_cast<std::size_t>(s)])
        fabric.require("links").fail("switch '" + c.fabric.switches[static_cast<std::size_t>(s)] +
                                     "' holds NICs but is not connected to switch '" +
                                     c.fabric.switches[static_cast<std::size_t>(c.fabric.nic_switch[0][0])] + "'");
}

ClusterSpec read_cluster(const Document& doc) {
  const auto top =
      MapReader::root(doc, {"name", "nodes", "gpus_per_node", "gpu", "nvswitch", "pcie", "nics", "fabric"});
  ClusterSpec c;
  c.source = doc.file();
  c.name = top.require("name").string();
  c.nodes = limited_int(top.require("nodes"), INT_MAX_VALUE);
  const Field gpus_per_node = top.require("gpus_per_node");
  c.gpus_per_node = limited_int(gpus_per_node, MAX_PER_NODE);
  if (static_cast<int64_t>(c.nodes) * c.gpus_per_node > MAX_GPUS) {
    gpus_per_node.fail("nodes * gpus_per_node = " + std::to_string(c.nodes) + "*" +
                       std::to_string(c.gpus_per_node) + " exceeds " + std::to_string(MAX_GPUS) +
                       " GPUs (the size limit)");
  }

  const auto gpu = top.require("gpu").map(
      {"kind", "peak_flops", "hbm_capacity", "hbm_bandwidth", "compute_efficiency", "memory_efficiency",
       "runtime_overhead", "allocator_fragmentation", "profile", "overlap_slowdown",
       "gemm_efficiency", "memory_bound_efficiency", "launch_overhead", "pass_overhead", "list_collective_per_rank",
       "host_bandwidth", "host_memory"});
  c.gpu.kind = gpu.require("kind").string();
  const auto peak = gpu.require("peak_flops").map({"bf16", "fp16", "fp8"});
  if (!peak.has("bf16") && !peak.has("fp16")) {
    peak.fail("expected at least one of bf16, fp16, found neither");
  }
  if (auto f = peak.find("bf16")) {
    c.gpu.peak_bf16 = positive_flops(*f);
  }
  if (auto f = peak.find("fp16")) {
    c.gpu.peak_fp16 = positive_flops(*f);
  }
  if (auto f = peak.find("fp8")) {
    c.gpu.peak_fp8 = positive_flops(*f);
  }
  c.gpu.hbm_capacity = positive_bytes(gpu.require("hbm_capacity"));
  c.gpu.hbm_bandwidth = positive_bandwidth(gpu.require("hbm_bandwidth"));
  c.gpu.compute_efficiency = fraction(gpu.require("compute_efficiency"));
  c.gpu.memory_efficiency = fraction(gpu.require("memory_efficiency"));
  c.gpu.runtime_overhead = Bytes(1024.0 * 1024 * 1024);
  if (auto f = gpu.find("runtime_overhead")) {
    c.gpu.runtime_overhead = nonnegative_bytes(*f);
  }
  c.gpu.allocator_fragmentation = 1.10;
  if (auto f = gpu.find("allocator_fragmentation")) {
    c.gpu.allocator_fragmentation = f->number("a number >= 1", [](double v) { return v >= 1.0; });
  }
  // Kernel profile: relative to the cluster file (to the working directory when given with --set);
  // `none` or absent = the roofline (docs/schema.md).
  if (auto f = gpu.find("profile")) {
    const std::string text = f->string();
    if (text != "none") {
      std::filesystem::path p(text);
      if (p.is_relative() && f->where().rfind("--set ", 0) != 0)
        p = std::filesystem::path(doc.file()).parent_path() / p;
      if (const std::string why = input_file_problem(p); !why.empty())
        f->fail("kernel profile '" + p.lexically_normal().string() + "': " + why + " (or `none` for the roofline)");
      c.gpu.profile = p.lexically_normal().string();
    }
  }
  if (auto f = gpu.find("overlap_slowdown")) {
    c.gpu.overlap_slowdown = f->number("a number in [1, 10] (the sanity limit)", [](double v) { return v >= 1.0 && v <= 10.0; });
  }
  if (auto f = gpu.find("gemm_efficiency")) {
    c.gpu.gemm_efficiency = fraction(*f);
  }
  if (auto f = gpu.find("memory_bound_efficiency")) {
    c.gpu.memory_bound_efficiency = fraction(*f);
  }
  if (auto f = gpu.find("launch_overhead")) {
    c.gpu.launch_overhead = latency(*f);
  }
  if (auto f = gpu.find("host_bandwidth")) {
    c.gpu.host_bandwidth = positive_bandwidth(*f);
  }
  if (auto f = gpu.find("host_memory")) {
    c.gpu.host_memory = positive_bytes(*f);
  }
  if (auto f = gpu.find("pass_overhead")) {
    c.gpu.pass_overhead = latency(*f);
  }
  if (auto f = gpu.find("list_collective_per_rank")) {
    c.gpu.list_collective_per_rank = latency(*f);
  }

  // Inside a node: an NVSwitch (optionally with NVLink SHARP) or PCIe; exactly one of the two.
  if (top.has("pcie")) {
    if (top.has("nvswitch"))
      top.require("pcie").fail("expected either nvswitch or pcie, found both");
    const auto pcie = top.require("pcie").map({"bandwidth", "latency", "efficiency", "host_bandwidth"});
    c.nvswitch = read_link(pcie);
    c.intra = IntraNodeKind::PCIE;
    if (auto f = pcie.find("host_bandwidth"))
      c.pcie_host_bandwidth = positive_bandwidth(*f);
  } else {
    const auto nvs = top.require("nvswitch").map({"bandwidth", "latency", "efficiency", "nvls"});
    c.nvswitch = read_link(nvs);
    if (auto f = nvs.find("nvls")) {
      const auto nvls = f->map({"efficiency", "latency"});
      c.nvls.enabled = true;
      c.nvls.efficiency = fraction(nvls.require("efficiency"));
      c.nvls.latency = latency(nvls.require("latency"));
    }
  }

  const auto nics = top.require("nics").map({"count", "bandwidth", "latency", "efficiency"});
  c.nics_per_node = limited_int(nics.require("count"), MAX_PER_NODE);
  c.nic = read_link(nics);

  const auto fabric = top.require("fabric").map({"kind", "nodes_per_leaf", "oversubscription", "switch_latency",
                                                  "tiers", "leaves_per_pod", "spine_oversubscription",
                                                  "switches", "links", "attach"});
  c.fabric.kind = fabric.require("kind").choice<FabricKind>({{"fat_tree", FabricKind::FAT_TREE},
                                                             {"rail_optimized", FabricKind::RAIL_OPTIMIZED},
                                                             {"graph", FabricKind::GRAPH}});
  read_fabric_extras(doc, fabric, c);
  c.fabric.nodes_per_leaf = 1;
  if (auto f = fabric.find("nodes_per_leaf")) {
    c.fabric.nodes_per_leaf = limited_int(*f, MAX_NODES);
  }
  c.fabric.oversubscription = 1.0;
  if (auto f = fabric.find("oversubscription")) {
    c.fabric.oversubscription = f->number("a number >= 1", [](double v) { return v >= 1.0; });
    at_most(*f, c.fabric.oversubscription, 1e6, f->scalar("a number"), "1e6");
  }
  c.fabric.switch_latency = Seconds(0.5e-6);
  if (auto f = fabric.find("switch_latency")) {
    c.fabric.switch_latency = latency(*f);
  }
  return c;
}

// ---- workload ------------------------------------------------------------------------------

/// `model.moe` over `moe` (defaults, or what a Hugging Face config gave). docs/moe.md.
void read_moe(const Field& field, const ModelSpec& model, MoeSpec& moe) {
  const auto m = field.map({"experts", "top_k", "expert_ffn_hidden", "shared_experts", "capacity_factor",
                            "moe_layer_freq", "first_dense_layers", "routing"});
  if (auto f = m.find("experts"))
    moe.experts = limited_int64(*f, MAX_EXPERTS);
  else if (!moe.enabled())
    (void)m.require("experts");
  if (auto f = m.find("top_k")) {
    moe.top_k = positive_int64(*f);
    if (moe.top_k > moe.experts)
      f->fail("expected at most model.moe.experts = " + std::to_string(moe.experts) + ", found " +
              std::to_string(moe.top_k));
  }
  if (moe.top_k > moe.experts)
    m.fail("top_k = " + std::to_string(moe.top_k) + " exceeds experts = " + std::to_string(moe.experts));
  if (auto f = m.find("expert_ffn_hidden"))
    moe.expert_ffn_hidden = limited_int64(*f, MAX_FFN);
  if (moe.expert_ffn_hidden == 0)
    moe.expert_ffn_hidden = model.ffn_hidden;
  if (auto f = m.find("shared_experts"))
    moe.shared_experts = f->integer(0, MAX_EXPERTS, "an integer in 0..65536");
  if (auto f = m.find("capacity_factor"))
    moe.capacity_factor = f->number("a number >= 1, or 0 for no capacity limit",
                                    [](double v) { return v == 0.0 || v >= 1.0; });
  if (auto f = m.find("moe_layer_freq"))
    moe.layer_freq = limited_int64(*f, MAX_LAYERS);
  if (auto f = m.find("first_dense_layers"))
    moe.first_dense_layers = f->integer(0, INT64_MAX_VALUE, "a non-negative integer");
  if (moe.first_dense_layers >= model.layers)
    m.fail("first_dense_layers = " + std::to_string(moe.first_dense_layers) + " leaves no MoE layer among model.layers = " +
           std::to_string(model.layers));
  if (auto f = m.find("routing")) {
    const auto r = f->map({"distribution", "zipf_exponent", "seed", "groups", "group_top_k"});
    if (auto d = r.find("distribution"))
      moe.routing.distribution = d->choice<RoutingDistribution>(
          {{"uniform", RoutingDistribution::UNIFORM}, {"zipf", RoutingDistribution::ZIPF}});
    if (auto z = r.find("zipf_exponent"))
      moe.routing.zipf_exponent = z->number("a number >= 0", [](double v) { return v >= 0.0; });
    if (auto sd = r.find("seed"))
      moe.routing.seed = static_cast<uint64_t>(sd->integer(0, INT64_MAX_VALUE, "a non-negative integer"));
    if (auto g = r.find("groups"))
      moe.routing.groups = g->integer(0, 65536, "an integer in 0..65536 (0: no group limit)");
    if (auto g = r.find("group_top_k"))
      moe.routing.group_top_k = g->integer(0, 65536, "an integer in 0..65536");
  }
  const RoutingSpec& rt = moe.routing;
  if (rt.groups > 0 || rt.group_top_k > 0) {
    if (rt.groups < 1 || moe.experts % rt.groups != 0)
      m.fail("routing.groups = " + std::to_string(rt.groups) + " must divide moe.experts = " +
             std::to_string(moe.experts) + " (equal expert groups; no group limit is groups = group_top_k = 0, "
             "and group_top_k is " + std::to_string(rt.group_top_k) + ")");
    if (rt.group_top_k < 1 || rt.group_top_k > rt.groups ||
        rt.group_top_k * (moe.experts / rt.groups) < moe.top_k)
      m.fail("routing.group_top_k = " + std::to_string(rt.group_top_k) + " must be in 1..groups = " +
             std::to_string(rt.groups) + " and its groups must hold top_k = " + std::to_string(moe.top_k) +
             " experts");
  }
}

/// model.sliding_window and model.full_attention_every (docs/schema.md), over what a Hugging Face
/// config gave.
void read_sliding_window(const MapReader& m, ModelSpec& model) {
  if (auto f = m.find("sliding_window")) {
    model.sliding_window = f->integer(0, MAX_SEQ_LEN, "an integer in 0.." + std::to_string(MAX_SEQ_LEN) +
                                                          " (tokens a query attends to; 0: no window)");
    if (model.sliding_window == 0)
      model.full_attention_every = 0;
  }
  if (auto f = m.find("full_attention_every")) {
    model.full_attention_every =
        f->integer(0, MAX_LAYERS, "an integer in 0.." + std::to_string(MAX_LAYERS) +
                                      " (every n-th layer attends to the whole sequence; 0: every layer windowed)");
    if (model.full_attention_every > 0 && model.sliding_window == 0)
      f->fail("model.full_attention_every needs model.sliding_window > 0 (the other layers' window)");
  }
}

/// model.mla (docs/schema.md): the latent ranks and head widths of multi-head latent attention.
/// Over an MLA a Hugging Face config gave, each key is optional and overrides its one value.
void read_mla(const Field& f, MlaSpec& mla) {
  const auto m = f.map({"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"});
  const bool over_config = mla.enabled();
  if (!over_config)
    mla = MlaSpec{};
  const auto size = [&](std::string_view key, int64_t& out, int64_t max) {
    if (auto v = m.find(key))
      out = limited_int64(*v, max);
    else if (!over_config)
      out = limited_int64(m.require(key), max);
  };
  if (auto q = m.find("q_lora_rank")) // 0: queries through one full projection (DeepSeek-V2-Lite)
    mla.q_lora_rank = q->integer(0, MAX_HIDDEN, "an integer in 0.." + std::to_string(MAX_HIDDEN));
  size("kv_lora_rank", mla.kv_lora_rank, MAX_HIDDEN);
  size("qk_nope_head_dim", mla.qk_nope_head_dim, MAX_HEAD_DIM);
  if (auto r = m.find("qk_rope_head_dim"))
    mla.qk_rope_head_dim = r->integer(0, MAX_HEAD_DIM, "an integer in 0.." + std::to_string(MAX_HEAD_DIM));
  size("v_head_dim", mla.v_head_dim, MAX_HEAD_DIM);
}

/// Multi-head latent attention replaces the head layout: no model.head_dim, every head its own
/// keys and values (kv_heads = heads), no linear biases, and heads x widths within the hidden limit.
void check_mla(const MapReader& m, const ModelSpec& model) {
  if (!model.mla.enabled())
    return;
  const auto fail = [&](const std::string& key, const std::string& why) {
    if (auto f = m.find(key))
      f->fail(why);
    if (auto f = m.find("mla"))
      f->fail(why);
    m.require("from_hf").fail("the Hugging Face config gives " + why);
  };
  if (model.head_dim_set > 0)
    fail("head_dim", "model.head_dim cannot be combined with model.mla, whose qk_nope_head_dim, qk_rope_head_dim and "
                     "v_head_dim give the head widths");
  if (model.kv_heads != model.heads)
    fail("kv_heads", "model.mla gives every head its own keys and values: expected kv_heads = heads = " +
                         std::to_string(model.heads) + ", found " + std::to_string(model.kv_heads));
  if (model.bias)
    fail("bias", "linear-layer biases are not modelled with model.mla; expected bias: false");
  if (std::max(model.mla.q_lora_rank, model.mla.kv_lora_rank) > MAX_HIDDEN)
    fail("mla", "an MLA latent rank above the " + std::to_string(MAX_HIDDEN) + " accepted (the limit of model.hidden)");
  const int64_t widest = std::max(model.mla.qk_head_dim(), model.mla.v_head_dim);
  if (model.heads * widest > MAX_HIDDEN)
    fail("mla", "heads x the widest MLA head (" + std::to_string(model.heads) + " x " + std::to_string(widest) +
                    ") exceeds the " + std::to_string(MAX_HIDDEN) + " accepted (the limit of model.hidden)");
}

ModelSpec read_model(const MapReader& m, const std::string& workload_name, const std::string& workload_file) {
  ModelSpec model;
  // model.from_hf: a Hugging Face config.json (relative to the workload file) gives the defaults;
  // keys given here override it, and the otherwise required keys become optional.
  const bool from_hf = m.has("from_hf");
  if (auto f = m.find("from_hf")) {
    std::filesystem::path p(f->string());
    if (p.is_relative() && f->where().rfind("--set ", 0) != 0)
      p = std::filesystem::path(workload_file).parent_path() / p;
    if (const std::string why = input_file_problem(p); !why.empty())
      f->fail("Hugging Face config '" + p.lexically_normal().string() + "': " + why);
    try {
      model = read_hf_config(p.lexically_normal());
    } catch (const ConfigError& e) {
      f->fail(std::string("cannot use the Hugging Face config: ") + e.what());
    }
  }
  model.name = workload_name;
  if (auto f = m.find("name")) {
    model.name = f->string();
  }
  const auto limit_of = [](std::string_view key) {
    for (const SizeLimit& l : MODEL_SIZE_LIMITS)
      if (l.key == key)
        return l.max;
    return INT64_MAX_VALUE;
  };
  const auto size = [&](std::string_view key, int64_t& out) {
    if (auto f = m.find(key))
      out = limited_int64(*f, limit_of(key));
    else if (!from_hf)
      out = limited_int64(m.require(key), limit_of(key));
  };
  size("layers", model.layers);
  size("hidden", model.hidden);
  size("heads", model.heads);
  if (auto f = m.find("head_dim"))
    model.head_dim_set = limited_int64(*f, MAX_HEAD_DIM);
  // With model.head_dim the heads need not divide the hidden size (Qwen3, Mistral NeMo).
  if (model.head_dim_set <= 0 && model.hidden % model.heads != 0) {
    const std::string why = "expected a divisor of model.hidden = " + std::to_string(model.hidden) + ", found " +
                            std::to_string(model.heads) + " (hidden % heads = " +
                            std::to_string(model.hidden % model.heads) + "; or give model.head_dim)";
    if (auto f = m.find("heads"))
      f->fail(why);
    m.fail("heads: " + why);
  }
  if (!from_hf)
    model.kv_heads = model.heads;
  if (auto f = m.find("kv_heads")) {
    model.kv_heads = limited_int64(*f, limit_of("kv_heads"));
  }
  if (model.heads % model.kv_heads != 0) {
    const std::string why = "expected a divisor of model.heads = " + std::to_string(model.heads) + ", found " +
                            std::to_string(model.kv_heads) +
                            " (heads % kv_heads = " + std::to_string(model.heads % model.kv_heads) + ")";
    if (auto f = m.find("kv_heads"))
      f->fail(why);
    m.fail("kv_heads: " + why);
  }
  // The attention widths obey the hidden size's limit: heads x head_dim (and a whole step's
  // tokens times it) must stay far inside 64-bit element counts.
  // (Sizes a Hugging Face config gave beyond their own limits are refused at the end; the product
  // is only formed within them.)
  if (model.head_dim_set > 0 && model.heads <= MAX_HEADS && model.head_dim_set <= MAX_HEAD_DIM &&
      model.q_dim() > MAX_HIDDEN) {
    const std::string why = "heads x head_dim = " + std::to_string(model.heads) + " x " +
                            std::to_string(model.head_dim_set) + " = " + std::to_string(model.q_dim()) +
                            ", more than the " + std::to_string(MAX_HIDDEN) + " accepted (the limit of model.hidden)";
    if (auto f = m.find("head_dim"))
      f->fail(why);
    m.require("from_hf").fail("the Hugging Face config gives " + why);
  }
  size("ffn_hidden", model.ffn_hidden);
  size("vocab", model.vocab);
  size("seq_len", model.seq_len);
  if (auto f = from_hf ? m.find("mlp") : std::optional<Field>(m.require("mlp"))) {
    model.mlp = f->choice<MlpKind>({{"gelu", MlpKind::GELU}, {"swiglu", MlpKind::SWIGLU}});
    // GPT-style (gelu) and Llama-style (swiglu) families differ in these defaults.
    const bool gpt = model.mlp == MlpKind::GELU;
    model.norm = gpt ? NormKind::LAYERNORM : NormKind::RMSNORM;
    model.position = gpt ? PositionEmbedding::LEARNED : PositionEmbedding::ROTARY;
    model.bias = gpt;
    model.tied_embeddings = gpt;
  }
  if (auto f = m.find("norm")) {
    model.norm = f->choice<NormKind>({{"layernorm", NormKind::LAYERNORM}, {"rmsnorm", NormKind::RMSNORM}});
  }
  if (auto f = m.find("position_embedding")) {
    model.position = f->choice<PositionEmbedding>(
        {{"learned", PositionEmbedding::LEARNED}, {"rotary", PositionEmbedding::ROTARY}});
  }
  if (auto f = m.find("bias")) {
    model.bias = f->boolean();
  }
  if (auto f = m.find("tied_embeddings")) {
    model.tied_embeddings = f->boolean();
  }
  if (auto f = m.find("dropout")) {
    model.dropout = f->boolean();
  }
  if (auto f = m.find("moe"))
    read_moe(*f, model, model.moe);
  if (auto f = m.find("mla"))
    read_mla(*f, model.mla);
  read_sliding_window(m, model);
  if (auto f = m.find("mtp_layers"))
    model.mtp_layers = f->integer(0, 16, "an integer in 0..16 (multi-token prediction depth)");
  if (from_hf) {
    // Sizes the workload file did not override, as the Hugging Face config gave them, obey the
    // limits of the workload keys (docs/schema.md, "Size limits") before any product of them is
    // formed below: a config is as likely to hold a typo as a workload file.
    const auto check = [&](const std::string& key, int64_t value, int64_t max) {
      if (value > max)
        m.require("from_hf").fail("the Hugging Face config gives model." + key + " = " + std::to_string(value) +
                                  ", more than the " + std::to_string(max) + " accepted");
    };
    for (const SizeLimit& l : MODEL_SIZE_LIMITS)
      check(std::string(l.key), model.*l.field, l.max);
    check("moe.experts", model.moe.experts, MAX_EXPERTS);
    check("moe.top_k", model.moe.top_k, MAX_EXPERTS);
    check("moe.expert_ffn_hidden", model.moe.expert_ffn_hidden, MAX_FFN);
    check("moe.shared_experts", model.moe.shared_experts, MAX_EXPERTS);
    check("moe.first_dense_layers", model.moe.first_dense_layers, MAX_LAYERS);
    check("moe.moe_layer_freq", model.moe.layer_freq, MAX_LAYERS);
    check("moe.routing.groups", model.moe.routing.groups, 65536);
    check("moe.routing.group_top_k", model.moe.routing.group_top_k, 65536);
    check("mla.q_lora_rank", model.mla.q_lora_rank, MAX_HIDDEN);
    check("mla.kv_lora_rank", model.mla.kv_lora_rank, MAX_HIDDEN);
    check("mla.qk_nope_head_dim", model.mla.qk_nope_head_dim, MAX_HEAD_DIM);
    check("mla.qk_rope_head_dim", model.mla.qk_rope_head_dim, MAX_HEAD_DIM);
    check("mla.v_head_dim", model.mla.v_head_dim, MAX_HEAD_DIM);
    check("sliding_window", model.sliding_window, MAX_SEQ_LEN);
    check("full_attention_every", model.full_attention_every, MAX_LAYERS);
    check("mtp_layers", model.mtp_layers, 16);
  }
  check_mla(m, model);
  return model;
}

ParallelSpec read_parallel(const MapReader& m) {
  ParallelSpec p;
  p.tp = limited_int(m.require("tp"), MAX_DEGREE);
  p.pp = limited_int(m.require("pp"), MAX_DEGREE);
  p.dp = 0; // omitted: check_layout derives it
  if (auto f = m.find("dp")) {
    p.dp = limited_int(*f, MAX_DEGREE);
  }
  p.schedule =
      m.require("schedule").choice<Schedule>({{"gpipe", Schedule::GPIPE},
                                              {"1f1b", Schedule::ONE_F_ONE_B},
                                              {"interleaved", Schedule::INTERLEAVED},
                                              {"zb-h1", Schedule::ZB_H1},
                                              {"zb-h2", Schedule::ZB_H2}});
  p.vp = 1;
  if (auto f = m.find("vp")) {
    p.vp = limited_int(*f, MAX_DEGREE);
  }
  p.sp = false;
  if (auto f = m.find("sp")) {
    p.sp = f->boolean();
  }
  if (auto f = m.find("pp_scatter_gather"))
    p.pp_scatter_gather = f->boolean();
  if (auto f = m.find("tp_grad_overlap"))
    p.tp_grad_overlap = f->boolean();
  p.zero_stage = 0;
  if (auto f = m.find("zero_stage")) {
    p.zero_stage = static_cast<int>(f->integer(0, 3, "an integer in 0..3"));
  }
  if (auto f = m.find("cp"))
    p.cp = limited_int(*f, MAX_DEGREE);
  if (auto f = m.find("ep"))
    p.ep = limited_int(*f, MAX_DEGREE);
  if (auto f = m.find("etp"))
    p.etp = limited_int(*f, MAX_DEGREE);
  if (auto f = m.find("ep_overlap"))
    p.ep_overlap = f->boolean();
  if (auto f = m.find("chunk_layers")) {
    const YAML::Node& list = f->value();
    if (!list.IsSequence() || list.size() == 0)
      f->fail("expected a non-empty list of layer counts, one per model chunk (pp*vp of them)");
    for (const YAML::Node& item : list) {
      int64_t n = -1;
      if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, n) || n < 0 || n > 100000)
        f->fail("expected layer counts in 0..100000, found '" + (item.IsScalar() ? item.Scalar() : std::string("a non-scalar entry")) + "'");
      p.chunk_layers.push_back(n);
    }
  }
  if (auto f = m.find("ep_dispatch"))
    p.ep_dispatch = f->choice<EpDispatch>({{"all_to_all", EpDispatch::ALL_TO_ALL}, {"deduplicated", EpDispatch::DEDUPLICATED}});
  return p;
}

TrainingSpec read_training(const std::optional<MapReader>& m) {
  TrainingSpec t;
  t.dp_bucket = Bytes(25.0 * 1024 * 1024);
  t.optimizer_bytes_per_param = 12;
  t.recompute = Recompute::NONE;
  if (!m) {
    return t;
  }
  if (auto f = m->find("dp_bucket")) {
    t.dp_bucket = positive_bytes(*f);
  }
  if (auto f = m->find("optimizer_bytes_per_param")) {
    t.optimizer_bytes_per_param = f->number("a number >= 0", [](double v) { return v >= 0.0; });
    at_most(*f, t.optimizer_bytes_per_param, 1024, f->scalar("a number"), "1024");
  }
  if (auto f = m->find("recompute")) {
    t.recompute = f->choice<Recompute>(
        {{"none", Recompute::NONE}, {"selective", Recompute::SELECTIVE}, {"full", Recompute::FULL}});
  }
  if (auto f = m->find("recompute_modules")) {
    if (t.recompute != Recompute::SELECTIVE)
      f->fail("recompute_modules needs training.recompute: selective");
    const YAML::Node& list = f->value();
    if (!list.IsSequence() || list.size() == 0)
      f->fail("expected a non-empty list of core_attn, layernorm, mlp, moe_act, mla_up_proj");
    t.recompute_modules = RecomputeModules{.core_attn = false};
    for (const YAML::Node& item : list) {
      const std::string name = item.IsScalar() ? item.Scalar() : std::string();
      bool RecomputeModules::*module = nullptr;
      if (name == "core_attn")
        module = &RecomputeModules::core_attn;
      else if (name == "layernorm")
        module = &RecomputeModules::layernorm;
      else if (name == "mlp")
        module = &RecomputeModules::mlp;
      else if (name == "moe_act")
        module = &RecomputeModules::moe_act;
      else if (name == "mla_up_proj")
        module = &RecomputeModules::mla_up_proj;
      else
        f->fail("expected modules among core_attn, layernorm, mlp, moe_act, mla_up_proj, found '" +
                (item.IsScalar() ? name : std::string("a non-scalar entry")) +
                "' (Megatron's moe and shared_experts are not modelled)");
      if (t.recompute_modules.*module)
        f->fail("module '" + name + "' listed twice");
      t.recompute_modules.*module = true;
    }
  }
  if (auto f = m->find("flash_attention")) {
    t.flash_attention = f->boolean();
  }
  if (auto f = m->find("zero3_prefetch")) {
    t.zero3_prefetch = static_cast<int>(f->integer(0, 64, "an integer in 0..64"));
  }
  if (auto f = m->find("zero3_fetch")) {
    t.zero3_fetch = f->choice<Zero3Fetch>({{"prefetch", Zero3Fetch::PREFETCH}, {"blocking", Zero3Fetch::BLOCKING}});
  }
  if (auto f = m->find("overlap_param_gather")) {
    t.overlap_param_gather = f->boolean();
  }
  if (auto f = m->find("grad_reduce_in_fp32")) {
    t.grad_reduce_in_fp32 = f->boolean();
  }
  if (auto f = m->find("cross_entropy")) {
    t.cross_entropy = f->choice<CrossEntropy>({{"fp32", CrossEntropy::FP32}, {"fused", CrossEntropy::FUSED}});
  }
  if (auto f = m->find("fp8_params")) {
    t.fp8_params = f->boolean();
  }
  if (auto f = m->find("offload_layers")) { // bounded by the layout (check_layout)
    t.offload_layers = f->integer(0, 1 << 20, "an integer >= 0");
  }
  if (auto f = m->find("recompute_layers")) { // with recompute: full (check_layout)
    t.recompute_layers = f->integer(0, 1 << 20, "an integer >= 0 (0: every layer)");
  }
  return t;
}

WorkloadSpec read_workload(const Document& doc) {
  const auto top = MapReader::root(doc, {"name", "model", "batch", "parallel", "precision", "training", "collectives"});
  WorkloadSpec w;
  w.source = doc.file();
  w.name = top.require("name").string();
  w.model = read_model(
      top.require("model").map({"name", "from_hf", "layers", "hidden", "heads", "kv_heads", "head_dim", "mla", "ffn_hidden",
                                "vocab", "seq_len", "mlp", "norm", "position_embedding", "bias", "tied_embeddings",
                                "dropout", "moe", "sliding_window", "full_attention_every", "mtp_layers"}),
      w.name, doc.file());
  const auto batch = top.require("batch").map({"global_batch", "micro_batch"});
  w.batch.global_batch = limited_int64(batch.require("global_batch"), INT_MAX_VALUE);
  w.batch.micro_batch = limited_int64(batch.require("micro_batch"), int64_t{1} << 20);
  {
    const double mb = static_cast<double>(w.batch.micro_batch), s = static_cast<double>(w.model.seq_len);
    if (mb * s > static_cast<double>(MAX_TOKENS_PER_MICRO_BATCH))
      batch.require("micro_batch")
          .fail("micro_batch x model.seq_len = " + std::to_string(w.batch.micro_batch) + " x " +
                std::to_string(w.model.seq_len) + " tokens per micro-batch, more than the 2^32 accepted");
    if (mb * static_cast<double>(w.model.heads) * s * s > MAX_SCORE_ELEMENTS)
      batch.require("micro_batch")
          .fail("micro_batch x model.heads x model.seq_len^2 = " + std::to_string(w.batch.micro_batch) + " x " +
                std::to_string(w.model.heads) + " x " + std::to_string(w.model.seq_len) +
                "^2 attention scores, more than the 2^62 accepted");
  }
  w.parallel = read_parallel(top.require("parallel").map({"tp", "pp", "dp", "schedule", "vp", "sp", "pp_scatter_gather", "tp_grad_overlap", "zero_stage", "cp", "ep", "etp", "ep_overlap", "ep_dispatch", "chunk_layers"}));
  w.precision =
      top.require("precision").choice<Precision>(
          {{"bf16", Precision::BF16}, {"fp16", Precision::FP16}, {"fp8", Precision::FP8}});
  std::optional<MapReader> training;
  if (auto f = top.find("training")) {
    training = f->map({"dp_bucket", "optimizer_bytes_per_param", "recompute", "recompute_modules", "flash_attention",
                       "zero3_prefetch", "zero3_fetch", "overlap_param_gather", "grad_reduce_in_fp32", "cross_entropy",
                       "fp8_params", "offload_layers", "recompute_layers"});
  }
  w.training = read_training(training);
  if (auto f = training ? training->find("fp8_params") : std::nullopt; f && w.training.fp8_params &&
                                                                      w.precision != Precision::FP8)
    f->fail("fp8 primary weights need precision: fp8");
  if (auto f = training ? training->find("recompute_modules") : std::nullopt) {
    if (w.training.recompute_modules.mlp && w.model.moe.enabled())
      f->fail("module 'mlp' (the dense MLP) is not modelled for a mixture-of-experts model; its experts take "
              "moe_act");
    if (w.training.recompute_modules.moe_act && !w.model.moe.enabled())
      f->fail("module 'moe_act' needs a mixture-of-experts model (model.moe.experts)");
    if (w.training.recompute_modules.mla_up_proj && !w.model.mla.enabled())
      f->fail("module 'mla_up_proj' needs multi-head latent attention (model.mla)");
  }
  if (auto f = top.find("collectives")) {
    const auto coll = f->map({"tp", "pp", "dp", "ep", "cp"});
    const auto algorithm = [](const Field& a) {
      return a.choice<CollectiveAlgorithm>({{"auto", CollectiveAlgorithm::AUTO},
                                            {"ring", CollectiveAlgorithm::RING},
                                            {"tree", CollectiveAlgorithm::TREE},
                                            {"hierarchical", CollectiveAlgorithm::HIERARCHICAL},
                                            {"nvls", CollectiveAlgorithm::NVLS},
                                            {"pairwise", CollectiveAlgorithm::PAIRWISE}});
    };
    if (auto a = coll.find("tp"))
      w.collectives.tp = algorithm(*a);
    if (auto a = coll.find("pp"))
      w.collectives.pp = algorithm(*a);
    if (auto a = coll.find("dp"))
      w.collectives.dp = algorithm(*a);
    if (auto a = coll.find("ep"))
      w.collectives.ep = algorithm(*a);
    if (auto a = coll.find("cp"))
      w.collectives.cp = algorithm(*a);
  }
  return w;
}

// ---- layout --------------------------------------------------------------------------------

/// a*b, or nullopt on overflow.
std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    return std::nullopt;
  }
  return out;
}

std::string str(int64_t v) {
  return std::to_string(v);
}

int64_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions, adjacent transpositions.
  const std::size_t n = a.size();
  const std::size_t m = b.size();
  std::vector<std::vector<int64_t>> d(n + 1, std::vector<int64_t>(m + 1, 0));
  for (std::size_t i = 0; i <= n; ++i) {
    d[i][0] = static_cast<int64_t>(i);
  }
  for (std::size_t j = 0; j <= m; ++j) {
    d[0][j] = static_cast<int64_t>(j);
  }
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const int64_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

} // namespace

// ---- public API ----------------------------------------------------------------------------

Override parse_override(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    throw ConfigError("--set " + text + ": expected PATH=VALUE, e.g. parallel.pp=4");
  }
  std::string path = text.substr(0, eq);
  while (!path.empty() && std::isspace(static_cast<unsigned char>(path.back())) != 0) {
    path.pop_back();
  }
  while (!path.empty() && std::isspace(static_cast<unsigned char>(path.front())) != 0) {
    path.erase(path.begin());
  }
  if (path.empty()) {
    throw ConfigError("--set " + text + ": expected PATH=VALUE with a non-empty PATH, e.g. parallel.pp=4");
  }
  if (path.front() == '.' || path.back() == '.' || path.find("..") != std::string::npos) {
    throw ConfigError("--set " + text + ": empty key in path '" + path + "'");
  }
  return Override{path, text.substr(eq + 1)};
}

ClusterSpec load_cluster(const std::filesystem::path& file, const std::vector<Override>& overrides) {
  Document doc(file);
  for (const auto& o : overrides) {
    if (o.path.starts_with(CLUSTER_PREFIX)) {
      doc.apply(o.path.substr(CLUSTER_PREFIX.size()), o.value, shown(o));
    }
  }
  return read_cluster(doc);
}

WorkloadSpec load_workload(const std::filesystem::path& file, const std::vector<Override>& overrides) {
  Document doc(file);
  for (const auto& o : overrides) {
    if (!o.path.starts_with(CLUSTER_PREFIX)) {
      doc.apply(o.path, o.value, shown(o));
    }
  }
  return read_workload(doc);
}

namespace {

/// Schedule rules (docs/schedules.md): interleaving needs vp >= 2, pp >= 2, layers % (pp*vp) == 0
/// and, as in Megatron-LM, micro-batches % pp == 0; vp > 1 only with the interleaved schedule; the
/// zero-bubble schedules defer weight gradients, which full recomputation cannot do cheaply.
template <class Fail>
void check_schedule(const WorkloadSpec& w, int64_t dp, const Fail& fail) {
  const ParallelSpec& p = w.parallel;
  if (p.vp < 1)
    fail("parallel.vp = " + str(p.vp) + " must be >= 1");
  if (p.schedule != Schedule::INTERLEAVED) {
    if (p.vp != 1)
      fail("parallel.vp = " + str(p.vp) + " needs parallel.schedule = interleaved (virtual stages are its model chunks)");
  } else {
    if (p.vp < 2)
      fail("parallel.schedule = interleaved needs parallel.vp >= 2 model chunks per GPU, found vp = " + str(p.vp));
    if (p.pp < 2)
      fail("parallel.schedule = interleaved needs parallel.pp >= 2, found pp = " + str(p.pp));
    const int64_t chunks = static_cast<int64_t>(p.pp) * p.vp;
    if (p.chunk_layers.empty() && w.model.layers % chunks != 0)
      fail("parallel.pp*vp = " + str(p.pp) + "*" + str(p.vp) + " = " + str(chunks) + " does not divide model.layers = " +
           str(w.model.layers) + " (every model chunk holds the same number of layers)");
    const int64_t per_step = w.batch.micro_batch * dp;
    const int64_t m = per_step > 0 ? w.batch.global_batch / per_step : 0;
    if (m % p.pp != 0)
      fail("parallel.schedule = interleaved needs the micro-batches per pipeline (" + str(m) +
           " = global_batch / (micro_batch*dp)) to be a multiple of parallel.pp = " + str(p.pp) +
           " (Megatron-LM's interleaved schedule)");
  }
  if ((p.schedule == Schedule::ZB_H1 || p.schedule == Schedule::ZB_H2) && w.training.recompute == Recompute::FULL)
    fail(std::string("parallel.schedule = ") + (p.schedule == Schedule::ZB_H1 ? "zb-h1" : "zb-h2") +
         " cannot be combined with training.recompute = full: deferred weight-gradient passes need the recomputed "
         "activations kept until they run (use none or selective)");
}

/// Expert and context parallelism (docs/moe.md): ep needs experts, divides dp and the experts;
/// TP splits every expert's MLP; cp divides the sequence (tp*cp with sequence parallelism).
template <class Fail>
void check_moe_and_cp(const WorkloadSpec& w, int64_t dp, const Fail& fail) {
  const ParallelSpec& p = w.parallel;
  const ModelSpec& m = w.model;
  const MoeSpec& moe = m.moe;
  if (p.ep > 1 && !moe.enabled())
    fail("parallel.ep = " + str(p.ep) + " needs a mixture-of-experts model (model.moe.experts)");
  if (p.etp > 0 && !moe.enabled())
    fail("parallel.etp = " + str(p.etp) + " needs a mixture-of-experts model (model.moe.experts)");
  if (p.etp > 1 && p.etp != p.tp)
    fail("parallel.etp = " + str(p.etp) + " is not modelled with parallel.tp = " + str(p.tp) +
         ": use 1 (every expert whole on its GPU, the expert groups folded over the TP ranks) or tp (every "
         "expert split like the dense MLP)");
  if (moe.enabled()) {
    const int etp = p.expert_tp();
    if (!p.folds_experts()) {
      if (dp % p.ep != 0)
        fail("parallel.ep = " + str(p.ep) + " does not divide parallel.dp = " + str(dp) +
             " (expert parallelism subdivides the data-parallel group; expert-data-parallel size = dp / ep; "
             "parallel.etp below tp folds it over the tensor-parallel ranks too)");
    } else {
      const int64_t stage_gpus = static_cast<int64_t>(p.tp) * p.cp * dp;
      if (stage_gpus % (static_cast<int64_t>(etp) * p.ep) != 0)
        fail("parallel.etp*ep = " + str(etp) + "*" + str(p.ep) + " does not divide tp*cp*dp = " + str(stage_gpus) +
             " (with etp < tp the expert groups fold over the GPUs of a pipeline stage)");
      if (p.tp > 1 && !p.sp)
        fail("parallel.etp = " + str(etp) + " below parallel.tp = " + str(p.tp) +
             " needs parallel.sp: true (each TP rank routes its own share of the sequence)");
    }
    if (moe.experts % p.ep != 0)
      fail("parallel.ep = " + str(p.ep) + " does not divide model.moe.experts = " + str(moe.experts) +
           " (every EP rank holds the same number of experts)");
    if (moe.expert_ffn_hidden % etp != 0)
      fail(std::string(p.folds_experts() ? "parallel.etp = " : "parallel.tp = ") + str(etp) +
           " does not divide model.moe.expert_ffn_hidden = " + str(moe.expert_ffn_hidden) +
           " (every expert's MLP is split across its expert-tensor-parallel GPUs)");
    if (moe.top_k > moe.experts)
      fail("model.moe.top_k = " + str(moe.top_k) + " exceeds model.moe.experts = " + str(moe.experts));
  }
  if (p.ep_dispatch == EpDispatch::DEDUPLICATED && (!moe.enabled() || p.ep < 2))
    fail("parallel.ep_dispatch = deduplicated needs a mixture-of-experts model with parallel.ep >= 2, found ep = " +
         str(p.ep));
  if (p.ep_overlap) {
    if (!moe.enabled() || p.ep < 2)
      fail("parallel.ep_overlap needs a mixture-of-experts model with parallel.ep >= 2 (it hides the expert "
           "all-to-alls), found ep = " + str(p.ep));
    if (p.pp > 1 && p.schedule != Schedule::INTERLEAVED)
      fail("parallel.ep_overlap with parallel.pp = " + str(p.pp) +
           " needs parallel.schedule = interleaved (Megatron-Core's combined 1F1B pairs the interleaved "
           "schedule's steady-state passes)");
    if (p.pp == 1 && p.schedule != Schedule::ONE_F_ONE_B)
      fail("parallel.ep_overlap with parallel.pp = 1 needs parallel.schedule = 1f1b (each forward runs with the "
           "previous micro-batch's backward)");
    if (w.training.recompute == Recompute::FULL)
      fail("parallel.ep_overlap cannot be combined with training.recompute = full (use none or selective)");
  }
  if (p.cp > 1 && m.window_below_sequence())
    fail("parallel.cp = " + str(p.cp) + " with model.sliding_window = " + str(m.sliding_window) +
         " is not modelled (ring attention over windowed layers); use cp = 1 or a window of at least seq_len / 2");
  if (p.cp > 1) {
    const int64_t split = p.sp ? static_cast<int64_t>(p.cp) * p.tp : p.cp;
    if (m.seq_len % split != 0)
      fail("parallel.cp = " + str(p.cp) + " needs model.seq_len = " + str(m.seq_len) + " divisible by " +
           (p.sp ? "tp*cp = " : "cp = ") + str(split) + " (the sequence is split across CP ranks)");
  }
}

} // namespace

void check_precision(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  if (peak_flops(cluster.gpu, workload.precision).value() > 0)
    return;
  throw ModelError((workload.source.empty() ? std::string("workload") : workload.source) + ": precision: " +
                   precision_name(workload.precision) + " needs gpu.peak_flops." + precision_name(workload.precision) +
                   ", which " + (cluster.source.empty() ? cluster.name : cluster.source) + " does not give for " +
                   cluster.gpu.kind);
}

void check_layout(const ClusterSpec& cluster, WorkloadSpec& workload) {
  const std::string prefix = (workload.source.empty() ? std::string("workload") : workload.source) + ": ";
  const std::string cluster_name = cluster.source.empty() ? cluster.name : cluster.source;
  const auto fail = [&](const std::string& why) { throw ModelError(prefix + why); };
  const ModelSpec& m = workload.model;
  const ParallelSpec& p = workload.parallel;
  const int64_t tp = p.tp;
  const int64_t pp = p.pp;

  if (p.tp < 1 || p.pp < 1 || p.dp < 0) {
    fail("parallel: tp and pp must be >= 1 and dp >= 1 (or 0 to derive it), found tp = " + str(tp) +
         ", pp = " + str(pp) + ", dp = " + str(p.dp));
  }
  if (p.zero_stage < 0 || p.zero_stage > 3) {
    fail("parallel.zero_stage = " + str(p.zero_stage) + " but only stages 0, 1, 2 and 3 exist");
  }
  if (workload.batch.micro_batch < 1 || workload.batch.global_batch < 1) {
    fail("batch: global_batch and micro_batch must be >= 1, found " + str(workload.batch.global_batch) +
         " and " + str(workload.batch.micro_batch));
  }
  check_precision(cluster, workload);
  if (workload.training.offload_layers > 0 && cluster.gpu.host_bandwidth.value() <= 0) {
    fail("training.offload_layers moves activations to host memory and needs gpu.host_bandwidth (GPU <-> host, "
         "per direction), which " + cluster_name + " does not give");
  }
  if (workload.precision == Precision::FP8 && cluster.gpu.peak_bf16.value() <= 0) {
    fail("precision: fp8 runs the attention core, logits and norms in bf16 and needs gpu.peak_flops.bf16, which " +
         cluster_name + " does not give for " + cluster.gpu.kind);
  }

  const int64_t gpus = static_cast<int64_t>(cluster.nodes) * cluster.gpus_per_node;
  const std::string gpus_text = str(gpus) + " GPUs (" + cluster_name + ": " + str(cluster.nodes) +
                                " nodes * " + str(cluster.gpus_per_node) + " GPUs)";
  // Context parallelism multiplies the GPUs of one model replica: GPUs = tp*cp*pp*dp.
  const int64_t cp = p.cp;
  if (p.cp < 1 || p.ep < 1)
    fail("parallel: cp and ep must be >= 1, found cp = " + str(p.cp) + ", ep = " + str(p.ep));
  const auto tp_pp = checked_mul(tp * pp, cp).value_or(0);
  const std::string tp_pp_name = cp > 1 ? "tp*cp*pp" : "tp*pp";
  const std::string tp_pp_factors = cp > 1 ? str(tp) + "*" + str(cp) + "*" + str(pp) : str(tp) + "*" + str(pp);
  int64_t dp = p.dp;
  if (dp == 0) {
    if (tp_pp == 0 || gpus % tp_pp != 0) {
      fail("parallel: dp is omitted, but the cluster's " + gpus_text + " are not divisible by " + tp_pp_name +
           " = " + tp_pp_factors + " = " + str(tp_pp));
    }
    dp = gpus / tp_pp;
  } else {
    const auto total = checked_mul(tp_pp, dp);
    if (!total || *total != gpus) {
      fail("parallel: " + tp_pp_name + "*dp = " + tp_pp_factors + "*" + str(dp) + " = " +
           (total ? str(*total) : std::string("(overflow)")) + " but the cluster has " + gpus_text);
    }
  }

  const auto divides = [&](const char* degree_name, int64_t degree, const char* dim_name, int64_t dim,
                           const char* why) {
    if (dim % degree != 0) {
      fail(std::string(degree_name) + " = " + str(degree) + " does not divide " + dim_name + " = " +
           str(dim) + " (" + why + ")");
    }
  };
  divides("parallel.tp", tp, "model.heads", m.heads, "attention heads are split across TP ranks");
  divides("parallel.tp", tp, "model.kv_heads", m.kv_heads, "key/value heads are split across TP ranks");
  divides("parallel.tp", tp, "model.ffn_hidden", m.ffn_hidden, "the MLP is split across TP ranks");
  divides("parallel.tp", tp, "model.vocab", m.vocab, "the embedding and logits are split across TP ranks");
  if (workload.parallel.chunk_layers.empty()) {
    divides("parallel.pp", pp, "model.layers", m.layers,
            "every pipeline stage holds the same number of layers; parallel.chunk_layers splits them unevenly");
  } else {
    const auto& c = workload.parallel.chunk_layers;
    const int64_t chunks = static_cast<int64_t>(pp) * std::max(1, workload.parallel.vp);
    if (static_cast<int64_t>(c.size()) != chunks)
      fail("parallel.chunk_layers lists " + str(static_cast<int64_t>(c.size())) + " model chunks, expected pp*vp = " +
           str(chunks));
    int64_t sum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      sum += c[i];
      if (c[i] == 0 && i + 1 != c.size())
        fail("parallel.chunk_layers[" + str(static_cast<int64_t>(i)) +
             "] = 0: only the last model chunk (it holds the output layer) may have no layers");
    }
    if (sum != m.layers)
      fail("parallel.chunk_layers adds up to " + str(sum) + " layers, expected model.layers = " + str(m.layers));
  }
  if (const int64_t n = workload.training.offload_layers; n > 0) {
    // Megatron offloads fewer layers than a model chunk holds, and none it recomputes.
    int64_t smallest = m.layers / (static_cast<int64_t>(pp) * std::max(1, workload.parallel.vp));
    for (int64_t c : workload.parallel.chunk_layers)
      if (c > 0)
        smallest = std::min(smallest, c);
    if (n >= smallest)
      fail("training.offload_layers = " + str(n) + " must be fewer than a model chunk's layers (" + str(smallest) +
           ")");
    if (workload.training.recompute != Recompute::NONE)
      fail("training.offload_layers needs training.recompute: none (Megatron does not offload recomputed layers)");
  }
  if (workload.training.overlap_param_gather && workload.parallel.zero_stage != 1 && workload.parallel.zero_stage != 2)
    fail("training.overlap_param_gather overlaps the distributed optimizer's parameter all-gather and needs "
         "parallel.zero_stage 1 or 2, found " + str(workload.parallel.zero_stage));
  if (workload.training.zero3_fetch == Zero3Fetch::BLOCKING && workload.parallel.zero_stage != 3)
    fail("training.zero3_fetch: blocking is how ZeRO-3 gathers parameters and needs parallel.zero_stage 3, found " +
         str(workload.parallel.zero_stage));
  if (workload.training.recompute_layers > 0 && workload.training.recompute != Recompute::FULL)
    fail("training.recompute_layers = " + str(workload.training.recompute_layers) +
         " needs training.recompute: full");

  const auto per_step = checked_mul(workload.batch.micro_batch, dp);
  if (!per_step || workload.batch.global_batch % *per_step != 0) {
    fail("batch.global_batch = " + str(workload.batch.global_batch) +
         " is not divisible by batch.micro_batch*parallel.dp = " + str(workload.batch.micro_batch) + "*" +
         str(dp) + (p.dp == 0 ? " (dp derived)" : "") + " = " +
         (per_step ? str(*per_step) : std::string("(overflow)")));
  }
  check_schedule(workload, dp, fail);
  check_moe_and_cp(workload, dp, fail);
  if (p.sp && tp == 1) {
    fail("parallel.sp = true needs parallel.tp > 1, found tp = 1 (sequence parallelism splits along TP)");
  }
  if (p.sp && m.seq_len % tp != 0) {
    fail("parallel.sp = true needs model.seq_len = " + str(m.seq_len) +
         " divisible by parallel.tp = " + str(tp) + " (seq_len % tp = " + str(m.seq_len % tp) + ")");
  }
  workload.parallel.dp = static_cast<int>(dp);
}

std::string did_you_mean(const std::string& key, const std::vector<std::string>& candidates) {
  const std::string wanted = lowercase(key);
  const int64_t limit = std::max<int64_t>(1, static_cast<int64_t>(key.size()) / 3);
  std::string best;
  int64_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    const int64_t d = edit_distance(wanted, lowercase(candidate));
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

} // namespace stepsim::config
