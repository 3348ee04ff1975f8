#include "cli/commands.hpp"

#include "cli/options.hpp"
#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "engine/replay.hpp"
#include "graph/step_builder.hpp"
#include "model/transformer.hpp"
#include "report/summary.hpp"
#include "trace/chrome_trace.hpp"

#include <chrono>
#include <filesystem>
#include <string>

namespace stepsim::cli {

namespace {

constexpr const char* VERSION = "0.1.0";

constexpr const char* USAGE = R"(usage: stepsim <command> [options]

commands:
  run       simulate one training step: stepsim run --cluster C.yaml --workload W.yaml [--out DIR]
  help      show this text (or `stepsim <command> --help`)
  version   print the version

Exit codes: 0 ok, 1 simulation error, 2 usage or configuration error.
)";

constexpr const char* RUN_USAGE = R"(usage: stepsim run --cluster FILE --workload FILE [options]

Simulates one training step and prints a summary table.

options:
  --cluster FILE         cluster description (topologies/*.yaml)
  --workload FILE        training job (workloads/*.yaml)
  --out DIR              write DIR/summary.json and DIR/trace.json (default: no files)
  --set PATH=VALUE       override a key; PATH is dotted into the workload, or starts with
                         `cluster.` for the cluster (repeatable), e.g. --set parallel.pp=4
  --no-trace             do not write trace.json
  --csv                  also write DIR/tasks.csv (one row per task)
  --collectives FORM     auto | fine | coarse  (how collectives expand into flows; default auto)
  --no-fold              simulate every DP replica instead of one (slower, same answer on
                         symmetric fabrics)
  --quiet                no table on stdout
)";

engine::CollectiveForm parse_form(const std::string& v) {
  if (v == "auto")
    return engine::CollectiveForm::AUTO;
  if (v == "fine")
    return engine::CollectiveForm::FINE;
  if (v == "coarse")
    return engine::CollectiveForm::COARSE;
  throw ConfigError("--collectives: expected auto, fine or coarse, got '" + v + "'");
}

int run_command(Args& args, std::ostream& out, std::ostream& err) {
  if (args.flag("--help")) {
    out << RUN_USAGE;
    return 0;
  }
  const std::string cluster_file = args.required("--cluster");
  const std::string workload_file = args.required("--workload");
  const std::string out_dir = args.value("--out", "");
  std::vector<config::Override> overrides;
  for (const std::string& s : args.values("--set"))
    overrides.push_back(config::parse_override(s));
  const bool write_trace = !args.flag("--no-trace");
  const bool write_csv = args.flag("--csv");
  const bool quiet = args.flag("--quiet");
  const bool no_fold = args.flag("--no-fold");
  const engine::CollectiveForm form = parse_form(args.value("--collectives", "auto"));
  args.finish();

  const ClusterSpec cluster = config::load_cluster(cluster_file, overrides);
  WorkloadSpec workload = config::load_workload(workload_file, overrides);
  config::check_layout(cluster, workload);

  const auto t0 = std::chrono::steady_clock::now();
  graph::BuildOptions build{.fold_dp = !no_fold,
                            .compute_time = [&](const graph::ComputeQuery& q) {
                              return model::roofline_time(q.flops, q.bytes, cluster.gpu, workload.precision);
                            }};
  const graph::StepProgram program = graph::build_step(workload, build);
  engine::Replay replay(program, cluster, engine::ReplayOptions{.collective_form = form});
  const engine::ReplayResult result = replay.run();
  const auto t1 = std::chrono::steady_clock::now();

  const report::Summary summary = report::summarize(program, result.start, result.end, cluster, workload);
  if (!quiet) {
    report::print_summary_table(out, summary);
    err << "simulated " << program.graph.size() << " tasks, " << result.flows << " flows in "
        << std::chrono::duration<double>(t1 - t0).count() << " s wall\n";
  }
  if (!out_dir.empty()) {
    namespace fs = std::filesystem;
    const fs::path dir(out_dir);
    write_file_atomically(dir / "summary.json", [&](std::ostream& o) { report::write_summary_json(o, summary); });
    const trace::TraceInput in{program, result.start, result.end, cluster, workload};
    if (write_trace)
      write_file_atomically(dir / "trace.json", [&](std::ostream& o) { trace::write_chrome_trace(o, in); });
    if (write_csv)
      write_file_atomically(dir / "tasks.csv", [&](std::ostream& o) { trace::write_task_csv(o, in); });
  }
  return 0;
}

} // namespace

int dispatch(int argc, char** argv, std::ostream& out, std::ostream& err) {
  Args args(argc, argv);
  const std::string cmd = args.command();
  if (cmd.empty() || cmd == "help" || cmd == "--help" || cmd == "-h") {
    out << USAGE;
    return cmd.empty() ? 2 : 0;
  }
  if (cmd == "version" || cmd == "--version") {
    out << "stepsim " << VERSION << '\n';
    return 0;
  }
  if (cmd == "run")
    return run_command(args, out, err);
  throw ConfigError("unknown command '" + cmd + "' (try `stepsim help`)");
}

} // namespace stepsim::cli
