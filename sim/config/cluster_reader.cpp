// The cluster file (docs/schema.md, "Cluster file").

#include "config/fields.hpp"

#include "core/input_file.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace stepsim::config::detail {

namespace {

// Largest cluster accepted (docs/schema.md, "Size limits"): nodes x gpus_per_node (building its
// platform: ~50 s, 7 GB). The limits of single keys are declared in schema.cpp.
constexpr int64_t MAX_GPUS = int64_t{1} << 20;

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

} // namespace

int unreached_switch(const FabricSpec& f, const std::vector<DegradedSpec::Link>& down) {
  std::vector<std::vector<int>> adj(f.switches.size());
  const auto is_down = [&](const FabricSpec::GraphLink& l) {
    return std::any_of(down.begin(), down.end(), [&](const DegradedSpec::Link& d) {
      return d.bandwidth.value() == 0 && ((d.a == l.a && d.b == l.b) || (d.a == l.b && d.b == l.a));
    });
  };
  for (const auto& l : f.links) {
    if (is_down(l))
      continue;
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
        return s;
  return -1;
}

namespace {

/// Connectivity: every switch that holds a NIC reaches every other one.
void check_graph_connected(const MapReader& fabric, const FabricSpec& f) {
  if (const int s = unreached_switch(f, {}); s >= 0)
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
    switches.fail("expected at most 4096 switches (the size limit), found " +
                  std::to_string(switches.value().size()));
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
      between.fail("expected two different switches, found '" +
                   c.fabric.switches[static_cast<std::size_t>(l.a)] + "' twice");
    l.bandwidth = read_bandwidth(link.require("bandwidth"));
    if (auto f = link.find("latency"))
      l.latency = read_duration(*f);
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
      fabric.require(key).fail(
          "not for kind: graph (its links and attach entries give the capacities and leaves)");
  if (auto f = fabric.find("tiers"))
    c.fabric.tiers = read_int(*f);
  for (std::string_view key : {"leaves_per_pod", "spine_oversubscription"})
    if (c.fabric.tiers != 3 && fabric.has(key))
      fabric.require(key).fail("only with tiers: 3");
  if (c.fabric.tiers == 3) {
    c.fabric.leaves_per_pod = read_int(fabric.require("leaves_per_pod"));
    if (auto f = fabric.find("spine_oversubscription"))
      c.fabric.spine_oversubscription = read_number(*f);
  }
  if (graph)
    read_graph_fabric(doc, fabric, c);
}

/// The `gpu` mapping (docs/schema.md).
void read_gpu(const Document& doc, const MapReader& gpu, GpuSpec& g) {
  required_key(gpu, "kind", [&](const Field& f) { g.kind = read_string(f); });
  if (auto peak = section(gpu, "peak_flops", File::CLUSTER)) {
    doc.attempt([&] {
      if (!peak->has("bf16") && !peak->has("fp16"))
        peak->fail("expected at least one of bf16, fp16, found neither");
    });
    optional_key(*peak, "bf16", [&](const Field& f) { g.peak_bf16 = read_flops(f); });
    optional_key(*peak, "fp16", [&](const Field& f) { g.peak_fp16 = read_flops(f); });
    optional_key(*peak, "fp8", [&](const Field& f) { g.peak_fp8 = read_flops(f); });
  }
  required_key(gpu, "hbm_capacity", [&](const Field& f) { g.hbm_capacity = read_bytes(f); });
  required_key(gpu, "hbm_bandwidth", [&](const Field& f) { g.hbm_bandwidth = read_bandwidth(f); });
  required_key(gpu, "compute_efficiency", [&](const Field& f) { g.compute_efficiency = read_number(f); });
  required_key(gpu, "memory_efficiency", [&](const Field& f) { g.memory_efficiency = read_number(f); });
  optional_key(gpu, "runtime_overhead", [&](const Field& f) { g.runtime_overhead = read_bytes(f); });
  optional_key(gpu, "allocator_fragmentation",
               [&](const Field& f) { g.allocator_fragmentation = read_number(f); });
  // Kernel profile: relative to the cluster file (to the working directory when given with --set);
  // `none` or absent = the roofline (docs/schema.md).
  optional_key(gpu, "profile", [&](const Field& f) {
    const std::string text = read_string(f);
    if (text == "none")
      return;
    std::filesystem::path p(text);
    if (p.is_relative() && f.where().rfind("--set ", 0) != 0)
      p = std::filesystem::path(doc.file()).parent_path() / p;
    if (const std::string why = input_file_problem(p); !why.empty())
      f.fail("kernel profile '" + p.lexically_normal().string() + "': " + why +
             " (or `none` for the roofline)");
    g.profile = p.lexically_normal().string();
  });
  optional_key(gpu, "overlap_slowdown", [&](const Field& f) { g.overlap_slowdown = read_number(f); });
  optional_key(gpu, "gemm_efficiency", [&](const Field& f) { g.gemm_efficiency = read_number(f); });
  optional_key(gpu, "memory_bound_efficiency",
               [&](const Field& f) { g.memory_bound_efficiency = read_number(f); });
  optional_key(gpu, "launch_overhead", [&](const Field& f) { g.launch_overhead = read_duration(f); });
  optional_key(gpu, "host_bandwidth", [&](const Field& f) { g.host_bandwidth = read_bandwidth(f); });
  optional_key(gpu, "host_memory", [&](const Field& f) { g.host_memory = read_bytes(f); });
  optional_key(gpu, "pass_overhead", [&](const Field& f) { g.pass_overhead = read_duration(f); });
  optional_key(gpu, "kernel_cv", [&](const Field& f) { g.kernel_cv = read_number(f); });
  optional_key(gpu, "list_collective_per_rank",
               [&](const Field& f) { g.list_collective_per_rank = read_duration(f); });
  read_gpu_variant(doc, gpu, g);
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
      optional_key(*pcie, "host_bandwidth",
                   [&](const Field& f) { c.pcie_host_bandwidth = read_bandwidth(f); });
    }
  } else if (auto nvs = section(top, "nvswitch", File::CLUSTER)) {
    read_link(*nvs, c.nvswitch);
    if (auto nvls = section(*nvs, "nvls", File::CLUSTER, false)) {
      c.nvls.enabled = true;
      required_key(*nvls, "efficiency", [&](const Field& f) { c.nvls.efficiency = read_number(f); });
      required_key(*nvls, "latency", [&](const Field& f) { c.nvls.latency = read_duration(f); });
    }
  }
}

