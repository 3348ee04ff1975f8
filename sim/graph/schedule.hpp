#pragma once
// Pipeline schedules as per-stage orderings of forward, backward and (zero-bubble schedules)
// weight-gradient passes of (model chunk, micro-batch). Each schedule is a small pure function;
// the engine knows nothing about schedules. Closed forms and choices: docs/schedules.md.

#include "config/spec.hpp"
#include "graph/step_graph.hpp"

#include <vector>

namespace stepsim::graph {

/// One pass of a stage: a micro-batch through one of the stage's model chunks.
struct PassRef {
  /// FORWARD; BACKWARD (the whole backward, or only its input-gradient part B under ZB-H1/ZB-H2);
  /// WEIGHT_GRAD (the deferred weight-gradient part W, zero-bubble schedules only).
  Phase phase = Phase::FORWARD;
  int micro_batch = 0;
  int chunk = 0; ///< local model chunk of the stage, 0..vp-1 (global chunk chunk*pp + stage)
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

/// The ordering of `schedule` for `stage`. Every (chunk, micro-batch) appears once per phase
/// (WEIGHT_GRAD only for the zero-bubble schedules), a backward never precedes its forward and a
/// W never precedes its B. `vp` is used by INTERLEAVED only.
std::vector<PassRef> stage_order(Schedule schedule, int stage, int pp, int m, int vp = 1);

/// True when `schedule` splits backward into B and W passes.
bool splits_backward(Schedule schedule);

/// Peak number of passes of one model chunk whose activations a stage holds at once when it runs
/// `order`: a forward adds one; a backward (or, when the backward is split, a W) removes one.
/// `with_output` counts only passes of `output_chunk` (the chunk carrying the logits).
int peak_in_flight(const std::vector<PassRef>& order, bool split_backward, int output_chunk = -1);

} // namespace stepsim::graph
