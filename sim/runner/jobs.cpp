#include "runner/jobs.hpp"

#include "core/error.hpp"
#include "runner/simulate.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

namespace stepsim::runner {

namespace {

/// The cluster's GPU that rank `r` of a job placed on `nodes` runs on.
graph::Rank gpu_of(const std::vector<int>& nodes, int gpus_per_node, graph::Rank r) {
  return nodes.at(static_cast<size_t>(r / gpus_per_node)) * gpus_per_node + r % gpus_per_node;
}

/// Appends `job`'s tasks to `merged`, ranks moved onto the GPUs of `nodes`; returns the first id.
graph::TaskId append(graph::StepGraph& merged, const graph::StepGraph& job, const std::vector<int>& nodes,
                     int gpus_per_node) {
  const auto first = static_cast<graph::TaskId>(merged.size());
  std::vector<graph::Rank> ranks;
  for (graph::TaskId id = 0; id < job.size(); ++id) {
    graph::Task t = job.task(id);
    if (t.rank >= 0)
      t.rank = gpu_of(nodes, gpus_per_node, t.rank);
    if (t.kind == graph::TaskKind::COMPUTE) {
      merged.add_task(t);
      continue;
    }
    ranks.clear();
    for (const graph::Rank r : job.participants(job.task(id)))
      ranks.push_back(gpu_of(nodes, gpus_per_node, r));
    merged.add_collective(t, ranks);
  }
  for (graph::TaskId id = 0; id < job.size(); ++id)
    for (const graph::TaskId s : job.successors(id))
      merged.add_edge(first + id, first + s);
  return first;
}

/// What one replay can hold of several jobs: a single choice of forced algorithms and of the
/// expert dispatcher's deduplication.
void check_one_choice(const JobsSpec& spec, const std::vector<StepSetup>& setups) {
  for (size_t j = 1; j < setups.size(); ++j) {
    const engine::ReplayOptions& a = setups.front().replay;
    const engine::ReplayOptions& b = setups[j].replay;
    const bool same_dedup = a.ep_dedup.experts == b.ep_dedup.experts &&
                            a.ep_dedup.top_k == b.ep_dedup.top_k && a.ep_dedup.groups == b.ep_dedup.groups &&
                            a.ep_dedup.group_top_k == b.ep_dedup.group_top_k;
    if (!(a.algorithms == b.algorithms) || !same_dedup || a.overlap_slowdown != b.overlap_slowdown)
      throw ConfigError(spec.source + ": jobs '" + spec.jobs.front().name + "' and '" + spec.jobs[j].name +
                        "' force different collective algorithms (collectives.*) or expert dispatch "
                        "(parallel.ep_dispatch); one shared replay runs one choice: give every job the same");
  }
}

} // namespace

ClusterSpec with_background(const ClusterSpec& cluster, double share) {
  if (!(share >= 0.0 && share < 1.0))
    throw ModelError("background share must be in [0, 1), got " + std::to_string(share));
  ClusterSpec c = cluster;
  c.nic.efficiency *= 1.0 - share;
  for (FabricSpec::GraphLink& l : c.fabric.links)
    l.bandwidth = BytesPerSec(l.bandwidth.value() * (1.0 - share));
  return c;
}

JobsSimulation simulate_jobs(const JobsSpec& spec, const JobsOptions& jobs_options) {
  const auto t0 = std::chrono::steady_clock::now();
  const ClusterSpec& cluster = spec.cluster;
  const int per_node = cluster.gpus_per_node;
  JobsSimulation sim;
  sim.job_of_gpu.assign(static_cast<size_t>(cluster.num_gpus()), -1);
  sim.rank_in_job.assign(static_cast<size_t>(cluster.num_gpus()), -1);
  // The jobs' nodes: each up, on the cluster and given to one job (checked before anything reads
  // the placement).
  std::vector<std::vector<int>> nodes;
  for (size_t j = 0; j < spec.jobs.size(); ++j) {
    const JobPlacement& job = spec.jobs[j];
    for (const int node : job.nodes) {
      if (node < 0 || node >= cluster.nodes || sim.job_of_gpu[static_cast<size_t>(node * per_node)] >= 0 ||
          std::any_of(cluster.degraded.nodes.begin(), cluster.degraded.nodes.end(),
                      [node](const DegradedSpec::Node& down) { return down.node == node; }))
        throw ConfigError(spec.source + ": job '" + job.name + "': node " + std::to_string(node) +
                          " is not a free node (up, not given to another job) of the cluster's " +
                          std::to_string(cluster.nodes));
      for (int g = 0; g < per_node; ++g)
        sim.job_of_gpu[static_cast<size_t>(node * per_node + g)] = static_cast<int32_t>(j);
    }
    nodes.push_back(job.nodes);
  }
  // Every DP replica's traffic on the fabric: one replica simulated per class of placement, the
  // others' pipeline sends copied (or, unfolded, every replica simulated); no symmetry sampling.
  std::vector<StepSetup> setups;
  for (size_t j = 0; j < spec.jobs.size(); ++j) {
    SimulateOptions build{.fold_dp = false, .sample_collectives = false};
    if (jobs_options.fold)
      build.replica_class = placement_classes(cluster, spec.jobs[j].workload.parallel, nodes, j);
    build.fold_dp = !build.replica_class.empty();
    setups.push_back(prepare_step(spec.jobs[j].cluster, spec.jobs[j].workload, build));
  }
  check_one_choice(spec, setups);

  std::vector<graph::TaskId> first;
  for (size_t j = 0; j < spec.jobs.size(); ++j) {
    const JobPlacement& job = spec.jobs[j];
    const graph::StepProgram& program = setups[j].program;
    first.push_back(append(sim.program.graph, program.graph, job.nodes, per_node));
    for (const graph::Rank r : program.simulated_ranks) {
      const graph::Rank gpu = gpu_of(job.nodes, per_node, r);
      sim.program.simulated_ranks.push_back(gpu);
      sim.rank_in_job[static_cast<size_t>(gpu)] = r;
    }
    sim.program.micro_batches = std::max(sim.program.micro_batches, program.micro_batches);
  }
  sim.program.graph.finalize();
  std::sort(sim.program.simulated_ranks.begin(), sim.program.simulated_ranks.end());
  if (!setups.empty())
    sim.program.grid = setups.front().program.grid;

  engine::ReplayOptions options = setups.empty() ? engine::ReplayOptions{} : setups.front().replay;
  options.task_job.assign(sim.program.graph.size(), 0);
  for (size_t j = 0; j < first.size(); ++j)
    std::fill(options.task_job.begin() + first[j],
              options.task_job.begin() + first[j] +
                  static_cast<std::ptrdiff_t>(setups[j].program.graph.size()),
              static_cast<uint32_t>(j));
  // The ranks here are the cluster's GPUs already, and no job runs on a down node: the platform
  // must not move ranks past the down nodes (as a single job's ranks fill the nodes that are up).
  ClusterSpec shared = with_background(cluster, spec.background_share);
  shared.degraded.nodes.clear();
  engine::Replay replay(sim.program, shared, options);
  sim.result = run_replay(replay);

  for (size_t j = 0; j < spec.jobs.size(); ++j) {
    JobRun run;
    run.program = std::move(setups[j].program);
    const auto begin = static_cast<std::ptrdiff_t>(first[j]);
    const auto end = begin + static_cast<std::ptrdiff_t>(run.program.graph.size());
    run.start.assign(sim.result.start.begin() + begin, sim.result.start.begin() + end);
    run.end.assign(sim.result.end.begin() + begin, sim.result.end.begin() + end);
    run.summary =
        report::summarize(run.program, run.start, run.end, spec.jobs[j].cluster, spec.jobs[j].workload);
    sim.jobs.push_back(std::move(run));
  }
  sim.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sim;
}

} // namespace stepsim::runner
