// `stepsim memory`: the static per-GPU memory ledger of a layout, per pipeline stage, without
// simulating (fast enough to call inside a search loop).

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "config/config.hpp"
#include "model/memory.hpp"
#include "planner/planner.hpp"
#include "report/memory_timeline.hpp"

#include <cstdio>
#include <string>

namespace stepsim::cli {

namespace {

std::string cell(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%9.2f", b.value() / (1024.0 * 1024.0 * 1024.0));
  return buf;
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
    o.flag("--fail-on-oom", fail_on_oom_, "exit with code 3 when a stage does not fit");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::string cluster_file_, workload_file_;
  std::vector<std::string> sets_;
  bool fail_on_oom_ = false;
};

} // namespace

std::unique_ptr<Command> memory_command(Options& options) {
  return std::make_unique<MemoryCommand>(options);
}

int MemoryCommand::run(std::ostream& out, std::ostream& err) {
  const Job job = load_job(cluster_file_, workload_file_, overrides_from(sets_));
  const ClusterSpec& cluster = job.cluster;
  const WorkloadSpec& w = job.workload;

  out << "stepsim memory: " << w.name << " on " << cluster.name << " (tp " << w.parallel.tp << ", pp "
      << w.parallel.pp << ", dp " << w.parallel.dp << ", zero " << w.parallel.zero_stage << ", micro-batch "
      << w.batch.micro_batch << ", " << w.micro_batches() << " micro-batches, recompute "
      << planner::recompute_name(w.training)
      << (w.training.offload_layers > 0
              ? ", " + std::to_string(w.training.offload_layers) + " layers per chunk offloaded"
              : std::string())
      << (w.training.fp8_params ? ", fp8 weights" : "") << ")\n"
      << "  GiB per GPU   weights  gradients  optimizer  activations     other      peak  capacity  "
         "in-flight\n";
  bool fits = true;
  Bytes host(0.0); // offloaded activations, the most any stage holds
  for (int p = 0; p < w.parallel.pp; ++p) {
    const model::MemoryLedger l = model::static_memory(w, cluster.gpu, p);
    host = std::max(host, l.host);
    const bool ok = l.peak() <= cluster.gpu.hbm_capacity;
    fits = fits && ok;
    char stage[32];
    std::snprintf(stage, sizeof stage, "  stage %-5d", p);
    out << stage << cell(l.weights) << "  " << cell(l.gradients) << "  " << cell(l.optimizer) << "    "
        << cell(l.activations) << " " << cell(l.other()) << " " << cell(l.peak()) << " "
        << cell(cluster.gpu.hbm_capacity) << "  " << model::in_flight_micro_batches(w, p)
        << (ok ? "" : "  DOES NOT FIT") << '\n';
  }
  if (host.value() > 0) {
    const bool host_fits = cluster.gpu.host_memory.value() <= 0 || host <= cluster.gpu.host_memory;
    out << "  host memory for offloaded activations: " << report::gib(host) << " per GPU"
        << (cluster.gpu.host_memory.value() > 0 ? " of " + report::gib(cluster.gpu.host_memory)
                                                : std::string())
        << (host_fits ? "" : "  DOES NOT FIT") << '\n';
    fits = fits && host_fits;
  }
  out << (fits ? "  fits in memory\n" : "  *** DOES NOT FIT IN MEMORY ***\n");
  if (!fits && fail_on_oom_) {
    err << "stepsim: a pipeline stage does not fit in " << report::gib(cluster.gpu.hbm_capacity)
        << (cluster.gpu.host_memory.value() > 0 ? " (or its offloaded activations in host memory)" : "")
        << '\n';
    return EXIT_OUT_OF_MEMORY;
  }
  return 0;
}

} // namespace stepsim::cli
