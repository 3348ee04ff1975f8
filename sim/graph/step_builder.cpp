#include "graph/step_builder.hpp"

#include "core/error.hpp"
#include "graph/schedule.hpp"
#include "model/transformer.hpp"

#include <map>
#include <optional>

namespace stepsim::graph {

namespace {

constexpr TaskId NO_TASK = ~TaskId{0};

/// Compute tasks of one rank's passes, indexed by micro-batch.
struct RankPasses {
  std::vector<TaskId> fwd_first, fwd_last, bwd_first, bwd_last;
  std::vector<TaskId> grad_ready;     ///< per local layer: the task after which its gradient is final
  TaskId output_grad_ready = NO_TASK; ///< last stage: logits backward of the final pass
  TaskId last_compute = NO_TASK;
};

class Builder {
public:
  Builder(const WorkloadSpec& w, const BuildOptions& o) : w_(w), o_(o) {
    grid_ = RankGrid{w.parallel.tp, w.parallel.pp, w.parallel.dp};
    m_ = static_cast<int>(w.micro_batches());
    replicas_ = o.fold_dp ? 1 : grid_.dp;
  }

  StepProgram build() {
    passes_.resize(static_cast<size_t>(grid_.size()));
    for (int p = 0; p < grid_.pp; ++p)
      for (int d = 0; d < replicas_; ++d)
        build_tp_group_compute(d, p);
    build_pp_sends();
    build_dp_and_optimizer();
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
  /// Forward/backward cost of one block, cached per (block, phase, stage).
  std::pair<Seconds, ComputeQuery> cost(Block block, Phase phase, int stage) {
    const auto key = std::make_tuple(static_cast<int>(block), static_cast<int>(phase), stage);
    if (auto it = cache_.find(key); it != cache_.end())
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
    }
    ComputeQuery q{.block = block, .phase = phase, .stage = stage, .flops = f, .bytes = bytes};
    auto result = std::make_pair(o_.compute_time(q), q);
    cache_.emplace(key, result);
    return result;
  }

  /// Adds one compute task on every rank of the TP group; returns their ids (index = tp rank).
  std::vector<TaskId> compute_on_group(const std::vector<Rank>& group, Block block, Phase phase, int stage,
                                       int layer, int mb) {
    const auto [dur, q] = cost(block, phase, stage);
    std::vector<TaskId> ids;
    ids.reserve(group.size());
    for (Rank r : group) {
      Task t;
      t.kind = TaskKind::COMPUTE;
      t.phase = phase;
      t.block = block;
      t.stream = Stream::COMPUTE;
      t.rank = r;
      t.stage = stage;
      t.layer = layer;
      t.micro_batch = mb;
      t.duration = dur;
      t.flops = q.flops;
      t.bytes = q.bytes;
      const TaskId id = g_.add_task(t);
      RankPasses& rp = passes_[static_cast<size_t>(r)];
      if (rp.last_compute != NO_TASK)
        g_.add_edge(rp.last_compute, id);
      rp.last_compute = id;
      ids.push_back(id);
    }
    return ids;
  }

  /// A TP all-reduce after `producers` (one per TP rank); the next compute waits on it.
  void tp_all_reduce(const std::vector<Rank>& group, const std::vector<TaskId>& producers, Phase phase,
                     int stage, int layer, int mb, TaskId& tp_chain) {
    if (grid_.tp == 1)
      return;
    Task t;
    t.phase = phase;
    t.group = CommGroup::TP;
    t.op = CollectiveOp::ALL_REDUCE;
    t.stream = Stream::TP_COMM;
    t.rank = group.front();
    t.stage = stage;
    t.layer = layer;
    t.micro_batch = mb;
    t.bytes = model::tp_collective_bytes(w_);
    const TaskId ar = g_.add_collective(t, group);
    for (TaskId p : producers)
      g_.add_edge(p, ar);
    if (tp_chain != NO_TASK)
      g_.add_edge(tp_chain, ar);
    tp_chain = ar;
    // The compute stream of every TP rank waits for the all-reduce: make it the chain tail.
    for (Rank r : group)
      pending_wait_[r] = ar;
  }

  /// Compute task that must also wait for a pending collective on its rank.
  std::vector<TaskId> compute_after_wait(const std::vector<Rank>& group, Block block, Phase phase, int stage,
                                         int layer, int mb) {
    std::vector<TaskId> ids = compute_on_group(group, block, phase, stage, layer, mb);
    for (size_t i = 0; i < group.size(); ++i) {
      auto it = pending_wait_.find(group[i]);
      if (it != pending_wait_.end()) {
        g_.add_edge(it->second, ids[i]);
        pending_wait_.erase(it);
      }
    }
    return ids;
  }

