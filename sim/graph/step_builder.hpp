#pragma once
// Compiles a workload into the DAG of one training step: per rank, per layer, per micro-batch
// forward and backward compute (attention and MLP blocks), TP collectives between them, PP
// activation/gradient sends between neighbouring stages, DP gradient buckets that start as soon
// as backward has produced their gradients, and the optimizer step.

#include "config/spec.hpp"
#include "graph/compute_cost.hpp"
#include "graph/step_graph.hpp"

#include <algorithm>
#include <vector>

namespace stepsim::graph {

/// Megatron rank order: tp fastest-varying, then cp, then dp, then pp (docs/moe.md). `dp` counts
/// the GPUs that hold the same weights: data-parallel x context-parallel ranks (workload dp * cp,
/// the group dense gradients are reduced over); `d` in rank(d, p, t) is cp_index + cp * dp_index.
/// Expert groups: with etp = tp, expert parallelism subdivides the data-parallel index (ep_index =
/// dp_index % ep; all CP ranks hold the same experts). With etp < tp they fold over the GPUs of a
/// stage (MoE parallel folding): a GPU's index q = t + tp * d within its stage splits as etp
/// fastest, then ep, then the expert-data-parallel index.
struct RankGrid {
  int tp = 1;
  int pp = 1;
  int dp = 1; ///< dp * cp of the workload
  int cp = 1;
  int ep = 1;
  int etp = 1; ///< expert tensor parallelism (tp unless the expert groups fold, ParallelSpec::etp)
  [[nodiscard]] Rank rank(int d, int p, int t) const { return t + tp * (d + dp * p); }
  [[nodiscard]] int tp_of(Rank r) const { return r % tp; }
  /// The workload's data-parallel index (without the CP index).
  [[nodiscard]] int dp_of(Rank r) const { return (r / tp) % dp / cp; }
  [[nodiscard]] int cp_of(Rank r) const { return (r / tp) % cp; }
  [[nodiscard]] int pp_of(Rank r) const { return r / (tp * dp); }
  [[nodiscard]] int size() const { return tp * pp * dp; }
  [[nodiscard]] bool folded() const { return etp < tp; }
  /// The GPU's index within its pipeline stage.
  [[nodiscard]] int stage_index(Rank r) const { return r % (tp * dp); }
  [[nodiscard]] int ep_of(Rank r) const { return folded() ? stage_index(r) / etp % ep : dp_of(r) % ep; }
  /// GPUs holding the same experts: dp / ep, or tp * dp / (etp * ep) folded.
  [[nodiscard]] int edp() const { return folded() ? tp * dp / (etp * ep) : dp / ep; }
  /// Rank r's EP group (its ep members in EP-index order).
  [[nodiscard]] std::vector<Rank> ep_group(Rank r) const {
    std::vector<Rank> out;
    const int p = pp_of(r);
    if (folded()) {
      const int q = stage_index(r);
      const int first = q % etp + etp * ep * (q / (etp * ep));
      for (int e = 0; e < ep; ++e)
        out.push_back(p * tp * dp + first + etp * e);
    } else {
      const int j = dp_of(r) / ep;
      for (int e = 0; e < ep; ++e)
        out.push_back(rank(cp_of(r) + cp * (e + ep * j), p, tp_of(r)));
    }
    return out;
  }
  /// Rank r's expert-data-parallel group: the GPUs of its stage holding the same experts.
  [[nodiscard]] std::vector<Rank> edp_group(Rank r) const {
    std::vector<Rank> out;
    const int p = pp_of(r);
    if (folded()) {
      const int q = stage_index(r);
      const int first = q % (etp * ep);
      for (int j = 0; j < edp(); ++j)
        out.push_back(p * tp * dp + first + etp * ep * j);
    } else {
      const int e = ep_of(r);
      for (int j = 0; j < dp / cp / ep; ++j)
        for (int c = 0; c < cp; ++c)
          out.push_back(rank(c + cp * (e + ep * j), p, tp_of(r)));
    }
    return out;
  }
};

struct BuildOptions {
  /// Simulate one DP replica (dp index 0) and launch the other replicas' DP flows in lockstep
  /// with it. Exact when replicas see a symmetric network; see docs/engine.md.
  bool fold_dp = true;
  /// With fold_dp and ep > 1: simulate one rank of each EP group instead of the whole group. EP
  /// ranks run in lockstep (the all-to-alls are barriers); the simulated rank's routed experts
  /// carry the most loaded EP rank's assignments, so every MoE layer keeps its pace. Exact for
  /// balanced routing on a fabric where every node sees the same traffic (docs/moe.md).
  bool fold_ep = false;
  /// With fold_dp and a dense model (no EP, no CP): simulate one rank of each TP group (every
  /// rank of a replica with a TP group only partly among `distinct_ranks`). TP ranks run in lockstep (their
  /// collectives are barriers) and do the same work, and inside one node each GPU meets the others at the
  /// switch through its own ports and leaves the node through its own NIC, so their other traffic never meets
  /// the simulated rank's: the TP collectives keep all members, their flows sampled to the simulated GPU's
  /// (the replay's ReplayOptions::sample_tp); the DP and pipeline traffic of the other TP ranks is left out.
  /// Set only where that holds (runner::prepare_step, docs/engine.md "Folding TP").
  bool fold_tp = false;
  /// The cluster's GPUs per node (0: unknown). With fold_dp and a dense model, context
  /// parallelism is folded too where every hop of the CP ring is alike (each CP rank's TP group a
  /// node of its own, or the whole CP group inside one node): CP index 0 alone is simulated, and
  /// the other CP ranks' ring and pipeline sends copy its own (docs/engine.md).
  int gpus_per_node = 0;
  ComputeTimeFn compute_time; ///< required
  /// Fixed host-side cost of each pipeline pass, added to its first compute task on every rank
  /// (`gpu.pass_overhead`, docs/calibration.md).
  Seconds pass_overhead = Seconds(0.0);
  /// Host time per participant of a tensor-list collective (`gpu.list_collective_per_rank`):
  /// ZeRO-3's gathers and reduce-scatters under training.zero3_fetch: blocking.
  Seconds list_collective_per_rank = Seconds(0.0);
  /// GPU <-> host bandwidth per direction (`gpu.host_bandwidth`): activation offloading's rate.
  BytesPerSec host_bandwidth = BytesPerSec(0.0);
  /// Ranks whose GPU or network differs from the others' (a degraded cluster, docs/degraded.md).
  /// With fold_dp, the folded units (DP replicas with their CP and EP ranks) that hold one are
  /// simulated besides one representative of the rest; CP and EP are then not folded. Empty: all
  /// ranks alike.
  std::vector<Rank> distinct_ranks = {};
  /// Per distinct rank (empty, or distinct_ranks.size() entries): what sets it apart, as an index
  /// (a slow GPU's speed). Units whose distinct ranks sit at the same places with the same kinds
  /// are alike: the first of them is simulated and stands for the others. Given only where nothing
  /// else tells the units apart (runner::prepare_step: slower GPUs on a symmetric network).
  /// Empty: every unit holding a distinct rank is simulated.
  std::vector<int> distinct_kind = {};
  /// With fold_dp: the class of each DP replica (grid().dp entries, by d), replicas of one class
  /// seeing the same links (`stepsim jobs`, docs/jobs.md). The first unit (replicas folded
  /// together, as above) of each class is simulated and stands for the others of its class, whose
  /// pipeline sends copy its own: they load the fabric, nothing waits for them. A unit's replicas
  /// share one class; CP and EP are then not folded, and `distinct_ranks` is not read (give a
  /// degraded rank's unit a class of its own). Empty: the folding above.
  std::vector<int> replica_class = {};
  /// With fold_dp and no replica_class: simulate the first `sampled_units` units (DP replicas with
  /// their CP and EP ranks, as `distinct_ranks` folds them) whatever their ranks, and fold the
  /// rest; CP and EP are then not folded. Kernel noise makes every unit differ: the units
  /// simulated are a sample of them (docs/variability.md, "Sampled replicas"). 0: not used.
  int sampled_units = 0;
};

/// The DAG plus what downstream needs to interpret it.
struct StepProgram {
  StepGraph graph;
  RankGrid grid;
  std::vector<Rank> simulated_ranks; ///< ranks whose streams are simulated, ascending
  int micro_batches = 0;             ///< per pipeline per step
  /// Consecutive DP indices of `grid` folded as one unit (a replica with its CP and EP ranks);
  /// grid.dp when nothing is folded.
  int replica_unit = 1;
};

/// Whether simulated rank r stands for its whole TP group (BuildOptions::fold_tp): the first
/// rank of its group, the next one not simulated.
inline bool stands_for_tp_group(const StepProgram& program, Rank r) {
  return program.grid.tp > 1 && program.grid.tp_of(r) == 0 &&
         !std::binary_search(program.simulated_ranks.begin(), program.simulated_ranks.end(), r + 1);
}

/// Builds the finalized step DAG. Precondition: config::check_layout() passed.
/// Throws ModelError if options are incomplete.
StepProgram build_step(const WorkloadSpec& w, const BuildOptions& options);

} // namespace stepsim::graph
