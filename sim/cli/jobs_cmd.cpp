// `stepsim jobs`: several jobs on one fabric (docs/jobs.md). Each job alone on its nodes (one
// child process each), then all of them together in this process; prints each job's step alone
// and shared, the slowdown and the links they contend on; writes DIR/<job>/summary.json,
// DIR/jobs.json and one trace of every job.

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/json_output.hpp"
#include "config/jobs_config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "process/process.hpp"
#include "report/summary.hpp"
#include "runner/jobs.hpp"
#include "trace/chrome_trace.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace stepsim::cli {

namespace {

class JobsCommand final : public Command {
public:
  explicit JobsCommand(Options& o) {
    o.describe(R"(usage: stepsim jobs JOBS.yaml [--out DIR] [options]

Simulates several jobs on one cluster together (docs/jobs.md): each job's step alone on its nodes
and shared with the others, the slowdown, and the links their traffic contends on.)");
    o.positionals("JOBS.yaml", files_, "the jobs file: cluster, background: {share}, jobs");
    o.value("--out", out_dir_, "DIR",
            "write DIR/jobs.json, DIR/<job>/summary.json and DIR/trace.json (default: no files)");
    o.integer("--top", top_, 0, 1000, "N", "contended links listed, most shared bytes first (default 5)");
    o.integer("-j,--jobs", parallel_, 1, 256, "N", "alone runs at a time, one process each (default 1)");
    o.values(
        "--set", sets_, "cluster.KEY=VALUE",
        "override a key of the shared cluster, e.g. --set cluster.nodes=64 (a job's keys go in its `set`)");
    o.flag("--no-fold", no_fold_,
           "simulate every DP replica of each job (slower; by default one replica per class of "
           "placement, the others' pipeline sends copied; docs/jobs.md)");
    o.flag("--no-trace", no_trace_, "do not write trace.json");
    o.flag("--quiet", quiet_, "no table on stdout");
    o.flag("--json", json_,
           "print jobs.json (schema stepsim.jobs/1, docs/output.md) on stdout instead of the table");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::vector<std::string> files_, sets_;
  std::string out_dir_;
  int top_ = 5, parallel_ = 1;
  bool no_trace_ = false, quiet_ = false, json_ = false, no_fold_ = false;
};

/// Each job's step time alone on its nodes (with the background share): one child process each,
/// SimGrid running once per process.
std::vector<double> alone_step_times(const JobsSpec& spec, const runner::JobsOptions& options, int parallel) {
  std::vector<process::Job> children;
  for (const JobPlacement& job : spec.jobs) {
    JobsSpec one{.source = spec.source,
                 .cluster = spec.cluster,
                 .background_share = spec.background_share,
                 .jobs = {job}};
    children.push_back(
        process::Job{.body =
                         [one, options] {
                           return process::number(
                               runner::simulate_jobs(one, options).jobs.front().summary.step_time.value());
                         },
                     .argv = {}});
  }
  const std::vector<process::Outcome> outcomes =
      process::run_all(children, process::PoolOptions{.jobs = parallel, .spawn = {}, .name = "jobs"});
  std::vector<double> times;
  for (size_t j = 0; j < outcomes.size(); ++j) {
    const process::Outcome& o = outcomes[j];
    if (!o.message) {
      const std::string why = !o.exception.empty() ? o.exception
                              : o.signal != 0      ? "killed by signal " + std::to_string(o.signal)
                                                   : "exit code " + std::to_string(o.exit_code);
      throw SimulationError("jobs: job '" + spec.jobs[j].name + "' alone failed: " + why);
    }
    times.push_back(process::number_of(*o.message));
  }
  return times;
}

/// A link shared by more than one job, with its bytes per job.
struct Contended {
  const engine::LinkLoad* load = nullptr;
  double total = 0;
};

std::vector<Contended> contended_links(const engine::ReplayResult& result) {
  std::vector<Contended> out;
  for (const engine::LinkLoad& l : result.link_loads) {
    const auto users = std::count_if(l.bytes.begin(), l.bytes.end(), [](double b) { return b > 0; });
    if (users > 1) {
      double total = 0;
      for (const double b : l.bytes)
        total += b;
      out.push_back(Contended{&l, total});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Contended& a, const Contended& b) {
    return a.total > b.total; // ties keep the links' name order
  });
  return out;
}

nlohmann::ordered_json jobs_json(const JobsSpec& spec, const runner::JobsSimulation& sim,
                                 const std::vector<double>& alone, const std::vector<Contended>& links,
                                 int top) {
  nlohmann::ordered_json doc = document_head("stepsim.jobs/1", spec.cluster, "");
  doc["background_share"] = spec.background_share;
  nlohmann::ordered_json jobs = nlohmann::ordered_json::array();
  for (size_t j = 0; j < spec.jobs.size(); ++j) {
    const JobPlacement& p = spec.jobs[j];
    const double shared = sim.jobs[j].summary.step_time.value();
    jobs.push_back({{"name", p.name},
                    {"workload", p.workload.name},
                    {"num_gpus", p.cluster.num_gpus()},
                    {"nodes", p.nodes},
                    {"step_time_alone_s", alone[j]},
                    {"step_time_shared_s", shared},
                    {"slowdown", alone[j] > 0 ? shared / alone[j] : 1.0},
                    {"summary", p.name + "/summary.json"}});
  }
  doc["jobs"] = std::move(jobs);
  doc["contended_links_total"] = links.size();
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < links.size() && static_cast<int>(i) < top; ++i) {
    nlohmann::ordered_json bytes = nlohmann::ordered_json::object();
    for (size_t j = 0; j < spec.jobs.size(); ++j)
      if (links[i].load->bytes[j] > 0)
        bytes[spec.jobs[j].name] = links[i].load->bytes[j];
    list.push_back({{"link", links[i].load->link}, {"bytes", links[i].total}, {"bytes_per_job", bytes}});
  }
  doc["contended_links"] = std::move(list);
  return doc;
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, s >= 1.0 ? "%.3f s" : "%.3f ms", s >= 1.0 ? s : s * 1e3);
  return text;
}

