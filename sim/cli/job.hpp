#pragma once
// What several subcommands share: reading --set overrides, loading and checking a cluster and
// workload pair, and the --collectives option.

#include "config/config.hpp"
#include "config/spec.hpp"
#include "engine/replay.hpp"

#include <string>
#include <vector>

namespace stepsim::cli {

/// Every `--set PATH=VALUE` of the command line, parsed. Throws ConfigError.
std::vector<config::Override> overrides_from(const std::vector<std::string>& sets);

/// The help line of --set, as `run`, `memory`, `plan` and `kernels` take it.
inline constexpr const char* SET_HELP = "override a key; PATH is dotted into the workload, or starts with "
                                        "`cluster.` for the cluster, e.g. --set parallel.pp=4";

/// The choices of --collectives (how collectives expand into flows).
inline const std::vector<std::string> COLLECTIVE_FORMS = {"auto", "fine", "coarse"};

/// A validated cluster and workload (dp derived when omitted).
struct Job {
  ClusterSpec cluster;
  WorkloadSpec workload;
};

/// Loads both files with the overrides (and the cluster's degraded parts from `degrade_file`,
/// when given) and checks the layout. Throws ConfigError / ModelError.
Job load_job(const std::string& cluster_file, const std::string& workload_file,
             const std::vector<config::Override>& overrides, const std::string& degrade_file = "");

/// The help line of --degrade, as `run`, `memory` and `plan` take it.
inline constexpr const char* DEGRADE_HELP =
    "a YAML file holding a `degraded:` section (slow GPUs, slow or failed NICs, nodes down, fewer "
    "uplinks), added to the cluster's own (docs/degraded.md)";

/// The static memory ledger's verdict (model/memory.hpp, as `stepsim memory` prints it): why a
/// pipeline stage's peak does not fit in the GPU's memory, or its offloaded activations in host
/// memory; "" when the layout fits.
std::string memory_ledger_problem(const ClusterSpec& cluster, const WorkloadSpec& workload);

/// Why the layout can never fit, whatever its schedule, micro-batch or recomputation: a pipeline
/// stage's persistent memory alone (weights, gradients, optimizer states, buffers, runtime;
/// model/memory.hpp's persistent_memory) exceeds the GPU's memory; "" otherwise. `run` refuses
/// such a layout before simulating unless --simulate-oom (docs/usage.md, "Memory").
std::string model_states_problem(const ClusterSpec& cluster, const WorkloadSpec& workload);

/// --steps (`run`, `plan`, `sweep`): an integer in [1, 100000], the consecutive steps simulated
/// (docs/variability.md). Throws ConfigError naming the option.
int parse_steps(const std::string& text);

/// "auto" | "fine" | "coarse" for --collectives. Throws ConfigError naming the option.
CollectiveForm parse_collective_form(const std::string& text);

} // namespace stepsim::cli
