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

} // namespace stepsim::cli
