#include "api/stepsim.hpp"

#include "config/config.hpp"
#include "model/memory.hpp"

#include <nlohmann/json.hpp>

#include <sstream>

namespace stepsim::api {

Specs load(const Inputs& inputs) {
  std::vector<config::Override> overrides;
  for (const std::string& s : inputs.set)
    overrides.push_back(config::parse_override(s));
  Specs specs{config::load_cluster(inputs.cluster_file, overrides),
              config::load_workload(inputs.workload_file, overrides)};
  specs.workload = config::check_layout(specs.cluster, specs.workload).workload;
  return specs;
}

report::Summary simulate_step(const Specs& specs, const runner::SimulateOptions& options) {
  return runner::simulate(specs.cluster, specs.workload, options).summary;
}

std::string summary_json(const report::Summary& summary) {
  std::ostringstream out;
  report::write_summary_json(out, summary);
  return out.str();
}

std::string memory_json(const Specs& specs) {
  using nlohmann::ordered_json;
  const WorkloadSpec& w = specs.workload;
  const GpuSpec& gpu = specs.cluster.gpu;
  ordered_json stages = ordered_json::array();
  bool fits = true;
  for (int p = 0; p < w.parallel.pp; ++p) {
    const model::MemoryLedger l = model::static_memory(w, gpu, p);
    const bool stage_fits =
        l.peak() <= gpu.hbm_capacity && (gpu.host_memory.value() <= 0 || l.host <= gpu.host_memory);
    fits = fits && stage_fits;
    stages.push_back(ordered_json{{"stage", p},
                                  {"weights_bytes", l.weights.value()},
                                  {"gradients_bytes", l.gradients.value()},
                                  {"optimizer_bytes", l.optimizer.value()},
                                  {"activations_bytes", l.activations.value()},
                                  {"other_bytes", l.other().value()},
                                  {"peak_bytes", l.peak().value()},
                                  {"host_offload_bytes", l.host.value()},
                                  {"in_flight_micro_batches", model::in_flight_micro_batches(w, p)},
                                  {"fits", stage_fits}});
  }
  ordered_json j;
  j["workload"] = w.name;
  j["cluster"] = specs.cluster.name;
  j["capacity_bytes"] = gpu.hbm_capacity.value();
  j["host_capacity_bytes"] = gpu.host_memory.value();
  j["stages"] = stages;
  j["fits_in_memory"] = fits;
  return j.dump(2) + '\n';
}

} // namespace stepsim::api
