#pragma once
// `stepsim plan`: enumerate every valid parallel layout of a workload on a cluster, drop those the
// static memory ledger says do not fit, rank the rest with a fast analytical step-time estimate,
// and simulate the best few (each in its own process). Formulas: docs/planner.md.

#include "config/spec.hpp"
#include "core/units.hpp"
#include "graph/step_builder.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace stepsim::planner {

/// What enumeration varies. Empty lists mean the defaults noted.
struct SearchSpace {
  std::vector<int64_t> micro_batches = {1, 2, 4, 8}; ///< sequences per micro-batch
  int max_vp = 8;                                    ///< largest interleaving degree tried
  int max_tp = 0; ///< largest TP degree; 0 = 2 x gpus_per_node (TP across nodes is allowed, and slow)
  bool vary_zero = true;
  bool vary_recompute = true;
  /// A layout without recomputation that does not fit is tried again with activation offloading
  /// (training.offload_layers): the fewest layers per model chunk that make it fit, when the
  /// cluster gives gpu.host_bandwidth.
  bool try_offload = true;
  /// A layout with full recomputation of every layer that fits is tried with fewer: the fewest
  /// recomputed layers per model chunk (training.recompute_layers) that still fit, which is faster.
  bool fewest_recomputed = true;
  bool vary_sp = true;
  bool vary_schedule = true;
  bool vary_ep = true; ///< MoE: every ep dividing dp and the experts (else the workload's)
  /// ZeRO-3: sharding over all of DP and hybrid sharding over the replicas one node holds
  /// (parallel.dp_shard), each with its gathers released or kept from the forward to the backward
  /// (training.reshard_after_forward) where modelled; else the workload's.
  bool vary_sharding = true;
  /// Context parallelism: every cp up to max_cp dividing the GPUs when the workload already uses
  /// cp or its sequence has at least cp_from_seq_len tokens (else the workload's cp).
  bool vary_cp = true;
  int max_cp = 16;
  int64_t cp_from_seq_len = 16384;
  /// Share of each GPU's memory a layout must leave free, in [0, 1) (`plan --headroom`): a layout
  /// fits when its static peak is at most (1 - headroom) x the GPU's memory.
  double headroom = 0;
};

/// The GPU memory a layout may use under `space.headroom`.
Bytes memory_budget(const ClusterSpec& cluster, const SearchSpace& space);

/// Every layout of `base` for `cluster` (tp, pp, dp, vp, micro-batch, ZeRO stage and its sharding,
/// recomputation, SP, schedule) that config::check_layout accepts, in a deterministic order; dp is derived
/// from the cluster's GPU count; with experts, also ep (SearchSpace::vary_ep), and for long
/// sequences cp (SearchSpace::vary_cp). Model, global batch and other training keys come from
/// `base`.
std::vector<WorkloadSpec> enumerate_layouts(const ClusterSpec& cluster, const WorkloadSpec& base,
                                            const SearchSpace& space = {});

/// True when every pipeline stage's static ledger (model::static_memory) fits in HBM, and its
/// offloaded activations in the host memory per GPU (gpu.host_memory, when given).
bool fits_in_memory(const ClusterSpec& cluster, const WorkloadSpec& w);

/// True when no stage's offloaded activations exceed gpu.host_memory (or it is not given).
bool fits_host_memory(const ClusterSpec& cluster, const WorkloadSpec& w);

/// With SearchSpace::try_offload, a layout without recomputation that does not fit takes the
/// fewest offloaded layers per model chunk (training.offload_layers) that make it fit: `w` and
/// `peak` are updated and true returned; false when none does or offloading does not apply.
bool offload_to_fit(const ClusterSpec& cluster, WorkloadSpec& w, const SearchSpace& space, Bytes& peak);

/// With SearchSpace::fewest_recomputed, a fitting layout that fully recomputes every layer takes
/// the fewest recomputed layers per model chunk (training.recompute_layers) that still fit: `w`
/// and `peak` are updated when fewer than all do.
void recompute_fewest(const ClusterSpec& cluster, WorkloadSpec& w, const SearchSpace& space, Bytes& peak);

/// Highest static-ledger peak over the stages.
Bytes peak_memory(const ClusterSpec& cluster, const WorkloadSpec& w);

/// The analytical estimate of one step and its parts (docs/planner.md).
struct Estimate {
  Seconds step;
  Seconds compute;    ///< m x per-micro-batch compute of the slowest stage
  Seconds bubble;     ///< the schedule's pipeline bubble
  Seconds tp_comm;    ///< TP collectives on the critical path (blocking)
  Seconds ep_comm;    ///< MoE: expert all-to-alls on the critical path (blocking)
  Seconds pp_comm;    ///< pipeline sends on the fill/drain path
  Seconds dp_exposed; ///< DP / ZeRO communication not hidden behind backward
  Seconds optimizer;
};

/// Estimates one step of `w` (check_layout passed) on `cluster` using `compute_time` (the runner's
/// compute-time model) for every compute block and closed forms for communication.
Estimate estimate_step(const ClusterSpec& cluster, const WorkloadSpec& w,
                       const graph::ComputeTimeFn& compute_time);

/// "tp8 pp8 dp16 vp1 mb1 zero0 full sp 1f1b"
std::string describe(const WorkloadSpec& w);
std::string schedule_name(Schedule s);
/// "none", "full", "selective" (the attention core), or "selective[layernorm,moe_act]" for other
/// recompute_modules.
std::string recompute_name(const TrainingSpec& t);

struct Candidate {
  WorkloadSpec workload;
  Estimate estimate;
  Bytes peak_memory;  ///< static ledger, worst stage
  bool given = false; ///< the layout of the workload file itself
};

