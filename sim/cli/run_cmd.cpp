// `stepsim run`: simulate one training step, print the summary, write summary.json and trace.json.

#include "api/stepsim.hpp"
#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "config/config.hpp"
#include "config/stacks.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "html/page.hpp"
#include "runner/simulate.hpp"
#include "trace/chrome_trace.hpp"
#include "trace/gzip_stream.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace stepsim::cli {

namespace {

/// GPUs from which a noisy run without sampled replicas gets a note suggesting them (4,096 H100s
/// over 5 steps took 462 s of CPU, docs/performance.md).
constexpr int64_t LARGE_NOISY_JOB = 4096;

class RunCommand final : public Command {
public:
  explicit RunCommand(Options& o) {
    o.describe(R"(usage: stepsim run --cluster FILE --workload FILE [options]

Simulates one training step and prints a summary table.)");
    o.required("--cluster", cluster_file_, "FILE", "cluster description (topologies/*.yaml)");
    o.required("--workload", workload_file_, "FILE", "training job (workloads/*.yaml)");
    o.value("--out", out_dir_, "DIR", "write DIR/summary.json and DIR/trace.json (default: no files)");
    o.choice("--trace-format", trace_format_, {"json", "json.gz"},
             "DIR/trace.json, or DIR/trace.json.gz compressed with gzip (Perfetto opens both)");
    o.value("--trace-ranks", trace_ranks_, "SPEC",
            "draw only these simulated GPUs, by coordinates: DIM=VALUE,... with DIM dp, pp, tp, cp, ep and "
            "VALUE *, N or A-B, e.g. pp=*,tp=0,dp=0 (default: every simulated GPU)");
    o.value("--trace-window", trace_window_, "START:END",
            "draw only what runs between START and END seconds of the step (either may be empty)");
    o.values("--set", sets_, "PATH=VALUE", SET_HELP);
    o.value("--degrade", degrade_file_, "FILE", DEGRADE_HELP);
    o.value("--steps", steps_, "N",
            "simulate N consecutive steps (default 1); summary.json's `variability` gives their step-time "
            "distribution and the other figures are the first step's (docs/variability.md)");
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
    o.flag("--no-fold-tp", no_fold_tp_,
           "simulate every rank of each TP group instead of one, a slow GPU's TP members each at its own "
           "speed (slower, same answer for ring and NVLS TP collectives; docs/engine.md, \"Folding TP\")");
    o.flag("--html", html_,
           "also write DIR/report.html: the summary, per-stage bars, memory per stage and over time and a "
           "timeline of one pipeline in one self-contained page (docs/report.md)");
    o.flag("--quiet", quiet_, "no table on stdout");
    o.flag("--progress", progress_,
           "show tasks simulated / total and an ETA on stderr (the default when stderr is a terminal)");
    o.flag("--json", json_,
           "print summary.json (schema stepsim.summary/2, docs/output.md) on stdout instead of the table");
    o.flag("--explain", explain_,
           "print each training-stack mechanism (docs/stacks.md), its value and where it came from "
           "(the workload file, training.stack's preset, the built-in default), one per line, and exit "
           "without simulating");
    o.flag("--fail-on-oom", fail_on_oom_,
           "exit with code 3 when a GPU's peak memory exceeds its capacity (by default that is "
           "reported, fits_in_memory: false, and exit 0)");
    o.flag("--simulate-oom", simulate_oom_,
           "simulate a layout even when its model states alone (weights, gradients, optimizer) exceed the "
           "GPU's memory (by default refused with exit 3 before simulating)");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::string cluster_file_, workload_file_, out_dir_,
      collectives_ = "auto", trace_format_ = "json", trace_ranks_, trace_window_, degrade_file_, steps_ = "1";
  std::vector<std::string> sets_;
  bool no_trace_ = false, csv_ = false, html_ = false, no_fold_ = false, no_sampling_ = false,
       no_fold_tp_ = false, quiet_ = false, explain_ = false, fail_on_oom_ = false, simulate_oom_ = false,
       progress_ = false, json_ = false;
};

// The page of `run --html`: what `stepsim report` shows of a run folder, with the memory ledger
// of every stage and the memory over time of the pipeline the timeline draws.
html::PageInput run_page(const Job& job, const report::Summary& summary, const trace::TraceInput& in,
                         const std::vector<CounterSeries>& memory) {
  html::PageInput page;
  page.title = "stepsim: " + job.workload.name + " on " + job.cluster.name;
  page.summary = nlohmann::ordered_json::parse(api::summary_json(summary));
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
  ProgressReporter progress(err, ProgressOptions{.mode = progress_mode(progress_, quiet_)});
  const runner::SimulateOptions options{.collective_form = parse_collective_form(collectives_),
                                        .fold_dp = !no_fold_,
                                        .sample_collectives = !no_sampling_,
                                        .fold_tp = !no_fold_tp_,
                                        .steps = parse_steps(steps_),
                                        .progress = progress.enabled() ? progress.callback() : nullptr};
  if (csv_ && out_dir_.empty())
    throw ConfigError("--csv writes DIR/tasks.csv: give --out DIR");
  if ((!trace_ranks_.empty() || !trace_window_.empty() || trace_format_ != "json") &&
      (out_dir_.empty() || no_trace_))
    throw ConfigError("--trace-format, --trace-ranks and --trace-window shape DIR/trace.json: give --out DIR "
                      "(without --no-trace)");
  trace::TraceSelection selection =
      trace_window_.empty() ? trace::TraceSelection{} : trace::parse_window(trace_window_);
  const std::string trace_file = "trace." + trace_format_;
  if (html_ && out_dir_.empty())
    throw ConfigError("--html writes DIR/report.html: give --out DIR");

  const Job job = load_job(cluster_file_, workload_file_, overrides, degrade_file_);
  if (explain_) {
    for (const std::string& line : config::explain_stack(job.workload))
      out << line << '\n';
    return 0;
  }
  // The answer is already known: with --fail-on-oom, a layout the memory ledger says cannot fit
  // exits 3 at once; without it, one whose model states alone exceed the GPU's memory (no
  // schedule, micro-batch or recomputation rescues it, and its step would take as long to
  // simulate as any other) unless --simulate-oom. A near miss is simulated, and its step time
  // reported beside fits_in_memory=false.
  const std::string problem = fail_on_oom_    ? memory_ledger_problem(job.cluster, job.workload)
                              : simulate_oom_ ? std::string()
                                              : model_states_problem(job.cluster, job.workload);
  if (!problem.empty()) {
    err << "stepsim: does not fit in memory: " << problem << " (the memory ledger's verdict; not simulated, "
        << "no output written" << (fail_on_oom_ ? "" : "; --simulate-oom simulates it anyway") << ")\n";
    return EXIT_OUT_OF_MEMORY;
  }
  if (!out_dir_.empty()) {
    // Every output or none: refuse before simulating what could not be written.
    const std::filesystem::path dir(out_dir_);
    std::vector<std::filesystem::path> targets = {dir / "summary.json"};
    if (write_trace)
      targets.push_back(dir / trace_file);
    if (csv_)
      targets.push_back(dir / "tasks.csv");
    if (html_)
      targets.push_back(dir / "report.html");
    check_output_targets(targets);
  }
  const ClusterSpec& cluster = job.cluster;
  const WorkloadSpec& workload = job.workload;
  // Kernel noise simulates every GPU: at this size a sample of the replicas is the affordable way.
  const int64_t replicas = workload.parallel.dp * std::max(1, workload.parallel.cp);
  if (!quiet_ && runner::kernel_cv(cluster, workload) > 0 && workload.training.variability.replicas == 0 &&
      workload.num_gpus() >= LARGE_NOISY_JOB && replicas > 8)
    err << "stepsim: note: kernel noise simulates all " << workload.num_gpus()
        << " GPUs; training.variability.replicas: 8 would simulate 8 of the " << replicas
        << " data-parallel replicas and add the others' expected wait (docs/variability.md, \"Sampled "
           "replicas\")\n";

  const runner::Simulation sim = runner::simulate(cluster, workload, options);
  report::Summary summary = sim.summary;
  if (write_trace && !out_dir_.empty()) {
    selection.ranks = trace::select_ranks(sim.program, trace_ranks_);
    summary.trace = report::TraceNote{
        .file = trace_file,
        .gpus = selection.ranks,
        .gpu_ranges = trace::rank_ranges(selection.ranks),
        .window_start_s = selection.window_start.value(),
        .window_end_s = std::isfinite(selection.window_end.value()) ? selection.window_end.value() : -1.0};
  }
  if (json_)
    report::write_summary_json(out, summary);
  if (!quiet_) {
    if (!json_)
      report::print_summary_table(out, summary);
    err << "simulated " << sim.program.graph.size() << " tasks, " << sim.result.flows << " flows in "
        << sim.wall_s << " s wall\n";
  }
  if (!out_dir_.empty()) {
    // One run's set: the files of an earlier run (also those this run does not write) are
    // replaced together, summary.json last (core/atomic_file.hpp).
    std::vector<OutputFile> files = {
        {"summary.json", [&](std::ostream& o) { report::write_summary_json(o, summary); }}};
    trace::TraceInput in{sim.program, sim.result.start, sim.result.end, cluster, workload};
    in.selection = selection;
    std::optional<report::MemoryReport> memory;
    if (write_trace || html_)
      memory =
          report::memory_timeline(sim.program, sim.result.start, sim.result.end, cluster, workload, true);
    if (write_trace) {
      in.memory = &memory->tracks;
      files.push_back({trace_file, [&](std::ostream& o) {
                         if (trace_format_ == "json") {
                           trace::write_chrome_trace(o, in);
                           return;
                         }
                         trace::GzipOstream gz(o);
                         trace::write_chrome_trace(gz, in);
                         gz.finish();
                       }});
    }
    if (csv_)
      files.push_back({"tasks.csv", [&](std::ostream& o) { trace::write_task_csv(o, in); }});
    std::optional<html::PageInput> page;
    if (html_) {
      page = run_page(job, summary, in, memory->tracks);
      files.push_back({"report.html", [&](std::ostream& o) { html::write_page(o, *page); }});
    }
    write_output_set(out_dir_, files,
                     {"summary.json", "trace.json", "trace.json.gz", "tasks.csv", "report.html"});
  }
  if (!sim.summary.memory.fits_in_memory) {
    err << "stepsim: warning: does not fit in memory: " << sim.summary.memory.reason << '\n';
    if (fail_on_oom_)
      return EXIT_OUT_OF_MEMORY;
  }
  return 0;
}

} // namespace stepsim::cli
