#include "config/config.hpp"

#include "config/hf_config.hpp"
#include "config/schema.hpp"
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

using schema::File;

/// The keys of `mapping` in `file`, as declared in schema.cpp.
std::vector<std::string_view> keys_of(File file, std::string_view mapping) {
  const auto& keys = schema::children(file, mapping);
  return {keys.begin(), keys.end()};
}

// Each key is read in its own step: a collecting document keeps the step's error and reading
// goes on with the next key (docs/schema.md, "Errors").

/// Reads `key` of `m` with `read` when it is given.
template <class Read> void optional_key(const MapReader& m, std::string_view key, const Read& read) {
  m.document().attempt([&] {
    if (auto f = m.find(key))
      read(*f);
  });
}

/// Reads `key` of `m` with `read`; its absence is an error.
template <class Read> void required_key(const MapReader& m, std::string_view key, const Read& read) {
  m.document().attempt([&] { read(m.require(key)); });
}

/// The mapping under `key` of `m` (keys as declared for `file`), or nullopt when it is absent
/// (an error when `required`) or not a mapping.
std::optional<MapReader> section(const MapReader& m, std::string_view key, File file, bool required = true) {
  std::optional<MapReader> out;
  m.document().attempt([&] {
    if (auto f = required ? std::optional<Field>(m.require(key)) : m.find(key))
      out.emplace(f->map(keys_of(file, m.path().empty() ? key : m.path() + "." + std::string(key))));
  });
  return out;
}