/// Result of simulating one candidate (in a child process).
struct Simulated {
  bool ok = false;
  std::string error;
  double step_s = 0; ///< with several steps (SimulateAllOptions::steps), their mean
  double bubble_fraction = 0;
  double exposed_tp_s = 0, exposed_pp_s = 0, exposed_dp_s = 0;
  double mfu = 0;
  double peak_bytes = 0; ///< memory timeline peak, worst GPU
  bool fits = true;
  /// Non-zero when the figures are extrapolated (extrapolation_points): the micro-batches per
  /// pipeline of the two steps simulated.
  int64_t from_micro_batches[2] = {0, 0};
};

/// The two micro-batch counts per pipeline, m1 = 2 pp and m2 = 3 pp, whose simulated steps give
/// `w`'s by extrapolation (docs/planner.md, "Extrapolated in the micro-batches"): after the
/// pipeline fills, the 1F1B, interleaved and ZB-H1 schedules repeat one period per micro-batch,
/// so the step and its exposed parts are affine in the micro-batch count. Empty when `w` is
/// simulated whole: fewer than 8 pp micro-batches (too few to save), GPipe (its memory grows with
/// them), ZB-H2 (not yet periodic at 2 pp) or DualPipe schedules, several steps or kernel noise
/// (`steps`, the noise's CV).
std::optional<std::array<int64_t, 2>> extrapolation_points(const WorkloadSpec& w, int steps,
                                                           double kernel_cv);

/// `w` with `micro_batches` per pipeline (its global batch scaled; the rest as given).
WorkloadSpec with_micro_batches(WorkloadSpec w, int64_t micro_batches);

/// The figures of `m` micro-batches from the steps of `at[0]` and `at[1]` (a and b): each time
/// (step, exposed parts, bubble time) on the line through the two; MFU scaled by the work per time;
/// memory as b's (the schedules extrapolated hold at most pp micro-batches in flight).
Simulated extrapolate(const Simulated& a, const Simulated& b, const std::array<int64_t, 2>& at, int64_t m);

/// Which estimated layouts are simulated (docs/planner.md, "Simulate the leaders").
enum class Simulate {
  LEADERS, ///< the `top` best estimates and any within `margin` of the best estimate
  ALL,     ///< every fitting layout (to check what the leaders leave out; slow)
};

struct PlanOptions {
  int top = 3; ///< leaders: the K best estimates are simulated
  /// Leaders: also every layout whose estimate is at most (1 + margin) x the best estimate, >= 0.
  double margin = 0;
  Simulate which = Simulate::LEADERS;
  bool simulate = true;
  bool include_given = true; ///< also simulate the workload file's own layout when it fits (reference row)
  int jobs = 1;              ///< simulations at once (child processes)
  /// Consecutive steps each candidate is simulated for (`plan --steps`, docs/variability.md): with
  /// kernel noise its simulated step is the mean of that many.
  int steps = 1;
  /// Simulate long steps at two shorter micro-batch counts and extrapolate (`plan --exact` turns
  /// it off; docs/planner.md).
  bool extrapolate = true;
  SearchSpace space;
  /// Called with (simulated, to simulate) as each simulation ends and while they run.
  std::function<void(std::size_t, std::size_t)> progress = {};
};

struct PlanResult {
  size_t enumerated = 0;
  size_t fit = 0; ///< layouts that fit (with offloading where it takes that)
  /// Fitting layouts by estimate, best first (all of them; the workload's own layout, when it
  /// recomputes every layer, also beside its variant recomputing fewer).
  std::vector<Candidate> ranked;
  std::vector<Candidate> simulated; ///< the ones simulated: the leaders (+ the given layout)
  size_t leaders = 0;               ///< the best estimates simulated: a prefix of `ranked`
  size_t within_margin = 0;         ///< of them, beyond the top K, those within the margin
  std::vector<Simulated> outcomes;  ///< parallel to `simulated`
  double enumerate_s = 0, estimate_s = 0, simulate_s = 0;
};

/// How many of `ranked` (best estimate first) `options` simulates: all of them, or the `top` best
/// and then every one whose estimate is within `margin` of the best.
size_t leader_count(const std::vector<Candidate>& ranked, const PlanOptions& options);

/// Runs the planner. `given` is the workload file's layout (check_layout passed) and the base
/// of enumeration. Simulations fork: call from a process that has not started SimGrid.
PlanResult plan(const ClusterSpec& cluster, const WorkloadSpec& given, const PlanOptions& options);

struct SimulateAllOptions {
  int jobs = 1;  ///< simulations at once
  int steps = 1; ///< consecutive steps per simulation (runner::SimulateOptions::steps)
  /// Layouts extrapolation_points accepts are simulated at two shorter steps and extrapolated.
  bool extrapolate = false;
  /// Called with (ended, specs.size()) as each child ends and while they run; may be empty.
  std::function<void(std::size_t, std::size_t)> progress = {};
};

/// Simulates each of `specs` in its own child process (runner::simulate), `options.jobs` at once,
/// and returns their summary figures in order. A failed child is reported, not thrown; Error is
/// thrown only when a process cannot be started.
std::vector<Simulated> simulate_all(const ClusterSpec& cluster, const std::vector<WorkloadSpec>& specs,
                                    const SimulateAllOptions& options);

/// As above, one step each.
std::vector<Simulated> simulate_all(const ClusterSpec& cluster, const std::vector<WorkloadSpec>& specs,
                                    int jobs,
                                    const std::function<void(std::size_t, std::size_t)>& progress = {});

} // namespace stepsim::planner
