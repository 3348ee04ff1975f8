// `stepsim validate RUNS.yaml`: simulate published runs and compare with what was measured
// (docs/validation.md).

#include "cli/commands.hpp"
#include "cli/json_output.hpp"
#include "config/runs_config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "validate/crossval.hpp"
#include "validate/validate.hpp"

#include <climits>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

namespace stepsim::cli {

namespace {

namespace fs = std::filesystem;

/// --cross-validate: the groups' in-sample and out-of-group errors.
/// The `stepsim.validation/1` document (docs/output.md): every run and the error statistics.
nlohmann::ordered_json validation_json(const std::vector<validate::RunResult>& results) {
  using nlohmann::ordered_json;
  ordered_json runs = ordered_json::array();
  for (const validate::RunResult& r : results) {
    const bool ok = r.status == RunStatus::OK;
    ordered_json j{{"id", r.plan.id},
                   {"num_gpus", r.plan.num_gpus},
                   {"layout", r.plan.layout},
                   {"gpu_kind", r.plan.gpu_kind},
                   {"metric", std::string(to_string(r.plan.metric))},
                   {"measured", r.plan.measured},
                   {"status", std::string(to_string(r.status))},
                   {"reason", r.reason}};
    if (ok) {
      j["predicted"] = r.predicted;
      j["error_pct"] = r.error_pct;
      j["step_time_s"] = r.step_time_s;
      j["peak_bytes"] = r.peak_bytes;
      j["capacity_bytes"] = r.capacity_bytes;
      j["fits_in_memory"] = r.fits();
    }
    runs.push_back(j);
  }
  const validate::ErrorStats s = validate::error_stats(results);
  return ordered_json{{"schema", "stepsim.validation/1"},
                      {"runs", runs},
                      {"validated", s.validated},
                      {"skipped", s.skipped},
                      {"median_abs_error_pct", s.median_abs},
                      {"mean_abs_error_pct", s.mean_abs},
                      {"max_abs_error_pct", s.max_abs}};
}

int cross_validate_command(const config::RunsFile& runs, validate::GroupBy by,
                           const validate::ValidateOptions& options, bool temporary, std::ostream& out,
                           std::ostream& err) {
  err << "cross-validating " << runs.runs.size() << " runs of " << runs.source << " by "
      << validate::group_by_name(by) << " (" << options.jobs << " at a time)\n";
  validate::CrossValidation cv;
  try {
    cv = validate::cross_validate(runs, by, options, &err);
  } catch (...) {
    if (temporary)
      fs::remove_all(options.work_dir);
    throw;
  }
  if (!temporary)
    write_file_atomically(options.work_dir / "cross_validation.csv",
                          [&](std::ostream& o) { validate::write_cross_validation_csv(o, cv); });
  else
    fs::remove_all(options.work_dir);
  validate::print_cross_validation(out, cv);
  return 0;
}

class ValidateCommand final : public Command {
public:
  explicit ValidateCommand(Options& o) {
    o.describe(R"(usage: stepsim validate RUNS.yaml [MORE.yaml ...] [--out DIR] [-j N] [options]

Simulates every run of measured-runs files (the schema of measured_runs.yaml; several are read
as one, run ids must differ across them) on the bundled topology of its GPU kind and compares
with the measured figure: iteration_time_s when given, else TFLOP/s per GPU under the source's
FLOP convention, else MFU, else tokens/s per GPU.
Runs that cannot be simulated are listed as skipped with the reason. See docs/validation.md.

Last line: `validated N runs, skipped K: median_abs_error_pct=X max_abs_error_pct=Y` (with
--cross-validate: `cross-validated N runs in G groups by KEY: in_sample ...; out_of_group ...`).
Exit codes: 0 it ran (whatever the errors), 2 a malformed runs file or bad option.)");
    o.positionals("RUNS.yaml", files_, "measured-runs files (at least one)");
    o.value("--out", out_dir_, "DIR",
            "write DIR/validation.csv and DIR/runs/<id>/{workload.yaml,summary.json} (default: a "
            "temporary folder, removed at the end)");
    o.integer("-j,--jobs", options_.jobs, 1, INT_MAX, "N", "simulations at a time");
    o.values("--only", options_.only, "ID", "validate only this run");
    o.value("--topologies", topologies_, "DIR",
            "bundled topologies folder (default: ./topologies, else the source tree's)");
    o.flag("--no-calibration", no_calibration_, "do not apply topologies/calibration/<gpu kind>.yaml");
    o.seconds("--timeout", options_.timeout_s, "give up on a simulation after this long (a `failed` row)");
    o.choice("--cross-validate", cross_, {"source", "framework", "gpu"},
             "group the runs by KEY (source: the record's group; framework: its framework text without "
             "versions; gpu: the GPU family) and, for each group, refit every GPU kind's calibration as "
             "its stored record says without the group's runs, then predict the group with it: "
             "in-sample and out-of-group errors side by side (docs/validation.md, \"Cross-validation\"); "
             "with --out, DIR/cross_validation.csv");
    o.flag("--progress", progress_,
           "show runs simulated / total and an ETA on stderr (the default when stderr is a terminal and "
           "the simulations take more than 2 s)");
    o.flag("--json", json_,
           "print every run and the error statistics as JSON (schema stepsim.validation/1, "
           "docs/output.md) instead of the table; with --out, also DIR/validation.json");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::vector<std::string> files_;
  std::string out_dir_, topologies_, cross_;
  bool no_calibration_ = false, json_ = false, progress_ = false;
  validate::ValidateOptions options_;
};

} // namespace

std::unique_ptr<Command> validate_command(Options& options) {
  return std::make_unique<ValidateCommand>(options);
}

int ValidateCommand::run(std::ostream& out, std::ostream& err) {
  validate::ValidateOptions options = options_;
  options.calibration = !no_calibration_;
  options.progress = progress_mode(progress_);
  const std::vector<std::string>& pos = files_;
  const std::string& out_dir = out_dir_;
  if (pos.empty())
    throw ConfigError(
        "missing the runs file (usage: stepsim validate RUNS.yaml [MORE.yaml ...] [--out DIR])");
  const bool cross_validate = !cross_.empty();
  if (cross_validate && json_)
    throw ConfigError(
        "--json: not available with --cross-validate (its tables go to DIR/cross_validation.csv "
        "with --out)");
  const validate::GroupBy group_by =
      cross_validate ? validate::parse_group_by(cross_) : validate::GroupBy::SOURCE;
  options.topologies = validate::topologies_dir(topologies_);

  const config::RunsFile runs = config::load_runs(std::vector<fs::path>(pos.begin(), pos.end()));
  for (const std::string& line : runs.ignored)
    err << "stepsim: warning: " << line << '\n';
  const bool temporary = out_dir.empty();
  options.work_dir = temporary
                         ? fs::temp_directory_path() / ("stepsim-validate-" + std::to_string(::getpid()))
                         : fs::path(out_dir);
  fs::create_directories(options.work_dir);

  if (cross_validate)
    return cross_validate_command(runs, group_by, options, temporary, out, err);
  err << "validating " << runs.runs.size() << " runs of " << runs.source << " (" << options.jobs
      << " at a time)\n";
  const std::vector<validate::RunResult> results = validate::validate_runs(runs, options, &err);
  if (!temporary)
    write_file_atomically(options.work_dir / "validation.csv",
                          [&](std::ostream& o) { validate::write_csv(o, results); });
  else
    fs::remove_all(options.work_dir);
  if (json_) {
    emit_json(out, JsonTargets{.to_stdout = true, .out_dir = out_dir, .file_name = "validation.json"},
              validation_json(results));
    return 0;
  }
  validate::print_table(out, results);
  out << validate::summary_line(validate::error_stats(results)) << '\n';
  return 0;
}

} // namespace stepsim::cli
