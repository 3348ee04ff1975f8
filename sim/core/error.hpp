#pragma once
// One exception family. Only cli/ turns these into exit codes:
// ConfigError -> 2 (usage/config), ModelError -> 2 (a layout that cannot work),
// SimulationError -> 1.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace stepsim {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Bad input: a YAML file, a --set override or a command-line option. The message names the
/// file:line:col, the key and what was expected.
class ConfigError : public Error {
public:
  using Error::Error;
};

/// A configuration that parses but cannot work (e.g. tp*pp*dp != GPUs).
class ModelError : public Error {
public:
  using Error::Error;
};

/// The simulation itself failed (a task never ran, an inconsistent platform).
class SimulationError : public Error {
public:
  using Error::Error;
};

/// `text` as it may appear in a message: control bytes (and DEL) escaped as \n, \t or \xNN, and
/// cut after `max_chars` characters with "...(N bytes in all)" so that a huge or hostile value
/// cannot flood or drive a terminal.
std::string printable(std::string_view text, std::size_t max_chars = 80);

/// A whole error message for stderr: each line passed through `printable` (at most 1000
/// characters each), and at most 50 lines ("... and N more errors").
std::string printable_message(std::string_view message);

} // namespace stepsim
