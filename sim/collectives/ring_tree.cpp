// Rings with channels (all-reduce, all-gather, reduce-scatter), pipelined chains (broadcast,
// reduce) and NCCL's double binary tree all-reduce (docs/collectives.md).

#include "collectives/algorithms.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace stepsim::collectives::detail {

// ---- ring with channels -------------------------------------------------------------------------
namespace {

/// Channel c's ring: every node's GPUs rotated so that the ring enters the node at a GPU on NIC c
/// (and leaves it from a GPU on another NIC), nodes in order.
std::vector<int32_t> channel_ring(const std::vector<std::vector<int32_t>>& groups, int c, int nch) {
  std::vector<int32_t> order;
  for (const auto& g : groups) {
    const size_t m = g.size();
    const size_t shift = (static_cast<size_t>(c) * m / static_cast<size_t>(nch)) % m;
    for (size_t i = 0; i < m; ++i)
      order.push_back(g[(i + shift) % m]);
  }
  return order;
}

} // namespace

std::vector<std::vector<int32_t>> channel_rings(std::span<const int32_t> gpus, const TopologyView& v) {
  const int nch = channels(gpus, v);
  if (nch == 1)
    return {std::vector<int32_t>(gpus.begin(), gpus.end())};
  const auto groups = by_node(gpus, v);
  std::vector<std::vector<int32_t>> out;
  for (int c = 0; c < nch; ++c)
    out.push_back(channel_ring(groups, c, nch));
  return out;
}

void append_ring(FlowProgram& p, CollectiveOp op, const std::vector<std::vector<int32_t>>& rings, Bytes size,
                 CollectiveForm form, const TopologyView& v) {
  Builder b(p);
  const int nch = static_cast<int>(rings.size());
  const int n = static_cast<int>(rings.front().size());
  const int steps = ring_steps(op, n);
  const double chunk = size.value() / n / nch;
  Seconds alpha(0.0);
  for (const auto& ring : rings) {
    const uint32_t base = b.size();
    if (form == CollectiveForm::COARSE) {
      for (int i = 0; i < n; ++i) {
        const int32_t src = ring[static_cast<size_t>(i)], dst = ring[static_cast<size_t>((i + 1) % n)];
        b.add(src, dst, chunk * steps);
        if (v.latency)
          alpha = std::max(alpha, v.latency(src, dst));
      }
      continue;
    }
    for (int k = 0; k < steps; ++k)
      for (int i = 0; i < n; ++i) {
        const int64_t prev = k > 0 ? static_cast<int64_t>(base) + (k - 1) * n : -1;
        b.add(ring[static_cast<size_t>(i)], ring[static_cast<size_t>((i + 1) % n)], chunk,
              {prev < 0 ? -1 : prev + i, prev < 0 ? -1 : prev + (i + n - 1) % n});
      }
  }
  if (form == CollectiveForm::COARSE)
    p.tail_delay += alpha * static_cast<double>(steps - 1);
}

// ---- chains (broadcast, reduce) -----------------------------------------------------------------

/// Pipelined chain seq[0] -> seq[1] -> ... carrying `bytes`, C chunks.
void append_chain(FlowProgram& p, const std::vector<int32_t>& seq, double bytes, CollectiveForm form,
                  const TopologyView& v) {
  Builder b(p);
  const int n = static_cast<int>(seq.size());
  const int C = chunks_for(bytes);
  const double chunk = bytes / C;
  if (form == CollectiveForm::COARSE) {
    Seconds alpha(0.0);
    double beta = std::numeric_limits<double>::infinity();
    for (int i = 0; i + 1 < n; ++i) {
      b.add(seq[static_cast<size_t>(i)], seq[static_cast<size_t>(i + 1)], bytes);
      if (v.latency)
        alpha = std::max(alpha, v.latency(seq[static_cast<size_t>(i)], seq[static_cast<size_t>(i + 1)]));
      if (v.bandwidth)
        beta =
            std::min(beta, v.bandwidth(seq[static_cast<size_t>(i)], seq[static_cast<size_t>(i + 1)]).value());
    }
    p.tail_delay +=
        alpha * static_cast<double>(n + C - 3) + Seconds(std::isfinite(beta) ? (n - 2) * chunk / beta : 0.0);
    return;
  }
  const uint32_t base = b.size();
  const int edges = n - 1;
  for (int k = 0; k < C; ++k)
    for (int i = 0; i < edges; ++i) {
      const int64_t same_sender = k > 0 ? base + static_cast<int64_t>((k - 1) * edges + i) : -1;
      const int64_t arrived = i > 0 ? base + static_cast<int64_t>(k * edges + i - 1) : -1;
      b.add(seq[static_cast<size_t>(i)], seq[static_cast<size_t>(i + 1)], chunk, {same_sender, arrived});
    }
}