void print_table(std::ostream& out, const JobsSpec& spec, const runner::JobsSimulation& sim,
                 const std::vector<double>& alone, const std::vector<Contended>& links, int top) {
  out << "stepsim: " << spec.jobs.size() << " jobs on " << spec.cluster.name << " ("
      << spec.cluster.num_gpus() << " GPUs)";
  if (spec.background_share > 0)
    out << ", background share " << spec.background_share * 100 << " % of every inter-node link";
  out << '\n';
  char line[256];
  std::snprintf(line, sizeof line, "  %-16s %6s  %-24s %12s %12s %9s\n", "job", "GPUs", "nodes", "alone",
                "shared", "slowdown");
  out << line;
  for (size_t j = 0; j < spec.jobs.size(); ++j) {
    const JobPlacement& p = spec.jobs[j];
    const double shared = sim.jobs[j].summary.step_time.value();
    std::vector<graph::Rank> nodes(p.nodes.begin(), p.nodes.end());
    std::sort(nodes.begin(), nodes.end()); // the table shows which nodes; jobs.json their rank order
    std::snprintf(line, sizeof line, "  %-16s %6d  %-24s %12s %12s %9.3f\n", p.name.c_str(),
                  p.cluster.num_gpus(), trace::rank_ranges(nodes).c_str(), seconds_text(alone[j]).c_str(),
                  seconds_text(shared).c_str(), alone[j] > 0 ? shared / alone[j] : 1.0);
    out << line;
  }
  if (links.empty()) {
    out << "  no link carries traffic of more than one job\n";
    return;
  }
  out << "  contended links (" << links.size() << "; GB each job sent over it):\n";
  for (size_t i = 0; i < links.size() && static_cast<int>(i) < top; ++i) {
    out << "    " << links[i].load->link;
    const char* separator = "";
    for (size_t j = 0; j < spec.jobs.size(); ++j) {
      if (links[i].load->bytes[j] <= 0)
        continue;
      std::snprintf(line, sizeof line, "%s %s %.2f", separator, spec.jobs[j].name.c_str(),
                    links[i].load->bytes[j] / 1e9);
      out << line;
      separator = ",";
    }
    out << '\n';
  }
}

} // namespace

