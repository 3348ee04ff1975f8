#include "core/error.hpp"

#include <algorithm>
#include <cstdio>

namespace stepsim {

std::string printable(std::string_view text, std::size_t max_chars) {
  std::string out;
  std::size_t shown = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (shown >= max_chars) {
      out += "...(" + std::to_string(text.size()) + " bytes in all)";
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
    ++shown;
  }
  return out;
}

std::string printable_message(std::string_view message) {
  constexpr std::size_t kMaxLines = 50;
  constexpr std::size_t kMaxLineChars = 1000;
  std::string out;
  std::size_t lines = 0;
  std::size_t start = 0;
  while (start <= message.size()) {
    const std::size_t end = std::min(message.find('\n', start), message.size());
    if (lines == kMaxLines) {
      std::size_t rest = 1;
      for (std::size_t i = end; i < message.size(); ++i)
        rest += message[i] == '\n' ? 1 : 0;
      out += "\n... and " + std::to_string(rest) + " more errors";
      break;
    }
    out += (lines == 0 ? "" : "\n") + printable(message.substr(start, end - start), kMaxLineChars);
    ++lines;
    if (end == message.size())
      break;
    start = end + 1;
  }
  return out;
}

} // namespace stepsim
