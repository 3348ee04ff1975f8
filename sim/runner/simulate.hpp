#pragma once
// One simulation, end to end: specs in, step DAG built, replayed on SimGrid, summarized. Used by
// `stepsim run` and by every command that simulates (sweeps run it in child processes, since
// SimGrid allows one simulation per process).

#include "config/spec.hpp"
#include "engine/replay.hpp"
#include "graph/step_builder.hpp"
#include "graph/steps.hpp"
#include "kernels/kernel_shape.hpp"
#include "kernels/kernel_table.hpp"
#include "report/summary.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace stepsim::runner {

struct SimulateOptions {
  CollectiveForm collective_form = CollectiveForm::AUTO;
  bool fold_dp = true; ///< simulate one DP replica (docs/engine.md)
  /// With fold_dp on a non-blocking fabric, run only the flows of large collectives that touch
  /// nodes hosting simulated ranks (docs/engine.md, "Symmetry sampling").
  bool sample_collectives = true;
  /// With fold_dp and sample_collectives: one rank per TP group where that is exact
  /// (graph::BuildOptions::fold_tp, docs/engine.md "Folding TP").
  bool fold_tp = true;
  /// With fold_dp: the class of each DP replica (graph::BuildOptions::replica_class); empty: the
  /// default folding.
  std::vector<int> replica_class = {};
  /// Consecutive steps simulated (docs/variability.md): with more than one, or with kernel noise
  /// (training.variability, gpu.kernel_cv), the summary gains the step-time distribution and its
  /// other figures are the first step's.
  int steps = 1;
  /// Called after each replayed task with (tasks done, tasks in all); none when empty.
  std::function<void(std::size_t, std::size_t)> progress = {};
};

struct Simulation {
  graph::StepProgram program;
  engine::ReplayResult result;
  report::Summary summary;
  double wall_s = 0; ///< host time spent building and replaying (not part of any output file)
};

/// The cluster's kernel-time table: `gpu.profile` read for `gpu`, or null when the cluster has
/// no profile. Throws ConfigError (unreadable or malformed profile, gpu.kind mismatch).
std::shared_ptr<const kernels::KernelTable> load_kernel_table(const ClusterSpec& cluster);

/// The compute-time model (docs/kernels.md, "From kernels to compute tasks"). With a table:
/// each compute task is decomposed into its kernels (kernels::block_kernels; the optimizer is
/// one Adam over the rank's parameters, 1/dp of them with ZeRO >= 1), each kernel's table time
/// plus the profile's launch overhead is summed, and the answer says which share of it was
/// measured, interpolated or modelled; cached per (block, phase), and per stage for the
/// optimizer. Without a table (null): the roofline over `cluster.gpu`, all of it `roofline`.
/// Precondition: config::check_layout() passed. Lookups throw ModelError.
graph::ComputeTimeFn compute_time_model(const ClusterSpec& cluster, const WorkloadSpec& workload,
                                        std::shared_ptr<const kernels::KernelTable> table);
/// As above with load_kernel_table(cluster).
graph::ComputeTimeFn compute_time_model(const ClusterSpec& cluster, const WorkloadSpec& workload);

/// Factor >= 1 on compute progress while its GPU communicates: `gpu.overlap_slowdown` when set,
/// else the table's profile's, else 1.
double overlap_slowdown(const ClusterSpec& cluster, const kernels::KernelTable* table);

/// Host time per participant of a tensor-list collective (docs/model.md, "ZeRO-3 fetch"):
/// `gpu.list_collective_per_rank`, at least one kernel launch (`gpu.launch_overhead` when set,
/// else the table's profile's `launch_overhead_s`, else 0), since each rank's slice is copied by a
/// kernel of its own. With the knob unset (0) a blocking ZeRO-3 still pays that floor.
Seconds list_collective_per_rank(const ClusterSpec& cluster, const kernels::KernelTable* table);

