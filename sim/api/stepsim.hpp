#pragma once
// The public C++ interface of stepsim (docs/library.md): a cluster file and a workload file in,
// with `--set`-style overrides, one simulated step's summary or the static memory ledger out.
// `cmake --install` installs it with the headers it includes; `find_package(stepsim)` and
// `target_link_libraries(app PRIVATE stepsim::api)` use it.

#include "config/spec.hpp"
#include "report/summary.hpp"
#include "runner/simulate.hpp"

#include <string>
#include <vector>

namespace stepsim::api {

/// What to simulate: the two YAML files and overrides as `stepsim run --set` takes them
/// ("parallel.pp=4"; a path starting with `cluster.` goes into the cluster file).
struct Inputs {
  std::string cluster_file;
  std::string workload_file;
  std::vector<std::string> set;
};

/// A validated cluster and workload (dp derived when the workload omits it).
struct Specs {
  ClusterSpec cluster;
  WorkloadSpec workload;
};

/// Reads both files with the overrides and checks the layout. Throws ConfigError (its message
/// names file:line:col, the key and what was expected) or ModelError (a layout that cannot work).
Specs load(const Inputs& inputs);

/// Simulates one training step of `specs` and summarizes it. SimGrid allows one simulation per
/// process: call it at most once per process (run it in a child process to simulate more).
/// Throws SimulationError or ModelError.
report::Summary simulate_step(const Specs& specs, const runner::SimulateOptions& options = {});

/// The summary as the JSON text `stepsim run --out DIR` writes to DIR/summary.json.
std::string summary_json(const report::Summary& summary);

/// The static per-GPU memory ledger of every pipeline stage (what `stepsim memory` prints, in
/// bytes), without simulating, as JSON text: {"workload", "cluster", "capacity_bytes",
/// "host_capacity_bytes", "stages": [{"stage", "weights_bytes", "gradients_bytes",
/// "optimizer_bytes", "activations_bytes", "other_bytes", "peak_bytes", "host_offload_bytes",
/// "in_flight_micro_batches", "fits"}], "fits_in_memory"}. Throws ModelError.
std::string memory_json(const Specs& specs);

} // namespace stepsim::api
