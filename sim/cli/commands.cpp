#include "cli/commands.hpp"

#include "core/error.hpp"

#include <string>
#include <vector>

namespace stepsim::cli {

namespace {

constexpr const char* VERSION = "0.1.0";

struct CommandEntry {
  const char* name;
  const char* summary;
  std::unique_ptr<Command> (*make)(Options&);
};

// One line per subcommand.
constexpr CommandEntry COMMANDS[] = {
    {"run", "simulate one training step: --cluster C.yaml --workload W.yaml [--out DIR]", run_command},
    {"memory", "static per-GPU memory ledger per stage (no simulation)", memory_command},
    {"kernels", "kernel shapes a workload runs, for the microbenchmark suite: --workload W.yaml",
     kernels_command},
    {"collective", "nccl-tests-like sweep: --cluster C.yaml --op all_reduce --gpus N [--sizes 1MiB:8GiB]",
     collective_command},
    {"sweep", "simulate many configurations: SWEEP.yaml --out DIR [-j N] [--shard I/K] | --merge DIR",
     sweep_command},
    {"jobs", "several jobs on one cluster, alone and shared: JOBS.yaml [--out DIR]", jobs_command},
    {"plan", "search parallel layouts: --cluster C.yaml --workload W.yaml [--gpus N] [--top K]",
     plan_command},
    {"validate", "compare with published measured runs: RUNS.yaml [--out DIR] [-j N]", validate_command},
    {"calibrate", "fit per-GPU-kind knobs on measured runs: RUNS.yaml --fit ID,ID... [--write]",
     calibrate_command},
    {"compare", "measured Kineto trace vs simulated trace: --measured T.json --simulated trace.json",
     compare_command},
    {"report", "one self-contained HTML page of a run, sweep or plan output folder: DIR", report_command},
};

void usage(std::ostream& out) {
  out << "usage: stepsim <command> [options]   (`stepsim <command> --help` for its options)\n\ncommands:\n";
  for (const CommandEntry& c : COMMANDS) {
    const std::string name = c.name;
    out << "  " << name << std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') << c.summary << '\n';
  }
  out << "  help [CMD]  show this text, or a command's options\n  version     print the version\n\n"
      << "Every command takes --log-level trace|debug|info|warn|error|off: diagnostics on stderr\n"
      << "            (engine progress, planner stages; default off).\n"
      << "Exit codes: 0 ok, 1 simulation error, 2 usage or configuration error,\n"
      << "            3 a GPU runs out of memory and --fail-on-oom was given, or `run` refused\n"
      << "            a layout whose model states alone exceed the GPU's memory.\n";
}

const CommandEntry* find_command(const std::string& name) {
  for (const CommandEntry& c : COMMANDS)
    if (name == c.name)
      return &c;
  return nullptr;
}

/// The arguments after `stepsim help` or `stepsim version` must be none (or, for help, one
/// command's name).
void no_more(const std::vector<std::string>& rest, const std::string& command) {
  if (!rest.empty())
    throw ConfigError("unexpected argument '" + rest.front() + "' for `stepsim " + command + "`");
}

} // namespace

int dispatch(int argc, char** argv, std::ostream& out, std::ostream& err) {
  if (argc < 2) {
    usage(err);
    return 2;
  }
  const std::string cmd = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    if (!rest.empty() && find_command(rest.front()) != nullptr) { // `stepsim help run`
      const std::string name = rest.front();
      rest.erase(rest.begin());
      no_more(rest, "help " + name);
      Options options(name);
      const std::unique_ptr<Command> command = find_command(name)->make(options);
      options.parse({"--help"}, out);
      return 0;
    }
    no_more(rest, "help");
    usage(out);
    return 0;
  }
  if (cmd == "version" || cmd == "--version") {
    no_more(rest, "version");
    out << "stepsim " << VERSION << '\n';
    return 0;
  }
  const CommandEntry* entry = find_command(cmd);
  if (entry == nullptr) {
    std::vector<std::string> names = {"help", "version"};
    for (const CommandEntry& c : COMMANDS)
      names.emplace_back(c.name);
    throw ConfigError("unknown command '" + cmd + "' (try `stepsim help`)" + suggestion(cmd, names));
  }
  Options options(cmd);
  const std::unique_ptr<Command> command = entry->make(options);
  if (!options.parse(rest, out))
    return 0; // --help
  return command->run(out, err);
}

} // namespace stepsim::cli
