// `stepsim sweep`: simulate many configurations of one cluster + workload (a grid or a list of
// points over any --set key), each in its own process, into resumable result files; shard them
// across machines (--shard, or mpirun) and merge the shards (--merge). See docs/sweeps.md.

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "config/sweep_config.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "process/process.hpp"
#include "sweep/executor.hpp"
#include "sweep/mpi_session.hpp"
#include "sweep/plan.hpp"
#include "sweep/sweep.hpp"

#include <algorithm>
#include <climits>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace stepsim::cli {

namespace {

int dry_run(const std::string& sweep_file, std::ostream& out) {
  const sweep::SweepPlan plan = sweep::expand(config::load_sweep(sweep_file));
  out << plan.name << ": " << plan.configs.size() << " configuration(s)\n";
  for (const sweep::SweepConfig& c : plan.configs) {
    out << c.index << ' ' << c.id;
    for (const auto& [k, v] : c.swept)
      out << ' ' << k << '=' << v;
    out << '\n';
  }
  return 0;
}

int exit_code(const sweep::SweepOutcome& o) {
  return o.failed > 0 ? 1 : 0;
}

/// tools/plot_sweep.py: under the current folder (a checkout), else in the source tree this
/// stepsim was built from.
std::filesystem::path plot_script() {
  const std::filesystem::path local = "tools/plot_sweep.py";
  if (std::filesystem::is_regular_file(local))
    return local;
  const std::filesystem::path built_in(STEPSIM_PLOT_SCRIPT);
  if (std::filesystem::is_regular_file(built_in))
    return built_in;
  throw ConfigError("--plot: cannot find tools/plot_sweep.py (no ./tools/plot_sweep.py, no " +
                    built_in.string() + ")");
}

/// Runs the plot script on DIR (`--plot`); its lines go to `err`. Returns 0, or 1 when it failed.
int plot(const std::string& dir, std::ostream& err) {
  const process::Outcome o =
      process::run(process::Job{.body = {}, .argv = {"python3", plot_script().string(), dir}},
                   process::SpawnOptions{.output = process::Output::CAPTURE, .timeout_s = 600});
  err << o.output;
  if (o.exit_code == 0)
    return 0;
  err << "stepsim: error: --plot: tools/plot_sweep.py "
      << (o.exception.empty() ? "exited with code " + std::to_string(o.exit_code) : o.exception) << '\n';
  return 1;
}

class SweepCommand final : public Command {
public:
  explicit SweepCommand(Options& o) {
    o.describe(R"(usage: stepsim sweep SWEEP.yaml --out DIR [options]
       stepsim sweep --merge DIR
       mpirun -np K stepsim sweep SWEEP.yaml --out DIR [options]

Simulates every configuration of a sweep file (a base cluster and workload plus a grid or a
list of points over any --set key), each in its own process, and appends one row per
configuration to DIR/results.csv and DIR/results.jsonl. Rerunning the same command resumes:
finished rows are kept and not run again. Invalid combinations are rows with status `skipped`
and the reason. Format and outputs: docs/sweeps.md.

Under mpirun (when built with MPI), rank R of K runs shard R/K and rank 0 merges at the end.
Exit codes: 0 every configuration ok or skipped, 1 some failed, 2 usage or sweep-file error.)");
    o.positionals("SWEEP.yaml", files_, "the sweep file");
    o.value("--out", out_dir_, "DIR", "results folder (created if missing)");
    o.integer("-j,--jobs", jobs_, 1, INT_MAX, "N", "simulations at a time (default: the CPUs available)");
    o.value("--shard", shard_, "I/K",
            "run only configurations with index % K == I, into DIR/results.shard-I.{csv,jsonl} (e.g. a "
            "Slurm array task)");
    o.value("--merge", merge_dir_, "DIR", "merge DIR/results.shard-*.jsonl into DIR/results.{csv,jsonl}");
    o.seconds("--timeout", timeout_s_, "give up on a configuration after this long (a `failed` row)");
    o.flag("--retry-failed", retry_failed_, "run again configurations whose earlier row is `failed`");
    o.flag("--dry-run", dry_run_, "list the configurations (index, id, swept values) and stop");
    o.choice("--collectives", collectives_, COLLECTIVE_FORMS, "as for `stepsim run`");
    o.flag("--no-fold", no_fold_, "simulate every DP replica and CP rank (as for `stepsim run`)");
    o.value("--steps", steps_, "N",
            "simulate N consecutive steps per configuration (as for `stepsim run`): each row's summary "
            "gains `variability`, the step-time distribution (docs/variability.md)");
    o.flag("--progress", progress_,
           "show configurations done / total, an ETA and the counts by status on stderr (the default when "
           "stderr is a terminal and the sweep takes more than 2 s)");
    o.flag("--plot", plot_,
           "afterwards, draw DIR/plots/*.png with tools/plot_sweep.py (python3-matplotlib; exit 1 when it "
           "fails)");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::vector<std::string> files_;
  std::string out_dir_, shard_, merge_dir_, collectives_ = "auto", steps_ = "1";
  int jobs_ = 0;
  double timeout_s_ = 0;
  bool retry_failed_ = false, dry_run_ = false, no_fold_ = false, plot_ = false, progress_ = false;
};

} // namespace

std::unique_ptr<Command> sweep_command(Options& options) {
  return std::make_unique<SweepCommand>(options);
}

int SweepCommand::run(std::ostream& out, std::ostream& err) {
  const std::string& merge_dir = merge_dir_;
  const std::string& out_dir = out_dir_;
  const std::string& shard_text = shard_;
  const std::vector<std::string>& files = files_;
  const runner::SimulateOptions simulate{.collective_form = parse_collective_form(collectives_),
                                         .fold_dp = !no_fold_,
                                         .steps = parse_steps(steps_)};

  if (!merge_dir.empty()) {
    if (!files.empty() || !out_dir.empty() || !shard_text.empty())
      throw ConfigError("--merge DIR takes no sweep file, --out or --shard");
    sweep::merge_results(merge_dir, err);
    return plot_ ? plot(merge_dir, err) : 0;
  }
  if (files.size() != 1)
    throw ConfigError(files.empty() ? "missing the sweep file (usage: stepsim sweep SWEEP.yaml --out DIR)"
                                    : "expected one sweep file, got " + std::to_string(files.size()));
  if (dry_run_)
    return dry_run(files.front(), out);
  if (out_dir.empty())
    throw ConfigError("missing required option --out (see `stepsim sweep --help`)");

  sweep::SweepOptions options{.sweep_file = files.front(),
                              .out_dir = out_dir,
                              .jobs = jobs_,
                              .shard = shard_text.empty()
                                           ? std::nullopt
                                           : std::optional<sweep::Shard>(sweep::parse_shard(shard_text)),
                              .timeout_s = timeout_s_,
                              .retry_failed = retry_failed_,
                              .progress = progress_mode(progress_),
                              .label = "sweep",
                              .simulate = simulate};

  const std::optional<int> world = sweep::mpi_launcher_size();
  if (!world || *world <= 1) {
    const int code = exit_code(sweep::run_sweep(options, err));
    const int plotted = plot_ && !options.shard ? plot(out_dir, err) : 0;
    return std::max(code, plotted);
  }

  // Started by an MPI launcher with several ranks: rank R runs shard R/K, rank 0 merges.
  if (!sweep::mpi_built())
    throw ConfigError("started by mpirun with " + std::to_string(*world) +
                      " ranks, but this stepsim was built without MPI; install libopenmpi-dev and rebuild, "
                      "or run the shards with --shard I/K and merge with --merge DIR");
  if (options.shard)
    throw ConfigError("--shard cannot be combined with mpirun (each rank is a shard already)");
  const sweep::MpiSession mpi;
  options.shard = sweep::Shard{mpi.rank(), mpi.size()};
  options.label = "sweep rank " + std::to_string(mpi.rank()) + "/" + std::to_string(mpi.size());
  if (options.jobs == 0)
    options.jobs = std::max(1, sweep::available_cpus() / mpi.local_size());
  if (options.progress == ProgressMode::TERMINAL && mpi.rank() != 0)
    options.progress = ProgressMode::OFF; // one terminal, one line: rank 0's
  int code = 0;
  try {
    code = exit_code(sweep::run_sweep(options, err));
  } catch (const std::exception& e) {
    err << "stepsim: error (rank " << mpi.rank() << "): " << e.what() << '\n';
    mpi.abort(dynamic_cast<const ConfigError*>(&e) != nullptr ||
                      dynamic_cast<const ModelError*>(&e) != nullptr
                  ? 2
                  : 1);
  }
  mpi.barrier();
  if (mpi.rank() == 0) {
    sweep::merge_results(out_dir, err);
    if (plot_)
      code = std::max(code, plot(out_dir, err));
  }
  return code;
}

} // namespace stepsim::cli
