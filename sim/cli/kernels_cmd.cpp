// `stepsim kernels`: the kernel shapes a workload runs, as a shape list for the CUDA
// microbenchmark suite (docs/kernels.md, "Shape-list format").

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "kernels/profile.hpp"
#include "kernels/workload_kernels.hpp"
#include "runner/simulate.hpp"

#include <set>
#include <string>
#include <vector>

namespace stepsim::cli {

namespace {

class KernelsCommand final : public Command {
public:
  explicit KernelsCommand(Options& o) {
    o.describe(R"(usage: stepsim kernels --workload FILE [options]

Prints the kernel shapes one GPU of the workload runs, in the shape-list format the kernel
microbenchmark suite reads (kernels_profiles/run_suite.sh): the per-layer kernels of
workload_kernels, then any further shape the compute-time model looks up (residual adds,
sequence-parallel norms, the optimizer of every pipeline stage).)");
    o.required("--workload", workload_file_, "FILE", "training job (workloads/*.yaml)");
    o.value("--cluster", cluster_file_, "FILE",
            "cluster description; derives parallel.dp when the workload omits it (it sets the "
            "ZeRO-sharded optimizer size)");
    o.values("--set", sets_, "PATH=VALUE", "override a key, as for `stepsim run`");
    o.value("--out", out_file_, "FILE", "write the list to FILE instead of stdout");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::string workload_file_, cluster_file_, out_file_;
  std::vector<std::string> sets_;
};

} // namespace

std::unique_ptr<Command> kernels_command(Options& options) {
  return std::make_unique<KernelsCommand>(options);
}

int KernelsCommand::run(std::ostream& out, std::ostream& /*err*/) {
  const std::string& workload_file = workload_file_;
  const std::string& cluster_file = cluster_file_;
  const std::string& out_file = out_file_;
  const std::vector<config::Override> overrides = overrides_from(sets_);
  if (cluster_file.empty())
    for (const config::Override& o : overrides)
      if (o.path.starts_with("cluster."))
        throw ConfigError("--set " + o.path + "=" + o.value + ": a cluster key needs --cluster FILE");

  WorkloadSpec workload = config::load_workload(workload_file, overrides);
  std::vector<std::string> comments = {"workload: " + workload.name};
  if (!cluster_file.empty()) {
    const ClusterSpec cluster = config::load_cluster(cluster_file, overrides);
    workload = config::check_layout(cluster, workload).workload;
    comments.push_back("cluster: " + cluster.name + " (gpu " + cluster.gpu.kind + ")");
  }
  comments.push_back(
      "layout: tp " + std::to_string(workload.parallel.tp) + ", pp " + std::to_string(workload.parallel.pp) +
      ", dp " + (workload.parallel.dp > 0 ? std::to_string(workload.parallel.dp) : std::string("unknown")) +
      ", micro_batch " + std::to_string(workload.batch.micro_batch) + ", zero " +
      std::to_string(workload.parallel.zero_stage));

  std::vector<kernels::KernelShape> shapes = kernels::workload_kernels(workload);
  std::set<kernels::KernelShape> seen(shapes.begin(), shapes.end());
  for (const kernels::KernelShape& s : runner::compute_kernel_shapes(workload))
    if (seen.insert(s).second)
      shapes.push_back(s);

  if (out_file.empty()) {
    kernels::write_shape_list(out, shapes, comments);
  } else {
    write_file_atomically(out_file, [&](std::ostream& o) { kernels::write_shape_list(o, shapes, comments); });
  }
  return 0;
}

} // namespace stepsim::cli
