#pragma once
// The static per-GPU memory ledger of a layout, per pipeline stage, and whether it fits: what
// `stepsim memory`, the HTML report and the library's memory_json show (docs/model.md, "Memory").

#include "config/spec.hpp"
#include "model/memory.hpp"
#include "report/summary.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace stepsim::report {

/// One pipeline stage's ledger and whether it fits in the GPU's memory.
struct StageMemory {
  model::MemoryLedger ledger;
  int64_t params_per_gpu = 0; ///< parameters one GPU of the stage holds (before ZeRO sharding)
  int in_flight = 0;          ///< micro-batches whose activations it holds at its peak
  bool fits = true;           ///< its peak within the GPU's memory
};

/// The ledger of every stage and the verdict.
struct MemoryView {
  ParameterCounts parameters;
  std::vector<StageMemory> stages;
  Bytes host{0.0};       ///< offloaded activations, the most any stage holds
  bool host_fits = true; ///< that within the host's memory (when the cluster gives it)
  bool fits = true;      ///< every stage fits and the host holds what is offloaded
};

/// The ledger of `w` (check_layout passed) on `cluster`'s GPUs, without simulating.
MemoryView memory_view(const ClusterSpec& cluster, const WorkloadSpec& w);

/// The `stages` array of the memory documents (docs/output.md, `stepsim.memory/1`).
nlohmann::ordered_json stages_json(const MemoryView& v);

} // namespace stepsim::report
