#pragma once
// Diagnostics on stderr: one spdlog logger, "stepsim", off unless `--log-level` turns it on.
// Lines read `stepsim: <level>: <message>`; outputs and exit codes never depend on it.

#include <spdlog/logger.h>

#include <string_view>

namespace stepsim {

/// The process's diagnostics logger (stderr, level off until set_log_level).
spdlog::logger& log();

/// Sets the level from its name: trace, debug, info, warn, error or off. Throws ConfigError
/// naming `option` and the accepted names for anything else.
void set_log_level(std::string_view name, std::string_view option = "--log-level");

} // namespace stepsim
