// `stepsim memory`: the static per-GPU memory ledger of a layout, per pipeline stage, without
// simulating (fast enough to call inside a search loop).

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/json_output.hpp"
#include "config/config.hpp"
#include "model/memory.hpp"
#include "planner/planner.hpp"
#include "report/ledger.hpp"
#include "report/memory_timeline.hpp"
#include "report/summary.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace stepsim::cli {

namespace {

std::string cell(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%9.2f", b.value() / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

/// A parameter count in billions (or millions below one billion), e.g. "175.0 B", "3.2 M".
std::string params_text(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f B", n / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
  return buf;
}

/// The `stepsim.memory/1` document (docs/output.md).
nlohmann::ordered_json memory_json(const ClusterSpec& cluster, const WorkloadSpec& w,
                                   const report::MemoryView& v) {
  using nlohmann::ordered_json;
  ordered_json j = document_head("stepsim.memory/1", cluster, w.name);
  j["layout"] = layout_json(w);
  j["parameters"] = ordered_json{{"total", v.parameters.total},
                                 {"active", v.parameters.active},
                                 {"per_gpu_by_stage", v.parameters.per_gpu_by_stage}};
  j["capacity_bytes"] = cluster.gpu.hbm_capacity.value();
  j["host_capacity_bytes"] = cluster.gpu.host_memory.value();
  j["stages"] = report::stages_json(v);
  j["host_offload_bytes"] = v.host.value();
  j["fits_in_memory"] = v.fits;
  return j;
}

/// The table on stdout.
void print_table(std::ostream& out, const ClusterSpec& cluster, const WorkloadSpec& w,
                 const report::MemoryView& v) {
  out << "stepsim memory: " << w.name << " on " << cluster.name << " (tp " << w.parallel.tp << ", pp "
      << w.parallel.pp << ", dp " << w.parallel.dp << ", zero " << w.parallel.zero_stage << ", micro-batch "
      << w.batch.micro_batch << ", " << w.micro_batches() << " micro-batches, recompute "
      << planner::recompute_name(w.training)
      << (w.training.offload_layers > 0
              ? ", " + std::to_string(w.training.offload_layers) + " layers per chunk offloaded"
              : std::string())
      << (w.training.fp8_params ? ", fp8 weights" : "") << ")\n";
  const auto total = static_cast<double>(v.parameters.total);
  const auto active = static_cast<double>(v.parameters.active);
  out << "  parameters: " << params_text(total) << " total"
      << (active < total ? ", " + params_text(active) + " active per token" : std::string()) << '\n'
      << "  GiB per GPU   weights  gradients  optimizer  activations     other      peak  capacity  "
         "in-flight  params/GPU\n";
  for (size_t p = 0; p < v.stages.size(); ++p) {
    const report::StageMemory& s = v.stages[p];
    const model::MemoryLedger& l = s.ledger;
    char stage[32];
    std::snprintf(stage, sizeof stage, "  stage %-5zu", p);
    char inflight[32];
    std::snprintf(inflight, sizeof inflight, "  %9d  ", s.in_flight);
    out << stage << cell(l.weights) << "  " << cell(l.gradients) << "  " << cell(l.optimizer) << "    "
        << cell(l.activations) << " " << cell(l.other()) << " " << cell(l.peak()) << " "
        << cell(cluster.gpu.hbm_capacity) << inflight << params_text(static_cast<double>(s.params_per_gpu))
        << (s.fits ? "" : "  DOES NOT FIT") << '\n';
  }
  if (v.host.value() > 0)
    out << "  host memory for offloaded activations: " << report::gib(v.host) << " per GPU"
        << (cluster.gpu.host_memory.value() > 0 ? " of " + report::gib(cluster.gpu.host_memory)
                                                : std::string())
        << (v.host_fits ? "" : "  DOES NOT FIT") << '\n';
  out << (v.fits ? "  fits in memory\n" : "  *** DOES NOT FIT IN MEMORY ***\n");
}

class MemoryCommand final : public Command {
public:
  explicit MemoryCommand(Options& o) {
    o.describe(R"(usage: stepsim memory --cluster FILE --workload FILE [options]

Prints the per-GPU memory ledger of each pipeline stage (no simulation): weights, gradients,
optimizer states, activations of the micro-batches in flight, other (ZeRO-3 gathered layers,
communication buffers, runtime overhead, allocator fragmentation), the peak and whether it fits.
Exit 0, or 3 with --fail-on-oom when a stage does not fit.)");
    o.required("--cluster", cluster_file_, "FILE", "cluster description (topologies/*.yaml)");
    o.required("--workload", workload_file_, "FILE", "training job (workloads/*.yaml)");
    o.values("--set", sets_, "PATH=VALUE", SET_HELP);
    o.value("--degrade", degrade_file_, "FILE", DEGRADE_HELP);
    o.flag("--fail-on-oom", fail_on_oom_, "exit with code 3 when a stage does not fit");
    o.flag("--json", json_,
           "print the ledger as JSON (schema stepsim.memory/1, docs/output.md) instead of the table");
    o.value("--out", out_dir_, "DIR", "also write DIR/memory.json");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::string cluster_file_, workload_file_, out_dir_, degrade_file_;
  std::vector<std::string> sets_;
  bool fail_on_oom_ = false, json_ = false;
};

} // namespace

std::unique_ptr<Command> memory_command(Options& options) {
  return std::make_unique<MemoryCommand>(options);
}

int MemoryCommand::run(std::ostream& out, std::ostream& err) {
  const JsonTargets targets{.to_stdout = json_, .out_dir = out_dir_, .file_name = "memory.json"};
  check_json_target(targets);
  const Job job = load_job(cluster_file_, workload_file_, overrides_from(sets_), degrade_file_);
  const ClusterSpec& cluster = job.cluster;
  const WorkloadSpec& w = job.workload;
  const report::MemoryView v = report::memory_view(cluster, w);
  emit_json(out, targets, memory_json(cluster, w, v));
  if (!json_)
    print_table(out, cluster, w, v);
  const bool fits = v.fits;
  if (!fits && fail_on_oom_) {
    err << "stepsim: a pipeline stage does not fit in " << report::gib(cluster.gpu.hbm_capacity)
        << (cluster.gpu.host_memory.value() > 0 ? " (or its offloaded activations in host memory)" : "")
        << '\n';
    return EXIT_OUT_OF_MEMORY;
  }
  return 0;
}

} // namespace stepsim::cli
