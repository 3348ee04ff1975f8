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
      : o_(o), grid_(o.shape.grid), d_(d), p_(p),
        copies_(static_cast<size_t>(d) < o.shape.copied.size() ? &o.shape.copied[static_cast<size_t>(d)]
                                                               : nullptr),
        chain_(static_cast<size_t>(grid_.tp), NO_TASK),
        copy_chain_((copies_ ? copies_->size() : 0) * static_cast<size_t>(grid_.tp), NO_TASK) {}

  /// Returns the send of each TP rank.
  std::vector<TaskId> send(const Hop& hop, Bytes msg, bool gather) {
    const bool fwd = hop.pass.phase == Phase::FORWARD;
    std::vector<TaskId> sends;
    std::vector<Rank> dsts;
    for (int t = 0; t < o_.shape.tp_simulated(d_); ++t) {
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
    // What the receiving pass waits for: the sends, or with scatter/gather the all-gather after them.
    std::vector<TaskId> arrivals = sends;
    if (gather) {
      std::vector<Rank> members; // the receiving TP group, all of it (dsts: its simulated ranks)
      for (int t = 0; t < grid_.tp; ++t)
        members.push_back(grid_.rank(d_, hop.dst_stage, t));
      const TaskId all_gather = o_.graph.add_collective(
          o_.tp.task(
              CollectiveOp::ALL_GATHER,
              {.phase = hop.pass.phase, .stage = hop.dst_stage, .layer = -1, .mb = hop.pass.micro_batch},
              dsts.front()),
          members);
      for (TaskId send : sends)
        o_.graph.add_edge(send, all_gather);
      arrivals.assign(sends.size(), all_gather);
    }
    for (size_t i = 0; i < dsts.size(); ++i) {
      const RankState& r = o_.streams[dsts[i]];
      for (TaskId entry : o_.moe_cp.entry_of(fwd ? r.fwd_first[hop.dst_slot] : r.bwd_first[hop.dst_slot]))
        o_.graph.add_edge(arrivals[i], entry);
    }
    return sends;
  }

  /// The next chunk on the same stage: its first tasks wait for this pass's output.
  void turn(const Hop& hop) {
    const bool fwd = hop.pass.phase == Phase::FORWARD;
    for (int t = 0; t < o_.shape.tp_simulated(d_); ++t) {
      const RankState& s = o_.streams[grid_.rank(d_, p_, t)];
      const TaskId from = fwd ? s.fwd_last[hop.slot] : s.bwd_last[hop.slot];
      for (TaskId entry : o_.moe_cp.entry_of(fwd ? s.fwd_first[hop.dst_slot] : s.bwd_first[hop.dst_slot]))
        o_.graph.add_edge(from, entry);
    }
  }

private:
  /// The copies of send `task` of TP rank t by the replicas this one stands for (StepShape::
  /// copied; their order per (copy, t)): folded CP ranks, whose sends share their GPUs' links with
  /// the copied ring sends (which the simulated ranks' own ring sends cross), or the other
  /// replicas of a class. They run so that the links carry them; nothing waits for them.
  void copy_sends(const Task& task, int t, int dst_stage, TaskId from, TaskId wait) {
    if (!copies_)
      return;
    for (size_t c = 0; c < copies_->size(); ++c) {
      const int replica = (*copies_)[c];
      Task copy = task;
      copy.rank = grid_.rank(replica, p_, t);
      const Rank copy_pair[2] = {copy.rank, grid_.rank(replica, dst_stage, t)};
      const TaskId id = o_.graph.add_collective(copy, copy_pair);
      o_.graph.add_edge(from, id);
      if (wait != NO_TASK)
        o_.graph.add_edge(wait, id);
      follow(copy_chain_[c * static_cast<size_t>(grid_.tp) + static_cast<size_t>(t)], id);
    }
  }

  void follow(TaskId& tail, TaskId id) {
    if (tail != NO_TASK)
      o_.graph.add_edge(tail, id);
    tail = id;
  }

  const PpOptions& o_;
  const RankGrid& grid_;
  int d_, p_;
  const std::vector<int>* copies_; ///< the replicas copying this one's sends, or none
  std::vector<TaskId> chain_;      ///< per TP rank: the PP stream's tail
  std::vector<TaskId> copy_chain_; ///< per (copy, TP rank)
};

/// parallel.pp_p2p_blocking (DeepSpeed's PipelineEngine): the sends and receives of one pipeline
/// (replica d) in each stage's instruction order. Between two passes of a stage, TrainSchedule
/// issues its transfers one after the other: the gradient received before the activation is sent
/// when a backward is the very next step after a forward (RecvGrad, SendActivation), otherwise the
/// previous pass's output sent first (SendGrad, RecvActivation); each is a rendezvous of both ranks (it
/// starts once both have finished their earlier work) and both ranks' next work waits for it.
class BlockingOrder {
public:
  BlockingOrder(const PpOptions& o, int d, const std::vector<std::vector<PassRef>>& orders)
      : o_(o), d_(d), orders_(orders), m_(static_cast<size_t>(o.shape.micro_batches)) {
    for (const std::vector<PassRef>& order : orders) {
      outgoing_.emplace_back(order.size());
      incoming_.emplace_back(order.size());
      std::vector<size_t> at(2 * static_cast<size_t>(o.shape.vp) * m_, 0);
      for (size_t k = 0; k < order.size(); ++k)
        if (order[k].phase != Phase::WEIGHT_GRAD)
          at[index(order[k])] = k;
      position_.push_back(std::move(at));
    }
  }

