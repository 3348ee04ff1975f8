#include "graph/step_builder.hpp"

#include "core/error.hpp"
#include "graph/schedule.hpp"
#include "model/memory.hpp"
#include "model/transformer.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace stepsim::graph {

namespace {

constexpr TaskId NO_TASK = ~TaskId{0};

/// Per-rank state while building.
struct RankState {
  std::vector<TaskId> fwd_first, fwd_last, bwd_first, bwd_last; ///< per micro-batch
  std::vector<TaskId> fwd_out_wait, bwd_out_wait;               ///< trailing TP collective of a pass
  TaskId last_compute = NO_TASK;
  TaskId pending_wait = NO_TASK; ///< collective the next compute task must wait for
  TaskId dp_chain = NO_TASK;     ///< last task on the DP stream
};

/// A gradient (or parameter) item in the order backward produces it.
struct GradItem {
  double params = 0;
  TaskId producer = NO_TASK; ///< per rank of the TP group, filled during a pass
};

class Builder {
public:
  Builder(const WorkloadSpec& w, const BuildOptions& o) : w_(w), o_(o) {
    grid_ = RankGrid{w.parallel.tp, w.parallel.pp, w.parallel.dp};
    m_ = static_cast<int>(w.micro_batches());
    replicas_ = o.fold_dp ? 1 : grid_.dp;
    zero_ = w.parallel.zero_stage;
    sp_ = w.parallel.sp && grid_.tp > 1;
    stored_ = model::stored_layer_activations(w);
    working_ = model::recompute_working_set(w);
  }

  StepProgram build() {
    ranks_.resize(static_cast<size_t>(grid_.size()));
    for (int p = 0; p < grid_.pp; ++p)
      for (int d = 0; d < replicas_; ++d)
        build_tp_group(d, p);
    build_pp_sends();
    for (int p = 0; p < grid_.pp; ++p)
      for (int t = 0; t < grid_.tp; ++t)
        build_optimizer(p, t);
    g_.finalize();

    StepProgram out;
    out.grid = grid_;
    out.micro_batches = m_;
    for (int p = 0; p < grid_.pp; ++p)
      for (int d = 0; d < replicas_; ++d)
        for (int t = 0; t < grid_.tp; ++t)
          out.simulated_ranks.push_back(grid_.rank(d, p, t));
    std::sort(out.simulated_ranks.begin(), out.simulated_ranks.end());
    out.graph = std::move(g_);
    return out;
  }

private:
  RankState& rs(Rank r) { return ranks_[static_cast<size_t>(r)]; }

  // ---- compute ------------------------------------------------------------------------------

  /// Duration and query of one block, cached per (block, phase, stage).
  std::pair<ComputeCost, ComputeQuery> cost(Block block, Phase phase, int stage) {
    const auto key = std::make_tuple(static_cast<int>(block), static_cast<int>(phase), stage);
    if (auto it = cost_cache_.find(key); it != cost_cache_.end())
      return it->second;
    const ModelSpec& m = w_.model;
    const int64_t b = w_.batch.micro_batch;
    const int tp = grid_.tp;
    Flops f;
    Bytes bytes;
    const Bytes layer_bytes = model::layer_forward_bytes(m, b, tp, w_.precision);
    const Flops layer_flops = model::layer_forward_flops(m, b, tp);
    switch (block) {
    case Block::ATTENTION:
      f = model::attention_block_forward_flops(m, b, tp);
      bytes = layer_bytes * (f / layer_flops);
      break;
    case Block::MLP:
      f = model::mlp_block_forward_flops(m, b, tp);
      bytes = layer_bytes * (f / layer_flops);
      break;
    case Block::LOGITS:
      f = model::logits_forward_flops(m, b, tp);
      bytes = model::logits_forward_bytes(m, b, tp, w_.precision);
      break;
    default:
      throw ModelError("internal: no cost for block " + std::string(to_string(block)));
    }
    if (phase == Phase::BACKWARD) {
      f = f * 2.0;
      bytes = bytes * 2.0;
      // Selective recomputation repeats the attention core before the attention backward.
      if (block == Block::ATTENTION && w_.training.recompute == Recompute::SELECTIVE)
        f += model::attention_core_flops(m, b, tp);
    }
    ComputeQuery q{.block = block, .phase = phase, .stage = stage, .flops = f, .bytes = bytes};
    auto result = std::make_pair(o_.compute_time(q), q);
    cost_cache_.emplace(key, result);
    return result;
  }

