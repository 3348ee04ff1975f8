#pragma once
// Subcommands of the `stepsim` binary. Each lives in its own file (cli/<name>_cmd.cpp) and is
// listed once in the table in commands.cpp. Commands throw stepsim::Error subclasses; main()
// maps them to exit codes.

#include "cli/options.hpp"

#include <ostream>

namespace stepsim::cli {

/// Parses argv and runs the subcommand. Returns the exit code for a normal finish.
int dispatch(int argc, char** argv, std::ostream& out, std::ostream& err);

/// `stepsim run`: simulate one step. Exit 0, or 3 when --fail-on-oom and a GPU runs out of memory.
int run_command(Args& args, std::ostream& out, std::ostream& err);

/// `stepsim memory`: the static memory ledger per pipeline stage. Exit 0, or 3 with --fail-on-oom.
int memory_command(Args& args, std::ostream& out, std::ostream& err);

/// `stepsim collective`: an nccl-tests-like sweep of one collective (docs/collectives.md).
int collective_command(Args& args, std::ostream& out, std::ostream& err);

/// `stepsim sweep`: many configurations, each in its own process (docs/sweeps.md). Exit 0, or 1
/// when a configuration failed.
int sweep_command(Args& args, std::ostream& out, std::ostream& err);

/// `stepsim kernels`: the kernel shapes a workload runs, as a shape list (docs/kernels.md).
int kernels_command(Args& args, std::ostream& out, std::ostream& err);

/// `stepsim plan`: enumerate, filter by memory, estimate and simulate layouts (docs/planner.md).
int plan_command(Args& args, std::ostream& out, std::ostream& err);

/// `stepsim validate`: simulate published measured runs and compare (docs/validation.md). Exit 0
/// when it ran, whatever the errors.
int validate_command(Args& args, std::ostream& out, std::ostream& err);

/// `stepsim calibrate`: fit the per-GPU-kind knobs on a subset of measured runs (docs/calibration.md).
int calibrate_command(Args& args, std::ostream& out, std::ostream& err);

/// `stepsim compare`: a measured PyTorch profiler (Kineto) trace beside a simulated trace.json.
int compare_command(Args& args, std::ostream& out, std::ostream& err);

} // namespace stepsim::cli
