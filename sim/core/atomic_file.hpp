#pragma once
// Outputs are written whole or not at all: write to a temporary file beside the target, then
// rename over it.

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace stepsim {

/// Calls `write` with a stream to a temporary file next to `path`, then renames it to `path`.
/// Creates missing parent directories. Throws Error if any step fails (the target is untouched).
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);

/// Before a command computes outputs it will write as a set: throws ConfigError naming the first
/// of `paths` that cannot be written (a directory in its place, a parent that cannot be created,
/// a directory that refuses new files), so that a failure leaves none of them written.
void check_output_targets(const std::vector<std::filesystem::path>& paths);

/// Writes all of `text` to `fd`, retrying short writes and EINTR. False on any other error
/// (errno says which).
bool write_fully(int fd, const std::string& text);

} // namespace stepsim
