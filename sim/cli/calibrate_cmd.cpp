// `stepsim calibrate RUNS.yaml --fit ID,ID...`: fit per-GPU-kind knobs on a subset of measured
// runs (docs/calibration.md).

#include "cli/commands.hpp"
#include "config/runs_config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "validate/calibrate.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace stepsim::cli {

namespace {

constexpr const char* CALIBRATE_USAGE =
    R"(usage: stepsim calibrate RUNS.yaml [MORE.yaml ...] (--fit ID,ID,... | --fit-file FILE) [options]

Fits the calibration knobs of one GPU kind (cluster keys, the same value for every run of that
kind) on the chosen runs of measured-runs files (several are read as one; run ids must differ
across them) by minimising the mean |error| (or, with --objective rms, the RMS error) of the fit set
(golden-section search per knob, coordinate descent over knobs). Prints the fitted values; with
--write stores them in TOPOLOGIES/calibration/<gpu kind>.yaml. See docs/calibration.md.

options:
  --fit ID,ID,...        runs to fit on (repeatable; all of one GPU kind)
  --fit-file FILE        run ids, one per line (# comments)
  --knob KEY=LO:HI[:UNIT]  a knob and its search range (repeatable; default
                         gpu.gemm_efficiency=0.5:1)
  --rounds N             coordinate-descent rounds over the knobs (default 1)
  --tolerance X          search grid step (default 0.005)
  --objective mean|rms   minimise the fit runs' mean |error| (default) or their RMS error
  -j N, --jobs N         simulations at a time (default 1)
  --topologies DIR       bundled topologies folder (default: ./topologies, else the source tree's)
  --write                write TOPOLOGIES/calibration/<gpu kind>.yaml
  --out FILE             write the calibration file here instead
)";

std::vector<std::string> split_ids(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string id; std::getline(ss, id, ',');)
    if (!id.empty())
      out.push_back(id);
  return out;
}

} // namespace

int calibrate_command(Args& args, std::ostream& out, std::ostream& err) {
  if (args.flag("--help")) {
    out << CALIBRATE_USAGE;
    return 0;
  }
  std::vector<std::string> ids;
  for (const auto& f : args.values("--fit"))
    for (const auto& id : split_ids(f))
      ids.push_back(id);
  const std::string fit_file = args.value("--fit-file", "");
  validate::CalibrateOptions options;
  for (const auto& k : args.values("--knob"))
    options.knobs.push_back(validate::parse_knob(k));
  if (options.knobs.empty())
    options.knobs.push_back(validate::parse_knob("gpu.gemm_efficiency=0.5:1"));
  const std::string rounds = args.value("--rounds", "1");
  const std::string tolerance = args.value("--tolerance", "0.005");
  const std::string objective = args.value("--objective", "mean");
  const std::string jobs_text = args.value("--jobs", "");
  const std::string topologies = args.value("--topologies", "");
  const bool write = args.flag("--write");
  const std::string out_file = args.value("--out", "");
  std::vector<std::string> pos = args.positionals();
  options.validate.jobs = validate::parse_jobs(pos, jobs_text, 1);
  args.finish();
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
  options.validate.topologies = validate::topologies_dir(topologies);
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
