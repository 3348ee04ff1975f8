// The all-to-all: NCCL's node-aware pairwise schedule, with PXN and node deduplication
// (docs/collectives.md).

#include "collectives/algorithms.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace stepsim::collectives::detail {

// ---- all-to-all -----------------------------------------------------------------------------------
namespace {

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

} // namespace

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

} // namespace stepsim::collectives::detail
