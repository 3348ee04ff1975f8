#pragma once
// `stepsim calibrate`: fit the per-GPU-kind knobs (cluster keys such as gpu.gemm_efficiency) on
// a chosen subset of measured runs by minimising the mean |error|, or the RMS error
// (docs/calibration.md). The same knob value applies to every run of that GPU kind: there is no
// per-run or per-model factor.

#include "config/runs_config.hpp"
#include "validate/validate.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace stepsim::validate {

/// One knob: a cluster key (without the "cluster." prefix) searched in [lo, hi].
struct Knob {
  std::string key; ///< e.g. "gpu.gemm_efficiency"
  double lo = 0;
  double hi = 0;
  std::string unit; ///< appended to the value when set: "" or e.g. "us"
};

/// Parses "KEY=LO:HI" or "KEY=LO:HI:UNIT" (e.g. "gpu.launch_overhead=0:20:us"). Throws ConfigError.
Knob parse_knob(const std::string& text);

/// What the search minimises over the fit runs' errors: their mean |error| (every run counts
/// alike), or their root mean square (a large error counts more: one knob that several runs pull
/// apart settles where none is far off, where the mean |error| is flat across a range).
enum class Objective { MEAN_ABS, RMS };

struct CalibrateOptions {
  ValidateOptions validate; ///< topologies, work_dir, jobs; calibration files are NOT applied
  std::vector<Knob> knobs;  ///< searched one after the other (coordinate descent)
  double tolerance = 0.005; ///< stop when the bracket is narrower than this (knob units)
  int rounds = 1;           ///< coordinate-descent rounds over the knobs
  Objective objective = Objective::MEAN_ABS;
};

struct KnobValue {
  std::string key;
  double value = 0;
  std::string unit;
  [[nodiscard]] std::string text() const; ///< value with unit, 4 significant decimals
};

struct CalibrationResult {
  std::string gpu_kind; ///< the calibration file's gpu.kind
  std::vector<std::string> fit_runs;
  std::vector<KnobValue> values;
  double fit_mean_abs_error_pct = 0; ///< the objective at the fitted values
  double fit_median_abs_error_pct = 0;
  double fit_rms_error_pct = 0;
  Objective objective = Objective::MEAN_ABS;
  int evaluations = 0; ///< knob settings simulated
  /// How it searched (recorded so that a refit can repeat it): the knobs with their ranges, the
  /// coordinate-descent rounds and the grid step.
  std::vector<Knob> knobs;
  int rounds = 1;
  double tolerance = 0.005;
};

/// Fits the knobs on `fit_ids` (all of one GPU kind; throws ConfigError otherwise or when a run
/// cannot be simulated). Each knob is a golden-section search on the objective over the fit runs
/// (options.objective), starting from the middle of its range. `log` (may be null) gets one line per trial.
CalibrationResult calibrate(const config::RunsFile& runs, const std::vector<std::string>& fit_ids,
                            const CalibrateOptions& options, std::ostream* log);

/// "LO:HI[:UNIT]", the range as `--knob KEY=...` takes it.
std::string range_text(const Knob& k);

/// The calibration file text (format of config::load_calibration).
std::string calibration_yaml(const CalibrationResult& r, const std::string& runs_source);

} // namespace stepsim::validate
