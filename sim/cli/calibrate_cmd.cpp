// `stepsim calibrate RUNS.yaml --fit ID,ID...`: fit per-GPU-kind knobs on a subset of measured
// runs (docs/calibration.md).

#include "cli/commands.hpp"
#include "config/runs_config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "validate/calibrate.hpp"

#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace stepsim::cli {

namespace {

std::vector<std::string> split_ids(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string id; std::getline(ss, id, ',');)
    if (!id.empty())
      out.push_back(id);
  return out;
}

class CalibrateCommand final : public Command {
public:
  explicit CalibrateCommand(Options& o) {
    o.describe(
        R"(usage: stepsim calibrate RUNS.yaml [MORE.yaml ...] (--fit ID,ID,... | --fit-file FILE) [options]

Fits the calibration knobs of one GPU kind (cluster keys, the same value for every run of that
kind) on the chosen runs of measured-runs files (several are read as one; run ids must differ
across them) by minimising the mean |error| (or, with --objective rms, the RMS error) of the fit set
(golden-section search per knob, coordinate descent over knobs). Prints the fitted values; with
--write stores them in TOPOLOGIES/calibration/<gpu kind>.yaml. See docs/calibration.md.)");
    o.positionals("RUNS.yaml", files_, "measured-runs files (at least one)");
    o.values("--fit", fit_, "ID,ID,...", "runs to fit on (all of one GPU kind)");
    o.value("--fit-file", fit_file_, "FILE", "run ids, one per line (# comments)");
    o.values("--knob", knobs_, "KEY=LO:HI[:UNIT]",
             "a knob and its search range (default gpu.gemm_efficiency=0.5:1)");
    o.value("--rounds", rounds_, "N", "coordinate-descent rounds over the knobs");
    o.value("--tolerance", tolerance_, "X", "search grid step");
    o.choice("--objective", objective_, {"mean", "rms"},
             "minimise the fit runs' mean |error| or their RMS error");
    o.integer("-j,--jobs", options_.validate.jobs, 1, INT_MAX, "N", "simulations at a time");
    o.value("--topologies", topologies_, "DIR",
            "bundled topologies folder (default: ./topologies, else the source tree's)");
    o.flag("--write", write_, "write TOPOLOGIES/calibration/<gpu kind>.yaml");
    o.value("--out", out_file_, "FILE", "write the calibration file here instead");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::vector<std::string> files_, fit_, knobs_;
  std::string fit_file_, rounds_ = "1", tolerance_ = "0.005", objective_ = "mean", topologies_, out_file_;
  bool write_ = false;
  validate::CalibrateOptions options_;
};

} // namespace

std::unique_ptr<Command> calibrate_command(Options& o) {
  return std::make_unique<CalibrateCommand>(o);
}

