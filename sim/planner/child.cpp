// Simulations of planner candidates, each in its own child process (SimGrid runs one simulation
// per process); the child's figures come back as its message (process/process.hpp).

#include "planner/planner.hpp"

#include "process/process.hpp"
#include "runner/simulate.hpp"

#include <string>

namespace stepsim::planner {

namespace {

process::Message simulate_one(const ClusterSpec& cluster, const WorkloadSpec& w, int steps) {
  const runner::Simulation sim = runner::simulate(cluster, w, {.steps = steps});
  const report::Summary& s = sim.summary;
  const Seconds step = s.variability ? s.variability->mean : s.step_time;
  return process::Message{{"step_s", process::number(step.value())},
                          {"bubble_fraction", process::number(s.bubble_fraction)},
                          {"exposed_tp_s", process::number(s.exposed.tp.value())},
                          {"exposed_pp_s", process::number(s.exposed.pp.value())},
                          {"exposed_dp_s", process::number(s.exposed.dp.value())},
                          {"mfu", process::number(s.mfu)},
                          {"peak_bytes", process::number(s.memory.worst.peak().value())},
                          {"fits", s.memory.fits_in_memory}};
}

Simulated collect(const process::Outcome& child) {
  Simulated out;
  if (!child.exception.empty()) {
    out.error = child.exception;
    return out;
  }
  if (child.signal != 0) {
    out.error = "simulation killed by signal " + std::to_string(child.signal);
    return out;
  }
  try {
    const process::Message& m = child.message.value();
    out.step_s = process::number_of(m.at("step_s"));
    out.bubble_fraction = process::number_of(m.at("bubble_fraction"));
    out.exposed_tp_s = process::number_of(m.at("exposed_tp_s"));
    out.exposed_pp_s = process::number_of(m.at("exposed_pp_s"));
    out.exposed_dp_s = process::number_of(m.at("exposed_dp_s"));
    out.mfu = process::number_of(m.at("mfu"));
    out.peak_bytes = process::number_of(m.at("peak_bytes"));
    out.fits = m.at("fits").get<bool>();
    out.ok = true;
  } catch (const std::exception&) {
    out = Simulated{};
    out.error = "simulation process exited without a result";
  }
  return out;
}

} // namespace

std::vector<Simulated> simulate_all(const ClusterSpec& cluster, const std::vector<WorkloadSpec>& specs,
                                    int jobs, const std::function<void(std::size_t, std::size_t)>& progress) {
  return simulate_all(cluster, specs, SimulateAllOptions{.jobs = jobs, .steps = 1, .progress = progress});
}

std::vector<Simulated> simulate_all(const ClusterSpec& cluster, const std::vector<WorkloadSpec>& specs,
                                    const SimulateAllOptions& options) {
  const int steps = options.steps;
  const auto& progress = options.progress;
  std::vector<Simulated> out(specs.size());
  std::size_t ended = 0;
  process::run_each(
      specs.size(),
      [&](std::size_t i) {
        return process::Job{
            .body = [&cluster, &w = specs[i], steps] { return simulate_one(cluster, w, steps); }, .argv = {}};
      },
      process::PoolOptions{
          .jobs = options.jobs, .spawn = {.output = process::Output::DISCARD}, .name = "plan"},
      [&](std::size_t i, process::Outcome&& child) {
        out[i] = collect(child);
        if (progress)
          progress(++ended, specs.size());
      },
      [&] {
        if (progress)
          progress(ended, specs.size());
      });
  return out;
}

} // namespace stepsim::planner