  /// One compute task on every rank of the TP group, each after its rank's previous compute
  /// task, the collective it waits for and `extra_dep` (per rank, may be NO_TASK).
  std::vector<TaskId> compute(const std::vector<Rank>& group, Block block, Phase phase, int stage, int layer, int mb,
                              Bytes alloc, Bytes free, const std::vector<TaskId>& extra_dep = {},
                              Bytes param_free = Bytes(0.0)) {
    const auto [dur, q] = cost(block, phase, stage);
    std::vector<TaskId> ids;
    ids.reserve(group.size());
    for (size_t i = 0; i < group.size(); ++i) {
      const Rank r = group[i];
      Task t;
      t.kind = TaskKind::COMPUTE;
      t.phase = phase;
      t.block = block;
      t.stream = Stream::COMPUTE;
      t.rank = r;
      t.stage = stage;
      t.layer = layer;
      t.micro_batch = mb;
      t.duration = dur.time;
      t.sources = dur.sources;
      t.flops = q.flops;
      t.bytes = q.bytes;
      t.act_alloc = alloc;
      t.act_free = free;
      t.param_free = param_free;
      const TaskId id = g_.add_task(t);
      RankState& st = rs(r);
      if (st.last_compute != NO_TASK)
        g_.add_edge(st.last_compute, id);
      if (st.pending_wait != NO_TASK) {
        g_.add_edge(st.pending_wait, id);
        st.pending_wait = NO_TASK;
      }
      if (!extra_dep.empty() && extra_dep[i] != NO_TASK)
        g_.add_edge(extra_dep[i], id);
      st.last_compute = id;
      ids.push_back(id);
    }
    return ids;
  }

  // ---- TP ----------------------------------------------------------------------------------

  /// The TP collective(s) after one block: an all-reduce, or with sequence parallelism a
  /// reduce-scatter then an all-gather of the same payload. The next compute waits for it.
  void tp_comm(const std::vector<Rank>& group, const std::vector<TaskId>& producers, Phase phase, int stage,
               int layer, int mb, TaskId& tp_chain) {
    if (grid_.tp == 1)
      return;
    auto one = [&](CollectiveOp op, const std::vector<TaskId>& deps) {
      Task t;
      t.phase = phase;
      t.group = CommGroup::TP;
      t.op = op;
      t.stream = Stream::TP_COMM;
      t.rank = group.front();
      t.stage = stage;
      t.layer = layer;
      t.micro_batch = mb;
      t.bytes = model::tp_collective_bytes(w_);
      const TaskId id = g_.add_collective(t, group);
      for (TaskId p : deps)
        g_.add_edge(p, id);
      if (tp_chain != NO_TASK)
        g_.add_edge(tp_chain, id);
      tp_chain = id;
      return id;
    };
    TaskId last;
    if (sp_) {
      const TaskId rs = one(CollectiveOp::REDUCE_SCATTER, producers);
      last = one(CollectiveOp::ALL_GATHER, {rs});
    } else {
      last = one(CollectiveOp::ALL_REDUCE, producers);
    }
    for (Rank r : group)
      rs(r).pending_wait = last;
  }

  // ---- DP ----------------------------------------------------------------------------------

  std::vector<Rank> dp_group(int p, int t) const {
    std::vector<Rank> out;
    for (int d = 0; d < grid_.dp; ++d)
      out.push_back(grid_.rank(d, p, t));
    return out;
  }

