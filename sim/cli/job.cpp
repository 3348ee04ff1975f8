#include "cli/job.hpp"

#include "core/error.hpp"
#include "core/vocabulary.hpp"

namespace stepsim::cli {

std::vector<config::Override> overrides_from(const std::vector<std::string>& sets) {
  std::vector<config::Override> overrides;
  for (const std::string& s : sets)
    overrides.push_back(config::parse_override(s));
  return overrides;
}

Job load_job(const std::string& cluster_file, const std::string& workload_file,
             const std::vector<config::Override>& overrides) {
  Job job{config::load_cluster(cluster_file, overrides), config::load_workload(workload_file, overrides)};
  job.workload = config::check_layout(job.cluster, job.workload).workload;
  return job;
}

CollectiveForm parse_collective_form(const std::string& text) {
  if (const auto form = collective_form_by_name_or_null(text))
    return *form;
  throw ConfigError("--collectives: expected auto, fine or coarse, got '" + text + "'");
}

} // namespace stepsim::cli
