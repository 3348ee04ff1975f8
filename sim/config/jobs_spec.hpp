#pragma once
// Several training jobs on one cluster (`stepsim jobs`, docs/jobs.md): the shared cluster, the
// bandwidth other tenants take, and each job with the nodes it runs on. Plain structs, filled by
// config::load_jobs and read by runner::simulate_jobs.

#include "config/spec.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace stepsim {

/// One job placed on the shared cluster.
struct JobPlacement {
  std::string name;
  /// The job's own view of the cluster, job_view(shared cluster, nodes): what its layout was
  /// checked against and its summary speaks of.
  ClusterSpec cluster;
  WorkloadSpec workload; ///< checked against `cluster` (parallel.dp derived)
  /// The shared cluster's nodes it runs on, in rank order: the job's rank r runs on GPU
  /// r % gpus_per_node of node nodes[r / gpus_per_node].
  std::vector<int> nodes;
};

/// A job's own view of the shared cluster `shared` when it runs on `nodes` (in rank order): its
/// node count, and the degraded GPUs and NICs on its nodes renumbered to its own nodes (the k-th
/// of `nodes` is its node k). Degraded nodes, leaves and links are the shared fabric's: the
/// shared replay applies them (docs/jobs.md, "Degraded parts").
inline ClusterSpec job_view(const ClusterSpec& shared, const std::vector<int>& nodes) {
  ClusterSpec view = shared;
  view.nodes = static_cast<int>(nodes.size());
  view.degraded = DegradedSpec{};
  const auto local = [&](int node) {
    const auto it = std::find(nodes.begin(), nodes.end(), node);
    return it == nodes.end() ? -1 : static_cast<int>(it - nodes.begin());
  };
  for (DegradedSpec::Gpu g : shared.degraded.gpus)
    if ((g.node = local(g.node)) >= 0)
      view.degraded.gpus.push_back(g);
  for (DegradedSpec::Nic n : shared.degraded.nics)
    if ((n.node = local(n.node)) >= 0)
      view.degraded.nics.push_back(n);
  return view;
}

struct JobsSpec {
  std::string source; ///< the jobs file (for messages)
  ClusterSpec cluster;
  /// Share of every inter-node link's bandwidth other tenants take, in [0, 1).
  double background_share = 0;
  std::vector<JobPlacement> jobs; ///< in file order, names distinct
};

} // namespace stepsim