int CalibrateCommand::run(std::ostream& out, std::ostream& err) {
  std::vector<std::string> ids;
  for (const auto& f : fit_)
    for (const auto& id : split_ids(f))
      ids.push_back(id);
  const std::string& fit_file = fit_file_;
  validate::CalibrateOptions options = options_;
  for (const auto& k : knobs_)
    options.knobs.push_back(validate::parse_knob(k));
  if (options.knobs.empty())
    options.knobs.push_back(validate::parse_knob("gpu.gemm_efficiency=0.5:1"));
  const std::string& rounds = rounds_;
  const std::string& tolerance = tolerance_;
  const std::string& objective = objective_;
  const std::string& out_file = out_file_;
  const bool write = write_;
  const std::vector<std::string>& pos = files_;
  if (pos.empty())
    throw ConfigError(
        "expected a runs file (usage: stepsim calibrate RUNS.yaml [MORE.yaml ...] --fit ID,ID,...)");
  try {
    std::size_t used_rounds = 0;
    std::size_t used_tolerance = 0;
    options.rounds = std::stoi(rounds, &used_rounds);
    options.tolerance = std::stod(tolerance, &used_tolerance);
    if (used_rounds != rounds.size() || used_tolerance != tolerance.size())
      throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    throw ConfigError("--rounds/--tolerance: expected an integer and a number, got '" + rounds + "', '" +
                      tolerance + "'");
  }
  if (options.rounds < 1 || options.rounds > 100 || !(options.tolerance > 0))
    throw ConfigError("--rounds must be in 1..100 and --tolerance > 0");
  if (objective == "rms")
    options.objective = validate::Objective::RMS;
  else if (objective != "mean")
    throw ConfigError("--objective " + objective + ": expected mean or rms");
  // The search is golden-section on a grid of that step: at most 10^6 steps per knob's range
  // (about 30 simulations of the fit runs per knob and round).
  for (std::size_t i = 0; i < options.knobs.size(); ++i) {
    const validate::Knob& k = options.knobs[i];
    const std::string range =
        "knob " + k.key + "'s range [" + std::to_string(k.lo) + ", " + std::to_string(k.hi) + "]";
    if ((k.hi - k.lo) / options.tolerance > 1e6)
      throw ConfigError("--tolerance " + tolerance + ": " + range +
                        " would be more than 10^6 grid steps; give a larger step");
    if (options.tolerance > 0.5 * (k.hi - k.lo))
      throw ConfigError("--tolerance " + tolerance + ": " + range +
                        " holds fewer than two grid steps; give a smaller step");
    for (std::size_t j = 0; j < i; ++j)
      if (options.knobs[j].key == k.key)
        throw ConfigError("--knob " + k.key + " is given twice");
  }
  if (!fit_file.empty()) {
    std::istringstream in(read_input_file(fit_file, "fit-set file"));
    for (std::string line; std::getline(in, line);) {
      line = line.substr(0, line.find('#'));
      for (const auto& id : split_ids(line)) {
        std::string t = id;
        t.erase(0, t.find_first_not_of(" \t"));
        t.erase(t.find_last_not_of(" \t\r") + 1);
        if (!t.empty())
          ids.push_back(t);
      }
    }
  }
  options.validate.topologies = validate::topologies_dir(topologies_);
  namespace fs = std::filesystem;
  // Where the result goes is checked before the fit runs, not after.
  if (!out_file.empty())
    check_output_targets({fs::path(out_file)});
  options.validate.work_dir = fs::temp_directory_path() / ("stepsim-calibrate-" + std::to_string(::getpid()));

  const config::RunsFile runs = config::load_runs(std::vector<std::filesystem::path>(pos.begin(), pos.end()));
  for (const std::string& line : runs.ignored)
    err << "stepsim: warning: " << line << '\n';
  err << "calibrating on " << ids.size() << " runs\n";
  validate::CalibrationResult r;
  try {
    r = validate::calibrate(runs, ids, options, &err);
  } catch (...) {
    fs::remove_all(options.validate.work_dir);
    throw;
  }
  fs::remove_all(options.validate.work_dir);
  out << "gpu kind " << r.gpu_kind << ", fitted on " << r.fit_runs.size() << " runs in " << r.evaluations
      << " evaluations:\n";
  for (const auto& v : r.values)
    out << "  " << v.key << " = " << v.text() << '\n';
  out << "fit mean_abs_error_pct=" << r.fit_mean_abs_error_pct
      << " median_abs_error_pct=" << r.fit_median_abs_error_pct << " rms_error_pct=" << r.fit_rms_error_pct
      << '\n';
  const std::string text = validate::calibration_yaml(r, runs.source);
  fs::path target = out_file;
  if (write && target.empty())
    target = options.validate.topologies / "calibration" / (r.gpu_kind + ".yaml");
  if (!target.empty()) {
    write_file_atomically(target, [&](std::ostream& o) { o << text; });
    out << "wrote " << target.string() << '\n';
  }
  return 0;
}

} // namespace stepsim::cli
