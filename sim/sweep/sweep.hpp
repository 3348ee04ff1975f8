#pragma once
// `stepsim sweep` as a library: expand a sweep file, resume from the result files in the output
// folder, run what is left (in child processes), and merge the files of several shards.
// docs/sweeps.md describes the file format, the outputs and the resume semantics.

#include "core/progress.hpp"
#include "runner/simulate.hpp"

#include <cstddef>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>

namespace stepsim::sweep {

/// Shard `index` of `count` runs the configurations whose index % count == index.
struct Shard {
  int index = 0;
  int count = 1;
};

/// Parses "I/K" with 0 <= I < K. Throws ConfigError.
Shard parse_shard(const std::string& text);

struct SweepOptions {
  std::filesystem::path sweep_file;
  std::filesystem::path out_dir;
  int jobs = 0;               ///< processes at a time; 0: the CPUs available
  std::optional<Shard> shard; ///< run one shard into results.shard-I.*; nullopt: everything into results.*
  double timeout_s = 0;       ///< per configuration; 0: none
  bool retry_failed = false;  ///< drop failed rows of an earlier run and run them again
  ProgressMode progress = ProgressMode::OFF; ///< the progress line on stderr (core/progress.hpp)
  std::string label = "sweep";               ///< progress prefix
  runner::SimulateOptions simulate;
};

struct SweepOutcome {
  std::size_t total = 0;   ///< configurations of this shard
  std::size_t resumed = 0; ///< already in the result files before this run
  std::size_t ok = 0;      ///< rows of this shard by status, old and new
  std::size_t skipped = 0;
  std::size_t failed = 0;
  std::size_t oom = 0; ///< simulated, but a GPU's memory does not hold the layout
};

/// Runs a sweep (or one shard of it). Writes DIR/sweep.json (what the sweep is: name, columns,
/// number of configurations) and appends one row per finished configuration; when every
/// configuration of the shard has a row, rewrites the result files sorted by index.
/// Throws ConfigError for a bad sweep file or options, Error for I/O failures.
SweepOutcome run_sweep(const SweepOptions& options, std::ostream& err);

struct MergeOutcome {
  std::size_t rows = 0;        ///< rows in the merged files
  std::size_t shard_files = 0; ///< results.shard-*.jsonl files read
  std::size_t expected = 0;    ///< configurations per DIR/sweep.json; 0 when unknown
  std::size_t conflicts = 0;   ///< ids found twice with different content (first kept)
};

/// Merges DIR/results.shard-*.jsonl (and an existing DIR/results.jsonl) into DIR/results.jsonl
/// and DIR/results.csv, one row per id, sorted by index. Shard files are left as they are.
/// Throws ConfigError when DIR holds no result files.
MergeOutcome merge_results(const std::filesystem::path& dir, std::ostream& err);

} // namespace stepsim::sweep
