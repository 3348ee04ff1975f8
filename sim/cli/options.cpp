#include "cli/options.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <string>

namespace stepsim::cli {

Args::Args(int argc, char** argv) {
  if (argc > 1)
    command_ = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    Item item;
    if (a.rfind("--", 0) == 0) {
      const auto eq = a.find('=');
      if (eq != std::string::npos) {
        item.name = a.substr(0, eq);
        item.value = a.substr(eq + 1);
        item.has_value = true;
      } else {
        item.name = a;
        // The next argument is this option's value unless it is itself an option.
        if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
          item.value = argv[++i];
          item.has_value = true;
        }
      }
    } else {
      item.value = a;
      item.has_value = true;
    }
    items_.push_back(item);
  }
}

std::string Args::required(const std::string& name) {
  const std::vector<std::string> all = values(name);
  if (all.empty())
    throw ConfigError("missing required option " + name + " (see `stepsim " + command_ + " --help`)");
  if (all.size() > 1)
    throw ConfigError("option " + name + " is given " + std::to_string(all.size()) +
                      " times; it takes one value");
  return all.front();
}

std::string Args::value(const std::string& name, const std::string& fallback) {
  const std::vector<std::string> all = values(name);
  if (all.size() > 1)
    throw ConfigError("option " + name + " is given " + std::to_string(all.size()) +
                      " times; it takes one value");
  return all.empty() ? fallback : all.front();
}

std::vector<std::string> Args::values(const std::string& name) {
  std::vector<std::string> out;
  for (Item& it : items_)
    if (it.name == name) {
      it.used = true;
      if (!it.has_value)
        throw ConfigError("option " + name + " needs a value");
      if (it.value.empty())
        throw ConfigError("option " + name + " needs a non-empty value");
      out.push_back(it.value);
    }
  return out;
}

bool Args::flag(const std::string& name) {
  bool seen = false;
  for (Item& it : items_)
    if (it.name == name) {
      if (it.has_value)
        throw ConfigError("option " + name + " takes no value, got '" + it.value + "'");
      it.used = true;
      seen = true;
    }
  return seen;
}

std::vector<std::string> Args::positionals() {
  std::vector<std::string> out;
  for (Item& it : items_)
    if (it.name.empty()) {
      it.used = true;
      out.push_back(it.value);
    }
  return out;
}

void Args::finish() const {
  for (const Item& it : items_)
    if (!it.used)
      throw ConfigError(it.name.empty() ? "unexpected argument '" + it.value + "'"
                                        : "unknown option " + it.name + " for `stepsim " + command_ + "`");
}

void apply_log_level(Args& args) {
  set_log_level(args.value("--log-level", "off"));
}

} // namespace stepsim::cli
