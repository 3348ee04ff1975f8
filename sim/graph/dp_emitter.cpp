#include "graph/dp_emitter.hpp"

#include "graph/compute_cost.hpp"
#include "model/memory.hpp"
#include "model/moe.hpp"

#include <algorithm>

namespace stepsim::graph::detail {

ExpertShards ParamGathers::experts_of(int chunk, int l) const {
  ExpertShards xs;
  if (experts.empty())
    return xs;
  const auto& m = experts[static_cast<size_t>(chunk)];
  if (auto it = m.find(l); it != m.end())
    xs.gather = it->second;
  return xs;
}

std::vector<TaskId> ParamGathers::of(int chunk, size_t item) const {
  if (gather.empty())
    return {};
  const auto c = static_cast<size_t>(chunk);
  return gather[c][bucket_of[c][item]];
}

std::vector<Rank> DpEmitter::group(const DpGroup& g) const {
  std::vector<Rank> out;
  const int s = hybrid_shard();
  for (int d = 0; d < grid_.dp; ++d)
    if ((g.shard < 0 || d / s == g.shard) && (g.position < 0 || d % s == g.position))
      out.push_back(grid_.rank(d, g.stage, g.tp));
  return out;
}

int DpEmitter::hybrid_shard() const {
  const int s = w_.parallel.shard_group() * grid_.cp;
  return w_.parallel.zero_stage >= 3 && s < grid_.dp ? s : 0;
}

DpGroup DpEmitter::zero3_group(int p, int t, Rank r, bool replicas) const {
  DpGroup g{.stage = p, .tp = t};
  if (const int s = hybrid_shard(); s > 0) {
    const int d = (r / grid_.tp) % grid_.dp; // the grid's DP index (with the CP index)
    if (replicas)
      g.position = d % s;
    else
      g.shard = d / s;
  }
  return g;
}

TaskId DpEmitter::collective(const DpCollective& c) {
  TaskId id;
  if (auto it = tasks_.find(c.key); it != tasks_.end()) {
    id = it->second;
  } else {
    const DpGroup& dp = c.key.group;
    Task task =
        collective_task(CommGroup::DP, c.op, Stream::DP_COMM,
                        {.phase = c.phase, .stage = dp.stage, .layer = c.key.layer, .mb = c.mb}, c.bytes);
    const std::vector<Rank> ranks = group(dp);
    task.rank = ranks.front();
    task.bucket = c.key.bucket;
    task.param_alloc = c.alloc;
    id = g_.add_collective(task, ranks);
    tasks_.emplace(c.key, id);
  }
  if (c.producer != NO_TASK)
    g_.add_edge(c.producer, id);
  o_.streams.chain_dp(c.rank, id);
  return id;
}

model::StageLayout DpEmitter::chunk_layout(int p, int chunk) const {
  return model::chunk_span(w_, w_.parallel.global_chunk(p, chunk));
}

GradientItems DpEmitter::gradient_items(const model::StageLayout& layout) const {
  GradientItems out;
  if (layout.has_output) {
    out.params.push_back(model::output_params(w_.model, grid_.tp, grid_.pp));
    out.layer_of.push_back(-1);
  }
  for (int64_t l = layout.num_layers - 1; l >= 0; --l) {
    out.params.push_back(
        model::layer_params_at(w_.model, layout.first_layer + l, grid_.tp, grid_.ep, grid_.etp).dense);
    out.layer_of.push_back(static_cast<int>(l));
  }
  if (layout.has_embedding) {
    out.params.push_back(model::embedding_params(w_.model, grid_.tp));
    out.layer_of.push_back(-2);
  }
  return out;
}

Buckets DpEmitter::buckets(const std::vector<double>& params) const {
  Buckets out;
  const double limit = w_.training.dp_bucket.value() / model::element_bytes(w_.precision);
  double acc = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    acc += params[i];
    if (acc >= limit || i + 1 == params.size()) {
      out.emplace_back(i, acc);
      acc = 0;
    }
  }
  return out;
}

