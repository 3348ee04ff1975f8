#pragma once
// Every input file (YAML, Hugging Face JSON, kernel profiles, traces) is read through one door
// that refuses what is not a readable regular file of sane size, with a message naming the file.

#include <cstdint>
#include <filesystem>
#include <string>

namespace stepsim {

/// Largest input file read (traces of long profiler captures run to a few GB).
constexpr std::uintmax_t kMaxInputBytes = std::uintmax_t{8} << 30;

/// Why `file` cannot be read as an input ("it does not exist", "it is a directory", "it is not a
/// regular file", or the system's reason), or "" when it can. Never throws.
std::string input_file_problem(const std::filesystem::path& file);

/// The whole content of `file`. Throws ConfigError "FILE: cannot read the <what>: <why>" when it
/// does not exist, is a directory or a device (neither a regular file nor a pipe), cannot be
/// opened, or is larger than kMaxInputBytes.
std::string read_input_file(const std::filesystem::path& file, const std::string& what = "file");

} // namespace stepsim
