#pragma once
// Subcommands of the `stepsim` binary. Each lives in its own file (cli/<name>_cmd.cpp): a class
// whose constructor declares its options on an Options (one line each, bound to its members)
// and whose run() does the work; it is listed once in the table in commands.cpp. Commands throw
// stepsim::Error subclasses; main() maps them to exit codes.

#include "cli/options.hpp"

#include <memory>
#include <ostream>

namespace stepsim::cli {

/// Exit codes besides 0 (ok), 1 (simulation error) and 2 (usage or configuration error).
/// A GPU runs out of memory: --fail-on-oom was given, or the model states alone do not fit.
inline constexpr int EXIT_OUT_OF_MEMORY = 3;

/// One subcommand, its options declared and bound by its constructor.
class Command {
public:
  virtual ~Command() = default;
  /// Runs the command once its options are parsed. Returns the exit code for a normal finish.
  virtual int run(std::ostream& out, std::ostream& err) = 0;
};

/// Parses argv and runs the subcommand. Returns the exit code for a normal finish.
int dispatch(int argc, char** argv, std::ostream& out, std::ostream& err);

/// `stepsim run`: simulate one step. Exit 0, or 3 when --fail-on-oom and a GPU runs out of memory.
std::unique_ptr<Command> run_command(Options& options);

/// `stepsim memory`: the static memory ledger per pipeline stage. Exit 0, or 3 with --fail-on-oom.
std::unique_ptr<Command> memory_command(Options& options);

/// `stepsim collective`: an nccl-tests-like sweep of one collective (docs/collectives.md).
std::unique_ptr<Command> collective_command(Options& options);

/// `stepsim sweep`: many configurations, each in its own process (docs/sweeps.md). Exit 0, or 1
/// when a configuration failed.
std::unique_ptr<Command> sweep_command(Options& options);

/// `stepsim kernels`: the kernel shapes a workload runs, as a shape list (docs/kernels.md).
std::unique_ptr<Command> kernels_command(Options& options);

/// `stepsim jobs`: several jobs on one cluster, alone and shared (docs/jobs.md).
std::unique_ptr<Command> jobs_command(Options& options);

/// `stepsim plan`: enumerate, filter by memory, estimate and simulate layouts (docs/planner.md).
std::unique_ptr<Command> plan_command(Options& options);

/// `stepsim validate`: simulate published measured runs and compare (docs/validation.md). Exit 0
/// when it ran, whatever the errors.
std::unique_ptr<Command> validate_command(Options& options);

/// `stepsim calibrate`: fit the per-GPU-kind knobs on a subset of measured runs (docs/calibration.md).
std::unique_ptr<Command> calibrate_command(Options& options);

/// `stepsim compare`: a measured PyTorch profiler (Kineto) trace beside a simulated trace.json.
std::unique_ptr<Command> compare_command(Options& options);

/// `stepsim report`: the HTML page of an output folder (docs/report.md).
std::unique_ptr<Command> report_command(Options& options);

} // namespace stepsim::cli
