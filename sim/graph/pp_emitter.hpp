#pragma once
// Private to graph/: pipeline parallelism's activation and gradient sends between the stages.

#include "graph/emit.hpp"
#include "graph/moe_cp_emitter.hpp"
#include "graph/rank_streams.hpp"
#include "graph/tp_emitter.hpp"

namespace stepsim::graph::detail {

/// What the PP sends connect.
struct PpOptions {
  const StepShape& shape;
  StepGraph& graph;
  const RankStreams& streams; ///< every pass's first and last tasks, and its trailing TP collective
  const TpEmitter& tp;        ///< the receiving TP group's all-gather (parallel.pp_scatter_gather)
  const MoeCpEmitter& moe_cp; ///< the first tasks of a block it replaced (entry_of)
};

/// Adds the sends of every simulated pipeline: each forward (backward) pass's output goes from
/// its last task to the first task of the next (previous) model chunk's pass of the same
/// micro-batch, one send per TP rank, in pass order on the PP stream. With folded context
/// parallelism the other CP ranks' sends, copies of CP index 0's, run too.
void emit_pp_sends(const PpOptions& o);

} // namespace stepsim::graph::detail
