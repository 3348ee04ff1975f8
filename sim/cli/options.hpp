#pragma once
// A small, strict command-line parser: `--name value`, `--name=value`, repeatable options and
// flags. Unknown or unused options are errors (ConfigError).

#include <set>
#include <string>
#include <vector>

namespace stepsim::cli {

class Args {
public:
  Args(int argc, char** argv);

  /// The subcommand (first argument), or "" when there is none.
  [[nodiscard]] const std::string& command() const { return command_; }

  /// Value of a required option; throws ConfigError naming the option when missing.
  std::string required(const std::string& name);
  /// Value of an optional option, or `fallback`.
  std::string value(const std::string& name, const std::string& fallback);
  /// Every value of a repeatable option, in order.
  std::vector<std::string> values(const std::string& name);
  /// True when the flag is present.
  bool flag(const std::string& name);
  /// Positional arguments after the subcommand.
  std::vector<std::string> positionals();
  /// Throws ConfigError if any argument was not consumed.
  void finish() const;

private:
  struct Item {
    std::string name; ///< "--x" or "" for a positional
    std::string value;
    bool has_value = false;
    bool used = false;
  };
  std::string command_;
  std::vector<Item> items_;
};

/// Consumes `--log-level LEVEL`, which every command takes, and sets the diagnostics level
/// (core/log.hpp; default off: nothing extra on stderr).
void apply_log_level(Args& args);

} // namespace stepsim::cli
