// The hierarchical all-reduce (reduce-scatter in each node, all-reduce across nodes, all-gather
// in each node) and NVLink SHARP's in-switch all-reduce (docs/collectives.md).

#include "collectives/algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>

namespace stepsim::collectives::detail {

// ---- hierarchical -------------------------------------------------------------------------------
namespace {

/// Per rank: the flows its next phase waits for (its last send and last receive so far).
using Frontier = std::unordered_map<int32_t, std::vector<int64_t>>;

/// Appends `phase` after what is already in `p`: each rank's first flows wait for the last
/// flows it sent and received before (a per-rank barrier between phases). Linear in the phase's
/// flows (a rank's frontier is a hash lookup).
void append_phase(FlowProgram& p, const FlowProgram& phase, Frontier& frontier) {
  Builder b(p);
  const uint32_t base = b.size();
  static const std::vector<int64_t> none;
  for (size_t f = 0; f < phase.flows.size(); ++f) {
    const Flow& fl = phase.flows[f];
    std::vector<int64_t> deps;
    const auto own = phase.deps_of(f);
    for (uint32_t d : own)
      deps.push_back(base + d);
    if (own.empty()) {
      const auto it = frontier.find(fl.src);
      const std::vector<int64_t>& fr = it == frontier.end() ? none : it->second;
      deps.insert(deps.end(), fr.begin(), fr.end());
    }
    b.add(fl.src, fl.dst, fl.bytes, deps);
  }
  // New frontier: each rank's last send and last receive in this phase.
  std::unordered_map<int32_t, std::pair<int64_t, int64_t>> last; // rank -> (send, receive)
  for (size_t f = 0; f < phase.flows.size(); ++f) {
    const int64_t id = base + static_cast<int64_t>(f);
    last.try_emplace(phase.flows[f].src, -1, -1).first->second.first = id;
    last.try_emplace(phase.flows[f].dst, -1, -1).first->second.second = id;
  }
  for (const auto& [gpu, sr] : last)
    frontier[gpu] = {sr.first, sr.second};
  p.tail_delay += phase.tail_delay;
}

} // namespace

void append_hierarchical(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                         const TopologyView& v) {
  const auto groups = by_node(gpus, v);
  const size_t m = groups.front().size();
  Frontier frontier;
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

} // namespace stepsim::collectives::detail