  /// A DP collective of the group (p, t), shared by all simulated replicas: the first replica to
  /// issue it (same `key`) creates it; each issuing rank chains it on its DP stream after
  /// `producer`.
  TaskId dp_collective(Rank rank, int p, int t, const std::tuple<int, int, int>& key, CollectiveOp op, Bytes bytes,
                       Phase phase, int layer, int mb, TaskId producer, Bytes alloc = Bytes(0.0),
                       int bucket = -1) {
    const auto full_key = std::make_tuple(p, t, std::get<0>(key), std::get<1>(key), std::get<2>(key));
    TaskId id;
    if (auto it = dp_tasks_.find(full_key); it != dp_tasks_.end()) {
      id = it->second;
    } else {
      Task task;
      task.phase = phase;
      task.group = CommGroup::DP;
      task.op = op;
      task.stream = Stream::DP_COMM;
      task.rank = grid_.rank(0, p, t);
      task.stage = p;
      task.layer = layer;
      task.micro_batch = mb;
      task.bucket = bucket;
      task.bytes = bytes;
      task.param_alloc = alloc;
      const std::vector<Rank> group = dp_group(p, t);
      id = g_.add_collective(task, group);
      dp_tasks_.emplace(full_key, id);
    }
    RankState& st = rs(rank);
    if (producer != NO_TASK)
      g_.add_edge(producer, id);
    if (st.dp_chain != NO_TASK)
      g_.add_edge(st.dp_chain, id);
    st.dp_chain = id;
    return id;
  }

  /// Gradient items of a stage in backward order: output layer, layers last to first, embedding.
  /// Index i of the result: 0..; `layer_of[i]` is the local layer (-1 output, -2 embedding).
  void gradient_items(int p, std::vector<double>& params, std::vector<int>& layer_of) const {
    const model::StageLayout layout = model::stage_layout(w_, p);
    params.clear();
    layer_of.clear();
    if (layout.has_output) {
      params.push_back(model::output_params(w_.model, grid_.tp, grid_.pp));
      layer_of.push_back(-1);
    }
    for (int64_t l = layout.num_layers - 1; l >= 0; --l) {
      params.push_back(model::layer_params(w_.model, grid_.tp));
      layer_of.push_back(static_cast<int>(l));
    }
    if (layout.has_embedding) {
      params.push_back(model::embedding_params(w_.model, grid_.tp));
      layer_of.push_back(-2);
    }
  }

