#include "core/input_file.hpp"

#include "core/error.hpp"

#include <fstream>
#include <system_error>

namespace stepsim {

namespace {

/// True for a process's inherited pipe reached as /dev/fd/N or /proc/self/fd/N (the link
/// reads "pipe:[inode]"): `<(...)` of a shell.
bool inherited_pipe(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(std::filesystem::symlink_status(file, ec)))
    return false;
  const std::string target = std::filesystem::read_symlink(file, ec).string();
  return !ec && target.starts_with("pipe:[");
}

} // namespace

std::string describe_bytes(std::uintmax_t bytes) {
  if (bytes >= (std::uintmax_t{1} << 30) && bytes % (std::uintmax_t{1} << 30) == 0)
    return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (std::uintmax_t{1} << 20) && bytes % (std::uintmax_t{1} << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

std::string input_file_problem(const std::filesystem::path& file) {
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    return ec.message(); // e.g. a name too long, a path through a file
  if (ec || !std::filesystem::exists(status))
    return "it does not exist";
  if (std::filesystem::is_directory(status))
    return "it is a directory";
  if (std::filesystem::is_fifo(status))
    return inherited_pipe(file) ? "" : "it is a FIFO (named pipe), not a regular file";
  if (!std::filesystem::is_regular_file(status))
    return "it is not a regular file";
  return "";
}

std::string read_input_file(const std::filesystem::path& file, const std::string& what,
                            std::uintmax_t max_bytes) {
  const std::string prefix = file.string() + ": cannot read the " + what + ": ";
  if (const std::string why = input_file_problem(file); !why.empty())
    throw ConfigError(prefix + why);
  const std::string too_large = prefix + "it is larger than the " + describe_bytes(max_bytes) + " accepted";
  std::error_code ec;
  if (std::filesystem::is_regular_file(file, ec)) {
    const std::uintmax_t size = std::filesystem::file_size(file, ec);
    if (!ec && size > max_bytes)
      throw ConfigError(too_large);
  }
  std::ifstream in(file, std::ios::binary);
  if (!in.is_open())
    throw ConfigError(prefix + "it cannot be opened (permissions?)");
  std::string text;
  char block[1 << 16];
  while (in.read(block, sizeof block) || in.gcount() > 0) {
    text.append(block, static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes)
      throw ConfigError(too_large);
  }
  if (in.bad())
    throw ConfigError(prefix + "a read error occurred");
  return text;
}

} // namespace stepsim
