#include "core/input_file.hpp"

#include "core/error.hpp"

#include <fstream>
#include <system_error>

namespace stepsim {

std::string input_file_problem(const std::filesystem::path& file) {
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    return ec.message(); // e.g. a name too long, a path through a file
  if (ec || !std::filesystem::exists(status))
    return "it does not exist";
  if (std::filesystem::is_directory(status))
    return "it is a directory";
  // Regular files, and pipes (`--workload <(...)`); not devices such as /dev/zero.
  if (!std::filesystem::is_regular_file(status) && !std::filesystem::is_fifo(status))
    return "it is not a regular file";
  return "";
}

std::string read_input_file(const std::filesystem::path& file, const std::string& what) {
  const std::string prefix = file.string() + ": cannot read the " + what + ": ";
  if (const std::string why = input_file_problem(file); !why.empty())
    throw ConfigError(prefix + why);
  std::ifstream in(file, std::ios::binary);
  if (!in.is_open())
    throw ConfigError(prefix + "it cannot be opened (permissions?)");
  std::string text;
  char block[1 << 16];
  while (in.read(block, sizeof block) || in.gcount() > 0) {
    text.append(block, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxInputBytes)
      throw ConfigError(prefix + "it has more than the " + std::to_string(kMaxInputBytes) +
                        " bytes accepted");
  }
  if (in.bad())
    throw ConfigError(prefix + "a read error occurred");
  return text;
}

} // namespace stepsim
