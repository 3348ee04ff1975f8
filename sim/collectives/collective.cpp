#include "collectives/collective.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

namespace stepsim::collectives {

namespace {

/// The tree all-reduce's bus bandwidth as a share of the ring's in the algorithm choice (NCCL's
/// tuner, docs/collectives.md "Automatic choice"); the simulated tree's flows are not scaled.
constexpr double TREE_BANDWIDTH_SHARE = 0.92;

/// Bytes per pipeline chunk of the chunked algorithms (tree, chain, NVLS) in their fine form.
constexpr double CHUNK_BYTES = 1024.0 * 1024.0;
constexpr int MAX_CHUNKS = 64;

int chunks_for(double bytes) {
  return static_cast<int>(std::clamp(std::ceil(bytes / CHUNK_BYTES), 1.0, static_cast<double>(MAX_CHUNKS)));
}

/// The group's GPUs by node, nodes in order of first appearance, GPUs in the given order.
std::vector<std::vector<int32_t>> by_node(std::span<const int32_t> gpus, const TopologyView& v) {
  std::vector<std::vector<int32_t>> out;
  std::vector<int> node_ids;
  for (int32_t g : gpus) {
    const int node = v.node_of(g);
    const auto it = std::find(node_ids.begin(), node_ids.end(), node);
    if (it == node_ids.end()) {
      node_ids.push_back(node);
      out.push_back({g});
    } else {
      out[static_cast<size_t>(it - node_ids.begin())].push_back(g);
    }
  }
  return out;
}

/// Appends flows; dependencies given as flow indices.
class Builder {
public:
  explicit Builder(FlowProgram& p) : p_(p) {
    if (p_.dep_begin.empty())
      p_.dep_begin.push_back(0);
  }
  uint32_t add(int32_t src, int32_t dst, double bytes, std::initializer_list<int64_t> deps = {}) {
    p_.flows.push_back({src, dst, bytes});
    for (int64_t d : deps)
      if (d >= 0)
        p_.deps.push_back(static_cast<uint32_t>(d));
    p_.dep_begin.push_back(static_cast<uint32_t>(p_.deps.size()));
    return static_cast<uint32_t>(p_.flows.size() - 1);
  }
  uint32_t add(int32_t src, int32_t dst, double bytes, const std::vector<int64_t>& deps) {
    p_.flows.push_back({src, dst, bytes});
    for (int64_t d : deps)
      if (d >= 0)
        p_.deps.push_back(static_cast<uint32_t>(d));
    p_.dep_begin.push_back(static_cast<uint32_t>(p_.deps.size()));
    return static_cast<uint32_t>(p_.flows.size() - 1);
  }
  [[nodiscard]] uint32_t size() const { return static_cast<uint32_t>(p_.flows.size()); }

private:
  FlowProgram& p_;
};

/// Appends `one` to `into` to run concurrently with what is there (no barrier between them):
/// its flows keep their own dependencies, shifted; the tail delay is the longer of the two.
void merge_concurrent(FlowProgram& into, const FlowProgram& one) {
  Builder b(into);
  const uint32_t base = b.size();
  for (size_t f = 0; f < one.flows.size(); ++f) {
    std::vector<int64_t> deps;
    for (uint32_t d : one.deps_of(f))
      deps.push_back(base + d);
    b.add(one.flows[f].src, one.flows[f].dst, one.flows[f].bytes, deps);
  }
  into.tail_delay = std::max(into.tail_delay, one.tail_delay);
}

struct PairFigures {
  Seconds alpha;
  BytesPerSec beta = BytesPerSec(std::numeric_limits<double>::infinity());
  bool present = false;
};

/// Latency and bandwidth of a representative intra-node and inter-node pair of the group.
struct GroupShape {
  int n = 0;
  int nodes = 0;
  int per_node = 0; ///< GPUs of the group on its fullest node
  bool uniform = true;
  PairFigures intra, inter;
};

GroupShape shape_of(std::span<const int32_t> gpus, const TopologyView& v) {
  GroupShape s;
  s.n = static_cast<int>(gpus.size());
  const auto groups = by_node(gpus, v);
  s.nodes = static_cast<int>(groups.size());
  for (const auto& g : groups) {
    s.per_node = std::max(s.per_node, static_cast<int>(g.size()));
    if (g.size() != groups.front().size())
      s.uniform = false;
    if (!s.intra.present && g.size() >= 2 && v.latency && v.bandwidth) {
      s.intra = {v.latency(g[0], g[1]), v.bandwidth(g[0], g[1]), true};
    }
  }
  if (groups.size() >= 2 && v.latency && v.bandwidth)
    s.inter = {v.latency(groups[0][0], groups[1][0]), v.bandwidth(groups[0][0], groups[1][0]), true};
  return s;
}

// ---- ring with channels -------------------------------------------------------------------------

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

// ---- hierarchical -------------------------------------------------------------------------------

/// Appends `phase` after what is already in `p`: each rank's first flows wait for the last
/// flows it sent and received before (a per-rank barrier between phases).
void append_phase(FlowProgram& p, const FlowProgram& phase,
                  std::vector<std::pair<int32_t, std::vector<int64_t>>>& frontier) {
  Builder b(p);
  const uint32_t base = b.size();
  auto find_frontier = [&](int32_t g) -> std::vector<int64_t>* {
    for (auto& [gpu, f] : frontier)
      if (gpu == g)
        return &f;
    frontier.push_back({g, {}});
    return &frontier.back().second;
  };
  for (size_t f = 0; f < phase.flows.size(); ++f) {
    const Flow& fl = phase.flows[f];
    std::vector<int64_t> deps;
    const auto own = phase.deps_of(f);
    for (uint32_t d : own)
      deps.push_back(base + d);
    if (own.empty()) {
      const auto* fr = find_frontier(fl.src);
      deps.insert(deps.end(), fr->begin(), fr->end());
    }
    b.add(fl.src, fl.dst, fl.bytes, deps);
  }
  // New frontier: each rank's last send and last receive in this phase.
  std::vector<std::pair<int32_t, std::vector<int64_t>>> next = frontier;
  std::vector<int32_t> touched;
  for (size_t f = phase.flows.size(); f-- > 0;) {
    for (int32_t g : {phase.flows[f].src, phase.flows[f].dst}) {
      if (std::find(touched.begin(), touched.end(), g) != touched.end())
        continue;
      touched.push_back(g);
    }
  }
  for (int32_t g : touched) {
    int64_t last_send = -1, last_recv = -1;
    for (size_t f = 0; f < phase.flows.size(); ++f) {
      if (phase.flows[f].src == g)
        last_send = base + static_cast<int64_t>(f);
      if (phase.flows[f].dst == g)
        last_recv = base + static_cast<int64_t>(f);
    }
    bool found = false;
    for (auto& [gpu, fr] : next)
      if (gpu == g) {
        fr = {last_send, last_recv};
        found = true;
      }
    if (!found)
      next.push_back({g, {last_send, last_recv}});
  }
  frontier = std::move(next);
  p.tail_delay += phase.tail_delay;
}

void append_hierarchical(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                         const TopologyView& v) {
  const auto groups = by_node(gpus, v);
  const size_t m = groups.front().size();
  std::vector<std::pair<int32_t, std::vector<int64_t>>> frontier;
  // 1. reduce-scatter inside each node (concurrently).
  FlowProgram rs;
  rs.dep_begin.push_back(0);
  if (m > 1)
    for (const auto& g : groups) {
      merge_concurrent(
          rs, expand_ring(CollectiveOp::REDUCE_SCATTER, g, size, form, v.latency)); // disjoint groups
    }
  append_phase(p, rs, frontier);
  // 2. all-reduce of size/m over each rail (GPU j of every node), concurrently.
  FlowProgram ar;
  ar.dep_begin.push_back(0);
  for (size_t j = 0; j < m; ++j) {
    std::vector<int32_t> rail;
    for (const auto& g : groups)
      rail.push_back(g[j]);
    merge_concurrent(
        ar, expand_ring(CollectiveOp::ALL_REDUCE, rail, size / static_cast<double>(m), form, v.latency));
  }
  append_phase(p, ar, frontier);
  // 3. all-gather inside each node.
  FlowProgram ag;
  ag.dep_begin.push_back(0);
  if (m > 1)
    for (const auto& g : groups) {
      merge_concurrent(ag, expand_ring(CollectiveOp::ALL_GATHER, g, size, form, v.latency));
    }
  append_phase(p, ag, frontier);
}

// ---- NVLS -----------------------------------------------------------------------------------------

void append_nvls(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                 const TopologyView& v) {
  Builder b(p);
  const int32_t sw = switch_endpoint(v.node_of(gpus.front()));
  const double bytes = size.value() * v.nvls_payload_scale;
  const int C = chunks_for(bytes);
  const double chunk = bytes / C;
  const int n = static_cast<int>(gpus.size());
  if (form == CollectiveForm::COARSE) {
    // The fine form is a two-stage pipeline (GPU -> switch, switch -> GPU) of C chunks, each
    // chunk paying the port latency (the switch reduces chunk k only once every GPU delivered
    // it): nvls_latency + (C+1) (alpha + chunk/beta). The flows give alpha + C chunk/beta; the
    // rest is added here.
    double beta = std::numeric_limits<double>::infinity();
    Seconds alpha(0.0);
    for (int32_t g : gpus) {
      b.add(g, sw, bytes);
      b.add(sw, g, bytes);
    }
    // Port figures from a GPU pair (GPU -> switch -> GPU: two port links).
    if (v.bandwidth)
      beta = v.bandwidth(gpus[0], gpus[1]).value();
    if (v.latency)
      alpha = v.latency(gpus[0], gpus[1]) / 2.0;
    p.tail_delay +=
        v.nvls_latency + alpha * static_cast<double>(C) + Seconds(std::isfinite(beta) ? chunk / beta : 0.0);
    return;
  }
  // up(k, i) = 2 (k n + i), down(k, i) = up + 1: a chunk comes down once every rank sent it up.
  const uint32_t base = b.size();
  auto up = [&](int k, int i) { return static_cast<int64_t>(base) + 2 * (static_cast<int64_t>(k) * n + i); };
  for (int k = 0; k < C; ++k)
    for (int i = 0; i < n; ++i) {
      b.add(gpus[static_cast<size_t>(i)], sw, chunk, {k > 0 ? up(k - 1, i) : -1});
      std::vector<int64_t> deps;
      for (int j = 0; j < n; ++j)
        deps.push_back(up(k, j));
      if (k > 0)
        deps.push_back(up(k - 1, i) + 1);
      b.add(sw, gpus[static_cast<size_t>(i)], chunk, deps);
    }
  p.tail_delay += v.nvls_latency;
}

// ---- all-to-all -----------------------------------------------------------------------------------

/// One round of the all-to-all schedule: rank (node a, local l) sends to (a + dn, l + dl) and
/// receives from (a - dn, l - dl), both mod the group's shape; a permutation of the ranks.
struct A2aRound {
  int dn = 0, dl = 0;
};

/// NCCL's node-aware p2p schedule (>= 2.19): rounds grouped by node distance, so that every round
/// of a remote distance sends exactly one piece out of (and into) every GPU's NIC; inside a
/// distance, local distances 0, 1, ... (0 first: the same-rail piece needs no PXN hop).
/// Groups with unequal GPUs per node use the flat pairwise order (one "node" of n ranks).
std::vector<A2aRound> a2a_rounds(int nodes, int per_node) {
  std::vector<A2aRound> out;
  for (int dn = 0; dn < nodes; ++dn)
    for (int dl = 0; dl < per_node; ++dl)
      if (dn != 0 || dl != 0)
        out.push_back({dn, dl});
  return out;
}

/// Lanes of the fine form: NCCL drives the network transport, the NVLink (P2P) transport and
/// the PXN hops on different channels, concurrently; inside a lane a rank's sends are ordered,
/// and so are its receives (a send progresses only once the receiver reached the matching recv).
enum A2aLane { NET = 0, NVL = 1, LANES = 2 };

/// Latency and bandwidth of one lane's representative pair (group start to a peer).
struct LaneFigures {
  double alpha = 0.0;
  double beta = std::numeric_limits<double>::infinity();
  int rounds = 0;
};

void append_all_to_all(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                       const TopologyView& v, const NodeDeduplication& dedup) {
  Builder b(p);
  const int n = static_cast<int>(gpus.size());
  const double piece = size.value() / n;
  const auto groups = by_node(gpus, v);
  // A piece to a remote node carries its share of deduplicated tokens (1 without deduplication).
  const double remote_piece = piece * remote_copy_share(dedup, static_cast<int>(groups.size()));
  bool uniform = true;
  for (const auto& g : groups)
    uniform = uniform && g.size() == groups.front().size();
  // Rank r = a * m + l: node index a in the group, local index l.
  const int N = uniform ? static_cast<int>(groups.size()) : 1;
  const int m = n / N;
  std::vector<int32_t> rank_gpu;
  if (uniform)
    for (const auto& g : groups)
      rank_gpu.insert(rank_gpu.end(), g.begin(), g.end());
  else
    rank_gpu.assign(gpus.begin(), gpus.end());
  const auto peer = [&](int r, A2aRound d, int sign) {
    const int a = r / m, l = r % m;
    return ((a + sign * d.dn + N) % N) * m + (l + sign * d.dl + m) % m;
  };
  const std::vector<A2aRound> rounds = a2a_rounds(N, m);
  // The GPU a piece from s to t leaves the node from: on a rail-optimised fabric a cross-node,
  // cross-rail piece first hops over NVLink to the sender node's GPU on t's rail (PXN).
  const auto pxn_proxy = [&](int32_t s, int32_t t) {
    if (v.rail_optimized && v.node_of(s) != v.node_of(t) && v.local_of(s) != v.local_of(t))
      return static_cast<int32_t>(v.node_of(s) * v.gpus_per_node + v.local_of(t));
    return s;
  };

  // Per lane: its rounds (the same for every rank) and the figures of rank 0's pairs in it.
  std::array<LaneFigures, LANES> lane;
  for (const A2aRound& d : rounds) {
    const int32_t s = rank_gpu[0], t = rank_gpu[static_cast<size_t>(peer(0, d, 1))];
    LaneFigures& f = lane[v.node_of(s) != v.node_of(t) ? NET : NVL];
    ++f.rounds;
    if (v.latency)
      f.alpha = std::max(f.alpha, v.latency(pxn_proxy(s, t), t).value());
    if (v.bandwidth)
      f.beta = std::min(f.beta, v.bandwidth(pxn_proxy(s, t), t).value());
  }

  if (form == CollectiveForm::COARSE) {
    // One flow per (rank, peer node): intra-node peers directly; a remote node's share goes to
    // the peer on the sender's rail (or the node's first peer) and is spread there over NVLink
    // (PXN-like aggregation, rails kept). The fine form's remaining per-round latencies are added
    // analytically: its slowest lane takes rounds x (alpha + piece/beta), a coarse flow
    // alpha + rounds x piece/beta.
    for (int32_t s : gpus) {
      for (const auto& g : groups) {
        if (v.node_of(g.front()) == v.node_of(s)) {
          for (int32_t d : g)
            if (d != s)
              b.add(s, d, piece);
          continue;
        }
        int32_t rep = g.front();
        for (int32_t d : g)
          if (v.local_of(d) == v.local_of(s))
            rep = d;
        b.add(s, rep, remote_piece * static_cast<double>(g.size()));
      }
    }
    double fine = 0.0, coarse = 0.0;
    for (size_t l = 0; l < LANES; ++l) {
      const LaneFigures& f = lane[l];
      if (f.rounds == 0)
        continue;
      const double bytes = l == NET ? remote_piece : piece;
      const double transfer = std::isfinite(f.beta) ? f.rounds * bytes / f.beta : 0.0;
      fine = std::max(fine, f.rounds * f.alpha + transfer);
      coarse = std::max(coarse, f.alpha + transfer);
    }
    p.tail_delay += Seconds(std::max(0.0, fine - coarse));
    return;
  }
  // FINE: round by round in schedule order; flow (round, rank) waits for the rank's previous
  // send and the receiver's previous receive in the same lane. On a rail-optimised fabric a
  // cross-node, cross-rail piece first hops over NVLink to the sender node's GPU on the
  // receiver's rail (PXN; hops ordered per sender on their own lane), then travels on that rail.
  std::array<std::vector<int64_t>, LANES> last_send, last_recv;
  for (int l = 0; l < LANES; ++l) {
    last_send[static_cast<size_t>(l)].assign(static_cast<size_t>(n), -1);
    last_recv[static_cast<size_t>(l)].assign(static_cast<size_t>(n), -1);
  }
  std::vector<int64_t> last_hop(static_cast<size_t>(n), -1);
  for (const A2aRound& d : rounds)
    for (int r = 0; r < n; ++r) {
      const int q = peer(r, d, 1);
      const int32_t s = rank_gpu[static_cast<size_t>(r)], t = rank_gpu[static_cast<size_t>(q)];
      const bool remote = v.node_of(s) != v.node_of(t);
      const size_t ln = remote ? NET : NVL;
      int64_t& sent = last_send[ln][static_cast<size_t>(r)];
      int64_t& received = last_recv[ln][static_cast<size_t>(q)];
      const int32_t from = pxn_proxy(s, t);
      int64_t hop = -1;
      const double bytes = remote ? remote_piece : piece;
      if (from != s) {
        hop = b.add(s, from, bytes, {last_hop[static_cast<size_t>(r)]});
        last_hop[static_cast<size_t>(r)] = hop;
      }
      const int64_t f = b.add(from, t, bytes, {sent, received, hop});
      sent = f;
      received = f;
    }
}

} // namespace

// ---- names ----------------------------------------------------------------------------------------

Algorithm parse_algorithm(std::string_view text) {
  if (text == "auto")
    return Algorithm::AUTO;
  if (text == "ring")
    return Algorithm::RING;
  if (text == "tree")
    return Algorithm::TREE;
  if (text == "hierarchical")
    return Algorithm::HIERARCHICAL;
  if (text == "nvls")
    return Algorithm::NVLS;
  if (text == "pairwise")
    return Algorithm::PAIRWISE;
  throw ConfigError("expected one of auto, ring, tree, hierarchical, nvls, pairwise, found '" +
                    std::string(text) + "'");
}

std::string_view to_string(Algorithm a) {
  switch (a) {
  case Algorithm::AUTO:
    return "auto";
  case Algorithm::RING:
    return "ring";
  case Algorithm::TREE:
    return "tree";
  case Algorithm::HIERARCHICAL:
    return "hierarchical";
  case Algorithm::NVLS:
    return "nvls";
  case Algorithm::PAIRWISE:
    return "pairwise";
  }
  return "?";
}

double bus_factor(CollectiveOp op, int n) {
  if (n < 2)
    return 1.0;
  switch (op) {
  case CollectiveOp::ALL_REDUCE:
    return 2.0 * (n - 1) / n;
  case CollectiveOp::ALL_GATHER:
  case CollectiveOp::REDUCE_SCATTER:
  case CollectiveOp::ALL_TO_ALL:
    return static_cast<double>(n - 1) / n;
  case CollectiveOp::SEND:
  case CollectiveOp::BROADCAST:
  case CollectiveOp::REDUCE:
    return 1.0;
  }
  return 1.0;
}

// ---- selection ------------------------------------------------------------------------------------

int channels(std::span<const int32_t> gpus, const TopologyView& v) {
  const auto groups = by_node(gpus, v);
  if (groups.size() < 2)
    return 1;
  int nch = std::numeric_limits<int>::max();
  for (const auto& g : groups) {
    std::vector<int> nics;
    for (int32_t x : g)
      if (std::find(nics.begin(), nics.end(), v.nic_of(x)) == nics.end())
        nics.push_back(v.nic_of(x));
    nch = std::min(nch, static_cast<int>(nics.size()));
  }
  return std::max(1, nch);
}

bool applicable(CollectiveOp op, Algorithm a, std::span<const int32_t> gpus, const TopologyView& v) {
  if (a == Algorithm::AUTO)
    return true;
  switch (op) {
  case CollectiveOp::SEND:
    return a == Algorithm::RING;
  case CollectiveOp::ALL_TO_ALL:
    return a == Algorithm::PAIRWISE;
  case CollectiveOp::ALL_GATHER:
  case CollectiveOp::REDUCE_SCATTER:
  case CollectiveOp::BROADCAST:
  case CollectiveOp::REDUCE:
    return a == Algorithm::RING;
  case CollectiveOp::ALL_REDUCE:
    break;
  }
  const auto groups = by_node(gpus, v);
  switch (a) {
  case Algorithm::RING:
  case Algorithm::TREE:
    return true;
  case Algorithm::HIERARCHICAL: {
    if (groups.size() < 2 || groups.front().size() < 2)
      return false;
    for (const auto& g : groups)
      if (g.size() != groups.front().size())
        return false;
    return true;
  }
  case Algorithm::NVLS:
    return v.nvls && groups.size() == 1 && gpus.size() >= 2;
  case Algorithm::PAIRWISE:
  case Algorithm::AUTO:
    return false;
  }
  return false;
}

Seconds estimate(CollectiveOp op, Algorithm a, std::span<const int32_t> gpus, Bytes size,
                 const TopologyView& v) {
  const GroupShape s = shape_of(gpus, v);
  const int n = s.n;
  if (n < 2 || size.value() <= 0)
    return Seconds(0.0);
  const double S = size.value();
  const double inf = std::numeric_limits<double>::infinity();
  const double ai = s.intra.present ? s.intra.alpha.value() : 0.0;
  const double bi = s.intra.present ? s.intra.beta.value() : inf;
  const double ax = s.inter.present ? s.inter.alpha.value() : ai;
  const double bx = s.inter.present ? s.inter.beta.value() : bi;
  const int nch = channels(gpus, v);
  const int m = s.per_node;
  // Ring edges: the slowest edge class bounds each step; channels multiply the NIC bandwidth,
  // NVLink carries (m-1)/m of the traffic on each GPU.
  const double ring_alpha = s.nodes > 1 ? ax : ai;
  const double ring_beta = s.nodes > 1 ? std::min(bx * nch, m > 1 ? bi * m / (m - 1.0) : inf) : bi;
  switch (a) {
  case Algorithm::AUTO:
    return estimate(op, choose(op, gpus, size, v), gpus, size, v);
  case Algorithm::RING: {
    if (op == CollectiveOp::SEND)
      return Seconds(ring_alpha + S / (s.nodes > 1 ? bx : bi));
    if (op == CollectiveOp::BROADCAST || op == CollectiveOp::REDUCE) {
      const int C = chunks_for(S / nch);
      return Seconds((n + C - 2) * (ring_alpha + S / nch / C / std::min(bx, bi)));
    }
    return Seconds(ring_steps(op, n) * ring_alpha + ring_bytes_per_rank(op, size, n).value() / ring_beta);
  }
  case Algorithm::TREE: {
    int depth_nodes = 0;
    for (int k = s.nodes; k > 1; k /= 2)
      ++depth_nodes;
    const double lat = 2.0 * (depth_nodes * ax + (m - 1) * ai);
    // NCCL's tuner rates a tree all-reduce at 0.92 of the bus bandwidth of the ring over the same
    // links (src/graph/tuning.cc, "model refinements"), so large messages go to the ring unless
    // its latency, 2(n-1) steps, costs more than the 8 %.
    const double tree_beta = TREE_BANDWIDTH_SHARE * (s.nodes > 1 ? std::min(bx * nch, bi) : bi);
    return Seconds(lat + 2.0 * S / tree_beta);
  }
  case Algorithm::HIERARCHICAL: {
    const int k = s.nodes;
    const double rail_beta = bx * std::min(1.0, static_cast<double>(v.nics_per_node) / m);
    const double intra = (m - 1) * ai + (m - 1.0) / m * S / bi;
    const double inter = 2.0 * (k - 1) * ax + 2.0 * (k - 1) / k * (S / m) / rail_beta;
    return Seconds(2 * intra + inter);
  }
  case Algorithm::NVLS: {
    const double bytes = S * v.nvls_payload_scale;
    return Seconds(v.nvls_latency.value() + ai + bytes / bi * (1.0 + 1.0 / chunks_for(bytes)));
  }
  case Algorithm::PAIRWISE: {
    const double nic_beta = bx * v.nics_per_node / v.gpus_per_node;
    const double remote = static_cast<double>(n - m) / n * S / nic_beta;
    const double local = static_cast<double>(m - 1) / n * S / bi;
    // Network and NVLink lanes run concurrently, one piece per round each (node-aware schedule).
    return Seconds(std::max(s.nodes > 1 ? (n - m) * ax + remote : 0.0, (m - 1) * ai + local));
  }
  }
  return Seconds(inf);
}

Algorithm choose(CollectiveOp op, std::span<const int32_t> gpus, Bytes size, const TopologyView& v) {
  if (op == CollectiveOp::ALL_TO_ALL)
    return Algorithm::PAIRWISE;
  Algorithm best = Algorithm::RING;
  Seconds best_t(std::numeric_limits<double>::infinity());
  for (Algorithm a : {Algorithm::RING, Algorithm::TREE, Algorithm::HIERARCHICAL, Algorithm::NVLS}) {
    if (!applicable(op, a, gpus, v))
      continue;
    const Seconds t = estimate(op, a, gpus, size, v);
    if (t < best_t) {
      best_t = t;
      best = a;
    }
  }
  return best;
}

// ---- expansion ------------------------------------------------------------------------------------

double remote_copy_share(const NodeDeduplication& d, int nodes) {
  if (d.experts <= 0 || d.top_k <= 0 || nodes < 2 || d.top_k > d.experts)
    return 1.0;
  // Experts per node (the group's experts split evenly over its nodes); a token's top_k experts
  // are distinct: P(none on the node) = prod_i (E - E_node - i) / (E - i).
  const double on_node = static_cast<double>(d.experts) / nodes;
  // Group-limited routing with one group per node: the node is among the token's chosen groups
  // with probability group_top_k/nodes, and its experts compete with those of the other chosen ones.
  const bool limited = d.groups == nodes && d.group_top_k > 0 && d.group_top_k < d.groups;
  const double chosen = limited ? static_cast<double>(d.group_top_k) / nodes : 1.0;
  const double e = limited ? on_node * static_cast<double>(d.group_top_k) : static_cast<double>(d.experts);
  double none = 1.0;
  for (int64_t i = 0; i < d.top_k; ++i)
    none *= std::max(0.0, e - on_node - static_cast<double>(i)) / (e - static_cast<double>(i));
  const double copies = static_cast<double>(d.top_k) / nodes; // routed copies per token for the node
  return std::min(1.0, chosen * (1.0 - none) / copies);
}

FlowProgram expand(CollectiveOp op, std::span<const int32_t> gpus, Bytes size, Algorithm algorithm,
                   CollectiveForm form, const TopologyView& view, const NodeDeduplication& dedup) {
  const int n = static_cast<int>(gpus.size());
  form = resolve_form(form, gpus.size());
  if (op == CollectiveOp::SEND)
    return expand_ring(op, gpus, size, form, view.latency);
  FlowProgram prog;
  prog.dep_begin.push_back(0);
  if (n < 2 || size.value() <= 0)
    return prog;
  if (algorithm == Algorithm::AUTO)
    algorithm = choose(op, gpus, size, view);
  if (!applicable(op, algorithm, gpus, view))
    throw SimulationError("collectives: algorithm " + std::string(to_string(algorithm)) + " cannot run " +
                          std::string(to_string(op)) + " over these " + std::to_string(n) + " GPUs");
  switch (algorithm) {
  case Algorithm::RING:
    if (op == CollectiveOp::BROADCAST || op == CollectiveOp::REDUCE) {
      const auto rings = channel_rings(gpus, view);
      for (auto ring : rings) {
        const auto root = std::find(ring.begin(), ring.end(), gpus.front());
        std::rotate(ring.begin(), root, ring.end());
        if (op == CollectiveOp::REDUCE)
          std::reverse(ring.begin(), ring.end());
        FlowProgram one;
        append_chain(one, ring, size.value() / static_cast<double>(rings.size()), form, view);
        merge_concurrent(prog, one); // channels run concurrently
      }
    } else {
      append_ring(prog, op, channel_rings(gpus, view), size, form, view);
    }
    break;
  case Algorithm::TREE:
    append_tree_all_reduce(prog, gpus, size, form, view);
    break;
  case Algorithm::HIERARCHICAL:
    append_hierarchical(prog, gpus, size, form, view);
    break;
  case Algorithm::NVLS:
    append_nvls(prog, gpus, size, form, view);
    break;
  case Algorithm::PAIRWISE:
    append_all_to_all(prog, gpus, size, form, view, dedup);
    break;
  case Algorithm::AUTO:
    break;
  }
  return prog;
}

} // namespace stepsim::collectives
