// Rings with channels (all-reduce, all-gather, reduce-scatter), pipelined chains (broadcast,
// reduce) and NCCL's double binary tree all-reduce (docs/collectives.md).

#include "collectives/algorithms.hpp"

#include <algorithm>
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
  std::vector<int32_t> gpu; ///< vertex -> GPU
  std::vector<int> parent;  ///< vertex -> parent vertex, -1 for the root
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

} // namespace

void append_tree_all_reduce(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                            const TopologyView& v) {
  Builder b(p);
  const auto groups = by_node(gpus, v);
  const int nch = groups.size() > 1 ? channels(gpus, v) : 1;
  const double per_tree = size.value() / (2.0 * nch);
  const int C = chunks_for(per_tree);
  const double chunk = per_tree / C;
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
        std::vector<int64_t> head_up(static_cast<size_t>(V), -1), last_up(static_cast<size_t>(V), -1);
        std::vector<int64_t> head_down(static_cast<size_t>(V), -1), last_down(static_cast<size_t>(V), -1);
        // One edge direction: head after the upstream heads; body after the head; last chunk
        // after the body (or head) and the upstream last chunks.
        const auto edge = [&](int32_t src, int32_t dst, const std::vector<int64_t>& heads,
                              const std::vector<int64_t>& lasts, int64_t& head, int64_t& last) {
          head = b.add(src, dst, C > 1 ? chunk : per_tree, heads);
          last = head;
          if (C == 1)
            return;
          std::vector<int64_t> deps = lasts;
          deps.push_back(body > 0 ? static_cast<int64_t>(b.add(src, dst, body, {head})) : head);
          last = b.add(src, dst, chunk, deps);
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
          edge(a, pa, heads, lasts, head_up[static_cast<size_t>(x)], last_up[static_cast<size_t>(x)]);
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
          edge(t.gpu[static_cast<size_t>(par)], t.gpu[static_cast<size_t>(x)], heads, lasts,
               head_down[static_cast<size_t>(x)], last_down[static_cast<size_t>(x)]);
        }
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
  if (form == CollectiveForm::COARSE)
    p.tail_delay += alpha * static_cast<double>(std::max(0, C - 3));
}

} // namespace stepsim::collectives::detail
