#pragma once
// Pipeline schedules as per-stage orderings of forward, backward and (zero-bubble schedules)
// weight-gradient passes of (model chunk, micro-batch). Each schedule is a small pure function;
// the engine knows nothing about schedules. Closed forms and choices: docs/schedules.md.

#include "config/spec.hpp"
#include "graph/step_graph.hpp"

#include <optional>
#include <vector>

namespace stepsim::graph {

/// One pass of a stage: a micro-batch through one of the stage's model chunks.
struct PassRef {
  /// FORWARD; BACKWARD (the whole backward, or only its input-gradient part B under ZB-H1/ZB-H2);
  /// WEIGHT_GRAD (the deferred weight-gradient part W, zero-bubble schedules only).
  Phase phase = Phase::FORWARD;
  int micro_batch = 0;
  int chunk = 0; ///< local model chunk of the stage, 0..vp-1 (ParallelSpec::global_chunk)
  /// Runs alongside the previous pass of the order, sharing the GPU (DualPipe's overlapped
  /// forward-and-backward chunk pairs; combined 1F1B finds its pairs itself).
  bool paired = false;
};

/// GPipe: all m forwards, then all m backwards (in micro-batch order).
std::vector<PassRef> gpipe_order(int stage, int pp, int m);

/// 1F1B (PipeDream-Flush): min(pp - stage - 1, m) warm-up forwards, then one forward and one
/// backward alternating, then the remaining backwards. Holds at most pp - stage micro-batches.
std::vector<PassRef> one_f_one_b_order(int stage, int pp, int m);

/// Megatron-LM's interleaved 1F1B over `vp` model chunks per stage. Virtual micro-batch k (of
/// m*vp) runs forward on chunk (k mod pp*vp) / pp and backward on chunk vp - 1 - that, for
/// micro-batch (k / (pp*vp))*pp + k mod pp. Warm-up: (pp - stage - 1)*2 + (vp - 1)*pp forwards
/// (all of them when m == pp), then one forward and one backward alternating. Precondition:
/// m % pp == 0 (config::check_layout enforces it); throws ModelError otherwise.
std::vector<PassRef> interleaved_order(int stage, int pp, int m, int vp);

/// ZB-H1 (Qi et al. 2023): 1F1B's forward/backward(B) order, with the weight-gradient pass W of
/// micro-batch j placed right after the B of micro-batch j + stage (the rest at the end). At most
/// min(pp, m) micro-batches in flight (forward started, W not done) on every stage; with equal
/// F, B and W times the bubble is (pp - 1)*t_F, a third of 1F1B's (pp - 1)*(t_F + t_B + t_W).
std::vector<PassRef> zb_h1_order(int stage, int pp, int m);

/// ZB-H2 (Qi et al. 2023): 2*(pp - stage) - 2 warm-up forwards, then forward and B alternating,
/// the W of micro-batch j right after the B of micro-batch j + 2*stage. At most min(2*pp - 1, m)
/// in flight on every stage. With equal pass times every stage runs without a gap from its first
/// forward to its last W (a parallelogram): zero bubble in steady state, where stage i's next
/// step starts as soon as its own step ends (see docs/schedules.md for the single-step view).
std::vector<PassRef> zb_h2_order(int stage, int pp, int m);

/// DualPipe (DeepSeek-V3, section 3.2.1): pp even, m micro-batches, m/2 fed at stage 0 into
/// local chunk 0 (micro-batches 0..m/2-1) and m/2 fed at stage pp-1 into local chunk 1
/// (m/2..m-1), m/2 >= pp. Per stage, with h = min(stage, pp-1-stage) and the stage's "near" chunk
/// (0 on the first half, 1 on the second) and "far" chunk: 2(pp/2-h-1) near forwards; h+1 near
/// and far forwards; pp/2-h-1 (far B, W, far forward); m/2-pp+h+1 steady pairs (near forward with
/// far backward, then far forward with near backward, each pair one overlapped F&B: the second
/// pass `paired`; the middle stages run their first pair one after the other); pp/2-h-1 (far
/// backward, far forward with near backward); h+1 (far, near backward) of which the second half
/// defer W; pp/2-h-1 (W, near B); h+1 W. A backward that does not defer its W is followed by it at
/// once; deferred Ws run first in, first out. At most pp+1 chunk passes in flight on every stage.
/// Throws ModelError when pp is odd or m/2 < pp (config::check_layout refuses those).
std::vector<PassRef> dualpipe_order(int stage, int pp, int m);

/// DualPipeV (DualPipe cut in half): the model in 2*pp chunks along a V, stage i holding chunks i
/// (local 0) and 2pp-1-i (local 1); every micro-batch goes down local chunk 0 and back up local
/// chunk 1, entering and leaving at stage 0. The order is DualPipe's with h = stage, pp/2 -> pp and
/// m/2 -> m (m >= 2*pp); at most 2*pp+1 chunk passes in flight on every stage.
std::vector<PassRef> dualpipe_v_order(int stage, int pp, int m);

/// The ordering of `schedule` for `stage`. Every (chunk, micro-batch) appears once per phase
/// (WEIGHT_GRAD only for the zero-bubble schedules), a backward never precedes its forward and a
/// W never precedes its B. `vp` is used by INTERLEAVED only. DualPipe's chunks see m/2
/// micro-batches each.
std::vector<PassRef> stage_order(Schedule schedule, int stage, int pp, int m, int vp = 1);

/// Where the output of `chunk` on `stage` goes: the next model chunk's (stage, local chunk) in
/// the forward (`forward`) or the previous one's in the backward; nullopt at the pipeline's end.
/// The destination may be the same stage (DualPipeV's turn at the V's tip).
struct ChunkPlace {
  int stage = 0;
  int chunk = 0;
};
std::optional<ChunkPlace> pipeline_neighbour(const ParallelSpec& par, int stage, int chunk, bool forward);

/// True when `schedule` splits backward into B and W passes (config/spec.hpp).
using stepsim::splits_backward;

/// Peak number of passes of one model chunk whose activations a stage holds at once when it runs
/// `order`: a forward adds one; a backward (or, when the backward is split, a W) removes one.
/// `with_output` counts only passes of `output_chunk` (the chunk carrying the logits).
int peak_in_flight(const std::vector<PassRef>& order, bool split_backward, int output_chunk = -1);

} // namespace stepsim::graph
