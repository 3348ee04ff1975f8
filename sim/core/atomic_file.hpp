#pragma once
// Outputs are written whole or not at all: each file goes to a temporary file created exclusively
// (O_CREAT|O_EXCL|O_NOFOLLOW, a random name) beside its target, is flushed to disk, then renamed
// over the target. Temporary files are removed on failure, on SIGINT/SIGTERM/SIGHUP (see
// install_interrupt_handlers) and, when a process died before it could, by a later run that
// writes into the same folder.

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace stepsim {

/// Calls `write` with a stream to a temporary file next to `path`, then renames it to `path`.
/// Creates missing parent directories. Throws Error naming the file and the system's reason if
/// any step fails (the target is untouched and no temporary file is left).
void write_file_atomically(const std::filesystem::path& path,
                           const std::function<void(std::ostream&)>& write);

/// One file of an output set: its name inside the set's folder and what it holds.
struct OutputFile {
  std::string name;
  std::function<void(std::ostream&)> write;
};

/// Writes `files` into `dir` as one run's set. Every file is first written to a temporary file;
/// only when all are complete are the files of the previous set (`set_names`, e.g. summary.json,
/// trace.json, tasks.csv: also those this run does not write) removed, and the new ones renamed
/// into place, the first of `files` last. So the folder never holds files of two runs: an
/// interruption leaves either the old set, or a part of the new set without its first file.
/// Throws Error as write_file_atomically.
void write_output_set(const std::filesystem::path& dir, const std::vector<OutputFile>& files,
                      const std::vector<std::string>& set_names);

/// Before a command computes outputs it will write as a set: throws ConfigError naming the first
/// of `paths` that cannot be written (a directory in its place, a parent that cannot be created,
/// a directory that refuses new files), so that a failure leaves none of them written.
void check_output_targets(const std::vector<std::filesystem::path>& paths);

/// Removes the temporary files of this naming pattern in `dir` whose process no longer runs
/// (left by a process killed with SIGKILL). Returns how many were removed. Never throws.
int remove_stale_temporaries(const std::filesystem::path& dir);

/// The name pattern of temporary files: true for a name this module creates.
bool is_temporary_name(const std::string& name);

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove this process's temporary files,
/// say on stderr which signal ended the run, and end the process by that signal. Installed by
/// main and again after the simulation engine starts (SimGrid installs its own SIGINT handler).
void install_interrupt_handlers();

/// Writes all of `text` to `fd`, retrying short writes and EINTR. False on any other error
/// (errno says which).
bool write_fully(int fd, const std::string& text);

} // namespace stepsim
