#pragma once
// Runs sweep configurations, each in its own child process (SimGrid allows one simulation per
// process), at most `jobs` at a time, on process/process.hpp's pool: children die with the sweep
// and print nothing. The parent never starts SimGrid: it only forks, waits and collects each
// child's verdict, its message.

#include "runner/simulate.hpp"
#include "sweep/plan.hpp"
#include "sweep/results.hpp"

#include <filesystem>
#include <functional>
#include <vector>

namespace stepsim::sweep {

struct ExecuteOptions {
  std::filesystem::path cluster;    ///< base cluster file
  std::filesystem::path workload;   ///< base workload file
  int jobs = 1;                     ///< child processes at a time, >= 1
  double timeout_s = 0;             ///< kill a configuration after this many seconds; 0: never
  runner::SimulateOptions simulate; ///< passed to runner::simulate in each child
};

/// Called in the parent for each finished configuration, in completion order, with its row and
/// the wall time its process took (seconds).
using OnFinished = std::function<void(const Row&, double)>;
/// Called in the parent about five times a second while children run.
using OnTick = std::function<void()>;

/// Runs every configuration of `pending`. In a child: load the cluster and workload with the
/// configuration's overrides, check the layout, simulate, summarize. ConfigError and ModelError
/// give a skipped row with the message as reason; any other error, a crash, or the timeout give
/// a failed row. Throws Error only when processes cannot be created; then, or when a callback
/// throws, the running children are killed and reaped first.
void execute(const std::vector<const SweepConfig*>& pending, const ExecuteOptions& options,
             const OnFinished& on_finished, const OnTick& on_tick);

/// CPUs this process may run on (sched_getaffinity), at least 1.
int available_cpus();

} // namespace stepsim::sweep
