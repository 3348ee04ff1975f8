#include "core/log.hpp"

#include "core/error.hpp"

#include <spdlog/sinks/stdout_sinks.h>

#include <array>
#include <memory>
#include <string>
#include <utility>

namespace stepsim {

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("stepsim", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("stepsim: %l: %v");
    l->set_level(spdlog::level::off);
    l->flush_on(spdlog::level::trace); // children of plan/sweep/validate may end with _Exit
    return l;
  }();
  return *logger;
}

void set_log_level(std::string_view name, std::string_view option) {
  static constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 6> LEVELS{{
      {"trace", spdlog::level::trace},
      {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},
      {"off", spdlog::level::off},
  }};
  for (const auto& [level_name, level] : LEVELS)
    if (name == level_name) {
      log().set_level(level);
      return;
    }
  throw ConfigError("option " + std::string(option) + ": '" + std::string(name) +
                    "' is not a level (trace, debug, info, warn, error, off)");
}

} // namespace stepsim
