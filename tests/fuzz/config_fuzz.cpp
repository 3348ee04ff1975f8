// The libFuzzer target of the configuration front end (tools/fuzz.sh, docs/reliability.md).
// An input's first byte picks the reader, the rest is the file's text:
//   0 cluster YAML, 1 workload YAML, 2 sweep file, 3 measured-runs file, 4 Hugging Face
//   config.json, 5 `--set` overrides (one PATH=VALUE per line) on the bundled tiny workload and
//   H100 cluster.
// Bad input must end in stepsim::Error (exit 2 in the binary); any other exception, a crash, a
// leak, a hang or a memory blow-up is a finding.

#include "config/config.hpp"
#include "config/hf_config.hpp"
#include "config/runs_config.hpp"
#include "config/sweep_config.hpp"
#include "core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;

/// A folder of this process for the input file (the readers take paths).
const fs::path& scratch() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("stepsim-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

fs::path write_input(const std::string& name, const std::string& text) {
  const fs::path file = scratch() / name;
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  return file;
}

void apply_overrides(const std::string& text) {
  std::vector<stepsim::config::Override> overrides;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    overrides.push_back(stepsim::config::parse_override(line));
  const std::string root = STEPSIM_SOURCE_DIR;
  (void)stepsim::config::load_cluster(root + "/topologies/dgx-h100.yaml", overrides);
  (void)stepsim::config::load_workload(root + "/workloads/tiny-gpt.yaml", overrides);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  const int kind = data[0] % 6;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (kind) {
    case 0:
      (void)stepsim::config::load_cluster(write_input("cluster.yaml", text));
      break;
    case 1:
      (void)stepsim::config::load_workload(write_input("workload.yaml", text));
      break;
    case 2:
      (void)stepsim::config::load_sweep(write_input("sweep.yaml", text));
      break;
    case 3:
      (void)stepsim::config::load_runs(write_input("runs.yaml", text));
      break;
    case 4:
      (void)stepsim::config::read_hf_config(write_input("config.json", text));
      break;
    default:
      apply_overrides(text);
      break;
    }
  } catch (const stepsim::Error&) {
    // A refusal with a message: what bad input must give.
  }
  return 0;
}