  void build_tp_group_compute(int d, int p) {
    std::vector<Rank> group;
    for (int t = 0; t < grid_.tp; ++t)
      group.push_back(grid_.rank(d, p, t));
    for (Rank r : group) {
      RankPasses& rp = passes_[static_cast<size_t>(r)];
      rp.fwd_first.assign(static_cast<size_t>(m_), NO_TASK);
      rp.fwd_last = rp.bwd_first = rp.bwd_last = rp.fwd_first;
      rp.grad_ready.assign(static_cast<size_t>(w_.model.layers / grid_.pp), NO_TASK);
    }
    const model::StageLayout layout = model::stage_layout(w_, p);
    TaskId tp_chain = NO_TASK;

    auto mark = [&](std::vector<TaskId> RankPasses::*field, const std::vector<TaskId>& ids, int mb, bool first) {
      for (size_t i = 0; i < group.size(); ++i) {
        auto& slot = (passes_[static_cast<size_t>(group[i])].*field)[static_cast<size_t>(mb)];
        if (!first || slot == NO_TASK)
          slot = ids[i];
      }
    };

    for (const PassRef& pass : stage_order(w_.parallel.schedule, p, grid_.pp, m_)) {
      const int mb = pass.micro_batch;
      if (pass.phase == Phase::FORWARD) {
        for (int64_t l = 0; l < layout.num_layers; ++l) {
          const int layer = static_cast<int>(layout.first_layer + l);
          auto attn = compute_after_wait(group, Block::ATTENTION, Phase::FORWARD, p, layer, mb);
          mark(&RankPasses::fwd_first, attn, mb, true);
          tp_all_reduce(group, attn, Phase::FORWARD, p, layer, mb, tp_chain);
          auto mlp = compute_after_wait(group, Block::MLP, Phase::FORWARD, p, layer, mb);
          tp_all_reduce(group, mlp, Phase::FORWARD, p, layer, mb, tp_chain);
          mark(&RankPasses::fwd_last, mlp, mb, false);
        }
        if (layout.has_output) {
          auto logits = compute_after_wait(group, Block::LOGITS, Phase::FORWARD, p, -1, mb);
          mark(&RankPasses::fwd_first, logits, mb, true);
          mark(&RankPasses::fwd_last, logits, mb, false);
        }
      } else {
        if (layout.has_output) {
          auto logits = compute_after_wait(group, Block::LOGITS, Phase::BACKWARD, p, -1, mb);
          mark(&RankPasses::bwd_first, logits, mb, true);
          for (size_t i = 0; i < group.size(); ++i)
            passes_[static_cast<size_t>(group[i])].output_grad_ready = logits[i];
        }
        for (int64_t l = layout.num_layers - 1; l >= 0; --l) {
          const int layer = static_cast<int>(layout.first_layer + l);
          auto mlp = compute_after_wait(group, Block::MLP, Phase::BACKWARD, p, layer, mb);
          mark(&RankPasses::bwd_first, mlp, mb, true);
          tp_all_reduce(group, mlp, Phase::BACKWARD, p, layer, mb, tp_chain);
          auto attn = compute_after_wait(group, Block::ATTENTION, Phase::BACKWARD, p, layer, mb);
          tp_all_reduce(group, attn, Phase::BACKWARD, p, layer, mb, tp_chain);
          mark(&RankPasses::bwd_last, attn, mb, false);
          for (size_t i = 0; i < group.size(); ++i)
            passes_[static_cast<size_t>(group[i])].grad_ready[static_cast<size_t>(l)] = attn[i];
        }
      }
      // The pass's output is ready only once its trailing TP all-reduce is done.
      for (Rank r : group)
        if (auto it = pending_wait_.find(r); it != pending_wait_.end())
          output_wait_[{r, mb, pass.phase == Phase::FORWARD}] = it->second;
    }
    // A trailing backward all-reduce (input gradient of the stage) must finish before the
    // gradient is sent or the step ends: record it as the last wait of each rank.
    for (Rank r : group) {
      auto it = pending_wait_.find(r);
      if (it != pending_wait_.end())
        trailing_wait_[r] = it->second;
    }
    pending_wait_.clear();
  }

