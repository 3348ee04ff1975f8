// The `degraded` section of a cluster file or of a --degrade file (docs/degraded.md).

#include "config/fields.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace stepsim::config::detail {

namespace {

/// The entries of the list under `key` of `m`, each as a checked mapping, with its path.
template <class Each> void each_entry(const MapReader& m, std::string_view key, const Each& each) {
  const auto f = m.find(key);
  if (!f)
    return;
  const std::string list = m.path() + "." + std::string(key);
  if (!f->value().IsSequence() && !f->value().IsNull())
    f->fail("expected a list of mappings, found " + describe(f->value()));
  if (!f->value().IsSequence())
    return;
  const Document& doc = m.document();
  for (std::size_t i = 0; i < f->value().size(); ++i) {
    const YAML::Node node = f->value()[i];
    const std::string path = list + "[" + std::to_string(i) + "]";
    doc.attempt([&] {
      if (!node.IsMap())
        Field(doc, path, node, node).fail("expected a mapping, found " + describe(node));
      const MapReader entry(doc, path, node, node,
                            keys_of(File::CLUSTER, "degraded." + std::string(key) + "[]"));
      each(entry, doc.location(path, node));
    });
  }
}

/// An integer key of `entry` in [0, count), named `what` in the message.
int index_in(const MapReader& entry, std::string_view key, int count, const std::string& what) {
  const Field f = entry.require(key);
  const int v = read_int(f);
  if (v >= count)
    f.fail("expected " + what + " below " + std::to_string(count) + ", found " + std::to_string(v));
  return v;
}

/// `down: true`, the only value the key takes.
void require_true(const Field& f) {
  if (!read_bool(f))
    f.fail("expected true (leave the entry out for a working part)");
}

/// The number of leaves of a fat tree.
int leaves_of(const ClusterSpec& c) {
  const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
  return (c.nodes + per_leaf - 1) / per_leaf;
}

void read_gpus(const MapReader& d, ClusterSpec& c) {
  each_entry(d, "gpus", [&](const MapReader& e, const std::string& where) {
    DegradedSpec::Gpu g{.where = where};
    g.node = index_in(e, "node", c.nodes, "a node");
    g.gpu = index_in(e, "gpu", c.gpus_per_node, "a GPU of the node (gpus_per_node)");
    g.speed = read_number(e.require("speed"));
    for (const auto& x : c.degraded.gpus)
      if (x.node == g.node && x.gpu == g.gpu)
        e.fail("GPU " + std::to_string(g.gpu) + " of node " + std::to_string(g.node) +
               " is listed twice (also at " + x.where + ")");
    c.degraded.gpus.push_back(g);
  });
}

void read_nics(const MapReader& d, ClusterSpec& c) {
  each_entry(d, "nics", [&](const MapReader& e, const std::string& where) {
    DegradedSpec::Nic n{.where = where};
    n.node = index_in(e, "node", c.nodes, "a node");
    n.nic = index_in(e, "nic", c.nics_per_node, "a NIC of the node (nics.count)");
    if (e.has("bandwidth") == e.has("down"))
      e.fail("expected exactly one of 'bandwidth', 'down'");
    if (auto f = e.find("bandwidth")) {
      n.bandwidth = read_bandwidth(*f);
      if (n.bandwidth.value() > c.nic.bandwidth.value())
        f->fail("expected at most nics.bandwidth (" + std::to_string(c.nic.bandwidth.value() * 8e-9) +
                " Gbps), found " + f->value().Scalar());
    } else {
      require_true(e.require("down"));
      n.down = true;
    }
    for (const auto& x : c.degraded.nics)
      if (x.node == n.node && x.nic == n.nic)
        e.fail("NIC " + std::to_string(n.nic) + " of node " + std::to_string(n.node) +
               " is listed twice (also at " + x.where + ")");
    c.degraded.nics.push_back(n);
    if (n.down && std::count_if(c.degraded.nics.begin(), c.degraded.nics.end(),
                                [&](const DegradedSpec::Nic& x) { return x.node == n.node && x.down; }) ==
                      c.nics_per_node)
      e.fail("every NIC of node " + std::to_string(n.node) +
             " is down: the node has no network (list it under degraded.nodes instead)");
  });
}

void read_nodes(const MapReader& d, ClusterSpec& c) {
  each_entry(d, "nodes", [&](const MapReader& e, const std::string& where) {
    DegradedSpec::Node n{.where = where};
    n.node = index_in(e, "node", c.nodes, "a node");
    require_true(e.require("down"));
    for (const auto& x : c.degraded.nodes)
      if (x.node == n.node)
        e.fail("node " + std::to_string(n.node) + " is listed twice (also at " + x.where + ")");
    if (static_cast<int>(c.degraded.nodes.size()) + 1 == c.nodes)
      e.fail("every node of the cluster is down");
    c.degraded.nodes.push_back(n);
  });
}

/// A fat tree's leaf entry: `leaf` with `uplinks_down` or `bandwidth`.
void read_leaf(const MapReader& e, const std::string& where, ClusterSpec& c) {
  if (e.has("between") || e.has("down"))
    e.fail("expected 'leaf' with 'uplinks_down' or 'bandwidth' (fabric.kind fat_tree)");
  const int leaves = leaves_of(c);
  if (leaves < 2)
    e.require("leaf").fail("the fabric has one leaf and no uplinks (nodes_per_leaf >= nodes)");
  DegradedSpec::Leaf l{.where = where};
  l.leaf = index_in(e, "leaf", leaves, "a leaf");
  if (e.has("uplinks_down") == e.has("bandwidth"))
    e.fail("expected exactly one of 'uplinks_down', 'bandwidth'");
  const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
  const int nodes_here = std::min(per_leaf, c.nodes - l.leaf * per_leaf);
  const double capacity = nodes_here * c.nics_per_node * c.nic.bandwidth.value() / c.fabric.oversubscription;
  if (auto f = e.find("uplinks_down")) {
    const int uplinks = DegradedSpec::uplinks(nodes_here, c.nics_per_node, c.fabric.oversubscription);
    l.uplinks_down = read_int(*f);
    if (l.uplinks_down >= uplinks)
      f->fail("expected fewer than the leaf's " + std::to_string(uplinks) +
              " uplinks (one per NIC's bandwidth: NICs under the leaf / oversubscription), found " +
              std::to_string(l.uplinks_down));
  } else {
    const Field bw = e.require("bandwidth");
    l.bandwidth = read_bandwidth(bw);
    if (l.bandwidth.value() >= capacity)
      bw.fail("expected less than the leaf's uplink capacity (" + std::to_string(capacity * 8e-9) +
              " Gbps per direction), found " + bw.value().Scalar());
  }
  for (const auto& x : c.degraded.leaves)
    if (x.leaf == l.leaf)
      e.fail("leaf " + std::to_string(l.leaf) + " is listed twice (also at " + x.where + ")");
  c.degraded.leaves.push_back(l);
}

/// A graph fabric's link entry: `between` two switches with `bandwidth` or `down`.
void read_graph_link(const MapReader& e, const std::string& where, ClusterSpec& c) {
  if (e.has("leaf") || e.has("uplinks_down"))
    e.fail("expected 'between' with 'bandwidth' or 'down' (fabric.kind graph)");
  const Field between = e.require("between");
  if (!between.value().IsSequence() || between.value().size() != 2)
    between.fail("expected two switch names, found " + describe(between.value()));
  const auto& names = c.fabric.switches;
  int ends[2] = {0, 0};
  for (std::size_t k = 0; k < 2; ++k) {
    const Field f(e.document(), between.path() + "[" + std::to_string(k) + "]", between.value()[k],
                  between.value()[k]);
    const auto it = std::find(names.begin(), names.end(), f.string());
    if (it == names.end())
      f.fail("expected one of fabric.switches, found '" + f.string() + "'");
    ends[k] = static_cast<int>(it - names.begin());
  }
  double nominal = 0;
  for (const auto& l : c.fabric.links)
    if ((l.a == ends[0] && l.b == ends[1]) || (l.a == ends[1] && l.b == ends[0]))
      nominal += l.bandwidth.value();
  if (nominal == 0)
    between.fail("no link of fabric.links joins '" + names[static_cast<std::size_t>(ends[0])] + "' and '" +
                 names[static_cast<std::size_t>(ends[1])] + "'");
  if (e.has("bandwidth") == e.has("down"))
    e.fail("expected exactly one of 'bandwidth', 'down'");
  DegradedSpec::Link l{.a = ends[0], .b = ends[1], .where = where};
  if (auto f = e.find("bandwidth")) {
    l.bandwidth = read_bandwidth(*f);
    if (l.bandwidth.value() > nominal)
      f->fail("expected at most the links' " + std::to_string(nominal * 8e-9) + " Gbps, found " +
              f->value().Scalar());
  } else {
    require_true(e.require("down"));
  }
  for (const auto& x : c.degraded.links)
    if ((x.a == l.a && x.b == l.b) || (x.a == l.b && x.b == l.a))
      e.fail("the links between '" + names[static_cast<std::size_t>(l.a)] + "' and '" +
             names[static_cast<std::size_t>(l.b)] + "' are listed twice (also at " + x.where + ")");
  c.degraded.links.push_back(l);
  if (l.bandwidth.value() == 0 && unreached_switch(c.fabric, c.degraded.links) >= 0)
    e.fail("with these links down the fabric's switches holding NICs are no longer connected");
}

} // namespace

