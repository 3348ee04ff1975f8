#include "api/stepsim.hpp"

#include "config/config.hpp"
#include "report/ledger.hpp"

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
  const report::MemoryView v = report::memory_view(specs.cluster, specs.workload);
  nlohmann::ordered_json j;
  j["workload"] = specs.workload.name;
  j["cluster"] = specs.cluster.name;
  j["capacity_bytes"] = specs.cluster.gpu.hbm_capacity.value();
  j["host_capacity_bytes"] = specs.cluster.gpu.host_memory.value();
  j["stages"] = report::stages_json(v);
  j["fits_in_memory"] = v.fits;
  return j.dump(2) + '\n';
}

} // namespace stepsim::api
