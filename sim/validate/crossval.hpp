#pragma once
// `stepsim validate RUNS.yaml... --cross-validate source|framework|gpu`: how well the calibration
// predicts runs it was not fitted on (docs/validation.md, "Cross-validation"). The runs are split
// into groups; for each group every GPU kind's calibration is refitted the way its stored record
// says (topologies/calibration/<kind>.yaml: knobs, ranges, objective, later fits) on its fit runs
// minus the group's, and the group's runs are predicted with the refitted knobs. The stored
// calibration gives the in-sample errors beside them.

#include "config/runs_config.hpp"
#include "validate/calibrate.hpp"
#include "validate/validate.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace stepsim::validate {

/// What makes a group: the record's `group` (one paper table, one benchmark suite), its
/// framework text normalised (normalised_framework), or the GPU family the mapping assigns.
enum class GroupBy { SOURCE, FRAMEWORK, GPU };

/// "source", "framework" or "gpu". Throws ConfigError naming the option otherwise.
GroupBy parse_group_by(const std::string& text);
std::string group_by_name(GroupBy by);

/// The framework text without its parenthesised parts and version numbers (words starting with a
/// digit, or "v" and a digit), lower case, single spaces: "NeMo (24.09 containers)" and
/// "NeMo 24.07" are "nemo"; "NeMo Megatron-Bridge (25.11 container)" is "nemo megatron-bridge".
/// "(none)" when nothing is left.
std::string normalised_framework(const std::string& text);

/// The run's group key under `by`. A run without a `group` is a source of its own ("id:<id>");
/// one whose GPU maps to no family is "(unknown gpu)".
std::string group_key(const config::MeasuredRun& run, GroupBy by);

/// One fit of a stored record, as a refit repeats it.
struct FitStage {
  std::string where; ///< "FILE:LINE:COL: key 'fit'" (or then[i])
  std::vector<Knob> knobs;
  std::vector<std::string> runs;
  Objective objective = Objective::MEAN_ABS;
  int rounds = 1;
  double tolerance = 0.005;
};

/// A GPU kind's calibration file read for refitting: its stored knobs and its fits in order
/// (`fit`, then each `then`). A file with no fit runs (knobs transferred from another kind) has
/// no stages.
struct FitRecord {
  std::string gpu_kind;
  std::string source;
  std::vector<config::Override> stored;
  std::vector<FitStage> stages;
};

/// Throws ConfigError naming the file and key when a fitted knob has no range, a range does not
/// parse, or the objective is not one calibrate has.
FitRecord fit_record(const config::CalibrationFile& file);

/// A refit of one GPU kind without one group's runs.
struct KindRefit {
  std::string gpu_kind;
  std::vector<std::string> left_out;  ///< its fit runs (all stages) in the group
  std::vector<KnobValue> values;      ///< every fitted knob: refitted, stored, or at its default
  std::vector<std::string> defaulted; ///< knobs whose fit has no run left: at the schema default
  std::vector<std::string> kept;      ///< knobs of a fit that needed no refit: stored value
  int evaluations = 0;
};

struct CrossRun {
  std::string gpu_kind;
  bool fit_run = false; ///< a fit run of its kind's stored calibration
  bool refit = false;   ///< out_of_group comes from a refit (else it is in_sample)
  RunResult in_sample;
  RunResult out_of_group;
};

struct CrossGroup {
  std::string key;
  std::vector<CrossRun> runs; ///< file order
  std::vector<KindRefit> refits;
};

struct CrossValidation {
  GroupBy by = GroupBy::SOURCE;
  std::vector<CrossGroup> groups; ///< in order of their first run in the files
  std::vector<std::string> notes; ///< kinds without a calibration file, transferred knobs
};

/// Simulates every run with the stored calibration, then for each group refits the kinds whose
/// fit runs the group holds and predicts the group's runs of those kinds. `options.work_dir`
/// gets in-sample/ and group-<n>/ folders. `log` (may be null) gets one line per refit.
/// Throws ConfigError when a fit run to refit on is not among `runs`.
CrossValidation cross_validate(const config::RunsFile& runs, GroupBy by, const ValidateOptions& options,
                               std::ostream* log);

/// The errors of the runs simulated (OK) in both ways.
struct PairedStats {
  int runs = 0;     ///< the group's runs
  int compared = 0; ///< OK in both
  ErrorStats in_sample;
  ErrorStats out_of_group;
};
PairedStats paired_stats(const std::vector<const CrossRun*>& runs);

/// Per group and overall: runs, in-sample and out-of-group median / max |error| side by side,
/// what was refitted; then every run's two errors. Last line: `cross-validated N runs in G groups
/// by KEY: in_sample median_abs_error_pct=X max_abs_error_pct=Y; out_of_group
/// median_abs_error_pct=X max_abs_error_pct=Y`.
void print_cross_validation(std::ostream& out, const CrossValidation& cv);

/// CSV with the header `group,id,gpu_kind,fit_run,refit,status,measured,in_sample_predicted,
/// in_sample_error_pct,out_of_group_predicted,out_of_group_error_pct`.
void write_cross_validation_csv(std::ostream& out, const CrossValidation& cv);

} // namespace stepsim::validate
