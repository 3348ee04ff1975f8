#pragma once
// Private to graph/: each simulated rank's stream tails while the step is built, and the rule
// that orders a rank's streams (docs/architecture.md, "Stream order is edges").

#include "graph/step_graph.hpp"

#include <vector>

namespace stepsim::graph::detail {

inline constexpr TaskId NO_TASK = ~TaskId{0};

/// One rank's stream tails and pass boundaries while building.
struct RankState {
  /// Per (chunk, micro-batch) slot: the first and last compute task of its forward and backward
  /// passes, and the trailing TP collective the pass's output waits for.
  std::vector<TaskId> fwd_first, fwd_last, bwd_first, bwd_last;
  std::vector<TaskId> fwd_out_wait, bwd_out_wait;
  TaskId last_compute = NO_TASK; ///< the compute stream's tail
  TaskId pending_wait = NO_TASK; ///< collective the next compute task must wait for
  TaskId dp_chain = NO_TASK;     ///< the DP stream's tail
  TaskId ep_chain = NO_TASK;     ///< the EP stream's tail
  Seconds pass_overhead{0.0};    ///< host cost of the current pass, not yet charged to a compute task
};

/// The stream-order rule, stated once: a stream runs its tasks one at a time in issue order
/// (CUDA-stream semantics), so a task issued on a rank's stream follows the stream's tail; a
/// compute task also follows the collective its rank's compute stream was told to wait for
/// (pending_wait, then cleared) and carries the pass overhead not yet charged.
class RankStreams {
public:
  RankStreams(StepGraph& g, int ranks) : g_(g), ranks_(static_cast<size_t>(ranks)) {}

  RankState& operator[](Rank r) { return ranks_[static_cast<size_t>(r)]; }
  const RankState& operator[](Rank r) const { return ranks_[static_cast<size_t>(r)]; }

  /// Adds compute task `t` on rank t.rank's compute stream (its duration plus the pass overhead
  /// not yet charged): after the stream's tail and the pending collective. Returns its id.
  TaskId add_compute(Task t) {
    RankState& st = (*this)[t.rank];
    t.duration = t.duration + take_pass_overhead(t.rank);
    const TaskId id = g_.add_task(t);
    if (st.last_compute != NO_TASK)
      g_.add_edge(st.last_compute, id);
    if (st.pending_wait != NO_TASK) {
      g_.add_edge(st.pending_wait, id);
      st.pending_wait = NO_TASK;
    }
    st.last_compute = id;
    return id;
  }

  /// Issues task `id` on rank r's DP stream, after its tail.
  void chain_dp(Rank r, TaskId id) { chain(id, (*this)[r].dp_chain); }
  /// Issues task `id` on rank r's EP stream, after its tail.
  void chain_ep(Rank r, TaskId id) { chain(id, (*this)[r].ep_chain); }

  /// The pass overhead not yet charged on rank r (cleared: a pass charges it once).
  Seconds take_pass_overhead(Rank r) {
    const Seconds s = (*this)[r].pass_overhead;
    (*this)[r].pass_overhead = Seconds(0.0);
    return s;
  }

  /// Each rank's compute tail (those that have one): what a collective issued between two compute
  /// tasks of the group waits for.
  [[nodiscard]] std::vector<TaskId> last_computes(const std::vector<Rank>& group) const {
    std::vector<TaskId> out;
    for (Rank r : group)
      if ((*this)[r].last_compute != NO_TASK)
        out.push_back((*this)[r].last_compute);
    return out;
  }

private:
  void chain(TaskId id, TaskId& tail) {
    if (tail != NO_TASK)
      g_.add_edge(tail, id);
    tail = id;
  }

  StepGraph& g_;
  std::vector<RankState> ranks_;
};

} // namespace stepsim::graph::detail