  /// Bucket boundaries over the gradient items: each bucket closes at the first item that makes
  /// it reach `dp_bucket`, and at the last item. Returns, per bucket, (last item, params).
  std::vector<std::pair<size_t, double>> buckets(const std::vector<double>& params) const {
    std::vector<std::pair<size_t, double>> out;
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

  // ---- one TP group's passes ----------------------------------------------------------------

  void build_tp_group(int d, int p) {
    std::vector<Rank> group;
    for (int t = 0; t < grid_.tp; ++t)
      group.push_back(grid_.rank(d, p, t));
    for (Rank r : group) {
      RankState& st = rs(r);
      st.fwd_first.assign(static_cast<size_t>(m_), NO_TASK);
      st.fwd_last = st.bwd_first = st.bwd_last = st.fwd_out_wait = st.bwd_out_wait = st.fwd_first;
    }
    const model::StageLayout layout = model::stage_layout(w_, p);
    const int n_layers = static_cast<int>(layout.num_layers);
    const double e = model::element_bytes(w_.precision);
    const Bytes logits_act = model::logits_activations(w_);
    std::vector<double> item_params;
    std::vector<int> item_layer;
    gradient_items(p, item_params, item_layer);
    const auto item_buckets = buckets(item_params);

    // ZeRO-3: parameters of local layer l gathered as one collective; the first and last layers
    // also carry the embedding / output parameters of their stage.
    auto zero3_params = [&](int l) {
      double extra = 0;
      if (l == 0 && layout.has_embedding)
        extra += model::embedding_params(w_.model, grid_.tp);
      if (l == n_layers - 1 && layout.has_output)
        extra += model::output_params(w_.model, grid_.tp, grid_.pp);
      return model::layer_params(w_.model, grid_.tp) + extra;
    };

    TaskId tp_chain = NO_TASK;
    int pass_index = 0, backward_passes = 0;
    for (const PassRef& pass : stage_order(w_.parallel.schedule, p, grid_.pp, m_)) {
      const int mb = pass.micro_batch;
      const bool fwd = pass.phase == Phase::FORWARD;
      if (!fwd)
        ++backward_passes;
      const bool last_backward = !fwd && backward_passes == m_;
      auto mark_first = [&](std::vector<TaskId> RankState::*field, const std::vector<TaskId>& ids) {
        for (size_t i = 0; i < group.size(); ++i) {
          TaskId& slot = (rs(group[i]).*field)[static_cast<size_t>(mb)];
          if (slot == NO_TASK)
            slot = ids[i];
        }
      };
      auto mark_last = [&](std::vector<TaskId> RankState::*field, const std::vector<TaskId>& ids) {
        for (size_t i = 0; i < group.size(); ++i)
          (rs(group[i]).*field)[static_cast<size_t>(mb)] = ids[i];
      };

      // ZeRO-3 gathers: position j of the pass (layers in pass order) is gathered ahead, at most
      // prefetch + 1 layers resident; gather j waits for the task that freed position j-prefetch-1.
      const int prefetch = w_.training.zero3_prefetch;
      std::vector<std::vector<TaskId>> gather(static_cast<size_t>(n_layers)); // per position, per TP rank
      std::vector<std::vector<TaskId>> freer(static_cast<size_t>(n_layers));  // task freeing position
      int issued = 0;
      auto issue_gathers_up_to = [&](int upto) {
        if (zero_ < 3 || grid_.dp == 1)
          return;
        for (; issued <= std::min(upto, n_layers - 1); ++issued) {
          const int j = issued;
          const int l = fwd ? j : n_layers - 1 - j;
          const double params = zero3_params(l);
          gather[static_cast<size_t>(j)].resize(group.size());
          for (size_t i = 0; i < group.size(); ++i) {
            const int t = static_cast<int>(i);
            const TaskId after = j - prefetch - 1 >= 0 ? freer[static_cast<size_t>(j - prefetch - 1)][i] : NO_TASK;
            gather[static_cast<size_t>(j)][i] =
                dp_collective(group[i], p, t, {pass_index, 0, j}, CollectiveOp::ALL_GATHER, Bytes(params * e),
                              pass.phase, static_cast<int>(layout.first_layer + l), mb, after, Bytes(params * e));
          }
        }
      };
      auto gather_of = [&](int j) {
        return zero_ >= 3 && grid_.dp > 1 ? gather[static_cast<size_t>(j)] : std::vector<TaskId>{};
      };
      auto gathered_bytes = [&](int l) { return zero_ >= 3 && grid_.dp > 1 ? Bytes(zero3_params(l) * e) : Bytes(0.0); };

      if (fwd) {
        for (int j = 0; j < n_layers; ++j) {
          issue_gathers_up_to(j + prefetch);
          const int l = j;
          const int layer = static_cast<int>(layout.first_layer + l);
          auto attn = compute(group, Block::ATTENTION, Phase::FORWARD, p, layer, mb, stored_.attention, Bytes(0.0),
                              gather_of(j));
          mark_first(&RankState::fwd_first, attn);
          tp_comm(group, attn, Phase::FORWARD, p, layer, mb, tp_chain);
          auto mlp = compute(group, Block::MLP, Phase::FORWARD, p, layer, mb, stored_.mlp, Bytes(0.0), {},
                             gathered_bytes(l));
          tp_comm(group, mlp, Phase::FORWARD, p, layer, mb, tp_chain);
          freer[static_cast<size_t>(j)] = mlp;
          mark_last(&RankState::fwd_last, mlp);
        }
        if (layout.has_output) {
          auto logits = compute(group, Block::LOGITS, Phase::FORWARD, p, -1, mb, logits_act, Bytes(0.0));
          mark_first(&RankState::fwd_first, logits);
          mark_last(&RankState::fwd_last, logits);
        }
      } else {
        // Gradients become final per item; ZeRO-0/1 reduce them once (last pass), ZeRO-2/3 every
        // pass (their gradients are sharded, so they cannot accumulate locally).
        const bool reduce_now = zero_ >= 2 ? true : last_backward;
        std::vector<std::vector<TaskId>> item_producer(item_params.size());
        size_t item = 0;
        size_t bucket = 0;
        auto item_done = [&](const std::vector<TaskId>& producers) {
          item_producer[item] = producers;
          if (zero_ < 3 && reduce_now && grid_.dp > 1 && bucket < item_buckets.size() &&
              item_buckets[bucket].first == item) {
            const CollectiveOp op = zero_ == 0 ? CollectiveOp::ALL_REDUCE : CollectiveOp::REDUCE_SCATTER;
            // ZeRO-0/1 reduce the accumulated gradients once per step; ZeRO-2 per micro-batch.
            for (size_t i = 0; i < group.size(); ++i)
              dp_collective(group[i], p, static_cast<int>(i), {pass_index, 1, static_cast<int>(bucket)}, op,
                            Bytes(item_buckets[bucket].second * e), Phase::BACKWARD, -1, zero_ >= 2 ? mb : -1,
                            producers[i], Bytes(0.0), static_cast<int>(bucket));
            ++bucket;
          }
          ++item;
        };

        if (layout.has_output) {
          auto logits = compute(group, Block::LOGITS, Phase::BACKWARD, p, -1, mb, Bytes(0.0), logits_act);
          mark_first(&RankState::bwd_first, logits);
          item_done(logits);
        }
        for (int j = 0; j < n_layers; ++j) {
          issue_gathers_up_to(j + prefetch);
          const int l = n_layers - 1 - j;
          const int layer = static_cast<int>(layout.first_layer + l);
          std::vector<TaskId> first_dep = gather_of(j);
          if (w_.training.recompute == Recompute::FULL) {
            auto ra = compute(group, Block::ATTENTION, Phase::RECOMPUTE, p, layer, mb, working_.attention, Bytes(0.0),
                              first_dep);
            mark_first(&RankState::bwd_first, ra);
            tp_comm(group, ra, Phase::RECOMPUTE, p, layer, mb, tp_chain);
            auto rm = compute(group, Block::MLP, Phase::RECOMPUTE, p, layer, mb, working_.mlp, Bytes(0.0));
            tp_comm(group, rm, Phase::RECOMPUTE, p, layer, mb, tp_chain);
            first_dep.clear();
          }
          auto mlp = compute(group, Block::MLP, Phase::BACKWARD, p, layer, mb, Bytes(0.0), stored_.mlp + working_.mlp,
                             first_dep);
          mark_first(&RankState::bwd_first, mlp);
          tp_comm(group, mlp, Phase::BACKWARD, p, layer, mb, tp_chain);
          auto attn = compute(group, Block::ATTENTION, Phase::BACKWARD, p, layer, mb, Bytes(0.0),
                              stored_.attention + working_.attention, {}, gathered_bytes(l));
          tp_comm(group, attn, Phase::BACKWARD, p, layer, mb, tp_chain);
          mark_last(&RankState::bwd_last, attn);
          freer[static_cast<size_t>(j)] = attn;
          if (zero_ >= 3 && grid_.dp > 1) {
            // ZeRO-3: the layer's gradients are reduce-scattered as soon as they exist.
            const double params = zero3_params(l);
            for (size_t i = 0; i < group.size(); ++i)
              dp_collective(group[i], p, static_cast<int>(i), {pass_index, 2, j}, CollectiveOp::REDUCE_SCATTER,
                            Bytes(params * e), Phase::BACKWARD, layer, mb, attn[i]);
          }
          item_done(attn);
        }
        if (layout.has_embedding)
          item_done(item_producer[item - 1]);
      }
      // The pass's output is ready only once its trailing TP collective is done.
      for (Rank r : group) {
        RankState& st = rs(r);
        if (st.pending_wait != NO_TASK)
          (fwd ? st.fwd_out_wait : st.bwd_out_wait)[static_cast<size_t>(mb)] = st.pending_wait;
      }
      ++pass_index;
    }
  }

  // ---- PP ----------------------------------------------------------------------------------

  void build_pp_sends() {
    if (grid_.pp == 1)
      return;
    const Bytes msg = model::pp_message_bytes(w_);
    for (int p = 0; p < grid_.pp; ++p) {
      for (int d = 0; d < replicas_; ++d) {
        for (int t = 0; t < grid_.tp; ++t) {
          const Rank src = grid_.rank(d, p, t);
          TaskId chain = NO_TASK;
          for (const PassRef& pass : stage_order(w_.parallel.schedule, p, grid_.pp, m_)) {
            const bool fwd = pass.phase == Phase::FORWARD;
            const int dst_stage = fwd ? p + 1 : p - 1;
            if (dst_stage < 0 || dst_stage >= grid_.pp)
              continue;
            const Rank dst = grid_.rank(d, dst_stage, t);
            const size_t mb = static_cast<size_t>(pass.micro_batch);
            Task task;
            task.phase = pass.phase;
            task.group = CommGroup::PP;
            task.op = CollectiveOp::SEND;
            task.stream = Stream::PP_COMM;
            task.rank = src;
            task.stage = p;
            task.micro_batch = pass.micro_batch;
            task.bytes = msg;
            const Rank pair[2] = {src, dst};
            const TaskId send = g_.add_collective(task, pair);
            const RankState& s = rs(src);
            g_.add_edge(fwd ? s.fwd_last[mb] : s.bwd_last[mb], send);
            const TaskId wait = fwd ? s.fwd_out_wait[mb] : s.bwd_out_wait[mb];
            if (wait != NO_TASK)
              g_.add_edge(wait, send);
            if (chain != NO_TASK)
              g_.add_edge(chain, send);
            chain = send;
            const RankState& r = rs(dst);
            g_.add_edge(send, fwd ? r.fwd_first[mb] : r.bwd_first[mb]);
          }
        }
      }
    }
  }

  // ---- optimizer and ZeRO-1/2 parameter all-gather ------------------------------------------

  void build_optimizer(int p, int t) {
    std::vector<double> item_params;
    std::vector<int> item_layer;
    gradient_items(p, item_params, item_layer);
    const auto item_buckets = buckets(item_params);
    const double e = model::element_bytes(w_.precision);
    for (int d = 0; d < replicas_; ++d) {
      const Rank r = grid_.rank(d, p, t);
      RankState& st = rs(r);
      double params = model::params_on_rank(w_, p);
      if (zero_ >= 1)
        params /= grid_.dp;
      const Bytes moved(params * 2.0 * (w_.training.optimizer_bytes_per_param + 2.0));
      ComputeQuery q{.block = Block::OPTIMIZER, .phase = Phase::OPTIMIZER, .stage = p,
                     .flops = Flops(params * 12.0), .bytes = moved};
      Task task;
      task.kind = TaskKind::COMPUTE;
      task.phase = Phase::OPTIMIZER;
      task.block = Block::OPTIMIZER;
      task.rank = r;
      task.stage = p;
      const ComputeCost opt_cost = o_.compute_time(q);
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
      // ZeRO-1/2: every rank updated its shard; gather the updated parameters.
      if ((zero_ == 1 || zero_ == 2) && grid_.dp > 1) {
        TaskId producer = opt;
        for (size_t b = 0; b < item_buckets.size(); ++b) {
          dp_collective(r, p, t, {-1, 3, static_cast<int>(b)}, CollectiveOp::ALL_GATHER,
                        Bytes(item_buckets[b].second * e), Phase::OPTIMIZER, -1, -1, producer, Bytes(0.0),
                        static_cast<int>(b));
          producer = NO_TASK;
        }
      }
    }
  }

  const WorkloadSpec& w_;
  const BuildOptions& o_;
  RankGrid grid_;
  int m_ = 0;
  int replicas_ = 1;
  int zero_ = 0;
  bool sp_ = false;
  model::LayerActivations stored_, working_;
  StepGraph g_;
  std::vector<RankState> ranks_;
  std::map<std::tuple<int, int, int, int, int>, TaskId> dp_tasks_;
  std::map<std::tuple<int, int, int>, std::pair<ComputeCost, ComputeQuery>> cost_cache_;
};

} // namespace

StepProgram build_step(const WorkloadSpec& w, const BuildOptions& options) {
  if (!options.compute_time)
    throw ModelError("build_step: BuildOptions.compute_time is required");
  if (w.parallel.dp < 1 || w.micro_batches() < 1)
    throw ModelError("build_step: layout not checked (dp or micro-batches < 1)");
  return Builder(w, options).build();
}

} // namespace stepsim::graph