ParamGathers DpEmitter::overlapped_param_gathers(const std::vector<Rank>& ranks, int p) {
  ParamGathers out;
  const int zero = o_.shape.zero;
  if (!w_.training.overlap_param_gather || (zero != 1 && zero != 2) || grid_.dp == 1)
    return out;
  const double weight_bytes = model::weight_bytes(w_); // a gathered parameter's bytes
  const int vp = o_.shape.vp;
  out.gather.resize(static_cast<size_t>(vp));
  out.bucket_of.resize(static_cast<size_t>(vp));
  out.experts.resize(static_cast<size_t>(vp));
  for (int c = 0; c < vp; ++c) {
    const model::StageLayout layout = chunk_layout(p, c);
    const GradientItems items = gradient_items(layout);
    const Buckets bk = buckets(items.params);
    auto& of = out.bucket_of[static_cast<size_t>(c)];
    for (size_t b = 0, i = 0; b < bk.size(); ++b)
      for (; i <= bk[b].first; ++i)
        of.push_back(b);
    auto& gathers = out.gather[static_cast<size_t>(c)];
    gathers.resize(bk.size());
    for (size_t b = bk.size(); b-- > 0;) {
      for (size_t i = 0; i < ranks.size(); ++i)
        gathers[b].push_back(collective({.rank = ranks[i],
                                         .key = {.group = {p, static_cast<int>(i)},
                                                 .purpose = CollectivePurpose::PARAM_GATHER,
                                                 .chunk = c,
                                                 .bucket = static_cast<int>(b)},
                                         .op = CollectiveOp::ALL_GATHER,
                                         .bytes = Bytes(bk[b].second * weight_bytes),
                                         .phase = Phase::FORWARD}));
      // The bucket's MoE layers' experts, first layer first (items run last layer first).
      const size_t first_item = b == 0 ? 0 : bk[b - 1].first + 1;
      for (size_t item = bk[b].first + 1; item-- > first_item;) {
        const int l = items.layer_of[item];
        if (l < 0)
          continue;
        const int layer = static_cast<int>(layout.first_layer + l);
        const double experts = model::layer_params_at(w_.model, layer, grid_.tp, grid_.ep, grid_.etp).expert;
        if (experts <= 0)
          continue;
        std::vector<TaskId> ids;
        for (const Rank r : ranks)
          ids.push_back(o_.moe_cp.expert_gather(
              {.rank = r,
               .site = {.phase = Phase::FORWARD, .stage = p, .layer = layer, .mb = -1},
               .after = NO_TASK,
               .bytes = Bytes(experts * weight_bytes),
               .held = Bytes(0.0)}));
        if (ids.front() != NO_TASK)
          out.experts[static_cast<size_t>(c)][l] = std::move(ids);
      }
    }
  }
  return out;
}

void DpEmitter::sync(const Sync& s, const std::vector<Rank>& ranks,
                     const std::vector<std::vector<Rank>>& copies) {
  Task t = collective_task(s.group, CollectiveOp::ALL_REDUCE, s.stream,
                           {.phase = Phase::OPTIMIZER, .stage = s.stage}, s.bytes);
  t.rank = ranks.front();
  t.role = s.role;
  std::vector<TaskId> ids = {g_.add_collective(t, ranks)};
  for (const std::vector<Rank>& copy : copies) {
    t.rank = copy.front();
    ids.push_back(g_.add_collective(t, copy));
  }
  for (Rank r : ranks) {
    RankState& st = o_.streams[r];
    for (TaskId dep : {st.last_compute, st.dp_chain, st.pending_wait})
      if (dep != NO_TASK)
        for (const TaskId id : ids)
          g_.add_edge(dep, id);
    st.pending_wait = ids.front();
  }
}

std::vector<std::vector<Rank>> DpEmitter::copies_of(int d, const std::vector<Rank>& ranks) const {
  std::vector<std::vector<Rank>> out;
  if (static_cast<size_t>(d) >= o_.shape.copied.size())
    return out;
  for (const int c : o_.shape.copied[static_cast<size_t>(d)]) {
    std::vector<Rank> moved;
    for (const Rank r : ranks)
      moved.push_back(grid_.rank(c, grid_.pp_of(r), grid_.tp_of(r)));
    out.push_back(std::move(moved));
  }
  return out;
}

