// `stepsim run`: simulate one training step, print the summary, write summary.json and trace.json.

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "config/config.hpp"
#include "config/stacks.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "runner/simulate.hpp"
#include "trace/chrome_trace.hpp"

#include <filesystem>
#include <string>

namespace stepsim::cli {

namespace {

constexpr const char* RUN_USAGE = R"(usage: stepsim run --cluster FILE --workload FILE [options]

Simulates one training step and prints a summary table.

options:
  --cluster FILE         cluster description (topologies/*.yaml)
  --workload FILE        training job (workloads/*.yaml)
  --out DIR              write DIR/summary.json and DIR/trace.json (default: no files)
  --set PATH=VALUE       override a key; PATH is dotted into the workload, or starts with
                         `cluster.` for the cluster (repeatable), e.g. --set parallel.pp=4
  --no-trace             do not write trace.json
  --csv                  also write DIR/tasks.csv (one row per task; `role` names the
                         collectives outside the layers)
  --collectives FORM     auto | fine | coarse  (how collectives expand into flows; default auto)
  --no-fold              simulate every DP replica and CP rank instead of one (slower, same
                         answer on symmetric fabrics)
  --no-sampling          run every flow of large collectives (slower; by default only the
                         flows touching simulated nodes run on non-blocking fabrics)
  --quiet                no table on stdout
  --explain              print each training-stack mechanism (docs/stacks.md), its value and
                         where it came from (the workload file, training.stack's preset, the
                         built-in default), one per line, and exit without simulating
  --fail-on-oom          exit with code 3 when a GPU's peak memory exceeds its capacity
                         (by default that is reported, fits_in_memory: false, and exit 0)
)";

} // namespace

int run_command(Args& args, std::ostream& out, std::ostream& err) {
  if (args.flag("--help")) {
    out << RUN_USAGE;
    return 0;
  }
  const std::string cluster_file = args.required("--cluster");
  const std::string workload_file = args.required("--workload");
  const std::string out_dir = args.value("--out", "");
  const std::vector<config::Override> overrides = overrides_from(args);
  const bool write_trace = !args.flag("--no-trace");
  const bool write_csv = args.flag("--csv");
  const bool quiet = args.flag("--quiet");
  const bool fail_on_oom = args.flag("--fail-on-oom");
  const bool explain = args.flag("--explain");
  runner::SimulateOptions options{.collective_form =
                                      parse_collective_form(args.value("--collectives", "auto")),
                                  .fold_dp = !args.flag("--no-fold"),
                                  .sample_collectives = !args.flag("--no-sampling")};
  args.finish();
  if (write_csv && out_dir.empty())
    throw ConfigError("--csv writes DIR/tasks.csv: give --out DIR");

  const Job job = load_job(cluster_file, workload_file, overrides);
  if (explain) {
    for (const std::string& line : config::explain_stack(job.workload))
      out << line << '\n';
    return 0;
  }
  if (!out_dir.empty()) {
    // Every output or none: refuse before simulating what could not be written.
    const std::filesystem::path dir(out_dir);
    std::vector<std::filesystem::path> targets = {dir / "summary.json"};
    if (write_trace)
      targets.push_back(dir / "trace.json");
    if (write_csv)
      targets.push_back(dir / "tasks.csv");
    check_output_targets(targets);
  }
  const ClusterSpec& cluster = job.cluster;
  const WorkloadSpec& workload = job.workload;

  const runner::Simulation sim = runner::simulate(cluster, workload, options);
  if (!quiet) {
    report::print_summary_table(out, sim.summary);
    err << "simulated " << sim.program.graph.size() << " tasks, " << sim.result.flows << " flows in "
        << sim.wall_s << " s wall\n";
  }
  if (!out_dir.empty()) {
    namespace fs = std::filesystem;
    const fs::path dir(out_dir);
    write_file_atomically(dir / "summary.json",
                          [&](std::ostream& o) { report::write_summary_json(o, sim.summary); });
    trace::TraceInput in{sim.program, sim.result.start, sim.result.end, cluster, workload};
    if (write_trace) {
      const report::MemoryReport memory =
          report::memory_timeline(sim.program, sim.result.start, sim.result.end, cluster, workload, true);
      in.memory = &memory.tracks;
      write_file_atomically(dir / "trace.json", [&](std::ostream& o) { trace::write_chrome_trace(o, in); });
    }
    if (write_csv)
      write_file_atomically(dir / "tasks.csv", [&](std::ostream& o) { trace::write_task_csv(o, in); });
  }
  if (!sim.summary.memory.fits_in_memory) {
    err << "stepsim: warning: does not fit in memory: " << sim.summary.memory.reason << '\n';
    if (fail_on_oom)
      return 3;
  }
  return 0;
}

} // namespace stepsim::cli
