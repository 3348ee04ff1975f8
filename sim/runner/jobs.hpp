#pragma once
// Several jobs on one fabric (`stepsim jobs`, docs/jobs.md): each job's step built as `run`
// builds it (runner::prepare_step), every DP replica's traffic on the fabric (one replica per
// class of placement simulated, the others' pipeline sends copied), its ranks moved onto the GPUs
// of its nodes, and all jobs replayed in one engine so that their flows share the links they meet on.

#include "config/jobs_spec.hpp"
#include "engine/replay.hpp"
#include "graph/step_builder.hpp"
#include "report/summary.hpp"

#include <cstdint>
#include <vector>

namespace stepsim::runner {

/// One job's part of a shared replay.
struct JobRun {
  graph::StepProgram program; ///< the job's own step: its ranks 0..N-1
  std::vector<Seconds> start; ///< per task of `program`, in the shared replay
  std::vector<Seconds> end;
  report::Summary summary; ///< as `run` summarizes it (the job's own view of the cluster)
};

struct JobsSimulation {
  /// Every job's tasks, job after job, their ranks renumbered as the cluster's GPUs.
  graph::StepProgram program;
  engine::ReplayResult result; ///< of `program`; link_loads: bytes per link and job
  std::vector<JobRun> jobs;    ///< in the order given
  /// Per GPU of the cluster: the job running on it, -1 for none.
  std::vector<int32_t> job_of_gpu;
  /// Per GPU of the cluster: its rank in its job, -1 for none.
  std::vector<graph::Rank> rank_in_job;
  double wall_s = 0; ///< host time building and replaying
};

/// `cluster` with `share` of every inter-node link's bandwidth taken by other tenants: the NICs
/// (and with them every fat-tree and rail uplink, which carry the NICs' bandwidth over the
/// oversubscription) and every link of a graph fabric run at (1 - share) of their bandwidth.
/// Links inside a node keep theirs. Precondition: 0 <= share < 1.
ClusterSpec with_background(const ClusterSpec& cluster, double share);

struct JobsOptions {
  /// Simulate one DP replica per class of placement (the replicas whose nodes sit alike under
  /// the fabric's leaves), the others' pipeline sends copied, where each job's TP, CP and EP
  /// groups stay inside a node (docs/jobs.md); false: every replica.
  bool fold = true;
};

/// Simulates the jobs together on `spec.cluster` (with its background share) in one replay; one
/// job alone is its `alone` figure. The jobs' nodes must be distinct and on the cluster, and the
/// jobs must force the same collective algorithms (`collectives`) and expert dispatch (one
/// replay runs one choice); else ConfigError. At most once per process (SimGrid).
JobsSimulation simulate_jobs(const JobsSpec& spec, const JobsOptions& options = {});

} // namespace stepsim::runner
