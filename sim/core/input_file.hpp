#pragma once
// Every input file (YAML, Hugging Face JSON, kernel profiles, traces) is read through one door
// that refuses what is not a readable regular file of bounded size, with a message naming the
// file, before opening it (opening a named FIFO would block).

#include <cstdint>
#include <filesystem>
#include <string>

namespace stepsim {

/// Largest input file read by default (traces of long profiler captures run to a few GB).
constexpr std::uintmax_t kMaxInputBytes = std::uintmax_t{8} << 30;

/// Largest YAML configuration (cluster, workload, sweep, runs) or Hugging Face config.json read
/// (the bundled ones are under 200 kB).
constexpr std::uintmax_t kMaxConfigBytes = std::uintmax_t{16} << 20;

/// Largest kernel profile or shape list read (the bundled ones are under 100 kB).
constexpr std::uintmax_t kMaxTableBytes = std::uintmax_t{64} << 20;

/// Why `file` cannot be read as an input ("it does not exist", "it is a directory", "it is a
/// FIFO (named pipe)", "it is not a regular file", or the system's reason), or "" when it can.
/// An inherited pipe named /dev/fd/N (a shell's `<(...)`) is accepted: its writer already runs.
/// Never throws.
std::string input_file_problem(const std::filesystem::path& file);

/// The whole content of `file`. Throws ConfigError "FILE: cannot read the <what>: <why>" when
/// input_file_problem names a problem, it cannot be opened, or it is larger than `max_bytes`
/// (checked before reading a regular file, while reading a pipe).
std::string read_input_file(const std::filesystem::path& file, const std::string& what = "file",
                            std::uintmax_t max_bytes = kMaxInputBytes);

/// "N bytes" as a reader-friendly size ("16 MiB", "8 GiB", else bytes).
std::string describe_bytes(std::uintmax_t bytes);

} // namespace stepsim
