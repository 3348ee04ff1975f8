#pragma once
// Collective algorithms -> ordered point-to-point flows, and their analytical cost twin.
// Pure arithmetic: no SimGrid here; the engine runs the flows on the platform.

#include "core/units.hpp"
#include "core/vocabulary.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace stepsim::collectives {

/// Above these, CollectiveForm::AUTO chooses the coarse form (one flow per edge, latency analytic).
struct FormThresholds {
  int fine_max_ranks = 2; ///< fine only for groups of at most this many ranks
};

/// The form AUTO stands for over `ranks` participants (FINE or COARSE; any other form as given).
CollectiveForm resolve_form(CollectiveForm form, size_t ranks, const FormThresholds& thresholds = {});

struct Flow {
  int32_t src = 0;  ///< GPU index, or switch_endpoint(node) for an NVSwitch (NVLS)
  int32_t dst = 0;  ///< GPU index, or switch_endpoint(node)
  double bytes = 0; ///< payload
};

/// Flows with intra-program dependencies (compressed: flow f waits for
/// deps[dep_begin[f] .. dep_begin[f+1])), then a delay once all flows are done.
struct FlowProgram {
  std::vector<Flow> flows;
  std::vector<uint32_t> dep_begin; ///< size flows.size() + 1
  std::vector<uint32_t> deps;
  Seconds tail_delay; ///< analytic latency added after the last flow

  [[nodiscard]] std::span<const uint32_t> deps_of(size_t f) const {
    return {deps.data() + dep_begin[f], dep_begin[f + 1] - dep_begin[f]};
  }
};

/// The NVSwitch of `node` as a flow endpoint (negative, so never a GPU index).
constexpr int32_t switch_endpoint(int node) {
  return -1 - node;
}
/// Inverse of switch_endpoint.
constexpr int node_of_switch_endpoint(int32_t endpoint) {
  return -1 - endpoint;
}

/// One-way latency between two GPUs (from the platform).
using LatencyFn = std::function<Seconds(int32_t, int32_t)>;

/// Ring steps of `op` over n ranks: 2(n-1) for all-reduce, n-1 for all-gather and
/// reduce-scatter, 1 for a send.
int ring_steps(CollectiveOp op, int n);

/// Bytes each rank sends for `op` of payload `size` over n ranks (ring): 2(n-1)/n*S for
/// all-reduce, (n-1)/n*S for all-gather/reduce-scatter, S for a send.
Bytes ring_bytes_per_rank(CollectiveOp op, Bytes size, int n);

/// Expands `op` of payload `size` (nccl-tests "size": the full buffer) over `gpus`, in ring
/// order (gpus[i] sends to gpus[i+1 mod n]). A SEND takes exactly two GPUs (src, dst).
/// Empty when n == 1 or size == 0. `form` AUTO resolves with resolve_form. Throws
/// SimulationError on a malformed request.
FlowProgram expand_ring(CollectiveOp op, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                        const LatencyFn& latency);

/// Closed form of a ring on one link class: steps*alpha + ring_bytes_per_rank/beta
/// (all-reduce: 2(n-1)*alpha + 2(n-1)/n*S/beta).
Seconds ring_time(CollectiveOp op, Bytes size, int n, Seconds alpha, BytesPerSec beta);

} // namespace stepsim::collectives
