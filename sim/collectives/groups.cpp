// The helpers the collective algorithms share: a group's GPUs by node and its shape, pipeline
// chunks, and concurrent flow programs.

#include "collectives/algorithms.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace stepsim::collectives::detail {

namespace {

/// Bytes per pipeline chunk of the chunked algorithms (tree, chain, NVLS) in their fine form.
constexpr double CHUNK_BYTES = 1024.0 * 1024.0;
constexpr int MAX_CHUNKS = 64;

} // namespace

int chunks_for(double bytes) {
  return static_cast<int>(std::clamp(std::ceil(bytes / CHUNK_BYTES), 1.0, static_cast<double>(MAX_CHUNKS)));
}

std::vector<std::vector<int32_t>> by_node(std::span<const int32_t> gpus, const TopologyView& v) {
  // Node -> its index in `out`: a hash lookup per GPU, so a group of n GPUs costs O(n), not
  // O(n x nodes) (a data-parallel group of 4096 ranks spans 2048 nodes).
  std::vector<std::vector<int32_t>> out;
  std::unordered_map<int, size_t> index;
  index.reserve(gpus.size());
  for (int32_t g : gpus) {
    const auto [it, fresh] = index.try_emplace(v.node_of(g), out.size());
    if (fresh)
      out.push_back({g});
    else
      out[it->second].push_back(g);
  }
  return out;
}

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

} // namespace stepsim::collectives::detail
