#pragma once
// The options of one subcommand, parsed by CLI11. Each option is declared once, in its command's
// constructor: its names, the name of its value, its help line and the variable it fills; the
// `--help` text is generated from those declarations (with each default and "required").
//
// Parsing reports, in this order: an unknown option (with a "did you mean"), a flag given a value,
// an option without its value, a single option given twice or empty, a value that does not
// convert or is not one of its choices (with a "did you mean"), a required option missing.
// Every one is a ConfigError (exit 2). Flags, options and positional arguments may come in any
// order; `--name value`, `--name=value` and, for short names, `-j4` all work.

#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace stepsim::cli {

class Options {
public:
  /// `command` is the subcommand's name.
  explicit Options(std::string command);
  ~Options();
  Options(const Options&) = delete;
  Options& operator=(const Options&) = delete;

  /// The command's usage lines and a paragraph, printed first by --help.
  void describe(const std::string& about);

  // Declarations. `names` is "--name" or "-j,--jobs"; `metavar` names the value in the help.
  // A value option's default is what `target` holds when it is declared.

  /// One value, which must be given.
  void required(const std::string& names, std::string& target, const std::string& metavar,
                const std::string& help);
  /// One value, optional.
  void value(const std::string& names, std::string& target, const std::string& metavar,
             const std::string& help);
  /// Any number of values, one per occurrence, in order.
  void values(const std::string& names, std::vector<std::string>& target, const std::string& metavar,
              const std::string& help);
  /// A flag: true when present; it takes no value.
  void flag(const std::string& names, bool& target, const std::string& help);
  /// An integer in [lo, hi].
  void integer(const std::string& names, int& target, int lo, int hi, const std::string& metavar,
               const std::string& help);
  /// A positive, finite number of seconds (0 in `target`: not given).
  void seconds(const std::string& names, double& target, const std::string& help);
  /// One of `choices` (the help lists them).
  void choice(const std::string& names, std::string& target, const std::vector<std::string>& choices,
              const std::string& help);
  /// The positional arguments (files), in order.
  void positionals(const std::string& metavar, std::vector<std::string>& target, const std::string& help);

  /// Parses the arguments after the subcommand and fills the declared variables. Returns false
  /// when -h/--help was given: the help is then on `out` and nothing else was checked.
  bool parse(const std::vector<std::string>& args, std::ostream& out);

  /// The generated help text.
  [[nodiscard]] std::string help();

  /// The subcommand's name.
  [[nodiscard]] const std::string& command() const { return command_; }

private:
  struct Decl;
  void declare_common(); ///< --log-level, which every command takes, listed last
  void check_unknown() const;
  void convert(Decl& d) const;
  Decl& declare(const std::string& names, int kind, const std::string& metavar, std::string help);

  std::string command_;
  std::unique_ptr<CLI::App> app_;
  std::vector<std::unique_ptr<Decl>> decls_;
  std::string log_level_ = "off";
  bool common_declared_ = false;
};

/// "; did you mean X?" for the candidate nearest to `word` by edit distance (config::did_you_mean),
/// or "" when none is close.
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates);

} // namespace stepsim::cli
