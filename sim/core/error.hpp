#pragma once
// One exception family. Only cli/ turns these into exit codes:
// ConfigError -> 2 (usage/config), ModelError -> 2 (a layout that cannot work),
// SimulationError -> 1.

#include <stdexcept>
#include <string>

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

} // namespace stepsim
