#include "graph/tp_emitter.hpp"

#include "model/moe.hpp"
#include "model/transformer.hpp"

#include <algorithm>
#include <utility>

namespace stepsim::graph::detail {

Task TpEmitter::task(CollectiveOp op, const TaskSite& site, Rank rank) const {
  Task t = collective_task(CommGroup::TP, op, Stream::TP_COMM, site, model::tp_collective_bytes(w_));
  t.rank = rank;
  return t;
}

TaskId TpEmitter::chain(const Task& t, TpGroup& group, const std::vector<TaskId>& deps) {
  const TaskId id = g_.add_collective(t, group.members);
  for (TaskId p : deps)
    g_.add_edge(p, id);
  if (group.chain != NO_TASK)
    g_.add_edge(group.chain, id);
  group.chain = id;
  return id;
}

TaskId TpEmitter::collective(CollectiveOp op, double scale, TpGroup& group, const TpCollectives& c,
                             const std::vector<TaskId>& deps) {
  Task t = task(op, c.site, group.ranks.front());
  t.bytes = t.bytes * scale;
  t.role = c.role;
  return chain(t, group, deps);
}

void TpEmitter::wait_for(const TpGroup& group, TaskId last) {
  for (Rank r : group.ranks)
    o_.streams[r].pending_wait = last;
}

std::vector<TaskId> TpEmitter::after_block(TpGroup& group, const std::vector<TaskId>& producers,
                                           const TpCollectives& c) {
  if (grid_.tp == 1)
    return producers;
  if (pipelines(c))
    return pipelined_after_block(group, producers, c);
  TaskId last = NO_TASK;
  if (o_.shape.sp) {
    // A scale of 0 leaves that collective out (folded expert groups, moe_copies).
    last =
        c.rs_scale > 0 ? collective(CollectiveOp::REDUCE_SCATTER, c.rs_scale, group, c, producers) : NO_TASK;
    if (c.ag_scale > 0)
      last = collective(CollectiveOp::ALL_GATHER, c.ag_scale, group, c,
                        last != NO_TASK ? std::vector<TaskId>{last} : producers);
    if (last == NO_TASK)
      return producers;
  } else {
    last = collective(CollectiveOp::ALL_REDUCE, 1.0, group, c, producers);
  }
  wait_for(group, last);
  return producers;
}

bool TpEmitter::pipelines(const TpCollectives& c) const {
  if (!w_.parallel.tp_comm_overlap || !o_.shape.sp || grid_.tp == 1 || c.site.phase == Phase::BACKWARD)
    return false;
  if (c.block != Block::ATTENTION && c.block != Block::MLP)
    return false;
  if (w_.model.mla.enabled() || model::is_moe_layer(w_.model, c.site.layer))
    return false;
  return !o_.moe_cp.handles(c.block, c.site.layer);
}

std::vector<TaskId> TpEmitter::pipelined_after_block(TpGroup& group, const std::vector<TaskId>& producers,
                                                     const TpCollectives& c) {
  // What the chunks run beside: the block's GEMM time from the kernel profile, else (the
  // roofline) the linears' share of the block's forward FLOPs.
  const bool windowed = o_.costs.windowed(c.block, c.site.layer);
  const ComputeCost cost = o_.costs.cost(c.block, c.site.phase, c.site.stage, windowed).first;
  const model::BlockWork work = block_work(w_, c.block, windowed);
  const double share = work.forward.flops.value() > 0 ? work.weight_gemms / work.forward.flops : 0.0;
  const double chunk = 1.0 / grid_.tp;
  std::vector<TaskId> tails;
  std::vector<TaskId> heads; // what the first chunks follow on each rank
  tails.reserve(producers.size());
  for (size_t i = 0; i < producers.size(); ++i) {
    const Seconds whole = g_.task(producers[i]).duration;
    const Seconds cover =
        cost.gemm.value() > 0 ? std::min(cost.gemm, whole) : whole * std::clamp(share, 0.0, 1.0);
    if (cover.value() <= 0) {
      tails.push_back(producers[i]);
      continue;
    }
    // A block of linears only (the roofline's MLP) leaves an empty head: the chunks run beside
    // all of it.
    const TaskId tail = carve(producers[i], cover, 3);
    end_block_with(producers[i], tail, group.ranks[i]);
    tails.push_back(tail);
    heads.push_back(producers[i]);
  }
  if (heads.empty()) // no linears to hide behind: every chunk after the block
    heads = producers;
  // The first chunks beside the linears (after the block's head), the last after them.
  if (c.rs_scale > 0)
    collective(CollectiveOp::REDUCE_SCATTER, c.rs_scale * (1.0 - chunk), group, c, heads);
  if (c.ag_scale > 0)
    collective(CollectiveOp::ALL_GATHER, c.ag_scale * (1.0 - chunk), group, c, heads);
  TaskId last = NO_TASK;
  if (c.rs_scale > 0)
    last = collective(CollectiveOp::REDUCE_SCATTER, c.rs_scale * chunk, group, c, tails);
  if (c.ag_scale > 0)
    last = collective(CollectiveOp::ALL_GATHER, c.ag_scale * chunk, group, c, tails);
  if (last != NO_TASK)
    wait_for(group, last);
  return tails;
}

bool TpEmitter::has_input_linear(Block block, int layer) const {
  if (grid_.tp == 1 || o_.shape.split)
    return false; // zero-bubble B passes hold no weight-gradient GEMM to run beside
  switch (block) {
  case Block::ATTENTION:
    return !w_.model.mla.enabled();
  case Block::MLP:
    return !o_.moe_cp.handles(block, layer);
  case Block::LOGITS:
    return true;
  default:
    return false;
  }
}

void TpEmitter::end_block_with(TaskId first, TaskId last, Rank rank) {
  Task& a = g_.mutable_task(first);
  Task& b = g_.mutable_task(last);
  std::swap(a.act_free, b.act_free);
  std::swap(a.param_free, b.param_free);
  o_.streams[rank].last_compute = last;
}

TaskId TpEmitter::carve(TaskId from, Seconds duration, uint8_t piece) {
  Task t = g_.task(from);
  t.piece = piece;
  const double share = t.duration.value() > 0 ? duration / t.duration : 0.0;
  t.duration = duration;
  t.flops = t.flops * share;
  t.bytes = t.bytes * share;
  t.act_alloc = t.act_free = t.param_alloc = t.param_free = Bytes(0.0);
  Task& src = g_.mutable_task(from);
  src.duration -= duration;
  src.flops = src.flops * (1.0 - share);
  src.bytes = src.bytes * (1.0 - share);
  const TaskId id = g_.add_task(t);
  g_.add_edge(from, id);
  return id;
}

std::vector<TaskId> TpEmitter::after_backward_block(TpGroup& group, std::vector<TaskId> block_tasks,
                                                    Block block, const TpCollectives& c) {
  const bool overlap = w_.parallel.tp_grad_overlap;
  const bool sp = o_.shape.sp;
  if (!has_input_linear(block, c.site.layer) || (!overlap && !sp)) {
    after_block(group, block_tasks, c);
    return block_tasks;
  }
  const auto [dgrad, wgrad] = o_.costs.input_linear_times(block, c.site.stage, c.site.layer);
  const bool fits = wgrad.value() > 0 && // and the pieces leave some of each rank's task
                    std::all_of(block_tasks.begin(), block_tasks.end(),
                                [&](TaskId id) { return g_.task(id).duration > dgrad + wgrad; });
  if (!fits) {
    after_block(group, block_tasks, c);
    return block_tasks;
  }
  std::vector<TaskId> before_wgrad = block_tasks; // what the weight gradient follows on each rank
  TaskId regather = NO_TASK;
  if (sp && overlap) {
    for (TaskId& id : before_wgrad)
      id = carve(id, dgrad, 1); // the data gradient, beside the re-gather issued before it
    regather = collective(CollectiveOp::ALL_GATHER, 1.0, group, c, block_tasks);
  } else if (sp) {
    regather = collective(CollectiveOp::ALL_GATHER, 1.0, group, c, block_tasks);
  }
  std::vector<TaskId> wgrads;
  wgrads.reserve(group.ranks.size());
  for (size_t i = 0; i < group.ranks.size(); ++i) {
    const TaskId w = carve(block_tasks[i], wgrad, 2);
    if (before_wgrad[i] != block_tasks[i]) // after the data gradient too
      g_.add_edge(before_wgrad[i], w);
    if (regather != NO_TASK)
      g_.add_edge(regather, w);
    end_block_with(block_tasks[i], w, group.ranks[i]);
    wgrads.push_back(w);
  }
  if (!overlap) { // SP without the overlap: the block's collectives after its weight gradient
    after_block(group, wgrads, c);
    return wgrads;
  }
  TaskId last = NO_TASK;
  if (!sp) {
    last = collective(CollectiveOp::ALL_REDUCE, 1.0, group, c, before_wgrad);
  } else {
    if (c.rs_scale > 0)
      last = collective(CollectiveOp::REDUCE_SCATTER, c.rs_scale, group, c, before_wgrad);
    if (c.ag_scale > 0 && w_.parallel.tp_comm_overlap) {
      // Pipelined (tp_comm_overlap): the gradient's first chunks beside the weight gradient, after
      // the reduce-scatter on the TP stream; the last chunk after both.
      const double chunk = 1.0 / grid_.tp;
      collective(CollectiveOp::ALL_GATHER, c.ag_scale * (1.0 - chunk), group, c, before_wgrad);
      last = collective(CollectiveOp::ALL_GATHER, c.ag_scale * chunk, group, c, wgrads);
    } else if (c.ag_scale > 0) {
      // the gradient for the block below: after the reduce-scatter and the weight gradient
      std::vector<TaskId> deps = wgrads;
      if (last != NO_TASK)
        deps.push_back(last);
      last = collective(CollectiveOp::ALL_GATHER, c.ag_scale, group, c, deps);
    }
  }
  if (last != NO_TASK)
    wait_for(group, last);
  return wgrads;
}

void TpEmitter::loss_all_reduces(TpGroup& group, const std::vector<TaskId>& producers, int stage, int mb) {
  if (grid_.tp == 1)
    return;
  const Bytes bytes(model::gpu_tokens(w_) * 4.0);
  const int64_t count = 3 * (1 + w_.model.mtp_layers);
  TaskId last = NO_TASK;
  for (int64_t i = 0; i < count; ++i) {
    Task t = task(CollectiveOp::ALL_REDUCE, {.phase = Phase::FORWARD, .stage = stage, .layer = -1, .mb = mb},
                  group.ranks.front());
    t.bytes = bytes;
    t.role = CommRole::LOSS;
    last = chain(t, group, producers);
  }
  wait_for(group, last);
}

double TpEmitter::moe_copies(int layer) const {
  if (!o_.shape.sp || layer < 0 || !model::is_moe_layer(w_.model, layer))
    return 1.0;
  return grid_.folded() ? 0.0 : static_cast<double>(w_.model.moe.top_k);
}

} // namespace stepsim::graph::detail