void read_link(const MapReader& m, LinkSpec& link) {
  required_key(m, "bandwidth", [&](const Field& f) { link.bandwidth = positive_bandwidth(f); });
  required_key(m, "latency", [&](const Field& f) { link.latency = latency(f); });
  required_key(m, "efficiency", [&](const Field& f) { link.efficiency = fraction(f); });
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

/// The index of the switch `f` names among `switches`, else fails.
int switch_index(const Field& f, const std::vector<std::string>& switches) {
  const std::string text = f.string();
  const auto it = std::find(switches.begin(), switches.end(), text);
  if (it == switches.end())
    f.fail("expected one of fabric.switches, found '" + text + "'");
  return static_cast<int>(it - switches.begin());
}

/// Connectivity: every switch that holds a NIC reaches every other one.
void check_graph_connected(const MapReader& fabric, const FabricSpec& f) {
  std::vector<std::vector<int>> adj(f.switches.size());
  for (const auto& l : f.links) {
    adj[static_cast<std::size_t>(l.a)].push_back(l.b);
    adj[static_cast<std::size_t>(l.b)].push_back(l.a);
  }
  std::vector<char> seen(f.switches.size(), 0);
  std::vector<int> pending{f.nic_switch[0][0]};
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
  for (const auto& per_node : f.nic_switch)
    for (int s : per_node)
      if (!seen[static_cast<std::size_t>(s)])
        fabric.require("links").fail("switch '" + f.switches[static_cast<std::size_t>(s)] +
                                     "' holds NICs but is not connected to switch '" +
                                     f.switches[static_cast<std::size_t>(f.nic_switch[0][0])] + "'");
}

/// A graph fabric's `switches`, `links` and `attach` (docs/schema.md).
void read_graph_fabric(const Document& doc, const MapReader& fabric, ClusterSpec& c) {
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
  const auto switch_of = [&](const Field& f) { return switch_index(f, c.fabric.switches); };
  // Links: full duplex between two distinct switches.
  i = 0;
  for (const YAML::Node& node : list_of(fabric.require("links"), "a list of links")) {
    const std::string path = "fabric.links[" + std::to_string(i++) + "]";
    const MapReader link(doc, path, node, node, keys_of(File::CLUSTER, "fabric.links[]"));
    const Field between = link.require("between");
    if (!between.value().IsSequence() || between.value().size() != 2)
      between.fail("expected two switch names, found " + detail::describe(between.value()));
    FabricSpec::GraphLink l;
    l.a = switch_of(Field(doc, path + ".between[0]", between.value()[0], between.value()[0]));
    l.b = switch_of(Field(doc, path + ".between[1]", between.value()[1], between.value()[1]));
    if (l.a == l.b)
      between.fail("expected two different switches, found '" + c.fabric.switches[static_cast<std::size_t>(l.a)] +
                   "' twice");
    l.bandwidth = positive_bandwidth(link.require("bandwidth"));
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
    const MapReader at(doc, path, node, node, keys_of(File::CLUSTER, "fabric.attach[]"));
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
      nic_sw.assign(static_cast<std::size_t>(c.nics_per_node), switch_of(*f));
    } else {
      const Field rails = at.require("rails");
      if (!rails.value().IsSequence() || rails.value().size() != static_cast<std::size_t>(c.nics_per_node))
        rails.fail("expected one switch per NIC (" + std::to_string(c.nics_per_node) + "), found " +
                   detail::describe(rails.value()));
      for (std::size_t k = 0; k < rails.value().size(); ++k)
        nic_sw.push_back(switch_of(
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
  check_graph_connected(fabric, c.fabric);
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
  if (graph)
    read_graph_fabric(doc, fabric, c);
}

/// The `gpu` mapping (docs/schema.md).
void read_gpu(const Document& doc, const MapReader& gpu, GpuSpec& g) {
  required_key(gpu, "kind", [&](const Field& f) { g.kind = f.string(); });
  if (auto peak = section(gpu, "peak_flops", File::CLUSTER)) {
    doc.attempt([&] {
      if (!peak->has("bf16") && !peak->has("fp16"))
        peak->fail("expected at least one of bf16, fp16, found neither");
    });
    optional_key(*peak, "bf16", [&](const Field& f) { g.peak_bf16 = positive_flops(f); });
    optional_key(*peak, "fp16", [&](const Field& f) { g.peak_fp16 = positive_flops(f); });
    optional_key(*peak, "fp8", [&](const Field& f) { g.peak_fp8 = positive_flops(f); });
  }
  required_key(gpu, "hbm_capacity", [&](const Field& f) { g.hbm_capacity = positive_bytes(f); });
  required_key(gpu, "hbm_bandwidth", [&](const Field& f) { g.hbm_bandwidth = positive_bandwidth(f); });
  required_key(gpu, "compute_efficiency", [&](const Field& f) { g.compute_efficiency = fraction(f); });
  required_key(gpu, "memory_efficiency", [&](const Field& f) { g.memory_efficiency = fraction(f); });
  optional_key(gpu, "runtime_overhead", [&](const Field& f) { g.runtime_overhead = nonnegative_bytes(f); });
  optional_key(gpu, "allocator_fragmentation", [&](const Field& f) {
    g.allocator_fragmentation = f.number("a number >= 1", [](double v) { return v >= 1.0; });
  });
  // Kernel profile: relative to the cluster file (to the working directory when given with --set);
  // `none` or absent = the roofline (docs/schema.md).
  optional_key(gpu, "profile", [&](const Field& f) {
    const std::string text = f.string();
    if (text == "none")
      return;
    std::filesystem::path p(text);
    if (p.is_relative() && f.where().rfind("--set ", 0) != 0)
      p = std::filesystem::path(doc.file()).parent_path() / p;
    if (const std::string why = input_file_problem(p); !why.empty())
      f.fail("kernel profile '" + p.lexically_normal().string() + "': " + why + " (or `none` for the roofline)");
    g.profile = p.lexically_normal().string();
  });
  optional_key(gpu, "overlap_slowdown", [&](const Field& f) {
    g.overlap_slowdown = f.number("a number in [1, 10] (the sanity limit)", [](double v) { return v >= 1.0 && v <= 10.0; });
  });
  optional_key(gpu, "gemm_efficiency", [&](const Field& f) { g.gemm_efficiency = fraction(f); });
  optional_key(gpu, "memory_bound_efficiency", [&](const Field& f) { g.memory_bound_efficiency = fraction(f); });
  optional_key(gpu, "launch_overhead", [&](const Field& f) { g.launch_overhead = latency(f); });
  optional_key(gpu, "host_bandwidth", [&](const Field& f) { g.host_bandwidth = positive_bandwidth(f); });
  optional_key(gpu, "host_memory", [&](const Field& f) { g.host_memory = positive_bytes(f); });
  optional_key(gpu, "pass_overhead", [&](const Field& f) { g.pass_overhead = latency(f); });
  optional_key(gpu, "list_collective_per_rank", [&](const Field& f) { g.list_collective_per_rank = latency(f); });
}

/// Inside a node: an NVSwitch (optionally with NVLink SHARP) or PCIe; exactly one of the two.
void read_intra_node(const Document& doc, const MapReader& top, ClusterSpec& c) {
  if (top.has("pcie")) {
    doc.attempt([&] {
      if (top.has("nvswitch"))
        top.require("pcie").fail("expected either nvswitch or pcie, found both");
    });
    c.intra = IntraNodeKind::PCIE;
    if (auto pcie = section(top, "pcie", File::CLUSTER)) {
      read_link(*pcie, c.nvswitch);
      optional_key(*pcie, "host_bandwidth", [&](const Field& f) { c.pcie_host_bandwidth = positive_bandwidth(f); });
    }
  } else if (auto nvs = section(top, "nvswitch", File::CLUSTER)) {
    read_link(*nvs, c.nvswitch);
    if (auto nvls = section(*nvs, "nvls", File::CLUSTER, false)) {
      c.nvls.enabled = true;
      required_key(*nvls, "efficiency", [&](const Field& f) { c.nvls.efficiency = fraction(f); });
      required_key(*nvls, "latency", [&](const Field& f) { c.nvls.latency = latency(f); });
    }
  }
}

/// The `fabric` mapping; the graph's lists need `nodes` and `nics.count`, read before.
void read_fabric(const Document& doc, const MapReader& fabric, ClusterSpec& c) {
  const bool kind = doc.attempt([&] {
    c.fabric.kind = fabric.require("kind").choice<FabricKind>({{"fat_tree", FabricKind::FAT_TREE},
                                                               {"rail_optimized", FabricKind::RAIL_OPTIMIZED},
                                                               {"graph", FabricKind::GRAPH}});
  });
  if (kind && c.nodes > 0 && c.nics_per_node > 0) // else already an error
    doc.attempt([&] { read_fabric_extras(doc, fabric, c); });
  optional_key(fabric, "nodes_per_leaf", [&](const Field& f) { c.fabric.nodes_per_leaf = limited_int(f, MAX_NODES); });
  optional_key(fabric, "oversubscription", [&](const Field& f) {
    c.fabric.oversubscription = f.number("a number >= 1", [](double v) { return v >= 1.0; });
    at_most(f, c.fabric.oversubscription, 1e6, f.scalar("a number"), "1e6");
  });
  optional_key(fabric, "switch_latency", [&](const Field& f) { c.fabric.switch_latency = latency(f); });
}

ClusterSpec read_cluster(const Document& doc) {
  const auto top = MapReader::root(doc, keys_of(File::CLUSTER, ""));
  ClusterSpec c;
  c.source = doc.file();
  required_key(top, "name", [&](const Field& f) { c.name = f.string(); });
  required_key(top, "nodes", [&](const Field& f) { c.nodes = limited_int(f, INT_MAX_VALUE); });
  required_key(top, "gpus_per_node", [&](const Field& f) {
    c.gpus_per_node = limited_int(f, MAX_PER_NODE);
    if (static_cast<int64_t>(c.nodes) * c.gpus_per_node > MAX_GPUS)
      f.fail("nodes * gpus_per_node = " + std::to_string(c.nodes) + "*" + std::to_string(c.gpus_per_node) +
             " exceeds " + std::to_string(MAX_GPUS) + " GPUs (the size limit)");
  });
  if (auto gpu = section(top, "gpu", File::CLUSTER))
    read_gpu(doc, *gpu, c.gpu);
  read_intra_node(doc, top, c);
  if (auto nics = section(top, "nics", File::CLUSTER)) {
    required_key(*nics, "count", [&](const Field& f) { c.nics_per_node = limited_int(f, MAX_PER_NODE); });
    read_link(*nics, c.nic);
  }
  if (auto fabric = section(top, "fabric", File::CLUSTER))
    read_fabric(doc, *fabric, c);
  return c;
}

// ---- workload ------------------------------------------------------------------------------

/// `model.moe` over `moe` (defaults, or what a Hugging Face config gave). docs/moe.md.
void read_moe(const Field& field, const ModelSpec& model, MoeSpec& moe) {
  const auto m = field.map(keys_of(File::WORKLOAD, "model.moe"));
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
    const auto r = f->map(keys_of(File::WORKLOAD, "model.moe.routing"));
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
  const auto m = f.map(keys_of(File::WORKLOAD, "model.mla"));
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

/// Sizes a Hugging Face config gave and the workload file did not override obey the limits of
/// the workload keys (docs/schema.md, "Size limits") before any product of them is formed: a
/// config is as likely to hold a typo as a workload file.
void check_hf_sizes(const MapReader& m, const ModelSpec& model) {
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

/// The attention heads against the hidden size: heads divide it (unless model.head_dim is given),
/// kv_heads divide the heads, heads x head_dim within the hidden size's limit.
void check_heads(const MapReader& m, const ModelSpec& model) {
  // With model.head_dim the heads need not divide the hidden size (Qwen3, Mistral NeMo).
  if (model.head_dim_set <= 0 && model.hidden % model.heads != 0) {
    const std::string why = "expected a divisor of model.hidden = " + std::to_string(model.hidden) + ", found " +
                            std::to_string(model.heads) + " (hidden % heads = " +
                            std::to_string(model.hidden % model.heads) + "; or give model.head_dim)";
    if (auto f = m.find("heads"))
      f->fail(why);
    m.fail("heads: " + why);
  }
}

void check_kv_heads(const MapReader& m, const ModelSpec& model) {
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
}

/// model.from_hf: a Hugging Face config.json (relative to the workload file) gives the defaults.
void read_from_hf(const Field& f, const std::string& workload_file, ModelSpec& model) {
  std::filesystem::path p(f.string());
  if (p.is_relative() && f.where().rfind("--set ", 0) != 0)
    p = std::filesystem::path(workload_file).parent_path() / p;
  if (const std::string why = input_file_problem(p); !why.empty())
    f.fail("Hugging Face config '" + p.lexically_normal().string() + "': " + why);
  try {
    model = read_hf_config(p.lexically_normal());
  } catch (const ConfigError& e) {
    f.fail(std::string("cannot use the Hugging Face config: ") + e.what());
  }
}

/// The `model` mapping. Checks that combine several keys run only while the file is clean.
ModelSpec read_model(const MapReader& m, const std::string& workload_name, const std::string& workload_file) {
  const Document& doc = m.document();
  ModelSpec model;
  // With model.from_hf, keys given here override the config, and the otherwise required keys
  // become optional.
  const bool from_hf = m.has("from_hf");
  optional_key(m, "from_hf", [&](const Field& f) { read_from_hf(f, workload_file, model); });
  model.name = workload_name;
  optional_key(m, "name", [&](const Field& f) { model.name = f.string(); });
  const auto limit_of = [](std::string_view key) {
    for (const SizeLimit& l : MODEL_SIZE_LIMITS)
      if (l.key == key)
        return l.max;
    return INT64_MAX_VALUE;
  };
  const auto size = [&](std::string_view key, int64_t& out) {
    doc.attempt([&] {
      if (auto f = m.find(key))
        out = limited_int64(*f, limit_of(key));
      else if (!from_hf)
        out = limited_int64(m.require(key), limit_of(key));
    });
  };
  size("layers", model.layers);
  size("hidden", model.hidden);
  size("heads", model.heads);
  optional_key(m, "head_dim", [&](const Field& f) { model.head_dim_set = limited_int64(f, MAX_HEAD_DIM); });
  if (doc.clean())
    doc.attempt([&] { check_heads(m, model); });
  if (!from_hf)
    model.kv_heads = model.heads;
  optional_key(m, "kv_heads", [&](const Field& f) { model.kv_heads = limited_int64(f, limit_of("kv_heads")); });
  if (doc.clean())
    doc.attempt([&] { check_kv_heads(m, model); });
  size("ffn_hidden", model.ffn_hidden);
  size("vocab", model.vocab);
  size("seq_len", model.seq_len);
  doc.attempt([&] {
    if (auto f = from_hf ? m.find("mlp") : std::optional<Field>(m.require("mlp"))) {
      model.mlp = f->choice<MlpKind>({{"gelu", MlpKind::GELU}, {"swiglu", MlpKind::SWIGLU}});
      // GPT-style (gelu) and Llama-style (swiglu) families differ in these defaults.
      const bool gpt = model.mlp == MlpKind::GELU;
      model.norm = gpt ? NormKind::LAYERNORM : NormKind::RMSNORM;
      model.position = gpt ? PositionEmbedding::LEARNED : PositionEmbedding::ROTARY;
      model.bias = gpt;
      model.tied_embeddings = gpt;
    }
  });
  optional_key(m, "norm", [&](const Field& f) {
    model.norm = f.choice<NormKind>({{"layernorm", NormKind::LAYERNORM}, {"rmsnorm", NormKind::RMSNORM}});
  });
  optional_key(m, "position_embedding", [&](const Field& f) {
    model.position =
        f.choice<PositionEmbedding>({{"learned", PositionEmbedding::LEARNED}, {"rotary", PositionEmbedding::ROTARY}});
  });
  optional_key(m, "bias", [&](const Field& f) { model.bias = f.boolean(); });
  optional_key(m, "tied_embeddings", [&](const Field& f) { model.tied_embeddings = f.boolean(); });
  optional_key(m, "dropout", [&](const Field& f) { model.dropout = f.boolean(); });
  if (doc.clean()) // over the layers and sizes read above
    optional_key(m, "moe", [&](const Field& f) { read_moe(f, model, model.moe); });
  optional_key(m, "mla", [&](const Field& f) { read_mla(f, model.mla); });
  doc.attempt([&] { read_sliding_window(m, model); });
  optional_key(m, "mtp_layers", [&](const Field& f) {
    model.mtp_layers = f.integer(0, 16, "an integer in 0..16 (multi-token prediction depth)");
  });
  if (from_hf && doc.clean())
    doc.attempt([&] { check_hf_sizes(m, model); });
  if (doc.clean())
    doc.attempt([&] { check_mla(m, model); });
  return model;
}

ParallelSpec read_parallel(const MapReader& m) {
  ParallelSpec p;
  required_key(m, "tp", [&](const Field& f) { p.tp = limited_int(f, MAX_DEGREE); });
  required_key(m, "pp", [&](const Field& f) { p.pp = limited_int(f, MAX_DEGREE); });
  optional_key(m, "dp", [&](const Field& f) { p.dp = limited_int(f, MAX_DEGREE); }); // omitted: derived
  required_key(m, "schedule", [&](const Field& f) {
    p.schedule = f.choice<Schedule>({{"gpipe", Schedule::GPIPE},
                                     {"1f1b", Schedule::ONE_F_ONE_B},
                                     {"interleaved", Schedule::INTERLEAVED},
                                     {"zb-h1", Schedule::ZB_H1},
                                     {"zb-h2", Schedule::ZB_H2}});
  });
  optional_key(m, "vp", [&](const Field& f) { p.vp = limited_int(f, MAX_DEGREE); });
  optional_key(m, "sp", [&](const Field& f) { p.sp = f.boolean(); });
  optional_key(m, "pp_scatter_gather", [&](const Field& f) { p.pp_scatter_gather = f.boolean(); });
  optional_key(m, "tp_grad_overlap", [&](const Field& f) { p.tp_grad_overlap = f.boolean(); });
  optional_key(m, "zero_stage", [&](const Field& f) { p.zero_stage = static_cast<int>(f.integer(0, 3, "an integer in 0..3")); });
  optional_key(m, "cp", [&](const Field& f) { p.cp = limited_int(f, MAX_DEGREE); });
  optional_key(m, "ep", [&](const Field& f) { p.ep = limited_int(f, MAX_DEGREE); });
  optional_key(m, "etp", [&](const Field& f) { p.etp = limited_int(f, MAX_DEGREE); });
  optional_key(m, "ep_overlap", [&](const Field& f) { p.ep_overlap = f.boolean(); });
  optional_key(m, "chunk_layers", [&](const Field& f) {
    const YAML::Node& list = f.value();
    if (!list.IsSequence() || list.size() == 0)
      f.fail("expected a non-empty list of layer counts, one per model chunk (pp*vp of them)");
    for (const YAML::Node& item : list) {
      int64_t n = -1;
      if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, n) || n < 0 || n > 100000)
        f.fail("expected layer counts in 0..100000, found '" +
               (item.IsScalar() ? item.Scalar() : std::string("a non-scalar entry")) + "'");
      p.chunk_layers.push_back(n);
    }
  });
  optional_key(m, "ep_dispatch", [&](const Field& f) {
    p.ep_dispatch =
        f.choice<EpDispatch>({{"all_to_all", EpDispatch::ALL_TO_ALL}, {"deduplicated", EpDispatch::DEDUPLICATED}});
  });
  return p;
}

/// training.recompute_modules (with recompute: selective).
RecomputeModules read_recompute_modules(const Field& f) {
  const YAML::Node& list = f.value();
  if (!list.IsSequence() || list.size() == 0)
    f.fail("expected a non-empty list of core_attn, layernorm, mlp, moe_act, mla_up_proj");
  RecomputeModules modules{.core_attn = false};
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
      f.fail("expected modules among core_attn, layernorm, mlp, moe_act, mla_up_proj, found '" +
             (item.IsScalar() ? name : std::string("a non-scalar entry")) +
             "' (Megatron's moe and shared_experts are not modelled)");
    if (modules.*module)
      f.fail("module '" + name + "' listed twice");
    modules.*module = true;
  }
  return modules;
}

void read_training(const MapReader& m, TrainingSpec& t) {
  optional_key(m, "dp_bucket", [&](const Field& f) { t.dp_bucket = positive_bytes(f); });
  optional_key(m, "optimizer_bytes_per_param", [&](const Field& f) {
    t.optimizer_bytes_per_param = f.number("a number >= 0", [](double v) { return v >= 0.0; });
    at_most(f, t.optimizer_bytes_per_param, 1024, f.scalar("a number"), "1024");
  });
  const bool recompute = m.document().attempt([&] {
    if (auto f = m.find("recompute"))
      t.recompute = f->choice<Recompute>(
          {{"none", Recompute::NONE}, {"selective", Recompute::SELECTIVE}, {"full", Recompute::FULL}});
  });
  if (recompute) // the modules need the recompute mode
    optional_key(m, "recompute_modules", [&](const Field& f) {
      if (t.recompute != Recompute::SELECTIVE)
        f.fail("recompute_modules needs training.recompute: selective");
      t.recompute_modules = read_recompute_modules(f);
    });
  optional_key(m, "flash_attention", [&](const Field& f) { t.flash_attention = f.boolean(); });
  optional_key(m, "zero3_prefetch", [&](const Field& f) {
    t.zero3_prefetch = static_cast<int>(f.integer(0, 64, "an integer in 0..64"));
  });
  optional_key(m, "zero3_fetch", [&](const Field& f) {
    t.zero3_fetch = f.choice<Zero3Fetch>({{"prefetch", Zero3Fetch::PREFETCH}, {"blocking", Zero3Fetch::BLOCKING}});
  });
  optional_key(m, "overlap_param_gather", [&](const Field& f) { t.overlap_param_gather = f.boolean(); });
  optional_key(m, "grad_reduce_in_fp32", [&](const Field& f) { t.grad_reduce_in_fp32 = f.boolean(); });
  optional_key(m, "cross_entropy", [&](const Field& f) {
    t.cross_entropy = f.choice<CrossEntropy>({{"fp32", CrossEntropy::FP32}, {"fused", CrossEntropy::FUSED}});
  });
  optional_key(m, "fp8_params", [&](const Field& f) { t.fp8_params = f.boolean(); });
  optional_key(m, "offload_layers", [&](const Field& f) { // bounded by the layout (check_layout)
    t.offload_layers = f.integer(0, 1 << 20, "an integer >= 0");
  });
  optional_key(m, "recompute_layers", [&](const Field& f) { // with recompute: full (check_layout)
    t.recompute_layers = f.integer(0, 1 << 20, "an integer >= 0 (0: every layer)");
  });
}

/// micro_batch x seq_len tokens and micro_batch x heads x seq_len^2 scores within their limits.
void check_micro_batch(const MapReader& batch, const WorkloadSpec& w) {
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

/// The training keys that depend on the precision and the model.
void check_training(const MapReader& training, const WorkloadSpec& w) {
  if (auto f = training.find("fp8_params"); f && w.training.fp8_params && w.precision != Precision::FP8)
    f->fail("fp8 primary weights need precision: fp8");
  if (auto f = training.find("recompute_modules")) {
    if (w.training.recompute_modules.mlp && w.model.moe.enabled())
      f->fail("module 'mlp' (the dense MLP) is not modelled for a mixture-of-experts model; its experts take "
              "moe_act");
    if (w.training.recompute_modules.moe_act && !w.model.moe.enabled())
      f->fail("module 'moe_act' needs a mixture-of-experts model (model.moe.experts)");
    if (w.training.recompute_modules.mla_up_proj && !w.model.mla.enabled())
      f->fail("module 'mla_up_proj' needs multi-head latent attention (model.mla)");
  }
}

void read_collectives(const MapReader& coll, CollectivesSpec& c) {
  const auto algorithm = [](const Field& a) {
    return a.choice<CollectiveAlgorithm>({{"auto", CollectiveAlgorithm::AUTO},
                                          {"ring", CollectiveAlgorithm::RING},
                                          {"tree", CollectiveAlgorithm::TREE},
                                          {"hierarchical", CollectiveAlgorithm::HIERARCHICAL},
                                          {"nvls", CollectiveAlgorithm::NVLS},
                                          {"pairwise", CollectiveAlgorithm::PAIRWISE}});
  };
  optional_key(coll, "tp", [&](const Field& f) { c.tp = algorithm(f); });
  optional_key(coll, "pp", [&](const Field& f) { c.pp = algorithm(f); });
  optional_key(coll, "dp", [&](const Field& f) { c.dp = algorithm(f); });
  optional_key(coll, "ep", [&](const Field& f) { c.ep = algorithm(f); });
  optional_key(coll, "cp", [&](const Field& f) { c.cp = algorithm(f); });
}

WorkloadSpec read_workload(const Document& doc) {
  const auto top = MapReader::root(doc, keys_of(File::WORKLOAD, ""));
  WorkloadSpec w;
  w.source = doc.file();
  required_key(top, "name", [&](const Field& f) { w.name = f.string(); });
  if (auto model = section(top, "model", File::WORKLOAD))
    w.model = read_model(*model, w.name, doc.file());
  if (auto batch = section(top, "batch", File::WORKLOAD)) {
    required_key(*batch, "global_batch", [&](const Field& f) { w.batch.global_batch = limited_int64(f, INT_MAX_VALUE); });
    required_key(*batch, "micro_batch", [&](const Field& f) { w.batch.micro_batch = limited_int64(f, int64_t{1} << 20); });
    if (doc.clean())
      doc.attempt([&] { check_micro_batch(*batch, w); });
  }
  if (auto parallel = section(top, "parallel", File::WORKLOAD))
    w.parallel = read_parallel(*parallel);
  required_key(top, "precision", [&](const Field& f) {
    w.precision = f.choice<Precision>({{"bf16", Precision::BF16}, {"fp16", Precision::FP16}, {"fp8", Precision::FP8}});
  });
  if (auto training = section(top, "training", File::WORKLOAD, false)) {
    read_training(*training, w.training);
    if (doc.clean())
      doc.attempt([&] { check_training(*training, w); });
  }
  if (auto coll = section(top, "collectives", File::WORKLOAD, false))
    read_collectives(*coll, w.collectives);
  return w;
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
  Document doc(file, /*collect=*/true);
  for (const auto& o : overrides) {
    if (o.path.starts_with(CLUSTER_PREFIX)) {
      doc.apply(o.path.substr(CLUSTER_PREFIX.size()), o.value, shown(o));
    }
  }
  ClusterSpec c = read_cluster(doc);
  doc.throw_errors();
  return c;
}

WorkloadSpec load_workload(const std::filesystem::path& file, const std::vector<Override>& overrides) {
  Document doc(file, /*collect=*/true);
  for (const auto& o : overrides) {
    if (!o.path.starts_with(CLUSTER_PREFIX)) {
      doc.apply(o.path, o.value, shown(o));
    }
  }
  WorkloadSpec w = read_workload(doc);
  doc.throw_errors();
  return w;
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