namespace {

// ---- double binary tree ---------------------------------------------------------------------------

struct Tree {
  std::vector<int32_t> gpu;  ///< vertex -> GPU
  std::vector<int32_t> node; ///< vertex -> index of its node in the group's node order
  std::vector<int> parent;   ///< vertex -> parent vertex, -1 for the root
  std::vector<std::vector<int>> children;
  int root = 0;
  int depth = 0;
};

/// Trees over nodes (heap layout over the node order, reversed for the mirror tree) with a chain
/// inside each node (rotated per channel, reversed in the mirror tree).
Tree build_tree(const std::vector<std::vector<int32_t>>& groups, bool mirror, int c, int nch) {
  Tree t;
  const int N = static_cast<int>(groups.size());
  std::vector<int> head(static_cast<size_t>(N));
  std::vector<int> node_at(static_cast<size_t>(N));
  for (int j = 0; j < N; ++j)
    node_at[static_cast<size_t>(j)] = mirror ? N - 1 - j : j;
  for (int j = 0; j < N; ++j) {
    const auto& g = groups[static_cast<size_t>(node_at[static_cast<size_t>(j)])];
    const size_t m = g.size();
    const size_t shift = (static_cast<size_t>(c) * m / static_cast<size_t>(nch)) % m;
    std::vector<int32_t> chain;
    for (size_t i = 0; i < m; ++i)
      chain.push_back(g[(i + shift) % m]);
    if (mirror)
      std::reverse(chain.begin(), chain.end());
    head[static_cast<size_t>(j)] = static_cast<int>(t.gpu.size());
    for (size_t i = 0; i < m; ++i) {
      t.gpu.push_back(chain[i]);
      t.node.push_back(node_at[static_cast<size_t>(j)]);
      t.parent.push_back(i == 0 ? -1 : static_cast<int>(t.gpu.size()) - 2);
    }
  }
  for (int j = 1; j < N; ++j)
    t.parent[static_cast<size_t>(head[static_cast<size_t>(j)])] = head[static_cast<size_t>((j - 1) / 2)];
  t.root = 0;
  t.children.assign(t.gpu.size(), {});
  for (size_t x = 0; x < t.gpu.size(); ++x)
    if (t.parent[x] >= 0)
      t.children[static_cast<size_t>(t.parent[x])].push_back(static_cast<int>(x));
  for (size_t x = 0; x < t.gpu.size(); ++x) {
    int d = 0;
    for (int y = static_cast<int>(x); t.parent[static_cast<size_t>(y)] >= 0;
         y = t.parent[static_cast<size_t>(y)])
      ++d;
    t.depth = std::max(t.depth, d);
  }
  return t;
}

/// Symmetry sampling of a tree pair over N nodes (docs/engine.md), for one of the two trees
/// (heap positions j over the group's node order, the mirror tree over the reversed order): the
/// positions whose flows decide when the observed nodes finish. The observed nodes and their
/// ancestors, and below each of these the deepest branch under each child (the leftmost path of a
/// heap subtree is its deepest), so that every wait on the observed nodes' paths, pipeline fill
/// included, is simulated hop by hop.
std::vector<char> sampled_positions(const std::vector<char>& observed, bool mirror) {
  const int N = static_cast<int>(observed.size());
  std::vector<char> on_path(static_cast<size_t>(N), 0), keep(static_cast<size_t>(N), 0);
  for (int g = 0; g < N; ++g) {
    if (!observed[static_cast<size_t>(g)])
      continue;
    for (int j = mirror ? N - 1 - g : g; !on_path[static_cast<size_t>(j)]; j = (j - 1) / 2) {
      on_path[static_cast<size_t>(j)] = 1;
      if (j == 0)
        break;
    }
  }
  for (int j = 0; j < N; ++j) {
    if (!on_path[static_cast<size_t>(j)])
      continue;
    keep[static_cast<size_t>(j)] = 1;
    for (int c = 2 * j + 1; c <= 2 * j + 2 && c < N; ++c)
      for (int d = c; d < N; d = 2 * d + 1)
        keep[static_cast<size_t>(d)] = 1;
  }
  return keep;
}

/// Where a coarse tree flow sits: its tree (channel x 2 + mirror), the vertex that sends up or
/// receives down, and its slot (0..2 head, body, last chunk up; 3..5 the same down).
struct TreeFlowSite {
  int32_t tree = 0;
  int32_t vertex = 0;
  int32_t slot = 0;
};
constexpr int TREE_SLOTS = 6;

/// Samples `whole`, the coarse tree pair of every channel (`trees`, flows located by `sites`),
/// into `p`: a flow is kept when one of its ends is on a node kept in either tree (a kept node
/// carries all its flows, both trees and every channel, so its links are shared as in the whole
/// tree). A kept flow's wait on a flow left out becomes a wait on that flow's twin: the same slot
/// of the vertex with the same place in its node's chain on a kept node at the same depth of the
/// same tree whose subtree is as high, which under symmetry finishes at the same moment.
void sample_tree(FlowProgram& p, const FlowProgram& whole, const std::vector<TreeFlowSite>& sites,
                 const std::vector<Tree>& trees, const std::vector<char>& observed) {
  const int N = static_cast<int>(observed.size());
  const auto depth = [](int j) {
    int d = 0;
    for (int q = j; q > 0; q = (q - 1) / 2)
      ++d;
    return d;
  };
  const auto height = [N](int j) {
    int h = 0;
    for (int q = j; 2 * q + 1 < N; q = 2 * q + 1)
      ++h;
    return h;
  };
  std::vector<char> kept_node(static_cast<size_t>(N), 0);
  std::vector<std::vector<char>> positions;
  for (bool mirror : {false, true}) {
    positions.push_back(sampled_positions(observed, mirror));
    for (int j = 0; j < N; ++j)
      if (positions.back()[static_cast<size_t>(j)])
        kept_node[static_cast<size_t>(mirror ? N - 1 - j : j)] = 1;
  }
  // Per tree: each vertex's twin (itself on a kept node), and the flow of each (vertex, slot).
  std::vector<std::vector<int32_t>> twin(trees.size());
  std::vector<std::vector<int64_t>> flow_at(trees.size());
  for (size_t ti = 0; ti < trees.size(); ++ti) {
    const Tree& t = trees[ti];
    const bool mirror = ti % 2 == 1;
    const std::vector<char>& pos = positions[mirror ? 1 : 0];
    std::vector<int32_t> first(static_cast<size_t>(N), -1), count(static_cast<size_t>(N), 0);
    for (size_t x = 0; x < t.gpu.size(); ++x) {
      const auto g = static_cast<size_t>(t.node[x]);
      if (first[g] < 0)
        first[g] = static_cast<int32_t>(x);
      ++count[g];
    }
    // A kept position per (depth, height): the first in heap order; the leftmost of each depth
    // (on the root's deepest branch, always kept) where no kept one is as high.
    std::vector<std::vector<int32_t>> rep;
    for (int j = 0; j < N; ++j) {
      if (!pos[static_cast<size_t>(j)])
        continue;
      const auto d = static_cast<size_t>(depth(j)), h = static_cast<size_t>(height(j));
      if (rep.size() <= d)
        rep.resize(d + 1);
      if (rep[d].size() <= h)
        rep[d].resize(h + 1, -1);
      if (rep[d][h] < 0)
        rep[d][h] = j;
    }
    twin[ti].resize(t.gpu.size());
    for (size_t x = 0; x < t.gpu.size(); ++x) {
      const int g = t.node[x];
      twin[ti][x] = static_cast<int32_t>(x);
      if (kept_node[static_cast<size_t>(g)])
        continue;
      const int j = mirror ? N - 1 - g : g;
      const auto d = static_cast<size_t>(depth(j)), h = static_cast<size_t>(height(j));
      int r = (1 << d) - 1;
      if (d < rep.size() && h < rep[d].size() && rep[d][h] >= 0)
        r = rep[d][h];
      const auto rg = static_cast<size_t>(mirror ? N - 1 - r : r);
      const int32_t chain = static_cast<int32_t>(x) - first[static_cast<size_t>(g)];
      twin[ti][x] = first[rg] + std::min(chain, count[rg] - 1);
    }
    flow_at[ti].assign(t.gpu.size() * TREE_SLOTS, -1);
  }
  for (size_t f = 0; f < sites.size(); ++f)
    flow_at[static_cast<size_t>(sites[f].tree)][static_cast<size_t>(sites[f].vertex) * TREE_SLOTS +
                                                static_cast<size_t>(sites[f].slot)] = static_cast<int64_t>(f);
  const auto node_kept = [&](const Tree& t, int x) {
    return kept_node[static_cast<size_t>(t.node[static_cast<size_t>(x)])] != 0;
  };
  std::vector<int64_t> renumbered(whole.flows.size(), -1);
  int64_t next = static_cast<int64_t>(p.flows.size());
  for (size_t f = 0; f < whole.flows.size(); ++f) {
    const Tree& t = trees[static_cast<size_t>(sites[f].tree)];
    const int x = sites[f].vertex;
    const int par = t.parent[static_cast<size_t>(x)];
    if (node_kept(t, x) || node_kept(t, par))
      renumbered[f] = next++;
  }
  Builder b(p);
  for (size_t f = 0; f < whole.flows.size(); ++f) {
    if (renumbered[f] < 0)
      continue;
    std::vector<int64_t> deps;
    for (uint32_t d : whole.deps_of(f)) {
      int64_t id = renumbered[d];
      if (id < 0) {
        const TreeFlowSite& s = sites[d];
        const auto ti = static_cast<size_t>(s.tree);
        const int64_t tw =
            flow_at[ti][static_cast<size_t>(twin[ti][static_cast<size_t>(s.vertex)]) * TREE_SLOTS +
                        static_cast<size_t>(s.slot)];
        id = tw >= 0 ? renumbered[static_cast<size_t>(tw)] : -1;
      }
      if (id >= 0 && std::find(deps.begin(), deps.end(), id) == deps.end())
        deps.push_back(id);
    }
    b.add(whole.flows[f].src, whole.flows[f].dst, whole.flows[f].bytes, deps);
  }
}

} // namespace

