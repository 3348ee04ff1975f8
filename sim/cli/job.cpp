#include "cli/job.hpp"

#include "core/error.hpp"
#include "core/vocabulary.hpp"
#include "model/memory.hpp"
#include "report/memory_timeline.hpp"

#include <algorithm>

namespace stepsim::cli {

std::vector<config::Override> overrides_from(const std::vector<std::string>& sets) {
  std::vector<config::Override> overrides;
  for (const std::string& s : sets)
    overrides.push_back(config::parse_override(s));
  return overrides;
}

Job load_job(const std::string& cluster_file, const std::string& workload_file,
             const std::vector<config::Override>& overrides, const std::string& degrade_file) {
  Job job{config::load_cluster(cluster_file, overrides, degrade_file),
          config::load_workload(workload_file, overrides)};
  job.workload = config::check_layout(job.cluster, job.workload).workload;
  return job;
}

namespace {
/// The part a memory message names: the variant when the cluster states one (docs/kernels.md).
const std::string& part_name(const GpuSpec& gpu) {
  return gpu.variant.active() ? gpu.variant.name : gpu.kind;
}
} // namespace

std::string memory_ledger_problem(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  Bytes host(0.0);
  for (int p = 0; p < workload.parallel.pp; ++p) {
    const model::MemoryLedger l = model::static_memory(workload, cluster.gpu, p);
    host = std::max(host, l.host);
    if (l.peak() > cluster.gpu.hbm_capacity)
      return "pipeline stage " + std::to_string(p) + " needs " + report::gib(l.peak()) +
             " per GPU, more than the " + report::gib(cluster.gpu.hbm_capacity) + " of " +
             part_name(cluster.gpu);
  }
  if (cluster.gpu.host_memory.value() > 0 && host > cluster.gpu.host_memory)
    return "offloaded activations need " + report::gib(host) + " of host memory per GPU, more than its " +
           report::gib(cluster.gpu.host_memory);
  return "";
}

std::string model_states_problem(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  for (int p = 0; p < workload.parallel.pp; ++p) {
    const Bytes states = model::persistent_memory(workload, cluster.gpu, p).peak();
    if (states > cluster.gpu.hbm_capacity)
      return "pipeline stage " + std::to_string(p) + " holds " + report::gib(states) +
             " per GPU in weights, gradients, optimizer states, buffers and runtime before any "
             "activation, more than the " +
             report::gib(cluster.gpu.hbm_capacity) + " of " + part_name(cluster.gpu) +
             ": no schedule, micro-batch or recomputation makes it fit";
  }
  return "";
}

CollectiveForm parse_collective_form(const std::string& text) {
  if (const auto form = collective_form_by_name_or_null(text))
    return *form;
  throw ConfigError("--collectives: expected auto, fine or coarse, got '" + text + "'");
}

/// --steps: an integer in [1, MAX_STEPS]. Throws ConfigError naming the option.
int parse_steps(const std::string& text) {
  constexpr int MAX_STEPS = 100'000;
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v >= 1 && v <= MAX_STEPS)
      return v;
  } catch (const std::exception&) {
  }
  throw ConfigError("--steps: expected an integer in [1, " + std::to_string(MAX_STEPS) + "], got '" + text +
                    "'");
}

} // namespace stepsim::cli
