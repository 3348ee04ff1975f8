#include "report/ledger.hpp"

#include <algorithm>

namespace stepsim::report {

MemoryView memory_view(const ClusterSpec& cluster, const WorkloadSpec& w) {
  MemoryView v;
  v.parameters = parameter_counts(w);
  for (int p = 0; p < w.parallel.pp; ++p) {
    StageMemory s{.ledger = model::static_memory(w, cluster.gpu, p),
                  .params_per_gpu = v.parameters.per_gpu_by_stage[static_cast<size_t>(p)],
                  .in_flight = static_cast<int>(model::in_flight_micro_batches(w, p))};
    s.fits = s.ledger.peak() <= cluster.gpu.hbm_capacity;
    v.host = std::max(v.host, s.ledger.host);
    v.fits = v.fits && s.fits;
    v.stages.push_back(s);
  }
  if (v.host.value() > 0) {
    v.host_fits = cluster.gpu.host_memory.value() <= 0 || v.host <= cluster.gpu.host_memory;
    v.fits = v.fits && v.host_fits;
  }
  return v;
}

nlohmann::ordered_json stages_json(const MemoryView& v) {
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (size_t p = 0; p < v.stages.size(); ++p) {
    const StageMemory& s = v.stages[p];
    const model::MemoryLedger& l = s.ledger;
    stages.push_back(nlohmann::ordered_json{{"stage", p},
                                            {"params_per_gpu", s.params_per_gpu},
                                            {"weights_bytes", l.weights.value()},
                                            {"gradients_bytes", l.gradients.value()},
                                            {"optimizer_bytes", l.optimizer.value()},
                                            {"activations_bytes", l.activations.value()},
                                            {"other_bytes", l.other().value()},
                                            {"peak_bytes", l.peak().value()},
                                            {"host_offload_bytes", l.host.value()},
                                            {"in_flight_micro_batches", s.in_flight},
                                            {"fits", s.fits}});
  }
  return stages;
}

} // namespace stepsim::report
