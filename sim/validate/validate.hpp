#pragma once
// `stepsim validate`: simulate published runs and compare with what was measured
// (docs/validation.md). Each run is simulated in its own forked process (SimGrid allows one
// simulation per process); the parent only plans, loads configuration, forks and collects.

#include "config/runs_config.hpp"
#include "core/progress.hpp"
#include "core/vocabulary.hpp"
#include "validate/plan.hpp"

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

namespace stepsim::validate {

struct ValidateOptions {
  std::filesystem::path topologies;          ///< bundled topologies folder
  std::filesystem::path work_dir;            ///< per-run files go to work_dir/runs/<id>/ (created)
  int jobs = 1;                              ///< child processes at a time, >= 1
  bool calibration = true;                   ///< apply topologies/calibration/*.yaml
  std::vector<config::Override> extra;       ///< cluster overrides after calibration (calibrate's trials)
  std::vector<std::string> only;             ///< run ids to consider; empty = all
  double timeout_s = 0;                      ///< kill a simulation after this long; 0 = never
  ProgressMode progress = ProgressMode::OFF; ///< runs done / total on the progress stream (core/progress.hpp)
};

struct RunResult {
  RunPlan plan;
  RunStatus status = RunStatus::SKIPPED;
  std::string reason;     ///< skip/failure reason; for OK rows the defaults used
  double predicted = 0;   ///< in the metric's unit
  double error_pct = 0;   ///< (predicted - measured) / measured * 100
  double step_time_s = 0; ///< simulated step time
  double wall_s = 0;      ///< host time of the simulation
  /// The memory ledger's verdict (OK rows): the worst GPU's peak, its capacity and its stage, the
  /// host memory offloaded activations take, and whether it all fits (summary.json's
  /// fits_in_memory). Every measured run ran, so a run that does not fit points at a ledger that
  /// over-counts or at a memory setting the record lacks.
  double peak_bytes = 0;
  double capacity_bytes = 0;
  int peak_stage = 0;
  double host_bytes = 0;
  bool fits_memory = true;
  [[nodiscard]] bool fits() const { return fits_memory; }
};

/// Plans, checks and simulates every run of `runs` (or of options.only), file order in the
/// result. `progress` (may be null) gets the progress line as options.progress says. Throws ConfigError when
/// an id of options.only is not in the file, Error when processes cannot be created.
std::vector<RunResult> validate_runs(const config::RunsFile& runs, const ValidateOptions& options,
                                     std::ostream* progress);

/// How many simulated (OK) runs the memory ledger fits in GPU memory.
struct MemoryStats {
  int checked = 0;
  int fitting = 0;
};
MemoryStats memory_stats(const std::vector<RunResult>& results);

struct ErrorStats {
  int validated = 0;     ///< OK rows
  int skipped = 0;       ///< SKIPPED and FAILED rows
  double median_abs = 0; ///< median |error_pct| over OK rows (0 when none)
  double mean_abs = 0;   ///< mean |error_pct| over OK rows (0 when none)
  double max_abs = 0;
};

ErrorStats error_stats(const std::vector<RunResult>& results);

/// The results table (id, GPUs, layout, metric, measured, predicted, error %), then the skipped
/// runs with their reasons and the defaults used per run.
void print_table(std::ostream& out, const std::vector<RunResult>& results);

/// CSV with the header `id,num_gpus,metric,measured,predicted,error_pct,status,reason`.
void write_csv(std::ostream& out, const std::vector<RunResult>& results);

/// The bundled topologies folder: `explicit_dir` when non-empty, else ./topologies when it holds
/// the bundled files, else the source tree's (compiled in). Throws ConfigError when none exists.
std::filesystem::path topologies_dir(const std::string& explicit_dir);

/// "validated N runs, skipped K: median_abs_error_pct=X max_abs_error_pct=Y".
std::string summary_line(const ErrorStats& s);

} // namespace stepsim::validate