  /// The transfer from pass k of `stage` to pass `to` of `dst_stage`: one send per TP rank.
  void add(int stage, size_t k, int dst_stage, const PassRef& to, std::vector<TaskId> sends) {
    const auto src = static_cast<size_t>(stage), dst = static_cast<size_t>(dst_stage);
    transfers_.push_back(std::move(sends));
    const size_t id = transfers_.size() - 1;
    outgoing_[src][k].push_back(id);
    incoming_[dst][position_[dst][index(to)]].push_back(id);
  }

  /// Adds the instruction-order edges of every stage.
  void order() {
    for (size_t q = 0; q < orders_.size(); ++q) {
      const std::vector<PassRef>& order = orders_[q];
      for (size_t k = 0; k + 1 < order.size(); ++k)
        order_gap(static_cast<int>(q), order[k], order[k + 1], outgoing_[q][k], incoming_[q][k + 1]);
    }
  }

private:
  [[nodiscard]] size_t index(const PassRef& pass) const {
    const size_t phase = pass.phase == Phase::FORWARD ? 0 : 1;
    return (phase * static_cast<size_t>(o_.shape.vp) + static_cast<size_t>(pass.chunk)) * m_ +
           static_cast<size_t>(pass.micro_batch);
  }

  [[nodiscard]] size_t slot(const PassRef& pass) const {
    return static_cast<size_t>(pass.chunk) * m_ + static_cast<size_t>(pass.micro_batch);
  }

  /// The transfers between pass a and the next pass b of stage q, in TrainSchedule's order.
  void order_gap(int q, const PassRef& a, const PassRef& b, const std::vector<size_t>& out,
                 const std::vector<size_t>& in) {
    if (out.empty() && in.empty())
      return;
    // TrainSchedule's steps: stage q runs forward i at step 2i + q and backward j at step
    // 2j + 2pp - 1 - q. A backward step opens with RecvGrad, then SendActivation of the forward of
    // the step before; every other step sends the previous output first. So the gradient comes
    // first only where backward b is the very next step after forward a.
    const int pp = o_.shape.grid.pp;
    const bool receive_first = a.phase == Phase::FORWARD && b.phase == Phase::BACKWARD &&
                               2 * b.micro_batch + 2 * pp - 1 - q == 2 * a.micro_batch + q + 1;
    std::vector<size_t> seq(receive_first ? in : out);
    for (size_t id : receive_first ? out : in)
      seq.push_back(id);
    // The simulated TP ranks: one where the replica's TP groups fold (StagePipe::send's sends).
    const int tp = o_.shape.tp_simulated(d_);
    for (int t = 0; t < tp; ++t) {
      const RankState& s = o_.streams[o_.shape.grid.rank(d_, q, t)];
      const bool a_fwd = a.phase == Phase::FORWARD, b_fwd = b.phase == Phase::FORWARD;
      // Edges the sends already have come again here (StepGraph::finalize drops repeats).
      TaskId prev = a_fwd ? s.fwd_last[slot(a)] : s.bwd_last[slot(a)];
      const TaskId wait = a_fwd ? s.fwd_out_wait[slot(a)] : s.bwd_out_wait[slot(a)];
      const TaskId first = transfers_[seq.front()][static_cast<size_t>(t)];
      if (wait != NO_TASK)
        o_.graph.add_edge(wait, first);
      for (size_t id : seq) {
        const TaskId x = transfers_[id][static_cast<size_t>(t)];
        o_.graph.add_edge(prev, x);
        prev = x;
      }
      for (TaskId entry : o_.moe_cp.entry_of(b_fwd ? s.fwd_first[slot(b)] : s.bwd_first[slot(b)]))
        o_.graph.add_edge(prev, entry);
    }
  }

  const PpOptions& o_;
  int d_;
  const std::vector<std::vector<PassRef>>& orders_;
  size_t m_;
  std::vector<std::vector<TaskId>> transfers_;             ///< per transfer: the send of each TP rank
  std::vector<std::vector<std::vector<size_t>>> outgoing_; ///< per stage, per pass: transfers it sends
  std::vector<std::vector<std::vector<size_t>>> incoming_; ///< per stage, per pass: transfers it receives
  std::vector<std::vector<size_t>> position_;              ///< per stage: each pass's place in its order
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
  std::vector<std::vector<PassRef>> orders;
  for (int p = 0; p < grid.pp; ++p)
    orders.push_back(stage_order(w.parallel.schedule, p, grid.pp, m, vp));
  const bool blocking = w.parallel.pp_p2p_blocking;
  std::vector<BlockingOrder> blocked;
  if (blocking)
    for (int d : o.shape.replicas)
      blocked.emplace_back(o, d, orders);
  for (int p = 0; p < grid.pp; ++p) {
    for (size_t r = 0; r < o.shape.replicas.size(); ++r) {
      StagePipe pipe(o, o.shape.replicas[r], p);
      const std::vector<PassRef>& order = orders[static_cast<size_t>(p)];
      for (size_t k = 0; k < order.size(); ++k) {
        const PassRef& pass = order[k];
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
        if (dst->stage == p) {
          pipe.turn(hop);
          continue;
        }
        std::vector<TaskId> sends = pipe.send(hop, msg, gather);
        if (blocking)
          blocked[r].add(p, k, dst->stage,
                         PassRef{.phase = pass.phase, .micro_batch = pass.micro_batch, .chunk = dst->chunk},
                         std::move(sends));
      }
    }
  }
  for (BlockingOrder& b : blocked)
    b.order();
}

} // namespace stepsim::graph::detail
