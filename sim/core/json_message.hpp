#pragma once
// nlohmann::json's exceptions read "[json.exception.parse_error.101] parse error at line 1, ...":
// errors shown to users keep the message and drop the library's tag.

#include <exception>
#include <string>

namespace stepsim {

/// `e.what()` without a leading "[json.exception.<kind>.<id>] " tag.
inline std::string json_message(const std::exception& e) {
  std::string m = e.what();
  if (m.rfind("[json.exception.", 0) == 0)
    if (const auto close = m.find("] "); close != std::string::npos)
      m.erase(0, close + 2);
  return m;
}

} // namespace stepsim
