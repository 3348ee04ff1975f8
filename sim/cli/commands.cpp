#include "cli/commands.hpp"

#include "core/error.hpp"

#include <string>

namespace stepsim::cli {

namespace {

constexpr const char* VERSION = "0.1.0";

struct Command {
  const char* name;
  const char* summary;
  int (*fn)(Args&, std::ostream&, std::ostream&);
};

// One line per subcommand.
constexpr Command COMMANDS[] = {
    {"run", "simulate one training step: --cluster C.yaml --workload W.yaml [--out DIR]", run_command},
    {"memory", "static per-GPU memory ledger per stage (no simulation)", memory_command},
    {"kernels", "kernel shapes a workload runs, for the microbenchmark suite: --workload W.yaml",
     kernels_command},
    {"collective", "nccl-tests-like sweep: --cluster C.yaml --op all_reduce --gpus N [--sizes 1MiB:8GiB]",
     collective_command},
    {"sweep", "simulate many configurations: SWEEP.yaml --out DIR [-j N] [--shard I/K] | --merge DIR",
     sweep_command},
    {"plan", "search parallel layouts: --cluster C.yaml --workload W.yaml [--gpus N] [--top K]",
     plan_command},
    {"validate", "compare with published measured runs: RUNS.yaml [--out DIR] [-j N]", validate_command},
    {"calibrate", "fit per-GPU-kind knobs on measured runs: RUNS.yaml --fit ID,ID... [--write]",
     calibrate_command},
    {"compare", "measured Kineto trace vs simulated trace: --measured T.json --simulated trace.json",
     compare_command},
};

void usage(std::ostream& out) {
  out << "usage: stepsim <command> [options]   (`stepsim <command> --help` for its options)\n\ncommands:\n";
  for (const Command& c : COMMANDS) {
    const std::string name = c.name;
    out << "  " << name << std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') << c.summary << '\n';
  }
  out << "  help        show this text\n  version     print the version\n\n"
      << "Every command takes --log-level trace|debug|info|warn|error|off: diagnostics on stderr\n"
      << "            (engine progress, planner stages; default off).\n"
      << "Exit codes: 0 ok, 1 simulation error, 2 usage or configuration error,\n"
      << "            3 a GPU runs out of memory and --fail-on-oom was given.\n";
}

} // namespace

int dispatch(int argc, char** argv, std::ostream& out, std::ostream& err) {
  Args args(argc, argv);
  const std::string cmd = args.command();
  if (cmd.empty()) {
    usage(err);
    return 2;
  }
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    args.finish(); // `stepsim help run` is not a thing: `stepsim run --help` is
    usage(out);
    return 0;
  }
  if (cmd == "version" || cmd == "--version") {
    args.finish();
    out << "stepsim " << VERSION << '\n';
    return 0;
  }
  apply_log_level(args);
  for (const Command& c : COMMANDS)
    if (cmd == c.name)
      return c.fn(args, out, err);
  throw ConfigError("unknown command '" + cmd + "' (try `stepsim help`)");
}

} // namespace stepsim::cli
