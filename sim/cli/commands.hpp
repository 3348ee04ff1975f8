#pragma once
// Subcommands of the `stepsim` binary. Throw stepsim::Error subclasses; main() maps them to
// exit codes.

#include <ostream>

namespace stepsim::cli {

/// Parses argv and runs the subcommand. Returns the exit code for a normal finish.
int dispatch(int argc, char** argv, std::ostream& out, std::ostream& err);

} // namespace stepsim::cli
