// Quantities with units in their text: "80GiB", "200Gbps", "1.5us", "989TFLOPS".
#include "config/config.hpp"

#include "core/error.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <span>
#include <string_view>
#include <system_error>

namespace stepsim::config {

namespace {

struct Unit {
  std::string_view suffix;
  double factor; ///< SI base units per one of this unit
};

constexpr double KIB = 1024.0;
constexpr double MIB = KIB * 1024.0;
constexpr double GIB = MIB * 1024.0;
constexpr double TIB = GIB * 1024.0;

constexpr std::array BYTE_UNITS{
    Unit{"B", 1.0},   Unit{"KB", 1e3},  Unit{"MB", 1e6},  Unit{"GB", 1e9},  Unit{"TB", 1e12},
    Unit{"KiB", KIB}, Unit{"MiB", MIB}, Unit{"GiB", GIB}, Unit{"TiB", TIB},
};

constexpr std::array BANDWIDTH_UNITS{
    Unit{"Bps", 1.0},      Unit{"KBps", 1e3},      Unit{"MBps", 1e6},     Unit{"GBps", 1e9},
    Unit{"TBps", 1e12},    Unit{"bps", 1.0 / 8},   Unit{"Kbps", 1e3 / 8}, Unit{"Mbps", 1e6 / 8},
    Unit{"Gbps", 1e9 / 8}, Unit{"Tbps", 1e12 / 8},
};

constexpr std::array TIME_UNITS{
    Unit{"s", 1.0},
    Unit{"ms", 1e-3},
    Unit{"us", 1e-6},
    Unit{"ns", 1e-9},
};

constexpr std::array FLOPS_UNITS{
    Unit{"FLOPS", 1.0},
    Unit{"GFLOPS", 1e9},
    Unit{"TFLOPS", 1e12},
    Unit{"PFLOPS", 1e15},
};

constexpr std::array POWER_UNITS{
    Unit{"W", 1.0},
    Unit{"kW", 1e3},
};

constexpr std::array FREQUENCY_UNITS{
    Unit{"Hz", 1.0},
    Unit{"MHz", 1e6},
    Unit{"GHz", 1e9},
};

/// What is being parsed, for messages.
struct QuantityKind {
  std::string_view name;    ///< "a byte size"
  std::string_view example; ///< "80GiB"
  std::span<const Unit> units;
};

bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string unknown_unit_hint(std::string_view unit, std::span<const Unit> units) {
  std::string same_letters;
  std::string all;
  for (const auto& u : units) {
    all += (all.empty() ? "" : ", ") + std::string(u.suffix);
    if (lower(u.suffix) == lower(unit)) {
      same_letters += (same_letters.empty() ? "'" : "' or '") + std::string(u.suffix);
    }
  }
  std::string hint = "unknown unit '" + std::string(unit) + "'; ";
  if (!same_letters.empty()) {
    return hint + "units are case-sensitive: did you mean " + same_letters + "'?";
  }
  return hint + "known units: " + all;
}

double parse_quantity(const std::string& text, const std::string& where, const QuantityKind& kind) {
  auto error = [&](const std::string& why) {
    return ConfigError((where.empty() ? "" : where + ": ") + "expected " + std::string(kind.name) +
                       " with a unit, e.g. " + std::string(kind.example) + ", found '" + text + "'" +
                       (why.empty() ? "" : " (" + why + ")"));
  };

  std::string_view s = text;
  while (!s.empty() && is_blank(s.front())) {
    s.remove_prefix(1);
  }
  while (!s.empty() && is_blank(s.back())) {
    s.remove_suffix(1);
  }
  if (s.empty()) {
    throw error("");
  }
  if (s.front() == '-') {
    throw error("must not be negative");
  }
  if (std::isdigit(static_cast<unsigned char>(s.front())) == 0 && s.front() != '.') {
    throw error("not a number");
  }
  double number = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  if (ec == std::errc::invalid_argument) {
    throw error("not a number");
  }
  if (ec == std::errc::result_out_of_range || !std::isfinite(number)) {
    throw error("out of range");
  }
  std::string_view unit(ptr, static_cast<std::size_t>(s.data() + s.size() - ptr));
  while (!unit.empty() && is_blank(unit.front())) {
    unit.remove_prefix(1);
  }
  if (unit.empty()) {
    throw error("no unit");
  }
  for (const auto& u : kind.units) {
    if (u.suffix == unit) {
      const double value = number * u.factor;
      if (!std::isfinite(value)) {
        throw error("out of range");
      }
      return value;
    }
  }
  throw error(unknown_unit_hint(unit, kind.units));
}

} // namespace

Bytes parse_bytes(const std::string& text, const std::string& where) {
  return Bytes(parse_quantity(text, where, {"a byte size", "80GiB", BYTE_UNITS}));
}

BytesPerSec parse_bandwidth(const std::string& text, const std::string& where) {
  return BytesPerSec(parse_quantity(text, where, {"a bandwidth", "200Gbps", BANDWIDTH_UNITS}));
}

Seconds parse_time(const std::string& text, const std::string& where) {
  return Seconds(parse_quantity(text, where, {"a time", "2us", TIME_UNITS}));
}

FlopsPerSec parse_flops_rate(const std::string& text, const std::string& where) {
  return FlopsPerSec(parse_quantity(text, where, {"a FLOP rate", "312TFLOPS", FLOPS_UNITS}));
}

double parse_power(const std::string& text, const std::string& where) {
  return parse_quantity(text, where, {"a power", "500W", POWER_UNITS});
}

double parse_frequency(const std::string& text, const std::string& where) {
  return parse_quantity(text, where, {"a frequency", "1.5GHz", FREQUENCY_UNITS});
}

} // namespace stepsim::config
