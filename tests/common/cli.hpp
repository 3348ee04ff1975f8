#pragma once
// Running the `stepsim` binary (or any shell command) from a test, and reading files back.
// A target that includes this defines STEPSIM_BINARY and STEPSIM_SOURCE_DIR.

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace stepsim::test {

struct CommandResult {
  int code = -1;   ///< exit status, -1 when the command did not exit normally
  std::string out; ///< stdout and stderr together
};

/// Runs `cmd` through the shell with stderr merged into stdout.
inline CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr)
    return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0)
    r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// `stepsim ARGS`.
inline CommandResult run_stepsim(const std::string& args) {
  return run_shell(std::string(STEPSIM_BINARY) + " " + args);
}

/// A path inside the source tree.
inline std::string src(const std::string& rel) {
  return std::string(STEPSIM_SOURCE_DIR) + "/" + rel;
}

/// A whole file's bytes ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// An empty directory of its own under the system temp dir, for one test of this process.
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("stepsim-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

/// The names in `dir` (hidden ones too), sorted.
inline std::vector<std::string> listing(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace stepsim::test