std::unique_ptr<Command> jobs_command(Options& options) {
  return std::make_unique<JobsCommand>(options);
}

int JobsCommand::run(std::ostream& out, std::ostream& err) {
  if (files_.size() != 1)
    throw ConfigError(files_.empty() ? "missing the jobs file (usage: stepsim jobs JOBS.yaml --out DIR)"
                                     : "expected one jobs file, got " + std::to_string(files_.size()));
  const JobsSpec spec = config::load_jobs(files_.front(), overrides_from(sets_));
  const bool write_trace = !no_trace_ && !out_dir_.empty();
  if (!out_dir_.empty()) {
    // Every output or none: refuse before simulating what could not be written.
    const std::filesystem::path dir(out_dir_);
    std::vector<std::filesystem::path> targets = {dir / "jobs.json"};
    if (write_trace)
      targets.push_back(dir / "trace.json");
    for (const JobPlacement& p : spec.jobs)
      targets.push_back(dir / p.name / "summary.json");
    check_output_targets(targets);
  }
  // The alone runs first: their children fork before this process starts SimGrid.
  const runner::JobsOptions options{.fold = !no_fold_};
  const std::vector<double> alone = alone_step_times(spec, options, parallel_);
  const runner::JobsSimulation sim = runner::simulate_jobs(spec, options);
  const std::vector<Contended> links = contended_links(sim.result);
  const nlohmann::ordered_json doc = jobs_json(spec, sim, alone, links, top_);
  if (json_)
    out << doc.dump(2) << '\n';
  else if (!quiet_)
    print_table(out, spec, sim, alone, links, top_);
  if (!quiet_)
    err << "simulated " << sim.program.simulated_ranks.size() << " of " << sim.job_of_gpu.size()
        << " GPUs' streams, " << sim.program.graph.size() << " tasks, " << sim.result.flows << " flows in "
        << sim.wall_s << " s wall (shared run)\n";
  if (out_dir_.empty())
    return 0;

  std::vector<OutputFile> files = {{"jobs.json", [&](std::ostream& o) { o << doc.dump(2) << '\n'; }}};
  std::vector<std::string> set_names = {"trace.json"};
  for (size_t j = 0; j < spec.jobs.size(); ++j) {
    const std::string name = spec.jobs[j].name + "/summary.json";
    files.push_back(
        {name, [&sim, j](std::ostream& o) { report::write_summary_json(o, sim.jobs[j].summary); }});
    set_names.push_back(name);
  }
  // One trace of every job: processes are the cluster's GPUs, named after their job.
  std::vector<trace::JobLabel> labels(static_cast<size_t>(spec.cluster.num_gpus()));
  for (size_t g = 0; g < labels.size(); ++g)
    if (const int32_t j = sim.job_of_gpu[g]; j >= 0)
      labels[g] = trace::JobLabel{.job = spec.jobs[static_cast<size_t>(j)].name,
                                  .grid = &sim.jobs[static_cast<size_t>(j)].program.grid,
                                  .rank = sim.rank_in_job[g]};
  // The trace's metadata names the run: the jobs' names, every GPU of the cluster.
  WorkloadSpec named = spec.jobs.front().workload;
  named.name.clear();
  for (const JobPlacement& p : spec.jobs)
    named.name += (named.name.empty() ? "" : " + ") + p.name;
  named.parallel.tp = named.parallel.pp = named.parallel.cp = 1;
  named.parallel.dp = spec.cluster.num_gpus();
  trace::TraceInput in{sim.program, sim.result.start, sim.result.end, spec.cluster, named};
  in.jobs = &labels;
  if (write_trace)
    files.push_back({"trace.json", [&](std::ostream& o) { trace::write_chrome_trace(o, in); }});
  write_output_set(out_dir_, files, set_names);
  return 0;
}

} // namespace stepsim::cli