/// degraded.random_gpus: `share` of the GPUs of the nodes that are up and not listed under
/// degraded.gpus, drawn without replacement (a partial Fisher-Yates shuffle driven by
/// std::mt19937_64, whose sequence the C++ standard fixes: the same seed draws the same GPUs on
/// every machine), each at `speed`.
void read_random_gpus(const MapReader& d, ClusterSpec& c) {
  const auto f = d.find("random_gpus");
  if (!f)
    return;
  const MapReader r = f->map(keys_of(File::CLUSTER, d.path() + ".random_gpus"));
  const Field share_field = r.require("share");
  const double share = read_number(share_field);
  const double speed = read_number(r.require("speed"));
  uint64_t seed = DegradedSpec::RandomGpus{}.seed;
  optional_key(r, "seed", [&](const Field& k) { seed = static_cast<uint64_t>(read_integer(k)); });
  std::vector<std::pair<int, int>> pool; // (node, GPU)
  for (int node = 0; node < c.nodes; ++node) {
    if (std::any_of(c.degraded.nodes.begin(), c.degraded.nodes.end(),
                    [node](const DegradedSpec::Node& x) { return x.node == node; }))
      continue;
    for (int gpu = 0; gpu < c.gpus_per_node; ++gpu)
      if (std::none_of(c.degraded.gpus.begin(), c.degraded.gpus.end(),
                       [&](const DegradedSpec::Gpu& x) { return x.node == node && x.gpu == gpu; }))
        pool.emplace_back(node, gpu);
  }
  const auto n = static_cast<size_t>(std::llround(share * static_cast<double>(pool.size())));
  if (n == 0)
    share_field.fail("expected a share that draws at least one of the " + std::to_string(pool.size()) +
                     " GPUs it draws from (share x GPUs rounds to 0)");
  c.degraded.random_gpus = DegradedSpec::RandomGpus{.share = share, .speed = speed, .seed = seed};
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; ++i)
    std::swap(pool[i], pool[i + static_cast<size_t>(rng() % (pool.size() - i))]);
  pool.resize(n);
  std::sort(pool.begin(), pool.end());
  const std::string where =
      d.document().location(f->path(), f->value()) + " (drawn with seed " + std::to_string(seed) + ")";
  for (const auto& [node, gpu] : pool)
    c.degraded.gpus.push_back(DegradedSpec::Gpu{.node = node, .gpu = gpu, .speed = speed, .where = where});
}

void read_degraded(const MapReader& d, ClusterSpec& c) {
  const Document& doc = d.document();
  doc.attempt([&] { read_gpus(d, c); });
  doc.attempt([&] { read_nics(d, c); });
  doc.attempt([&] { read_nodes(d, c); });
  doc.attempt([&] { read_random_gpus(d, c); });
  doc.attempt([&] {
    each_entry(d, "links", [&](const MapReader& e, const std::string& where) {
      if (c.fabric.kind == FabricKind::FAT_TREE)
        read_leaf(e, where, c);
      else if (c.fabric.kind == FabricKind::GRAPH)
        read_graph_link(e, where, c);
      else
        e.fail("not for fabric.kind rail_optimized (degrade its NICs under degraded.nics)");
    });
  });
}

} // namespace stepsim::config::detail