void append_tree_all_reduce(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                            const TopologyView& v) {
  Builder b(p);
  const auto groups = by_node(gpus, v);
  const int nch = groups.size() > 1 ? channels(gpus, v) : 1;
  const double per_tree = size.value() / (2.0 * nch);
  const int C = chunks_for(per_tree);
  const double chunk = per_tree / C;
  // Symmetry sampling (coarse form only): the whole program is built aside, then sampled.
  std::vector<char> observed;
  if (v.observed_nodes && form == CollectiveForm::COARSE) {
    observed.assign(groups.size(), 0);
    bool any = false;
    for (size_t g = 0; g < groups.size(); ++g) {
      const auto node = static_cast<size_t>(v.node_of(groups[g].front()));
      observed[g] = node < v.observed_nodes->size() && (*v.observed_nodes)[node];
      any = any || observed[g];
    }
    if (!any)
      observed.clear();
  }
  FlowProgram whole;
  std::vector<TreeFlowSite> sites;
  std::vector<Tree> trees;
  Builder bw(observed.empty() ? p : whole);
  Seconds alpha(0.0);
  for (int c = 0; c < nch; ++c)
    for (bool mirror : {false, true}) {
      const Tree t = build_tree(groups, mirror, c, nch);
      const int V = static_cast<int>(t.gpu.size());
      if (form == CollectiveForm::COARSE) {
        // Per edge and direction three flows: a head (the first chunk) and a last chunk, each
        // forwarded after its arrival as in the fine form, and between them a body (the other
        // C-2 chunks) streaming behind the head: pipeline fill and drain are simulated,
        // contention included; only the fine form's per-chunk latencies are added analytically.
        const double body = per_tree - 2 * chunk;
        const auto tree_index = static_cast<int32_t>(trees.size());
        std::vector<int64_t> head_up(static_cast<size_t>(V), -1), last_up(static_cast<size_t>(V), -1);
        std::vector<int64_t> head_down(static_cast<size_t>(V), -1), last_down(static_cast<size_t>(V), -1);
        const auto add = [&](int32_t src, int32_t dst, double bytes, std::span<const int64_t> deps, int x,
                             int slot) {
          const int64_t id = bw.add(src, dst, bytes, deps);
          if (!observed.empty())
            sites.push_back({tree_index, x, slot});
          return id;
        };
        // One edge direction (vertex x, up: slots 0..2, down: 3..5): head after the upstream
        // heads; body after the head; last chunk after the body (or head) and the upstream lasts.
        const auto edge = [&](int32_t src, int32_t dst, const std::vector<int64_t>& heads,
                              const std::vector<int64_t>& lasts, int x, int slot, int64_t& head,
                              int64_t& last) {
          head = add(src, dst, C > 1 ? chunk : per_tree, heads, x, slot);
          last = head;
          if (C == 1)
            return;
          std::vector<int64_t> deps = lasts;
          const std::array<int64_t, 1> after_head{head};
          deps.push_back(body > 0 ? add(src, dst, body, after_head, x, slot + 1) : head);
          last = add(src, dst, chunk, deps, x, slot + 2);
        };
        for (int x = V - 1; x >= 0; --x) {
          const int par = t.parent[static_cast<size_t>(x)];
          if (par < 0)
            continue;
          const int32_t a = t.gpu[static_cast<size_t>(x)], pa = t.gpu[static_cast<size_t>(par)];
          std::vector<int64_t> heads, lasts;
          for (int ch : t.children[static_cast<size_t>(x)]) {
            heads.push_back(head_up[static_cast<size_t>(ch)]);
            lasts.push_back(last_up[static_cast<size_t>(ch)]);
          }
          edge(a, pa, heads, lasts, x, 0, head_up[static_cast<size_t>(x)], last_up[static_cast<size_t>(x)]);
          if (v.latency)
            alpha = std::max({alpha, v.latency(a, pa), v.latency(pa, a)});
        }
        for (int x = 0; x < V; ++x) {
          const int par = t.parent[static_cast<size_t>(x)];
          if (par < 0)
            continue;
          std::vector<int64_t> heads, lasts;
          if (t.parent[static_cast<size_t>(par)] < 0) {
            for (int ch : t.children[static_cast<size_t>(par)]) {
              heads.push_back(head_up[static_cast<size_t>(ch)]);
              lasts.push_back(last_up[static_cast<size_t>(ch)]);
            }
          } else {
            heads.push_back(head_down[static_cast<size_t>(par)]);
            lasts.push_back(last_down[static_cast<size_t>(par)]);
          }
          edge(t.gpu[static_cast<size_t>(par)], t.gpu[static_cast<size_t>(x)], heads, lasts, x, 3,
               head_down[static_cast<size_t>(x)], last_down[static_cast<size_t>(x)]);
        }
        if (!observed.empty())
          trees.push_back(t);
        continue;
      }
      // Vertices are numbered parents before children, so up flows are created deepest first and
      // down flows root first; idx_up / idx_down remember each flow's index.
      std::vector<int64_t> idx_up(static_cast<size_t>(C * V), -1), idx_down(static_cast<size_t>(C * V), -1);
      auto at = [V](int k, int x) { return static_cast<size_t>(k * V + x); };
      for (int k = 0; k < C; ++k) {
        for (int x = V - 1; x >= 0; --x) {
          const int par = t.parent[static_cast<size_t>(x)];
          if (par < 0)
            continue;
          std::vector<int64_t> deps;
          for (int ch : t.children[static_cast<size_t>(x)])
            deps.push_back(idx_up[at(k, ch)]);
          if (k > 0)
            deps.push_back(idx_up[at(k - 1, x)]);
          idx_up[at(k, x)] =
              b.add(t.gpu[static_cast<size_t>(x)], t.gpu[static_cast<size_t>(par)], chunk, deps);
        }
        for (int x = 0; x < V; ++x) {
          const int par = t.parent[static_cast<size_t>(x)];
          if (par < 0)
            continue;
          std::vector<int64_t> deps;
          if (t.parent[static_cast<size_t>(par)] < 0) {
            for (int ch : t.children[static_cast<size_t>(par)])
              deps.push_back(idx_up[at(k, ch)]);
          } else {
            deps.push_back(idx_down[at(k, par)]);
          }
          if (k > 0)
            deps.push_back(idx_down[at(k - 1, x)]);
          idx_down[at(k, x)] =
              b.add(t.gpu[static_cast<size_t>(par)], t.gpu[static_cast<size_t>(x)], chunk, deps);
        }
      }
    }
  if (!observed.empty())
    sample_tree(p, whole, sites, trees, observed);
  if (form == CollectiveForm::COARSE)
    p.tail_delay += alpha * static_cast<double>(std::max(0, C - 3));
}

} // namespace stepsim::collectives::detail
