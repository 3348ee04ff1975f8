#include "runner/simulate.hpp"

#include "model/transformer.hpp"

#include <chrono>

namespace stepsim::runner {

graph::ComputeTimeFn compute_time_model(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  const GpuSpec gpu = cluster.gpu;
  const Precision precision = workload.precision;
  return [gpu, precision](const graph::ComputeQuery& q) { return model::roofline_time(q.flops, q.bytes, gpu, precision); };
}

Simulation simulate(const ClusterSpec& cluster, const WorkloadSpec& workload, const SimulateOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  Simulation sim;
  graph::BuildOptions build{.fold_dp = options.fold_dp, .compute_time = compute_time_model(cluster, workload)};
  sim.program = graph::build_step(workload, build);
  engine::Replay replay(sim.program, cluster, engine::ReplayOptions{.collective_form = options.collective_form});
  sim.result = replay.run();
  sim.summary = report::summarize(sim.program, sim.result.start, sim.result.end, cluster, workload);
  sim.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sim;
}

} // namespace stepsim::runner
