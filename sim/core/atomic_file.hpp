#pragma once
// Outputs are written whole or not at all: write to a temporary file beside the target, then
// rename over it.

#include <filesystem>
#include <functional>
#include <ostream>

namespace stepsim {

/// Calls `write` with a stream to a temporary file next to `path`, then renames it to `path`.
/// Creates missing parent directories. Throws Error if any step fails (the target is untouched).
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);

} // namespace stepsim