/// Every distinct kernel shape compute_time_model looks up for `workload` (all blocks and
/// passes, and the Adam of every pipeline stage), first-occurrence order.
/// Precondition: config::check_layout() passed.
std::vector<kernels::KernelShape> compute_kernel_shapes(const WorkloadSpec& workload);

/// Collectives of more ranks than this are symmetry-sampled on non-blocking fabrics
/// (docs/engine.md); below it every flow runs.
inline constexpr int SAMPLE_ABOVE_RANKS = 8;

/// A fabric on which flows of different nodes meet only at the nodes' own links: a fat tree with
/// no oversubscription at any tier, or a rail-optimised fabric whose leaf uplinks carry all their
/// NICs (its spine is a single crossbar). Symmetry sampling is exact only there.
bool non_blocking(const ClusterSpec& cluster);

/// The class of each DP replica of a job (graph::BuildOptions::replica_class) placed on the nodes
/// `jobs_nodes[job]` (its k-th node holding its ranks k x gpus_per_node and up) beside the other
/// jobs' nodes: replicas of one class see the same links. At each pipeline stage their node sits
/// under a leaf (a fat tree's leaf, a rail fabric's scalable unit) and pod in the same pattern
/// (which stages share a leaf or pod) and of the same load (how many nodes of each job it holds).
/// A replica block (the replicas sharing a node at each stage) holding a slow GPU or a degraded
/// NIC or leaf is a class of its own. Empty where the job's TP, CP or EP groups leave a node
/// (their traffic would load the fabric for every replica), on a graph fabric, or with expert
/// groups folded over the TP ranks.
std::vector<int> placement_classes(const ClusterSpec& cluster, const ParallelSpec& parallel,
                                   const std::vector<std::vector<int>>& jobs_nodes, size_t job);

/// What `simulate` replays: the step graph and the replay options (sampling, folding, the
/// workload's forced algorithms, the overlap slowdown). Precondition: config::check_layout() passed.
struct StepSetup {
  graph::StepProgram program;
  engine::ReplayOptions replay;
  /// The cluster the replay runs on where it differs from the given one: with one rank per TP
  /// group, a TP group holding a slow GPU at its slowest member's speed on every member
  /// (paced_tp_groups, docs/degraded.md "Folding"). Empty: the given cluster.
  std::optional<ClusterSpec> replayed_cluster;
};
StepSetup prepare_step(const ClusterSpec& cluster, const WorkloadSpec& workload,
                       const SimulateOptions& options = {});

/// The program's units (program.replica_unit consecutive DP indices: a replica with its CP and
/// EP ranks): {how many are simulated, how many the job holds}.
std::pair<int, int> sampled_units(const graph::StepProgram& program);

/// The cluster with every TP group that holds a slow GPU (degraded.gpus) slowed on all its
/// members to its slowest member's speed: every TP collective waits for that member, so the
/// group keeps its pace. Ranks fill the nodes that are up in order (topology::rank_gpus), TP
/// groups are `tp` consecutive ranks. Returns nullopt when no group holds a slow GPU.
std::optional<ClusterSpec> paced_tp_groups(const ClusterSpec& cluster, int tp, int ranks);

/// replay.run(), with a forced algorithm that cannot run its group's operation reported as a
/// ConfigError naming the workload key `collectives.<group>`.
engine::ReplayResult run_replay(engine::Replay& replay);

/// The per-kernel noise's CV in effect: training.variability.kernel_cv when set, else
/// gpu.kernel_cv.
double kernel_cv(const ClusterSpec& cluster, const WorkloadSpec& workload);

/// Builds, replays and summarizes one step (options.steps of them, docs/variability.md). With
/// kernel noise every GPU runs its own draws, so no DP replica, CP or EP rank is folded. Precondition:
/// config::check_layout() passed. At most once per process (SimGrid). Throws SimulationError / ModelError.
Simulation simulate(const ClusterSpec& cluster, const WorkloadSpec& workload,
                    const SimulateOptions& options = {});

} // namespace stepsim::runner
