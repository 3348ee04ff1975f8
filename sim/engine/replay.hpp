#pragma once
// Replays a StepProgram on a SimGrid platform built from the cluster. Each SimGrid activity is
// created just in time, when all its inputs are done (never a pre-built SimGrid DAG). Compute
// tasks share their GPU host's speed without a SimGrid activity (a kernel timer at the earliest
// end); collectives expand into ordered flows between GPU hosts.
// Listeners (subscribe) see each task as it finishes; report/ and trace/ read the per-task
// intervals of the ReplayResult once the run is over (docs/architecture.md, "Events").
//
// One simulation per process (SimGrid keeps global state): construct one Replay, run it once.

#include "collectives/collective.hpp"
#include "config/spec.hpp"
#include "core/error.hpp"
#include "graph/step_builder.hpp"

#include <functional>
#include <string>
#include <vector>

namespace stepsim::engine {

struct ReplayOptions {
  /// AUTO: coarse (one flow per ring edge) for every ring of more than two ranks, fine otherwise
  /// (collectives::resolve_form).
  CollectiveForm collective_form = CollectiveForm::AUTO;
  /// Algorithm per communication group (AUTO: the collectives cost model chooses per call).
  CollectivesSpec algorithms{};
  /// Factor >= 1: while any flow from or to a GPU is in flight, compute on that GPU progresses
  /// at 1/overlap_slowdown of its speed (NCCL kernels hold SMs and HBM bandwidth). 1 = off.
  double overlap_slowdown = 1.0;
  /// Symmetry sampling of large collectives (docs/engine.md): in a collective of more than
  /// `sample_above_ranks` ranks whose flows are independent of each other (coarse rings,
  /// pairwise all-to-all), run only the flows that start or end on a node hosting a simulated
  /// rank; the others are copies of them on nodes nobody observes. Exact when every node sees
  /// the same traffic (non-blocking fabric, folded DP replicas). 0 = off.
  int sample_above_ranks = 0;
  /// Sample every EP-group collective whatever its size: set when the step simulates one rank
  /// per EP group (graph::BuildOptions::fold_ep), whose all-to-alls are then observed from that
  /// rank's node only.
  bool sample_ep = false;
  /// Sample every TP-group collective: set when the step simulates one rank per TP group
  /// (graph::BuildOptions::fold_tp), each group inside one node, whose collectives are then
  /// observed from that rank's GPU: a program of independent flows inside one node keeps the
  /// simulated GPUs' flows only, as an expert all-to-all does (docs/engine.md, "Folding TP").
  bool sample_tp = false;
  /// With sample_tp: keep only the flows the simulated GPU sends. Set where nothing but the TP
  /// group's own collectives crosses a GPU's NVLink ports (the group fills the node): each member
  /// sends what it receives, at the same rate, so the received copies end when the sent ones do.
  bool sample_tp_sends = false;
  /// Expert all-to-alls (EP group) with a deduplicating dispatcher: cross-node pieces carry
  /// collectives::remote_copy_share of their routed copies (parallel.ep_dispatch). experts 0: off.
  collectives::NodeDeduplication ep_dedup{};
  /// Per task id: the index of the job it belongs to, when one replay runs several jobs
  /// (`stepsim jobs`). Non-empty: the replay counts the bytes each job's flows carry over every
  /// link (ReplayResult::link_loads). Empty: no counting.
  std::vector<uint32_t> task_job{};
  /// Leave the fat-tree links that can never limit a flow out of the flow solver
  /// (topology::PlatformOptions); ignored, every link kept, when link loads are counted.
  bool omit_unbinding_links = true;
};

/// The bytes the flows of each job carried over one link (ReplayOptions::task_job).
struct LinkLoad {
  std::string link;          ///< the platform's link name
  std::vector<double> bytes; ///< per job index
};

/// A task that finished: its id in the graph and its simulated interval.
struct TaskEvent {
  graph::TaskId id = 0;
  Seconds start;
  Seconds end;
};

/// A group's forced algorithm (ReplayOptions::algorithms) cannot run one of the group's
/// operations over its ranks: found only when the collective starts. The caller knows where the
/// choice came from and may say so (runner::simulate names the workload key).
class AlgorithmNotApplicable : public ModelError {
public:
  AlgorithmNotApplicable(graph::CommGroup group, collectives::Algorithm algorithm, CollectiveOp op,
                         size_t ranks);
  graph::CommGroup group() const { return group_; }
  collectives::Algorithm algorithm() const { return algorithm_; }
  CollectiveOp op() const { return op_; }
  size_t ranks() const { return ranks_; }

private:
  graph::CommGroup group_;
  collectives::Algorithm algorithm_;
  CollectiveOp op_;
  size_t ranks_;
};

struct ReplayResult {
  std::vector<Seconds> start;                    ///< per task id
  std::vector<Seconds> end;                      ///< per task id
  Seconds step_time;                             ///< latest end
  std::vector<collectives::Algorithm> algorithm; ///< per task: the algorithm a collective ran (AUTO resolved)
  uint64_t flows = 0;                            ///< point-to-point flows simulated
  uint64_t activities = 0;                       ///< SimGrid activities created
  /// With ReplayOptions::task_job: every link some flow crossed, by name.
  std::vector<LinkLoad> link_loads;
};

class Replay {
public:
  Replay(const graph::StepProgram& program, const ClusterSpec& cluster, ReplayOptions options = {});

  /// Called once per finished task, in completion order.
  void subscribe(std::function<void(const TaskEvent&)> listener);

  /// Runs the simulation. Throws SimulationError if any task never ran or the platform cannot
  /// hold the program (a rank beyond the cluster's GPUs).
  ReplayResult run();

private:
  const graph::StepProgram& program_;
  const ClusterSpec cluster_; ///< a copy: callers often pass a temporary
  ReplayOptions options_;
  std::vector<std::function<void(const TaskEvent&)>> listeners_;
};

} // namespace stepsim::engine
