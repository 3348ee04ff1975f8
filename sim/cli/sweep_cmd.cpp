// `stepsim sweep`: simulate many configurations of one cluster + workload (a grid or a list of
// points over any --set key), each in its own process, into resumable result files; shard them
// across machines (--shard, or mpirun) and merge the shards (--merge). See docs/sweeps.md.

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "config/sweep_config.hpp"
#include "core/error.hpp"
#include "sweep/executor.hpp"
#include "sweep/mpi_session.hpp"
#include "sweep/plan.hpp"
#include "sweep/sweep.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

namespace stepsim::cli {

namespace {

constexpr const char* SWEEP_USAGE = R"(usage: stepsim sweep SWEEP.yaml --out DIR [options]
       stepsim sweep --merge DIR
       mpirun -np K stepsim sweep SWEEP.yaml --out DIR [options]

Simulates every configuration of a sweep file (a base cluster and workload plus a grid or a
list of points over any --set key), each in its own process, and appends one row per
configuration to DIR/results.csv and DIR/results.jsonl. Rerunning the same command resumes:
finished rows are kept and not run again. Invalid combinations are rows with status `skipped`
and the reason. Format and outputs: docs/sweeps.md.

options:
  --out DIR              results folder (created if missing)
  -j N, --jobs N         simulations at a time (default: the CPUs available)
  --shard I/K            run only configurations with index % K == I, into
                         DIR/results.shard-I.{csv,jsonl} (e.g. a Slurm array task)
  --merge DIR            merge DIR/results.shard-*.jsonl into DIR/results.{csv,jsonl}
  --timeout SECONDS      give up on a configuration after this long (a `failed` row)
  --retry-failed         run again configurations whose earlier row is `failed`
  --dry-run              list the configurations (index, id, swept values) and stop
  --collectives FORM     auto | fine | coarse (as for `stepsim run`)
  --no-fold              simulate every DP replica and CP rank (as for `stepsim run`)

Under mpirun (when built with MPI), rank R of K runs shard R/K and rank 0 merges at the end.
Exit codes: 0 every configuration ok or skipped, 1 some failed, 2 usage or sweep-file error.
)";

int parse_jobs(const std::string& text) {
  int v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v < 1) {
    throw ConfigError("-j/--jobs: expected a positive integer, got '" + text + "'");
  }
  return v;
}

double parse_timeout(const std::string& text) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v) || v <= 0) {
    throw ConfigError("--timeout: expected a positive number of seconds, got '" + text + "'");
  }
  return v;
}

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

} // namespace

int sweep_command(Args& args, std::ostream& out, std::ostream& err) {
  if (args.flag("--help")) {
    out << SWEEP_USAGE;
    return 0;
  }
  const std::string merge_dir = args.value("--merge", "");
  const std::string out_dir = args.value("--out", "");
  std::string jobs_text = args.value("--jobs", "");
  bool jobs_given = !jobs_text.empty();
  const std::string shard_text = args.value("--shard", "");
  const std::string timeout_text = args.value("--timeout", "");
  const bool retry_failed = args.flag("--retry-failed");
  const bool list_only = args.flag("--dry-run");
  const runner::SimulateOptions simulate{.collective_form =
                                             parse_collective_form(args.value("--collectives", "auto")),
                                         .fold_dp = !args.flag("--no-fold")};
  // Positionals: the sweep file, and `-j N` / `-jN` (the option parser knows only --long options).
  std::vector<std::string> files;
  const std::vector<std::string> pos = args.positionals();
  for (std::size_t i = 0; i < pos.size(); ++i) {
    if (pos[i] == "-j") {
      if (i + 1 >= pos.size())
        throw ConfigError("option -j needs a value");
      jobs_text = pos[++i];
      jobs_given = true;
    } else if (pos[i].starts_with("-j")) {
      jobs_text = pos[i].substr(2);
      jobs_given = true;
    } else if (pos[i].starts_with("-")) {
      throw ConfigError("unknown option " + pos[i] + " for `stepsim sweep`");
    } else {
      files.push_back(pos[i]);
    }
  }
  args.finish();

  if (!merge_dir.empty()) {
    if (!files.empty() || !out_dir.empty() || !shard_text.empty())
      throw ConfigError("--merge DIR takes no sweep file, --out or --shard");
    sweep::merge_results(merge_dir, err);
    return 0;
  }
  if (files.size() != 1)
    throw ConfigError(files.empty() ? "missing the sweep file (usage: stepsim sweep SWEEP.yaml --out DIR)"
                                    : "expected one sweep file, got " + std::to_string(files.size()));
  if (list_only)
    return dry_run(files.front(), out);
  if (out_dir.empty())
    throw ConfigError("missing required option --out (see `stepsim sweep --help`)");

  sweep::SweepOptions options{.sweep_file = files.front(),
                              .out_dir = out_dir,
                              .jobs = jobs_given ? parse_jobs(jobs_text) : 0,
                              .shard = shard_text.empty()
                                           ? std::nullopt
                                           : std::optional<sweep::Shard>(sweep::parse_shard(shard_text)),
                              .timeout_s = timeout_text.empty() ? 0.0 : parse_timeout(timeout_text),
                              .retry_failed = retry_failed,
                              .tty = ::isatty(STDERR_FILENO) != 0,
                              .label = "sweep",
                              .simulate = simulate};

  const std::optional<int> world = sweep::mpi_launcher_size();
  if (!world || *world <= 1)
    return exit_code(sweep::run_sweep(options, err));

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
  options.tty = options.tty && mpi.rank() == 0;
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
  if (mpi.rank() == 0)
    sweep::merge_results(out_dir, err);
  return code;
}

} // namespace stepsim::cli