/// The `fabric` mapping; the graph's lists need `nodes` and `nics.count`, read before.
void read_fabric(const Document& doc, const MapReader& fabric, ClusterSpec& c) {
  const bool kind = doc.attempt([&] {
    c.fabric.kind =
        read_choice<FabricKind>(fabric.require("kind"), {{"fat_tree", FabricKind::FAT_TREE},
                                                         {"rail_optimized", FabricKind::RAIL_OPTIMIZED},
                                                         {"graph", FabricKind::GRAPH}});
  });
  if (kind && c.nodes > 0 && c.nics_per_node > 0) // else already an error
    doc.attempt([&] { read_fabric_extras(doc, fabric, c); });
  optional_key(fabric, "nodes_per_leaf", [&](const Field& f) { c.fabric.nodes_per_leaf = read_int(f); });
  optional_key(fabric, "oversubscription",
               [&](const Field& f) { c.fabric.oversubscription = read_number(f); });
  optional_key(fabric, "switch_latency", [&](const Field& f) { c.fabric.switch_latency = read_duration(f); });
}

} // namespace

ClusterSpec read_cluster(const Document& doc) {
  const auto top = MapReader::root(doc, keys_of(File::CLUSTER, ""));
  ClusterSpec c;
  c.source = doc.file();
  required_key(top, "name", [&](const Field& f) { c.name = read_string(f); });
  required_key(top, "nodes", [&](const Field& f) { c.nodes = read_int(f); });
  required_key(top, "gpus_per_node", [&](const Field& f) { c.gpus_per_node = read_int(f); });
  doc.attempt([&] {
    if (static_cast<int64_t>(c.nodes) * c.gpus_per_node <= MAX_GPUS)
      return;
    // Blame the key a --set override gave, else gpus_per_node (the product's second factor).
    const Field nodes = top.require("nodes");
    const Field per_node = top.require("gpus_per_node");
    const Field& blamed = nodes.where().starts_with("--set") ? nodes : per_node;
    blamed.fail("nodes * gpus_per_node = " + std::to_string(c.nodes) + "*" + std::to_string(c.gpus_per_node) +
                " exceeds " + std::to_string(MAX_GPUS) + " GPUs (the size limit)");
  });
  if (auto gpu = section(top, "gpu", File::CLUSTER))
    read_gpu(doc, *gpu, c.gpu);
  read_intra_node(doc, top, c);
  if (auto nics = section(top, "nics", File::CLUSTER)) {
    required_key(*nics, "count", [&](const Field& f) { c.nics_per_node = read_int(f); });
    read_link(*nics, c.nic);
  }
  if (auto fabric = section(top, "fabric", File::CLUSTER))
    read_fabric(doc, *fabric, c);
  // The degraded parts name nodes, GPUs, NICs and switches: read when those are.
  if (doc.clean())
    if (auto degraded = section(top, "degraded", File::CLUSTER, false))
      read_degraded(*degraded, c);
  return c;
}

} // namespace stepsim::config::detail
