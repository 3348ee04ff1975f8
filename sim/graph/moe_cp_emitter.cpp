#include "graph/moe_cp_emitter.hpp"

#include "core/error.hpp"
#include "model/block_cost.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"

#include <algorithm>
#include <string>

namespace stepsim::graph::detail {

namespace {

/// FLOPs factor of a pass over the forward (model::pass_flops_factor).
double pass_factor(Phase phase, bool split) {
  return model::pass_flops_factor(phase == Phase::BACKWARD, split);
}

} // namespace

MoeCpEmitter::MoeCpEmitter(const MoeCpOptions& o)
    : w_(o.shape.workload), grid_(o.shape.grid), m_(o.shape.micro_batches), split_(o.shape.split),
      representative_ep_(o.representative_ep), representative_cp_(o.shape.fold_cp), g_(o.graph),
      streams_(o.streams), costs_(o.costs) {}

bool MoeCpEmitter::handles(Block block, int layer) const {
  if (block == Block::MLP && layer >= 0 && model::is_moe_layer(w_.model, layer))
    return true;
  return block == Block::ATTENTION && grid_.cp > 1;
}

std::vector<TaskId> MoeCpEmitter::entry_of(TaskId t) const {
  if (auto it = entry_.find(t); it != entry_.end())
    return it->second;
  return {t};
}

ComputeCost MoeCpEmitter::scaled(Block base, Phase phase, int stage, Flops flops, Bytes& bytes) {
  const Phase base_phase = phase == Phase::WEIGHT_GRAD ? Phase::BACKWARD : phase;
  auto [c, q] = costs_.cost(base, base_phase, stage);
  const double ratio = q.flops.value() > 0 ? flops / q.flops : 0.0;
  bytes = q.bytes * ratio;
  c.time = c.time * ratio;
  return c;
}

TaskId MoeCpEmitter::add_compute(Rank r, const TaskSite& site, const Piece& piece) {
  Task t = compute_task(r, piece.block, site.phase, site.stage, site.layer, site.mb);
  Bytes bytes;
  const ComputeCost c = scaled(piece.base, site.phase, site.stage, piece.flops, bytes);
  t.duration = c.time;
  t.sources = c.sources;
  t.flops = piece.flops;
  t.bytes = bytes;
  t.act_alloc = piece.alloc;
  t.act_free = piece.free;
  t.param_free = piece.param_free;
  return streams_.add_compute(t);
}

std::vector<TaskId> MoeCpEmitter::emit(const std::vector<Rank>& group, const BlockCall& call) {
  param_free_ = call.param_free; // the block's last compute task frees it
  if (call.block == Block::ATTENTION && grid_.cp > 1)
    return emit_cp_attention(group, call);
  return emit_moe(group, call);
}

// ---- mixture of experts ---------------------------------------------------------------------

TaskId MoeCpEmitter::ep_all_to_all(Rank r, const TaskSite& site, int which, const std::vector<TaskId>& deps) {
  const std::vector<Rank> members = grid_.ep_group(r);
  // The group's first member names it.
  const auto key = std::make_tuple(site.stage, static_cast<int>(members.front()), site.layer, site.mb,
                                   static_cast<int>(site.phase), which);
  TaskId id;
  if (auto it = a2a_.find(key); it != a2a_.end()) {
    id = it->second;
  } else {
    Task task = collective_task(CommGroup::EP, CollectiveOp::ALL_TO_ALL, Stream::EP_COMM, site,
                                model::ep_all_to_all_bytes(w_));
    task.rank = members.front();
    id = g_.add_collective(task, members);
    a2a_.emplace(key, id);
  }
  for (TaskId d : deps)
    if (d != NO_TASK)
      g_.add_edge(d, id);
  streams_.chain_ep(r, id);
  return id;
}

void MoeCpEmitter::expert_gradients(Rank r, const TaskSite& site, TaskId producer) {
  const int stage = site.stage, layer = site.layer, mb = site.mb;
  const int per_micro_batch = w_.parallel.zero_stage >= 2 ? 1 : 0;
  // ZeRO-1 reduce-scatters and gathers the updated experts back: one all-reduce of the same volume
  // at the end of backward, unless the gather runs under the next forward (overlap_param_gather,
  // the step builder's) and only the reduce-scatter is left here.
  const bool scatter = per_micro_batch || w_.training.overlap_param_gather;
  int& passes = grad_passes_[{r, layer}];
  ++passes;
  if (!per_micro_batch && passes != m_)
    return;
  if (grid_.edp() <= 1) // one GPU holds these experts: nothing to reduce
    return;
  const std::vector<Rank> members = grid_.edp_group(r);
  const auto key =
      std::make_tuple(stage, static_cast<int>(members.front()), layer, per_micro_batch ? mb : -1);
  TaskId id;
  if (auto it = expert_reduce_.find(key); it != expert_reduce_.end()) {
    id = it->second;
  } else {
    Task task = collective_task(
        CommGroup::DP, scatter ? CollectiveOp::REDUCE_SCATTER : CollectiveOp::ALL_REDUCE, Stream::DP_COMM,
        {.phase = Phase::BACKWARD, .stage = stage, .layer = layer, .mb = per_micro_batch ? mb : -1},
        Bytes(model::layer_params_at(w_.model, layer, grid_.tp, grid_.ep, grid_.etp).expert *
              model::grad_bytes(w_)));
    task.rank = members.front();
    id = g_.add_collective(task, members);
    expert_reduce_.emplace(key, id);
  }
  g_.add_edge(producer, id);
  streams_.chain_dp(r, id);
}

TaskId MoeCpEmitter::expert_gather(const ExpertGather& x) {
  if (grid_.edp() <= 1) // one GPU holds these experts whole
    return NO_TASK;
  const std::vector<Rank> members = grid_.edp_group(x.rank);
  const TaskSite& site = x.site;
  const auto key = std::make_tuple(site.stage, static_cast<int>(members.front()), site.layer, site.mb,
                                   static_cast<int>(site.phase));
  TaskId id;
  if (auto it = expert_gather_.find(key); it != expert_gather_.end()) {
    id = it->second;
  } else {
    Task task = collective_task(CommGroup::DP, CollectiveOp::ALL_GATHER, Stream::DP_COMM, site, x.bytes);
    task.param_alloc = x.held;
    task.rank = members.front();
    id = g_.add_collective(task, members);
    expert_gather_.emplace(key, id);
  }
  if (x.after != NO_TASK)
    g_.add_edge(x.after, id);
  streams_.chain_dp(x.rank, id);
  return id;
}

MoeCpEmitter::MoePass MoeCpEmitter::moe_pass(const BlockCall& call) const {
  const double f = pass_factor(call.phase, split_);
  const model::MoeWork dense = model::moe_forward_work(w_, 0.0);
  return {.site = {.phase = call.phase, .stage = call.stage, .layer = call.layer, .mb = call.mb},
          .factor = f,
          .router = dense.router * f,
          .shared = dense.shared * f};
}

Flops MoeCpEmitter::routed_flops(const MoePass& pass, Rank r) const {
  const int layer = pass.site.layer;
  const double pairs = representative_ep_ ? model::ep_max_rank_assignments(w_, layer)
                                          : model::ep_rank_assignments(w_, layer, grid_.ep_of(r));
  return model::moe_forward_work(w_, pairs).routed * pass.factor;
}

void MoeCpEmitter::after_extra(const BlockCall& call, size_t i, TaskId id) {
  if (!call.extra_dep.empty() && call.extra_dep[i] != NO_TASK)
    g_.add_edge(call.extra_dep[i], id);
}

void MoeCpEmitter::after_gather(const BlockCall& call, size_t i, TaskId id) {
  if (!call.shards.gather.empty() && call.shards.gather[i] != NO_TASK)
    g_.add_edge(call.shards.gather[i], id);
}

std::vector<TaskId> MoeCpEmitter::emit_moe(const std::vector<Rank>& group, const BlockCall& call) {
  const MoePass pass = moe_pass(call);
  if (call.phase == Phase::WEIGHT_GRAD)
    return moe_weight_grad(group, call, pass);
  if (call.phase == Phase::FORWARD || call.phase == Phase::RECOMPUTE)
    return moe_forward(group, call, pass);
  return moe_backward(group, call, pass);
}

std::vector<TaskId> MoeCpEmitter::moe_weight_grad(const std::vector<Rank>& group, const BlockCall& call,
                                                  const MoePass& pass) {
  // Zero-bubble W pass: the weight gradients of router and shared experts (priced as the dense
  // MLP), then the routed experts' (as their own GEMMs); no all-to-all.
  std::vector<TaskId> out(group.size(), NO_TASK);
  for (size_t i = 0; i < group.size(); ++i) {
    const Rank r = group[i];
    const TaskId dense = add_compute(r, pass.site,
                                     {.block = Block::EXPERTS,
                                      .flops = pass.router + pass.shared,
                                      .base = Block::MLP,
                                      .alloc = call.alloc});
    after_extra(call, i, dense);
    out[i] = add_compute(
        r, pass.site,
        {.block = Block::EXPERTS, .flops = routed_flops(pass, r), .base = Block::EXPERTS, .free = call.free});
    expert_gradients(r, pass.site, out[i]);
  }
  return out;
}

std::vector<TaskId> MoeCpEmitter::moe_forward(const std::vector<Rank>& group, const BlockCall& call,
                                              const MoePass& pass) {
  // Router (+ shared experts, which overlap the dispatch), dispatch, experts, combine.
  const TaskSite& site = pass.site;
  const bool a2a = grid_.ep > 1;
  std::vector<TaskId> out(group.size(), NO_TASK), routers(group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    routers[i] = add_compute(
        group[i], site,
        {.block = Block::ROUTER, .flops = pass.router, .base = Block::ROUTER, .alloc = call.alloc});
    after_extra(call, i, routers[i]);
    if (w_.model.moe.shared_experts > 0)
      add_compute(group[i], site, {.block = Block::MLP, .flops = pass.shared, .base = Block::MLP});
  }
  for (size_t i = 0; i < group.size(); ++i) {
    const Rank r = group[i];
    if (a2a)
      streams_[r].pending_wait = ep_all_to_all(r, site, 0, {routers[i]});
    // The experts' compute is the block's last: it frees the layer's ZeRO-3 parameters.
    const TaskId x = add_compute(r, site,
                                 {.block = Block::EXPERTS,
                                  .flops = routed_flops(pass, r),
                                  .base = Block::EXPERTS,
                                  .free = call.free,
                                  .param_free = param_free_ + call.shards.free});
    after_gather(call, i, x);
    out[i] = x;
    if (a2a) {
      out[i] = ep_all_to_all(r, site, 1, {x});
      streams_[r].pending_wait = out[i];
    }
    entry_[out[i]] = {routers[i]};
  }
  return out;
}

std::vector<TaskId> MoeCpEmitter::moe_backward(const std::vector<Rank>& group, const BlockCall& call,
                                               const MoePass& pass) {
  // Backward (or its input-gradient part B): the output gradient goes back to the experts
  // (combine's backward), expert backward, the input gradients return (dispatch's backward), then
  // the router's backward. The shared experts' backward overlaps the first all-to-all.
  const TaskSite& site = pass.site;
  const bool a2a = grid_.ep > 1;
  const bool grads_final = split_ ? call.phase == Phase::WEIGHT_GRAD : call.phase == Phase::BACKWARD;
  std::vector<TaskId> out(group.size(), NO_TASK);
  for (size_t i = 0; i < group.size(); ++i) {
    const Rank r = group[i];
    std::vector<TaskId> entries;
    TaskId back = NO_TASK;
    if (a2a) {
      back = ep_all_to_all(r, site, 2, {streams_[r].last_compute, streams_[r].pending_wait});
      after_extra(call, i, back);
      entries.push_back(back);
    }
    if (w_.model.moe.shared_experts > 0) {
      const TaskId sh = add_compute(r, site, {.block = Block::MLP, .flops = pass.shared, .base = Block::MLP});
      after_extra(call, i, sh);
      entries.push_back(sh);
    }
    if (back != NO_TASK)
      streams_[r].pending_wait = back;
    const TaskId x = add_compute(r, site,
                                 {.block = Block::EXPERTS,
                                  .flops = routed_flops(pass, r),
                                  .base = Block::EXPERTS,
                                  .alloc = call.alloc,
                                  .param_free = call.shards.free});
    after_gather(call, i, x);
    if (entries.empty()) {
      after_extra(call, i, x);
      entries.push_back(x);
    }
    if (a2a)
      streams_[r].pending_wait = ep_all_to_all(r, site, 3, {x});
    out[i] = add_compute(
        r, site, {.block = Block::ROUTER, .flops = pass.router, .base = Block::ROUTER, .free = call.free});
    entry_[out[i]] = entries;
    if (grads_final)
      expert_gradients(r, site, x);
  }
  return out;
}

// ---- context parallelism ----------------------------------------------------------------------

std::vector<TaskId> MoeCpEmitter::emit_cp_attention(const std::vector<Rank>& group, const BlockCall& call) {
  const Phase phase = call.phase;
  const TaskSite site{.phase = phase, .stage = call.stage, .layer = call.layer, .mb = call.mb};
  const Bytes alloc = call.alloc, free = call.free;
  const std::vector<TaskId>& extra_dep = call.extra_dep;
  const int cp = grid_.cp;
  // One chunk: the local queries against one K,V block of s/cp tokens.
  const model::RingAttentionWork ring_work = model::ring_attention_work(w_);
  const Flops chunk = ring_work.chunk;
  const Flops proj = ring_work.projections;
  std::vector<TaskId> out(group.size(), NO_TASK);
  for (size_t i = 0; i < group.size(); ++i) {
    const Rank r = group[i];
    const TaskId dep = extra_dep.empty() ? NO_TASK : extra_dep[i];
    if (phase == Phase::WEIGHT_GRAD) {
      out[i] = add_compute(r, site,
                           {.block = Block::ATTENTION,
                            .flops = proj,
                            .base = Block::ATTENTION,
                            .alloc = alloc,
                            .free = free,
                            .param_free = param_free_});
      if (dep != NO_TASK)
        g_.add_edge(dep, out[i]);
      continue;
    }
    Ring ring;
    ring.phase = phase;
    ring.stage = call.stage;
    ring.layer = call.layer;
    ring.mb = call.mb;
    if (phase == Phase::FORWARD || phase == Phase::RECOMPUTE) {
      ring.start = add_compute(
          r, site, {.block = Block::ATTENTION, .flops = proj, .base = Block::ATTENTION, .alloc = alloc});
      if (dep != NO_TASK)
        g_.add_edge(dep, ring.start);
      for (int c = 0; c < cp; ++c)
        ring.chunk.push_back(add_compute(r, site,
                                         {.block = Block::ATTENTION,
                                          .flops = chunk,
                                          .base = Block::ATTENTION,
                                          .free = c == cp - 1 ? free : Bytes(0.0),
                                          .param_free = c == cp - 1 ? param_free_ : Bytes(0.0)}));
      out[i] = ring.chunk.back();
      entry_[out[i]] = {ring.start};
    } else {
      ring.backward = true;
      const Flops chunk_bwd = ring_work.chunk_backward;
      for (int c = 0; c < cp; ++c) {
        ring.chunk.push_back(add_compute(r, site,
                                         {.block = Block::ATTENTION,
                                          .flops = chunk_bwd,
                                          .base = Block::ATTENTION,
                                          .alloc = c == 0 ? alloc : Bytes(0.0)}));
        if (c == 0 && dep != NO_TASK)
          g_.add_edge(dep, ring.chunk.front());
      }
      out[i] = add_compute(r, site,
                           {.block = Block::ATTENTION,
                            .flops = proj * pass_factor(phase, split_),
                            .base = Block::ATTENTION,
                            .free = free,
                            .param_free = param_free_});
      entry_[out[i]] = {ring.chunk.front()};
    }
    rings_[r].push_back(std::move(ring));
  }
  return out;
}

void MoeCpEmitter::finish() {
  const int cp = grid_.cp;
  if (cp <= 1 || rings_.empty())
    return;
  std::vector<TaskId> cp_chain(static_cast<size_t>(grid_.size()), NO_TASK);
  const Bytes block = model::cp_kv_block_bytes(w_);
  // CP groups: ranks that differ only in their CP index, in ring order. Folded, only index 0 of
  // each is simulated: the group is the grid's, and its other members' rings are copies of it.
  std::map<std::tuple<int, int, int>, std::vector<Rank>> groups;
  for (const auto& [r, list] : rings_)
    groups[{grid_.pp_of(r), grid_.dp_of(r), grid_.tp_of(r)}].push_back(r);
  for (auto& [key, members] : groups) {
    const auto [p, d, t] = key;
    if (representative_cp_) {
      if (members.size() != 1 || grid_.cp_of(members.front()) != 0)
        throw ModelError("internal: a folded CP group simulates its index-0 rank only");
      members.clear();
      for (int c = 0; c < cp; ++c)
        members.push_back(grid_.rank(c + cp * d, p, t));
    }
    std::sort(members.begin(), members.end(),
              [&](Rank a, Rank b) { return grid_.cp_of(a) < grid_.cp_of(b); });
    const auto simulated = [&](Rank r) { return rings_.count(r) > 0; };
    for (Rank r : members)
      if (!representative_cp_ && !simulated(r))
        throw ModelError("internal: a CP group of " + std::to_string(members.size()) +
                         " simulated ranks, expected " + std::to_string(cp));
    if (static_cast<int>(members.size()) != cp)
      throw ModelError("internal: a CP group of " + std::to_string(members.size()) + " ranks, expected " +
                       std::to_string(cp));
    const size_t n = rings_.at(members.front()).size();
    for (Rank r : members)
      if (simulated(r) && rings_.at(r).size() != n)
        throw ModelError("internal: CP ranks emitted different numbers of ring-attention blocks");
    // The ring whose tasks member c's sends follow: its own, or (folded) member 0's.
    const auto ring_of = [&](Rank r, size_t inst) -> const Ring& {
      return rings_.at(simulated(r) ? r : members.front())[inst];
    };
    for (size_t inst = 0; inst < n; ++inst) {
      std::vector<TaskId> into(static_cast<size_t>(cp), NO_TASK); // the previous step's send into member c
      for (int step = 1; step < cp; ++step) {
        std::vector<TaskId> sent(static_cast<size_t>(cp), NO_TASK);
        for (int c = 0; c < cp; ++c) {
          const Rank src = members[static_cast<size_t>(c)];
          const Rank dst = members[static_cast<size_t>((c + 1) % cp)];
          const Ring& ring = ring_of(src, inst);
          Task task;
          task.phase = ring.phase;
          task.group = CommGroup::CP;
          task.op = CollectiveOp::SEND;
          task.stream = Stream::CP_COMM;
          task.rank = src;
          task.stage = ring.stage;
          task.layer = ring.layer;
          task.micro_batch = ring.mb;
          task.bytes = ring.backward ? block * 2.0 : block; // backward: K,V with their dK,dV
          const Rank pair[2] = {src, dst};
          const TaskId send = g_.add_collective(task, pair);
          // A copy follows member 0's receive of the step before (the same moment by symmetry).
          const TaskId received = into[static_cast<size_t>(simulated(src) ? c : 0)];
          if (step == 1)
            g_.add_edge(ring.backward ? ring.chunk.front() : ring.start, send);
          else
            g_.add_edge(received, send);
          if (ring.backward) // the dK,dV it forwards include this rank's contribution
            g_.add_edge(ring.chunk[static_cast<size_t>(step - 1)], send);
          TaskId& chain = cp_chain[static_cast<size_t>(src)];
          if (chain != NO_TASK)
            g_.add_edge(chain, send);
          chain = send;
          if (simulated(dst))
            g_.add_edge(send, rings_.at(dst)[inst].chunk[static_cast<size_t>(step)]);
          sent[static_cast<size_t>((c + 1) % cp)] = send;
        }
        into = sent;
      }
    }
  }
}

} // namespace stepsim::graph::detail
