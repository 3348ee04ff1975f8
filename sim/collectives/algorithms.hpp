#pragma once
// Private to collectives/: what the files of the algorithms share. collective.cpp names, chooses
// and expands the algorithms; ring_tree.cpp (rings with channels, chains, double binary trees),
// hierarchical_nvls.cpp (the two-level and the NVLink SHARP all-reduce) and all_to_all.cpp build
// their flow programs with the helpers of groups.cpp.

#include "collectives/collective.hpp"

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <vector>

namespace stepsim::collectives::detail {

/// Pipeline chunks of `bytes` for the chunked algorithms (tree, chain, NVLS) in their fine form.
int chunks_for(double bytes);

/// The group's GPUs by node, nodes in order of first appearance, GPUs in the given order.
std::vector<std::vector<int32_t>> by_node(std::span<const int32_t> gpus, const TopologyView& v);

/// Appends flows; dependencies given as flow indices.
class Builder {
public:
  explicit Builder(FlowProgram& p) : p_(p) {
    if (p_.dep_begin.empty())
      p_.dep_begin.push_back(0);
  }
  uint32_t add(int32_t src, int32_t dst, double bytes, std::initializer_list<int64_t> deps = {}) {
    return add(src, dst, bytes, std::span<const int64_t>(deps.begin(), deps.size()));
  }
  /// A flow after `deps` (negative entries: no dependency).
  uint32_t add(int32_t src, int32_t dst, double bytes, std::span<const int64_t> deps) {
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
void merge_concurrent(FlowProgram& into, const FlowProgram& one);

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

GroupShape shape_of(std::span<const int32_t> gpus, const TopologyView& v);

// ---- ring_tree.cpp

/// One ring per channel over the group (channels(gpus, v) of them).
std::vector<std::vector<int32_t>> channel_rings(std::span<const int32_t> gpus, const TopologyView& v);
void append_ring(FlowProgram& p, CollectiveOp op, const std::vector<std::vector<int32_t>>& rings, Bytes size,
                 CollectiveForm form, const TopologyView& v);
/// Pipelined chain seq[0] -> seq[1] -> ... carrying `bytes`, C chunks.
void append_chain(FlowProgram& p, const std::vector<int32_t>& seq, double bytes, CollectiveForm form,
                  const TopologyView& v);
void append_tree_all_reduce(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                            const TopologyView& v);

// ---- hierarchical_nvls.cpp

void append_hierarchical(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                         const TopologyView& v);
void append_nvls(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                 const TopologyView& v);

// ---- all_to_all.cpp

void append_all_to_all(FlowProgram& p, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                       const TopologyView& v, const NodeDeduplication& dedup);

} // namespace stepsim::collectives::detail
