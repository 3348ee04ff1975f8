// `stepsim validate RUNS.yaml`: simulate published runs and compare with what was measured
// (docs/validation.md).

#include "cli/commands.hpp"
#include "config/runs_config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "validate/validate.hpp"

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

namespace stepsim::cli {

namespace {

constexpr const char* VALIDATE_USAGE = R"(usage: stepsim validate RUNS.yaml [--out DIR] [-j N] [options]

Simulates every run of a measured-runs file (the schema of measured_runs.yaml) on the bundled
topology of its GPU kind and compares with the measured figure: iteration_time_s when given,
else TFLOP/s per GPU under the source's FLOP convention, else MFU, else tokens/s per GPU.
Runs that cannot be simulated are listed as skipped with the reason. See docs/validation.md.

options:
  --out DIR              write DIR/validation.csv and DIR/runs/<id>/{workload.yaml,summary.json}
                         (default: a temporary folder, removed at the end)
  -j N, --jobs N         simulations at a time (default 1)
  --only ID              validate only this run (repeatable)
  --topologies DIR       bundled topologies folder (default: ./topologies, else the source tree's)
  --no-calibration       do not apply topologies/calibration/<gpu kind>.yaml
  --timeout SECONDS      give up on a simulation after this long (a `failed` row)

Last line: `validated N runs, skipped K: median_abs_error_pct=X max_abs_error_pct=Y`.
Exit codes: 0 it ran (whatever the errors), 2 a malformed runs file or bad option.
)";

} // namespace

int validate_command(Args& args, std::ostream& out, std::ostream& err) {
  if (args.flag("--help")) {
    out << VALIDATE_USAGE;
    return 0;
  }
  const std::string out_dir = args.value("--out", "");
  const std::string jobs_text = args.value("--jobs", "");
  const std::string topologies = args.value("--topologies", "");
  const std::string timeout_text = args.value("--timeout", "");
  validate::ValidateOptions options;
  options.calibration = !args.flag("--no-calibration");
  options.only = args.values("--only");
  std::vector<std::string> pos = args.positionals();
  options.jobs = validate::parse_jobs(pos, jobs_text, 1);
  args.finish();
  for (const auto& p : pos)
    if (p.starts_with("-"))
      throw ConfigError("unknown option " + p + " for `stepsim validate`");
  if (pos.size() != 1)
    throw ConfigError(pos.empty() ? "missing the runs file (usage: stepsim validate RUNS.yaml [--out DIR])"
                                  : "expected one runs file, got " + std::to_string(pos.size()));
  if (!timeout_text.empty()) {
    try {
      std::size_t used = 0;
      options.timeout_s = std::stod(timeout_text, &used);
      if (used != timeout_text.size() || !(options.timeout_s > 0) || !std::isfinite(options.timeout_s))
        throw std::invalid_argument("not a positive time");
    } catch (const std::exception&) {
      throw ConfigError("--timeout: expected seconds > 0, got '" + timeout_text + "'");
    }
  }
  options.topologies = validate::topologies_dir(topologies);

  const config::RunsFile runs = config::load_runs(pos.front());
  for (const std::string& line : runs.ignored)
    err << "stepsim: warning: " << line << '\n';
  namespace fs = std::filesystem;
  const bool temporary = out_dir.empty();
  options.work_dir = temporary
                         ? fs::temp_directory_path() / ("stepsim-validate-" + std::to_string(::getpid()))
                         : fs::path(out_dir);
  fs::create_directories(options.work_dir);

  err << "validating " << runs.runs.size() << " runs of " << runs.source << " (" << options.jobs
      << " at a time)\n";
  const std::vector<validate::RunResult> results = validate::validate_runs(runs, options, &err);
  if (!temporary)
    write_file_atomically(options.work_dir / "validation.csv",
                          [&](std::ostream& o) { validate::write_csv(o, results); });
  else
    fs::remove_all(options.work_dir);
  validate::print_table(out, results);
  out << validate::summary_line(validate::error_stats(results)) << '\n';
  return 0;
}

} // namespace stepsim::cli
