#pragma once
// The memory ledger over simulated time, driven by the engine's task timeline: every task
// allocates its `mem_alloc` when it starts and frees its `mem_free` when it ends, on its GPU
// (compute) or on each simulated participant (collective), on top of the persistent state of
// model::persistent_memory. Gives each GPU's peak, the worst GPU's breakdown and a counter track.

#include "config/spec.hpp"
#include "core/counter_series.hpp"
#include "graph/step_builder.hpp"
#include "model/memory.hpp"

#include <string>
#include <utility>
#include <vector>

namespace stepsim::report {

struct MemoryReport {
  bool fits_in_memory = true;
  graph::Rank worst_rank = 0; ///< GPU with the highest peak (lowest rank on ties)
  int worst_stage = 0;
  model::MemoryLedger worst;         ///< its ledger at its peak
  Bytes capacity;                    ///< HBM capacity of one GPU
  Bytes host_peak;                   ///< most host memory a GPU holds for offloaded activations
  Bytes host_capacity;               ///< host memory per GPU (0 = not given, not checked)
  std::vector<Bytes> stage_peaks;    ///< highest peak per pipeline stage
  std::string reason;                ///< when it does not fit: which GPU, by how much, why
  std::vector<CounterSeries> tracks; ///< bytes in use per simulated GPU (only when asked for)
};

/// Replays allocations and frees in time order (frees first at equal times). Throws
/// SimulationError if a GPU's dynamic memory ever goes negative (an unbalanced ledger).
MemoryReport memory_timeline(const graph::StepProgram& program, const std::vector<Seconds>& start,
                             const std::vector<Seconds>& end, const ClusterSpec& cluster,
                             const WorkloadSpec& workload, bool keep_tracks);

/// "12.3 GiB"
std::string gib(Bytes b);

} // namespace stepsim::report
