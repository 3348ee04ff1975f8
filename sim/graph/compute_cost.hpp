#pragma once
// What a compute task asks of the compute-time model, and the query of each dense block as one
// GPU of a workload sees it (its FLOPs and bytes from model/block_cost.hpp). The step builder and
// the planner's estimate both build their queries here.

#include "config/spec.hpp"
#include "graph/step_graph.hpp"
#include "model/block_cost.hpp"

#include <functional>
#include <utility>

namespace stepsim::graph {

/// What a compute task does, for the compute-time model.
struct ComputeQuery {
  Block block = Block::NONE;
  Phase phase = Phase::FORWARD;
  int stage = 0;
  Flops flops;
  Bytes bytes;           ///< HBM traffic estimate
  bool windowed = false; ///< ATTENTION of a layer with a sliding window (ModelSpec::windowed_layer)
};

/// A compute task's duration and where it came from. Converts implicitly from a bare Seconds
/// (then all of it counts as `roofline`), so a function returning Seconds is a ComputeTimeFn.
struct ComputeCost {
  ComputeCost() = default;
  ComputeCost(Seconds t) : time(t), sources{.roofline = 1.0} {} // NOLINT(google-explicit-constructor)
  ComputeCost(Seconds t, TimeSources s) : time(t), sources(s) {}
  Seconds time;
  TimeSources sources; ///< shares of `time`, summing to 1
  /// A backward block's input-linear GEMMs within `time` (kernels::CallPart): data gradient and
  /// weight gradient. Zero when the model does not tell them apart (the roofline), and the
  /// builder takes the GEMMs' share of the block's FLOPs.
  Seconds input_dgrad{0.0};
  Seconds input_wgrad{0.0};
  /// The GEMM kernels' share of `time` (the profile's; zero under the roofline): what a forward
  /// block's pipelined TP collectives run beside (parallel.tp_comm_overlap).
  Seconds gemm{0.0};
};

/// Maps a compute task to its duration (runner::compute_time_model: kernel profiles, or the
/// roofline without one).
using ComputeTimeFn = std::function<ComputeCost(const ComputeQuery&)>;

/// The work of dense block ATTENTION, MLP, LOGITS or ROUTER on one GPU of `w` (model::*_work).
/// Throws ModelError for another block.
model::BlockWork block_work(const WorkloadSpec& w, Block block, bool windowed = false);

/// The query of one such block in `phase`: BACKWARD costs the whole backward, any other phase the
/// forward (a recomputation repeats it). Throws ModelError for another block.
ComputeQuery block_query(const WorkloadSpec& w, Block block, Phase phase, int stage, bool windowed = false);

/// The optimizer step's query on one GPU of `stage` (model::optimizer_work).
ComputeQuery optimizer_query(const WorkloadSpec& w, int stage);

/// With training.grad_accumulation: fp32_pass, the pass after each micro-batch's backward over
/// the gradients one GPU of `stage` holds (model::grad_accumulation_work), as block OPTIMIZER in
/// phase BACKWARD.
ComputeQuery grad_accumulation_query(const WorkloadSpec& w, int stage);

/// `time`'s cost of `query` for one GPU of `w`: kernel profiles see the whole sequence, so with
/// context parallelism a profiled time (and its input-linear parts) is divided by cp; the routed
/// experts' kernels are already those of the GPU's own tokens (kernels::block_kernels, EXPERTS).
ComputeCost gpu_compute_cost(const WorkloadSpec& w, const ComputeTimeFn& time, const ComputeQuery& query);

/// The data- and weight-gradient times of the input linear (QKV, fc1, the logits) within a
/// backward block of `cost` and `query` (as one GPU of `w` sees it, context parallelism's 1/cp
/// applied): the kernel profile's (ComputeCost::input_dgrad, input_wgrad), else the GEMM's share
/// of the block's FLOPs. Both zero when the block has none, or they would be all of it.
std::pair<Seconds, Seconds> input_linear_times(const WorkloadSpec& w, Block block, const ComputeCost& cost,
                                               const ComputeQuery& query);

} // namespace stepsim::graph
