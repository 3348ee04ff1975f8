#pragma once
// Several training jobs on one cluster (`stepsim jobs`, docs/jobs.md): the shared cluster, the
// bandwidth other tenants take, and each job with the nodes it runs on. Plain structs, filled by
// config::load_jobs and read by runner::simulate_jobs.

#include "config/spec.hpp"

#include <string>
#include <vector>

namespace stepsim {

/// One job placed on the shared cluster.
struct JobPlacement {
  std::string name;
  /// The job's own view of the cluster: the shared one with `nodes` set to its node count (what
  /// its layout was checked against and its summary speaks of).
  ClusterSpec cluster;
  WorkloadSpec workload; ///< checked against `cluster` (parallel.dp derived)
  /// The shared cluster's nodes it runs on, in rank order: the job's rank r runs on GPU
  /// r % gpus_per_node of node nodes[r / gpus_per_node].
  std::vector<int> nodes;
};

struct JobsSpec {
  std::string source; ///< the jobs file (for messages)
  ClusterSpec cluster;
  /// Share of every inter-node link's bandwidth other tenants take, in [0, 1).
  double background_share = 0;
  std::vector<JobPlacement> jobs; ///< in file order, names distinct
};

} // namespace stepsim