void DpEmitter::grad_sync() {
  const double e = model::grad_bytes(w_); // a gradient's bytes, as the DP buckets
  for (int d : o_.shape.replicas) {
    std::vector<Rank> all; // the replica's model-parallel group
    for (int p = 0; p < grid_.pp; ++p) {
      std::vector<Rank> tp_group;
      for (int t = 0; t < grid_.tp; ++t)
        tp_group.push_back(grid_.rank(d, p, t));
      all.insert(all.end(), tp_group.begin(), tp_group.end());
      if (o_.shape.sp)
        sync({.group = CommGroup::TP,
              .stream = Stream::TP_COMM,
              .stage = p,
              .bytes = Bytes(model::sequence_parallel_grad_params(w_, p) * e),
              .role = CommRole::NORM_GRADS},
             tp_group);
    }
    if (grid_.pp > 1 && (w_.model.tied_embeddings || w_.model.mtp_layers > 0)) {
      const Bytes bytes(static_cast<double>(w_.model.vocab) * static_cast<double>(w_.model.hidden) /
                        grid_.tp * e);
      for (int t = 0; t < o_.shape.tp_simulated(d); ++t) {
        const std::vector<Rank> ends = {grid_.rank(d, 0, t), grid_.rank(d, grid_.pp - 1, t)};
        sync({.group = CommGroup::PP,
              .stream = Stream::PP_COMM,
              .stage = 0,
              .bytes = bytes,
              .role = CommRole::TIED_EMBEDDING},
             ends, copies_of(d, ends));
      }
    }
    if (all.size() < 2)
      continue;
    std::sort(all.begin(), all.end());
    for (int i = 0; i < (w_.precision == Precision::FP16 ? 2 : 1); ++i)
      sync({.bytes = Bytes(4.0), .role = CommRole::GRAD_NORM}, all, copies_of(d, all));
  }
}

void DpEmitter::optimizer(int p, int t, const ComputeTimeFn& time) {
  const Buckets item_buckets = buckets(gradient_items(model::stage_layout(w_, p)).params);
  const double e = model::weight_bytes(w_); // the updated weights, gathered as stored
  const int zero = o_.shape.zero;
  for (int d : o_.shape.replicas) {
    if (t >= o_.shape.tp_simulated(d))
      continue;
    const Rank r = grid_.rank(d, p, t);
    RankState& st = o_.streams[r];
    const ComputeQuery q = optimizer_query(w_, p); // ZeRO: dense / (dp*cp), experts / expert_data_parallel
    Task task = compute_task(r, Block::OPTIMIZER, Phase::OPTIMIZER, p, -1, -1);
    const ComputeCost opt_cost = time(q);
    task.duration = opt_cost.time;
    task.sources = opt_cost.sources;
    task.flops = q.flops;
    task.bytes = q.bytes;
    const TaskId opt = g_.add_task(task);
    g_.add_edge(st.last_compute, opt);
    if (st.dp_chain != NO_TASK)
      g_.add_edge(st.dp_chain, opt);
    if (st.pending_wait != NO_TASK)
      g_.add_edge(st.pending_wait, opt);
    st.pending_wait = NO_TASK;
    st.last_compute = opt;
    // ZeRO-1/2: every rank updated its shard; gather the updated parameters (unless the next
    // step's forward does, overlapped_param_gathers).
    if ((zero == 1 || zero == 2) && grid_.dp > 1 && !w_.training.overlap_param_gather) {
      TaskId producer = opt;
      for (size_t b = 0; b < item_buckets.size(); ++b) {
        collective({.rank = r,
                    .key = {.group = {p, t},
                            .purpose = CollectivePurpose::OPTIMIZER_GATHER,
                            .bucket = static_cast<int>(b)},
                    .op = CollectiveOp::ALL_GATHER,
                    .bytes = Bytes(item_buckets[b].second * e),
                    .phase = Phase::OPTIMIZER,
                    .producer = producer});
        producer = NO_TASK;
      }
    }
    // ZeRO-2's experts, reduce-scattered every micro-batch, are gathered back likewise (ZeRO-1's
    // are all-reduced at the end of backward: the same volume).
    if (zero == 2 && !w_.training.overlap_param_gather)
      for (int c = 0; c < o_.shape.vp; ++c) {
        const model::StageLayout span = chunk_layout(p, c);
        for (int64_t l = 0; l < span.num_layers; ++l) {
          const int layer = static_cast<int>(span.first_layer + l);
          const double experts =
              model::layer_params_at(w_.model, layer, grid_.tp, grid_.ep, grid_.etp).expert;
          if (experts > 0)
            o_.moe_cp.expert_gather(
                {.rank = r,
                 .site = {.phase = Phase::OPTIMIZER, .stage = p, .layer = layer, .mb = -1},
                 .after = opt,
                 .bytes = Bytes(experts * e),
                 .held = Bytes(0.0)});
        }
      }
  }
}

} // namespace stepsim::graph::detail
