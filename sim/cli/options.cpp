#include "cli/options.hpp"

#include "config/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

#include <CLI/CLI.hpp>

#include <charconv>
#include <climits>
#include <cmath>
#include <sstream>
#include <string>

namespace stepsim::cli {

namespace {

enum Kind : int { REQUIRED, VALUE, VALUES, FLAG, INTEGER, SECONDS, CHOICE, POSITIONALS };

/// "-j,--jobs" -> {"-j", "--jobs"}.
std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream ss(names);
  for (std::string n; std::getline(ss, n, ',');)
    out.push_back(n);
  return out;
}

std::string join(const std::vector<std::string>& words, const std::string& sep, const std::string& last) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i)
    out += (i == 0 ? "" : i + 1 == words.size() ? last : sep) + words[i];
  return out;
}

/// The help layout: the command's usage and paragraph, then one line per option
/// ("  -j, --jobs N           help (default 1)").
class HelpFormatter : public CLI::Formatter {
public:
  HelpFormatter() { column_width(27); }
  std::string make_help(const CLI::App* app, std::string /*name*/, CLI::AppFormatMode mode) const override {
    std::stringstream out;
    out << app->get_description() << '\n' << make_positionals(app) << make_groups(app, mode);
    return out.str();
  }
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    if (positional)
      return opt->get_name(true, false);
    return join(split_names(opt->get_name(false, true)), ", ", ", ");
  }
  std::string make_option_opts(const CLI::Option* opt) const override {
    return opt->get_type_name().empty() ? std::string() : " " + opt->get_type_name();
  }
  /// The help line, wrapped at 100 columns (CLI11 indents what follows each newline).
  std::string make_option_desc(const CLI::Option* opt) const override {
    constexpr std::size_t WIDTH = 100;
    const std::size_t room = WIDTH - get_column_width();
    std::string out, line;
    std::stringstream words(opt->get_description());
    for (std::string w; words >> w;) {
      if (!line.empty() && line.size() + 1 + w.size() > room) {
        out += line + '\n';
        line.clear();
      }
      line += (line.empty() ? "" : " ") + w;
    }
    return out + line;
  }
};

} // namespace

/// One declared option: what CLI11 fills, and the variable it converts into.
struct Options::Decl {
  std::vector<std::string> names; ///< {"-j", "--jobs"}
  std::string shown;              ///< "-j/--jobs", as errors name it
  int kind = VALUE;
  std::vector<std::string> raw; ///< every value given, as written
  int count = 0;                ///< flags: times given
  std::string* text = nullptr;
  std::vector<std::string>* list = nullptr;
  bool* on = nullptr;
  int* whole = nullptr;
  double* number = nullptr;
  int lo = 0, hi = 0;
  std::vector<std::string> choices;
};

Options::Options(std::string command)
    : command_(std::move(command)), app_(std::make_unique<CLI::App>("", "stepsim " + command_)) {
  app_->formatter(std::make_shared<HelpFormatter>());
  app_->set_help_flag("-h,--help", "print this help and exit 0");
  app_->allow_extras(true); // reported by check_unknown, with a suggestion
}

void Options::declare_common() {
  if (common_declared_)
    return;
  common_declared_ = true;
  value("--log-level", log_level_, "LEVEL",
        "diagnostics on stderr: trace, debug, info, warn, error or off (engine progress, planner stages)");
}

Options::~Options() = default;

void Options::describe(const std::string& about) {
  app_->description(about);
}

Options::Decl& Options::declare(const std::string& names, int kind, const std::string& metavar,
                                std::string help) {
  auto d = std::make_unique<Decl>();
  d->names = split_names(names);
  d->shown = join(d->names, "/", "/");
  d->kind = kind;
  CLI::Option* opt = nullptr;
  if (kind == FLAG) {
    opt = app_->add_flag(names, d->count, help);
  } else {
    opt = app_->add_option(names, d->raw, help)->type_name(metavar);
    if (kind != POSITIONALS)
      opt->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  decls_.push_back(std::move(d));
  return *decls_.back();
}

namespace {

/// The help line with what the declaration knows: required, the choices, the default.
std::string described(const std::string& help, bool required, const std::string& fallback) {
  if (required)
    return help + " (required)";
  if (fallback.empty() || help.find("default") != std::string::npos)
    return help;
  return help + " (default " + fallback + ")";
}

} // namespace

void Options::required(const std::string& names, std::string& target, const std::string& metavar,
                       const std::string& help) {
  declare(names, REQUIRED, metavar, described(help, true, "")).text = &target;
}

void Options::value(const std::string& names, std::string& target, const std::string& metavar,
                    const std::string& help) {
  declare(names, VALUE, metavar, described(help, false, target)).text = &target;
}

void Options::values(const std::string& names, std::vector<std::string>& target, const std::string& metavar,
                     const std::string& help) {
  declare(names, VALUES, metavar, help + " (repeatable)").list = &target;
}

void Options::flag(const std::string& names, bool& target, const std::string& help) {
  declare(names, FLAG, "", help).on = &target;
}

void Options::integer(const std::string& names, int& target, int lo, int hi, const std::string& metavar,
                      const std::string& help) {
  Decl& d = declare(names, INTEGER, metavar, described(help, false, std::to_string(target)));
  d.whole = &target;
  d.lo = lo;
  d.hi = hi;
}

void Options::seconds(const std::string& names, double& target, const std::string& help) {
  declare(names, SECONDS, "SECONDS", help).number = &target;
}

void Options::choice(const std::string& names, std::string& target, const std::vector<std::string>& choices,
                     const std::string& help) {
  Decl& d = declare(names, CHOICE, join(choices, "|", "|"), described(help, false, target));
  d.text = &target;
  d.choices = choices;
}

void Options::positionals(const std::string& metavar, std::vector<std::string>& target,
                          const std::string& help) {
  declare(metavar, POSITIONALS, "", help).list = &target;
}

std::string Options::help() {
  declare_common();
  return app_->help();
}

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = config::did_you_mean(word, candidates);
  return best.empty() ? std::string() : "; did you mean " + best + "?";
}