  /// The task after which rank r's pass output (activation or input gradient) is available.
  TaskId pass_output(Rank r, int mb, Phase phase) {
    const RankPasses& rp = passes_[static_cast<size_t>(r)];
    return phase == Phase::FORWARD ? rp.fwd_last[static_cast<size_t>(mb)] : rp.bwd_last[static_cast<size_t>(mb)];
  }

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
            TaskId producer = pass_output(src, pass.micro_batch, pass.phase);
            // The output of a pass is ready only after its trailing TP all-reduce.
            g_.add_edge(producer, send);
            if (auto it = output_wait_.find({src, pass.micro_batch, fwd}); it != output_wait_.end())
              g_.add_edge(it->second, send);
            if (chain != NO_TASK)
              g_.add_edge(chain, send);
            chain = send;
            const RankPasses& rd = passes_[static_cast<size_t>(dst)];
            g_.add_edge(send, fwd ? rd.fwd_first[static_cast<size_t>(pass.micro_batch)]
                                  : rd.bwd_first[static_cast<size_t>(pass.micro_batch)]);
          }
        }
      }
    }
  }

  void build_dp_and_optimizer() {
    const double bytes_per_param = model::element_bytes(w_.precision);
    for (int p = 0; p < grid_.pp; ++p) {
      const model::StageLayout layout = model::stage_layout(w_, p);
      for (int t = 0; t < grid_.tp; ++t) {
        std::vector<Rank> dp_group;
        for (int d = 0; d < grid_.dp; ++d)
          dp_group.push_back(grid_.rank(d, p, t));
        // Gradient items in the order backward produces them, as (params, local layer or -1 for
        // output, -2 for embedding).
        std::vector<std::pair<double, int>> items;
        if (layout.has_output)
          items.emplace_back(model::output_params(w_.model, grid_.tp, grid_.pp), -1);
        for (int64_t l = layout.num_layers - 1; l >= 0; --l)
          items.emplace_back(model::layer_params(w_.model, grid_.tp), static_cast<int>(l));
        if (layout.has_embedding)
          items.emplace_back(model::embedding_params(w_.model, grid_.tp), -2);

        std::vector<TaskId> dp_chain(static_cast<size_t>(replicas_), NO_TASK);
        std::vector<TaskId> last_bucket(static_cast<size_t>(replicas_), NO_TASK);
        double bucket_params = 0;
        int bucket_index = 0;
        auto producer = [&](int d, int item) {
          const RankPasses& rp = passes_[static_cast<size_t>(grid_.rank(d, p, t))];
          if (item == -1)
            return rp.output_grad_ready;
          if (item == -2)
            return rp.grad_ready.front();
          return rp.grad_ready[static_cast<size_t>(item)];
        };
        auto emit = [&](int item) {
          if (bucket_params <= 0 || grid_.dp == 1)
            return;
          Task task;
          task.phase = Phase::BACKWARD;
          task.group = CommGroup::DP;
          task.op = CollectiveOp::ALL_REDUCE;
          task.stream = Stream::DP_COMM;
          task.rank = grid_.rank(0, p, t);
          task.stage = p;
          task.layer = bucket_index++;
          task.bytes = Bytes(bucket_params * bytes_per_param);
          const TaskId ar = g_.add_collective(task, dp_group);
          for (int d = 0; d < replicas_; ++d) {
            g_.add_edge(producer(d, item), ar);
            if (dp_chain[static_cast<size_t>(d)] != NO_TASK)
              g_.add_edge(dp_chain[static_cast<size_t>(d)], ar);
            dp_chain[static_cast<size_t>(d)] = ar;
          }
          bucket_params = 0;
        };
        const double bucket_limit = w_.training.dp_bucket.value() / bytes_per_param;
        for (size_t i = 0; i < items.size(); ++i) {
          bucket_params += items[i].first;
          if (bucket_params >= bucket_limit || i + 1 == items.size())
            emit(items[i].second);
        }

        // Optimizer step on every simulated rank of this (p, t).
        for (int d = 0; d < replicas_; ++d) {
          const Rank r = grid_.rank(d, p, t);
          RankPasses& rp = passes_[static_cast<size_t>(r)];
          double params = model::params_on_rank(w_, p);
          if (w_.parallel.zero_stage >= 1)
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
          task.duration = o_.compute_time(q);
          task.flops = q.flops;
          task.bytes = q.bytes;
          const TaskId opt = g_.add_task(task);
          g_.add_edge(rp.last_compute, opt);
          if (dp_chain[static_cast<size_t>(d)] != NO_TASK)
            g_.add_edge(dp_chain[static_cast<size_t>(d)], opt);
          if (auto it = trailing_wait_.find(r); it != trailing_wait_.end())
            g_.add_edge(it->second, opt);
          rp.last_compute = opt;
        }
      }
    }
  }

  const WorkloadSpec& w_;
  const BuildOptions& o_;
  RankGrid grid_;
  int m_ = 0;
  int replicas_ = 1;
  StepGraph g_;
  std::vector<RankPasses> passes_;
  std::map<Rank, TaskId> pending_wait_;
  std::map<Rank, TaskId> trailing_wait_;
  std::map<std::tuple<Rank, int, bool>, TaskId> output_wait_;
  std::map<std::tuple<int, int, int>, std::pair<Seconds, ComputeQuery>> cache_;
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
