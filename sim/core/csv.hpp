#pragma once
// One way to write a text cell of a CSV file, for every CSV writer.

#include <string>
#include <string_view>

namespace stepsim {

/// `text` as a CSV cell (RFC 4180): quoted when it holds a comma, a quote, a line break or
/// leading/trailing spaces, quotes doubled. A cell a spreadsheet would run as a formula (starting
/// with =, +, -, @, a tab or a carriage return) gets a leading single quote, unless the whole
/// cell is a number ("-1.5", "+3e8": data, kept as it is).
std::string csv_cell(std::string_view text);

} // namespace stepsim
