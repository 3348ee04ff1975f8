#include "graph/pp_emitter.hpp"

#include "graph/schedule.hpp"
#include "model/transformer.hpp"

namespace stepsim::graph::detail {

namespace {

/// A pass of stage p's order and where its output goes.
struct Hop {
  PassRef pass{};
  int dst_stage = 0;
  size_t slot = 0;     ///< the pass's (chunk, micro-batch) slot on the sending stage
  size_t dst_slot = 0; ///< the receiving pass's slot
};

/// The PP sends of one TP group of stage p (replica d), pass by pass.
class StagePipe {
public:
  StagePipe(const PpOptions& o, int d, int p)
      : o_(o), grid_(o.shape.grid), d_(d), p_(p), copies_(o.shape.fold_cp ? grid_.cp : 1),
        chain_(static_cast<size_t>(grid_.tp), NO_TASK),
        copy_chain_(static_cast<size_t>(copies_ * grid_.tp), NO_TASK) {}

  void send(const Hop& hop, Bytes msg, bool gather) {
    const bool fwd = hop.pass.phase == Phase::FORWARD;
    std::vector<TaskId> sends;
    std::vector<Rank> dsts;
    for (int t = 0; t < grid_.tp; ++t) {
      const Rank src = grid_.rank(d_, p_, t);
      const Rank dst = grid_.rank(d_, hop.dst_stage, t);
      Task task;
      task.phase = hop.pass.phase;
      task.group = CommGroup::PP;
      task.op = CollectiveOp::SEND;
      task.stream = Stream::PP_COMM;
      task.rank = src;
      task.stage = p_;
      task.micro_batch = hop.pass.micro_batch;
      task.bytes = msg;
      const Rank pair[2] = {src, dst};
      const TaskId send = o_.graph.add_collective(task, pair);
      const RankState& s = o_.streams[src];
      const TaskId from = fwd ? s.fwd_last[hop.slot] : s.bwd_last[hop.slot];
      o_.graph.add_edge(from, send);
      const TaskId wait = fwd ? s.fwd_out_wait[hop.slot] : s.bwd_out_wait[hop.slot];
      if (wait != NO_TASK)
        o_.graph.add_edge(wait, send);
      follow(chain_[static_cast<size_t>(t)], send);
      sends.push_back(send);
      dsts.push_back(dst);
      copy_sends(task, t, hop.dst_stage, from, wait);
    }
    if (gather) {
      const TaskId all_gather = o_.graph.add_collective(
          o_.tp.task(
              CollectiveOp::ALL_GATHER,
              {.phase = hop.pass.phase, .stage = hop.dst_stage, .layer = -1, .mb = hop.pass.micro_batch},
              dsts.front()),
          dsts);
      for (TaskId send : sends)
        o_.graph.add_edge(send, all_gather);
      sends.assign(sends.size(), all_gather);
    }
    for (size_t i = 0; i < dsts.size(); ++i) {
      const RankState& r = o_.streams[dsts[i]];
      for (TaskId entry : o_.moe_cp.entry_of(fwd ? r.fwd_first[hop.dst_slot] : r.bwd_first[hop.dst_slot]))
        o_.graph.add_edge(sends[i], entry);
    }
  }

  /// The next chunk on the same stage: its first tasks wait for this pass's output.
  void turn(const Hop& hop) {
    const bool fwd = hop.pass.phase == Phase::FORWARD;
    for (int t = 0; t < grid_.tp; ++t) {
      const RankState& s = o_.streams[grid_.rank(d_, p_, t)];
      const TaskId from = fwd ? s.fwd_last[hop.slot] : s.bwd_last[hop.slot];
      for (TaskId entry : o_.moe_cp.entry_of(fwd ? s.fwd_first[hop.dst_slot] : s.bwd_first[hop.dst_slot]))
        o_.graph.add_edge(from, entry);
    }
  }

private:
  /// Folded CP: the other CP ranks' copies of send `task` of TP rank t (their order per (c, t)).
  /// They share their GPUs' links with the copied ring sends (which the simulated ranks' own ring
  /// sends cross), so they run too; nothing waits for them.
  void copy_sends(const Task& task, int t, int dst_stage, TaskId from, TaskId wait) {
    for (int c = 1; c < copies_; ++c) {
      Task copy = task;
      copy.rank = grid_.rank(c, p_, t);
      const Rank copy_pair[2] = {copy.rank, grid_.rank(c, dst_stage, t)};
      const TaskId id = o_.graph.add_collective(copy, copy_pair);
      o_.graph.add_edge(from, id);
      if (wait != NO_TASK)
        o_.graph.add_edge(wait, id);
      follow(copy_chain_[static_cast<size_t>(c * grid_.tp + t)], id);
    }
  }

  void follow(TaskId& tail, TaskId id) {
    if (tail != NO_TASK)
      o_.graph.add_edge(tail, id);
    tail = id;
  }

  const PpOptions& o_;
  const RankGrid& grid_;
  int d_, p_, copies_;
  std::vector<TaskId> chain_;      ///< per TP rank: the PP stream's tail
  std::vector<TaskId> copy_chain_; ///< per (CP copy, TP rank)
};

} // namespace

void emit_pp_sends(const PpOptions& o) {
  const RankGrid& grid = o.shape.grid;
  if (grid.pp == 1)
    return;
  const WorkloadSpec& w = o.shape.workload;
  const int m = o.shape.micro_batches, vp = o.shape.vp;
  const Bytes msg = model::pp_message_bytes(w);
  // Megatron's scatter/gather (without SP): each TP rank sent 1/tp; the receiving TP group
  // all-gathers the whole activation before the next compute uses it.
  const bool gather = w.parallel.pp_scatter_gather && !o.shape.sp && grid.tp > 1;
  for (int p = 0; p < grid.pp; ++p) {
    for (int d : o.shape.replicas) {
      StagePipe pipe(o, d, p);
      for (const PassRef& pass : stage_order(w.parallel.schedule, p, grid.pp, m, vp)) {
        if (pass.phase == Phase::WEIGHT_GRAD)
          continue; // W passes send nothing
        // Chunk to chunk (ParallelSpec::global_chunk): interleaving wraps from the last stage to
        // stage 0's next chunk; DualPipe's chunk 1 runs from stage pp-1 to 0; DualPipeV turns at
        // stage pp-1 from chunk 0 to chunk 1 without a send.
        const auto dst = pipeline_neighbour(w.parallel, p, pass.chunk, pass.phase == Phase::FORWARD);
        if (!dst)
          continue;
        const auto mb = static_cast<size_t>(pass.micro_batch);
        const Hop hop{.pass = pass,
                      .dst_stage = dst->stage,
                      .slot = static_cast<size_t>(pass.chunk) * static_cast<size_t>(m) + mb,
                      .dst_slot = static_cast<size_t>(dst->chunk) * static_cast<size_t>(m) + mb};
        if (dst->stage == p)
          pipe.turn(hop);
        else
          pipe.send(hop, msg, gather);
      }
    }
  }
}

} // namespace stepsim::graph::detail
