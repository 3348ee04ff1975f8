#include "core/csv.hpp"

#include <charconv>
#include <cmath>

namespace stepsim {

namespace {

bool is_number(std::string_view text) {
  if (!text.empty() && text.front() == '+')
    text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size() && std::isfinite(value);
}

} // namespace

std::string csv_cell(std::string_view text) {
  std::string cell(text);
  if (!cell.empty() && std::string_view("=+-@\t\r").find(cell.front()) != std::string_view::npos &&
      !is_number(cell))
    cell.insert(cell.begin(), '\'');
  if (cell.find_first_of(",\"\n\r") == std::string::npos &&
      (cell.empty() || (cell.front() != ' ' && cell.back() != ' ')))
    return cell;
  std::string out = "\"";
  for (const char c : cell)
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

} // namespace stepsim
