// `stepsim run`: simulate one training step, print the summary, write summary.json and trace.json.

#include "api/stepsim.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "config/config.hpp"
#include "config/stacks.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "html/page.hpp"
#include "runner/simulate.hpp"
#include "trace/chrome_trace.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>

namespace stepsim::cli {

namespace {

class RunCommand final : public Command {
public:
  explicit RunCommand(Options& o) {
    o.describe(R"(usage: stepsim run --cluster FILE --workload FILE [options]

Simulates one training step and prints a summary table.)");
    o.required("--cluster", cluster_file_, "FILE", "cluster description (topologies/*.yaml)");
    o.required("--workload", workload_file_, "FILE", "training job (workloads/*.yaml)");
    o.value("--out", out_dir_, "DIR", "write DIR/summary.json and DIR/trace.json (default: no files)");
    o.values("--set", sets_, "PATH=VALUE", SET_HELP);
    o.flag("--no-trace", no_trace_, "do not write trace.json");
    o.flag("--csv", csv_,
           "also write DIR/tasks.csv (one row per task; `role` names the collectives outside "
           "the layers)");
    o.choice("--collectives", collectives_, COLLECTIVE_FORMS, "how collectives expand into flows");
    o.flag("--no-fold", no_fold_,
           "simulate every DP replica and CP rank instead of one (slower, same answer on symmetric fabrics)");
    o.flag("--no-sampling", no_sampling_,
           "run every flow of large collectives (slower; by default only the flows touching simulated "
           "nodes run on non-blocking fabrics)");
    o.flag("--html", html_,
           "also write DIR/report.html: the summary, per-stage bars, memory per stage and over time and a "
           "timeline of one pipeline in one self-contained page (docs/report.md)");
    o.flag("--quiet", quiet_, "no table on stdout");
    o.flag("--explain", explain_,
           "print each training-stack mechanism (docs/stacks.md), its value and where it came from "
           "(the workload file, training.stack's preset, the built-in default), one per line, and exit "
           "without simulating");
    o.flag("--fail-on-oom", fail_on_oom_,
           "exit with code 3 when a GPU's peak memory exceeds its capacity (by default that is "
           "reported, fits_in_memory: false, and exit 0)");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::string cluster_file_, workload_file_, out_dir_, collectives_ = "auto";
  std::vector<std::string> sets_;
  bool no_trace_ = false, csv_ = false, html_ = false, no_fold_ = false, no_sampling_ = false, quiet_ = false,
       explain_ = false, fail_on_oom_ = false;
};

// The page of `run --html`: what `stepsim report` shows of a run folder, with the memory ledger
// of every stage and the memory over time of the pipeline the timeline draws.
html::PageInput run_page(const Job& job, const runner::Simulation& sim, const trace::TraceInput& in,
                         const std::vector<CounterSeries>& memory) {
  html::PageInput page;
  page.title = "stepsim: " + job.workload.name + " on " + job.cluster.name;
  page.summary = nlohmann::ordered_json::parse(api::summary_json(sim.summary));
  page.ledger = nlohmann::ordered_json::parse(api::memory_json({job.cluster, job.workload}));
  std::stringstream csv;
  trace::write_task_csv(csv, in);
  page.timeline = html::pipeline_from_task_csv(csv, "the run's tasks");
  for (const CounterSeries& series : memory)
    if (std::any_of(page.timeline.begin(), page.timeline.end(),
                    [&](const html::Slice& s) { return s.rank == series.gpu; }))
      page.memory.push_back(series);
  return page;
}

} // namespace

std::unique_ptr<Command> run_command(Options& options) {
  return std::make_unique<RunCommand>(options);
}

int RunCommand::run(std::ostream& out, std::ostream& err) {
  const std::vector<config::Override> overrides = overrides_from(sets_);
  const bool write_trace = !no_trace_;
  const runner::SimulateOptions options{.collective_form = parse_collective_form(collectives_),
                                        .fold_dp = !no_fold_,
                                        .sample_collectives = !no_sampling_};
  if (csv_ && out_dir_.empty())
    throw ConfigError("--csv writes DIR/tasks.csv: give --out DIR");
  if (html_ && out_dir_.empty())
    throw ConfigError("--html writes DIR/report.html: give --out DIR");

  const Job job = load_job(cluster_file_, workload_file_, overrides);
  if (explain_) {
    for (const std::string& line : config::explain_stack(job.workload))
      out << line << '\n';
    return 0;
  }
  if (!out_dir_.empty()) {
    // Every output or none: refuse before simulating what could not be written.
    const std::filesystem::path dir(out_dir_);
    std::vector<std::filesystem::path> targets = {dir / "summary.json"};
    if (write_trace)
      targets.push_back(dir / "trace.json");
    if (csv_)
      targets.push_back(dir / "tasks.csv");
    if (html_)
      targets.push_back(dir / "report.html");
    check_output_targets(targets);
  }
  const ClusterSpec& cluster = job.cluster;
  const WorkloadSpec& workload = job.workload;

  const runner::Simulation sim = runner::simulate(cluster, workload, options);
  if (!quiet_) {
    report::print_summary_table(out, sim.summary);
    err << "simulated " << sim.program.graph.size() << " tasks, " << sim.result.flows << " flows in "
        << sim.wall_s << " s wall\n";
  }
  if (!out_dir_.empty()) {
    namespace fs = std::filesystem;
    const fs::path dir(out_dir_);
    write_file_atomically(dir / "summary.json",
                          [&](std::ostream& o) { report::write_summary_json(o, sim.summary); });
    trace::TraceInput in{sim.program, sim.result.start, sim.result.end, cluster, workload};
    const report::MemoryReport memory =
        write_trace || html_
            ? report::memory_timeline(sim.program, sim.result.start, sim.result.end, cluster, workload, true)
            : report::MemoryReport{};
    if (write_trace) {
      in.memory = &memory.tracks;
      write_file_atomically(dir / "trace.json", [&](std::ostream& o) { trace::write_chrome_trace(o, in); });
    }
    if (csv_)
      write_file_atomically(dir / "tasks.csv", [&](std::ostream& o) { trace::write_task_csv(o, in); });
    if (html_) {
      const html::PageInput page = run_page(job, sim, in, memory.tracks);
      write_file_atomically(dir / "report.html", [&](std::ostream& o) { html::write_page(o, page); });
    }
  }
  if (!sim.summary.memory.fits_in_memory) {
    err << "stepsim: warning: does not fit in memory: " << sim.summary.memory.reason << '\n';
    if (fail_on_oom_)
      return EXIT_OUT_OF_MEMORY;
  }
  return 0;
}

} // namespace stepsim::cli