void Options::check_unknown() const {
  const std::vector<std::string> extras = app_->remaining();
  if (extras.empty())
    return;
  const std::string& first = extras.front();
  if (!first.starts_with("-") || first == "-")
    throw ConfigError("unexpected argument '" + first + "' for `stepsim " + command_ + "` (see `stepsim " +
                      command_ + " --help`)");
  const std::string name = first.substr(0, first.find('='));
  std::vector<std::string> known = {"--help"};
  for (const auto& d : decls_)
    if (d->kind != POSITIONALS)
      known.insert(known.end(), d->names.begin(), d->names.end());
  throw ConfigError("unknown option " + name + " for `stepsim " + command_ + "`" + suggestion(name, known));
}

void Options::convert(Decl& d) const {
  if (d.kind == FLAG) {
    *d.on = d.count > 0;
    return;
  }
  if (d.kind == POSITIONALS) {
    *d.list = d.raw;
    return;
  }
  for (const std::string& v : d.raw)
    if (v.starts_with("--")) // `--out --quiet`: the next option is not --out's value
      throw ConfigError("option " + d.shown + " needs a value, found the option " + v);
  if (d.kind == VALUES) {
    for (const std::string& v : d.raw)
      if (v.empty())
        throw ConfigError("option " + d.shown + " needs a non-empty value");
    *d.list = d.raw;
    return;
  }
  if (d.raw.size() > 1)
    throw ConfigError("option " + d.shown + " is given " + std::to_string(d.raw.size()) +
                      " times; it takes one value");
  if (d.raw.empty())
    return; // a missing required option is reported after every conversion
  const std::string& v = d.raw.front();
  if (d.kind == INTEGER) {
    int n = 0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || n < d.lo || n > d.hi)
      throw ConfigError(d.shown + ": expected " +
                        (d.lo == 1 && d.hi == INT_MAX
                             ? std::string("a positive integer")
                             : "an integer in [" + std::to_string(d.lo) + ", " + std::to_string(d.hi) + "]") +
                        ", got '" + v + "'");
    *d.whole = n;
    return;
  }
  if (d.kind == SECONDS) {
    double s = 0;
    const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), s);
    if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || !std::isfinite(s) || !(s > 0))
      throw ConfigError(d.shown + ": expected seconds > 0, got '" + v + "'");
    *d.number = s;
    return;
  }
  if (v.empty())
    throw ConfigError("option " + d.shown + " needs a non-empty value");
  if (d.kind == CHOICE && std::find(d.choices.begin(), d.choices.end(), v) == d.choices.end()) {
    const std::string near = config::did_you_mean(v, d.choices);
    throw ConfigError(d.shown + " " + v + ": expected " + join(d.choices, ", ", " or ") +
                      (near.empty() ? std::string() : "; did you mean " + near + "?"));
  }
  *d.text = v;
}

bool Options::parse(const std::vector<std::string>& args, std::ostream& out) {
  declare_common();
  // A flag given a value (`--quiet=yes`) is refused as such, not as CLI11's conversion error.
  for (const std::string& a : args) {
    if (a == "--")
      break;
    const auto eq = a.find('=');
    if (!a.starts_with("--") || eq == std::string::npos)
      continue;
    for (const auto& d : decls_)
      if (d->kind == FLAG && std::find(d->names.begin(), d->names.end(), a.substr(0, eq)) != d->names.end())
        throw ConfigError("option " + a.substr(0, eq) + " takes no value, got '" + a.substr(eq + 1) + "'");
  }
  try {
    app_->parse(std::vector<std::string>(args.rbegin(), args.rend()));
  } catch (const CLI::CallForHelp&) {
    out << help();
    return false;
  } catch (const CLI::ArgumentMismatch& e) {
    // "--out: 1 required DIR missing": the option ends the line or has an empty `=` value.
    const std::string what = e.what();
    const std::string name = what.substr(0, what.find(':'));
    check_unknown();
    throw ConfigError("option " + name + " needs a value (see `stepsim " + command_ + " --help`)");
  } catch (const CLI::ParseError& e) {
    check_unknown();
    throw ConfigError(std::string(e.what()) + " (see `stepsim " + command_ + " --help`)");
  }
  check_unknown();
  for (const auto& d : decls_)
    convert(*d);
  for (const auto& d : decls_)
    if (d->kind == REQUIRED && d->raw.empty())
      throw ConfigError("missing required option " + d->names.back() + " (see `stepsim " + command_ +
                        " --help`)");
  set_log_level(log_level_);
  return true;
}

} // namespace stepsim::cli
