#include "graph/step_builder.hpp"

#include "core/error.hpp"
#include "graph/moe_builder.hpp"
#include "graph/schedule.hpp"
#include "model/memory.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
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
  Seconds pass_overhead{0.0};    ///< host cost of the current pass, not yet charged to a compute task
};

/// A gradient (or parameter) item in the order backward produces it.
struct GradItem {
  double params = 0;
  TaskId producer = NO_TASK; ///< per rank of the TP group, filled during a pass
};

class Builder {
public:
  Builder(const WorkloadSpec& w, const BuildOptions& o) : w_(w), o_(o) {
    grid_ = RankGrid{w.parallel.tp, w.parallel.pp, w.parallel.dp * w.parallel.cp, w.parallel.cp, w.parallel.ep,
                     w.parallel.expert_tp()};
    m_ = static_cast<int>(w.micro_batches());
    // Folded: all CP ranks of one EP group, or of one EP rank with fold_ep (docs/moe.md); without
    // experts, CP index 0 alone, the other CP ranks' ring and pipeline sends copying its own,
    // where every ring hop is alike: between nodes (one TP group per node) or inside one node
    // (docs/engine.md).
    const int node = o.gpus_per_node;
    const bool alike_hops = node > 0 && (grid_.tp == node || node % (grid_.tp * grid_.cp) == 0);
    fold_cp_ = o.fold_dp && grid_.cp > 1 && grid_.ep == 1 && !grid_.folded() && alike_hops;
    replicas_ = fold_cp_ ? 1 : o.fold_dp ? grid_.cp * (o.fold_ep ? 1 : grid_.ep) : grid_.dp;
    if (o.fold_dp && !o.fold_ep && grid_.folded()) {
      // Expert groups folded over the TP ranks: the first replicas (whole CP groups) whose GPUs
      // make up whole EP groups, etp*ep consecutive GPUs of a stage.
      replicas_ = grid_.cp;
      while ((grid_.tp * replicas_) % (grid_.etp * grid_.ep) != 0 && replicas_ < grid_.dp)
        replicas_ += grid_.cp;
    }
    zero_ = w.parallel.zero_stage;
    sp_ = w.parallel.sp && grid_.tp > 1;
    vp_ = std::max(1, w.parallel.vp);
    split_ = splits_backward(w.parallel.schedule);
    stored_ = model::stored_layer_activations(w);
    working_ = model::recompute_working_set(w);
    moe_cp_ = std::make_unique<detail::MoeCpEmitter>(
        w, grid_, m_, split_, o.fold_dp && o.fold_ep, fold_cp_, g_,
        detail::MoeCpEmitter::Host{[this](Rank r) -> TaskId& { return rs(r).last_compute; },
                                   [this](Rank r) -> TaskId& { return rs(r).pending_wait; },
                                   [this](Rank r) -> TaskId& { return rs(r).dp_chain; },
                                   [this](Block b, Phase ph, int s) { return cost(b, ph, s); },
                                   [this](Rank r) { return take_pass_overhead(r); }});
  }

  StepProgram build() {
    refuse_oversized();
    ranks_.resize(static_cast<size_t>(grid_.size()));
    for (int p = 0; p < grid_.pp; ++p)
      for (int d = 0; d < replicas_; ++d)
        build_tp_group(d, p);
    build_pp_sends();
    moe_cp_->finish();
    build_grad_sync();
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
  /// The graph has a few tasks per layer, pass and simulated GPU (about 2.5 measured without
  /// context parallelism; the ring attention of cp ranks adds its steps: about 5 at cp 2 and 9 at
  /// cp 4, bounded here by 3 cp; cp^2 + 3 when the other CP ranks' sends are copied in full). Refuse one that could not be held in memory before allocating any
  /// of it: a typo such as 10^9 layers, or cp 8 on a long pipeline, would otherwise exhaust the
  /// machine's memory.
  void refuse_oversized() const {
    constexpr double kMaxLayerPasses = 1e7; // at 3 tasks each: ~3e7 tasks, ~8 GB
    const double per_gpu = static_cast<double>(w_.model.layers) / grid_.pp;
    const double passes = static_cast<double>(m_) * (split_ ? 3.0 : 2.0);
    const double gpus = static_cast<double>(replicas_) * grid_.pp * grid_.tp;
    const double layer_passes = per_gpu * passes * gpus;
    // Tasks per layer pass, an upper bound: with folded CP and no sampling, the other CP ranks'
    // ring sends are copied too (cp - 1 steps of cp sends).
    const double cp = grid_.cp;
    const double per_pass = fold_cp_ ? cp * cp + 3.0 : 3.0 * cp;
    if (layer_passes * per_pass <= kMaxLayerPasses * 3.0)
      return;
    char text[320];
    std::snprintf(text, sizeof text,
                  "the step would compile into %.3g layer passes (%.3g layers per GPU x %.0f passes x %.0f "
                  "simulated GPUs) of about %.0f tasks each, more than the %.0e tasks the engine holds in "
                  "memory; use fewer model.layers, micro-batches or context-parallel ranks",
                  layer_passes, per_gpu, passes, gpus, per_pass, kMaxLayerPasses * 3.0);
    throw ModelError(text);
  }

  RankState& rs(Rank r) { return ranks_[static_cast<size_t>(r)]; }

  // ---- compute ------------------------------------------------------------------------------

  /// True when `block` of global layer `layer` is an attention block whose sliding window is
  /// shorter than the sequence (else it costs as full attention).
  [[nodiscard]] bool windowed(Block block, int layer) const {
    const ModelSpec& m = w_.model;
    return block == Block::ATTENTION && m.windowed_layer(layer) && m.window_below_sequence();
  }

  /// Duration and query of one block, cached per (block, phase, stage, windowed).
  std::pair<ComputeCost, ComputeQuery> cost(Block block, Phase phase, int stage, bool windowed = false) {
    const auto key = std::make_tuple(static_cast<int>(block), static_cast<int>(phase), stage, windowed);
    if (auto it = cost_cache_.find(key); it != cost_cache_.end())
      return it->second;
    const ComputeQuery q = block_query(w_, block, phase, stage, windowed);
    const auto result = std::make_pair(gpu_compute_cost(w_, o_.compute_time, q), q);
    cost_cache_.emplace(key, result);
    return result;
  }

  /// Zero-bubble split of a block's backward (docs/schedules.md): W is the weight-gradient GEMMs,
  /// B the rest (input-gradient GEMMs, the attention core's backward, a selectively recomputed
  /// core); time, FLOPs and bytes split in that ratio (model::BlockWork::weight_grad_share).
  std::pair<ComputeCost, ComputeQuery> split_cost(Block block, Phase phase, int stage, bool windowed) {
    auto [c, q] = cost(block, Phase::BACKWARD, stage, windowed);
    const double w_share = block_work(w_, block, windowed).weight_grad_share();
    const double share = phase == Phase::WEIGHT_GRAD ? w_share : 1.0 - w_share;
    c.time = c.time * share;
    q.flops = q.flops * share;
    q.bytes = q.bytes * share;
    q.phase = phase;
    return {c, q};
  }

  /// The pass overhead not yet charged on rank r (charged once, to the pass's first compute task).
  Seconds take_pass_overhead(Rank r) {
    const Seconds s = rs(r).pass_overhead;
    rs(r).pass_overhead = Seconds(0.0);
    return s;
  }

  /// One compute task on every rank of the TP group, each after its rank's previous compute
  /// task, the collective it waits for and `extra_dep` (per rank, may be NO_TASK).
  std::vector<TaskId> compute(const std::vector<Rank>& group, Block block, Phase phase, int stage, int layer, int mb,
                              Bytes alloc, Bytes free, const std::vector<TaskId>& extra_dep = {},
                              Bytes param_free = Bytes(0.0),
                              const detail::MoeCpEmitter::ExpertShards& shards = {}) {
    if (moe_cp_->handles(block, layer)) // MoE MLP blocks, CP ring attention (graph/moe_builder.hpp)
      return moe_cp_->emit(group, block, phase, stage, layer, mb, alloc, free, extra_dep, param_free, shards);
    const bool window = windowed(block, layer);
    const auto [dur, q] = split_ && (phase == Phase::BACKWARD || phase == Phase::WEIGHT_GRAD)
                              ? split_cost(block, phase, stage, window)
                              : cost(block, phase, stage, window);
    std::vector<TaskId> ids;
    ids.reserve(group.size());
    for (size_t i = 0; i < group.size(); ++i) {
      const Rank r = group[i];
      Task t = compute_task(r, block, phase, stage, layer, mb);
      t.duration = dur.time + take_pass_overhead(r);
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

  // ---- activation offloading (training.offload_layers) -----------------------------------

  /// Whether chunk-local layer `l` keeps its activations in host memory.
  [[nodiscard]] bool offloaded(int l) const { return l < w_.training.offload_layers; }

  /// The activations chunk-local layer `l` keeps on the GPU between its forward and its backward:
  /// none when offloaded (the staging copy in flight is a buffer of the ledger's,
  /// model::persistent_memory); its input when fully recomputed; otherwise all it stores (with
  /// recompute: full and recompute_layers, a layer past the recomputed ones keeps the working set).
  [[nodiscard]] model::LayerActivations kept_activations(int l) const {
    if (offloaded(l))
      return {};
    if (w_.training.recompute == Recompute::FULL && !w_.training.recomputes_layer(l))
      return working_;
    return stored_;
  }

  /// An offloaded layer's copy to (forward) or from (backward) host memory runs beside its
  /// compute on a copy engine; when it takes longer than the layer's compute on a rank (the
  /// compute tasks created since `layer_start`), the layer's last compute task waits for the rest.
  void offload_copy(const std::vector<Rank>& group, int l, size_t layer_start) {
    if (!offloaded(l))
      return;
    const Seconds copy = stored_.total() / o_.host_bandwidth;
    for (const Rank r : group) {
      Seconds busy(0.0);
      TaskId last = NO_TASK;
      for (size_t id = layer_start; id < g_.size(); ++id) {
        const Task& t = g_.task(static_cast<TaskId>(id));
        if (t.kind == TaskKind::COMPUTE && t.rank == r) {
          busy += t.duration;
          last = static_cast<TaskId>(id);
        }
      }
      if (last != NO_TASK && copy > busy)
        g_.mutable_task(last).duration += copy - busy;
    }
  }

  // ---- TP ----------------------------------------------------------------------------------

  /// A TP-group collective of the full b*s*h activation (all-reduce, or SP / pipeline scatter-gather pieces).
  Task tp_task(CollectiveOp op, Phase phase, Rank rank, int stage, int layer, int mb) const {
    Task t = detail::collective_task(CommGroup::TP, op, Stream::TP_COMM, phase, stage, layer, mb,
                                     model::tp_collective_bytes(w_));
    t.rank = rank;
    return t;
  }

  /// The TP collective(s) after one block: an all-reduce, or with sequence parallelism a
  /// reduce-scatter then an all-gather of the same payload (times `rs_scale`, `ag_scale`: an MoE
  /// layer's experts gather and scatter the routed copies, moe_copies). The next compute waits.
  void tp_comm(const std::vector<Rank>& group, const std::vector<TaskId>& producers, Phase phase, int stage,
               int layer, int mb, TaskId& tp_chain, double rs_scale = 1.0, double ag_scale = 1.0,
               CommRole role = CommRole::NONE) {
    if (grid_.tp == 1)
      return;
    auto one = [&](CollectiveOp op, const std::vector<TaskId>& deps) {
      Task t = tp_task(op, phase, group.front(), stage, layer, mb);
      t.bytes = t.bytes * (op == CollectiveOp::REDUCE_SCATTER ? rs_scale : op == CollectiveOp::ALL_GATHER ? ag_scale : 1.0);
      t.role = role;
      return chain_tp(t, group, deps, tp_chain);
    };
    TaskId last;
    if (sp_) {
      // A scale of 0 leaves that collective out (folded expert groups, moe_copies).
      last = rs_scale > 0 ? one(CollectiveOp::REDUCE_SCATTER, producers) : NO_TASK;
      if (ag_scale > 0)
        last = one(CollectiveOp::ALL_GATHER, last != NO_TASK ? std::vector<TaskId>{last} : producers);
      if (last == NO_TASK)
        return;
    } else {
      last = one(CollectiveOp::ALL_REDUCE, producers);
    }
    for (Rank r : group)
      rs(r).pending_wait = last;
  }

  /// Whether `block`'s backward ends in a column-parallel input linear whose gradient collective
  /// backward_tp_comm can take apart: attention with per-head projections (not MLA, whose
  /// down-projections are replicated), a dense MLP, the output layer.
  [[nodiscard]] bool has_input_linear(Block block, int layer) const {
    if (grid_.tp == 1 || split_)
      return false; // zero-bubble B passes hold no weight-gradient GEMM to run beside
    switch (block) {
    case Block::ATTENTION: return !w_.model.mla.enabled();
    case Block::MLP: return !moe_cp_->handles(block, layer);
    case Block::LOGITS: return true;
    default: return false;
    }
  }

  /// The data- and weight-gradient time of `block`'s input linear on one rank.
  std::pair<Seconds, Seconds> input_linear_times(Block block, int stage, int layer) {
    const auto [c, q] = cost(block, Phase::BACKWARD, stage, windowed(block, layer));
    return graph::input_linear_times(w_, block, c, q);
  }

  /// A piece of compute task `from` (its rank, block, pass) of `duration`, after `from`
  /// (Task::piece `piece`).
  TaskId carve(TaskId from, Seconds duration, uint8_t piece) {
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

  /// The TP collectives after a backward block (tp_comm's), where the block ends in a
  /// column-parallel input linear (QKV, fc1, the logits): the collective summing its input
  /// gradient (all-reduce; with SP reduce-scatter) is issued after its data-gradient GEMM and,
  /// with `parallel.tp_grad_overlap`, runs beside its weight-gradient GEMM; with SP the linear's
  /// input, kept split over the TP ranks, is all-gathered again for that GEMM (beside the
  /// data-gradient GEMM with the overlap, before the weight gradient without it), and the
  /// all-gather of the gradient into the block below follows both. Returns each rank's last
  /// compute task of the block (its weight gradient). docs/model.md, "TP in the backward".
  std::vector<TaskId> backward_tp_comm(const std::vector<Rank>& group, std::vector<TaskId> block_tasks, Block block,
                                       int stage, int layer, int mb, TaskId& tp_chain, double rs_scale,
                                       double ag_scale, CommRole role = CommRole::NONE) {
    const bool overlap = w_.parallel.tp_grad_overlap;
    if (!has_input_linear(block, layer) || (!overlap && !sp_)) {
      tp_comm(group, block_tasks, Phase::BACKWARD, stage, layer, mb, tp_chain, rs_scale, ag_scale, role);
      return block_tasks;
    }
    const auto [dgrad, wgrad] = input_linear_times(block, stage, layer);
    const bool fits = wgrad.value() > 0 && // and the pieces leave some of each rank's task
                      std::all_of(block_tasks.begin(), block_tasks.end(),
                                  [&](TaskId id) { return g_.task(id).duration > dgrad + wgrad; });
    if (!fits) {
      tp_comm(group, block_tasks, Phase::BACKWARD, stage, layer, mb, tp_chain, rs_scale, ag_scale, role);
      return block_tasks;
    }
    auto collective = [&](CollectiveOp op, double scale, const std::vector<TaskId>& deps) {
      Task t = tp_task(op, Phase::BACKWARD, group.front(), stage, layer, mb);
      t.bytes = t.bytes * scale;
      t.role = role;
      return chain_tp(t, group, deps, tp_chain);
    };
    std::vector<TaskId> before_wgrad = block_tasks; // what the weight gradient follows on each rank
    TaskId regather = NO_TASK;
    if (sp_ && overlap) {
      for (TaskId& id : before_wgrad)
        id = carve(id, dgrad, 1); // the data gradient, beside the re-gather issued before it
      regather = collective(CollectiveOp::ALL_GATHER, 1.0, block_tasks);
    } else if (sp_) {
      regather = collective(CollectiveOp::ALL_GATHER, 1.0, block_tasks);
    }
    std::vector<TaskId> wgrads;
    wgrads.reserve(group.size());
    for (size_t i = 0; i < group.size(); ++i) {
      const TaskId w = carve(block_tasks[i], wgrad, 2);
      if (before_wgrad[i] != block_tasks[i]) // after the data gradient too
        g_.add_edge(before_wgrad[i], w);
      if (regather != NO_TASK)
        g_.add_edge(regather, w);
      // The block's activations and gathered weights are freed with its last piece.
      Task& first = g_.mutable_task(block_tasks[i]);
      Task& last = g_.mutable_task(w);
      std::swap(first.act_free, last.act_free);
      std::swap(first.param_free, last.param_free);
      rs(group[i]).last_compute = w;
      wgrads.push_back(w);
    }
    if (!overlap) { // SP without the overlap: the block's collectives after its weight gradient
      tp_comm(group, wgrads, Phase::BACKWARD, stage, layer, mb, tp_chain, rs_scale, ag_scale, role);
      return wgrads;
    }
    TaskId last = NO_TASK;
    if (!sp_) {
      last = collective(CollectiveOp::ALL_REDUCE, 1.0, before_wgrad);
    } else {
      if (rs_scale > 0)
        last = collective(CollectiveOp::REDUCE_SCATTER, rs_scale, before_wgrad);
      if (ag_scale > 0) { // the gradient for the block below: after the reduce-scatter and the weight gradient
        std::vector<TaskId> deps = wgrads;
        if (last != NO_TASK)
          deps.push_back(last);
        last = collective(CollectiveOp::ALL_GATHER, ag_scale, deps);
      }
    }
    if (last != NO_TASK)
      for (Rank r : group)
        rs(r).pending_wait = last;
    return wgrads;
  }

  /// Adds TP collective `t` over `group` after `deps` and the group's previous TP collective.
  TaskId chain_tp(const Task& t, const std::vector<Rank>& group, const std::vector<TaskId>& deps, TaskId& tp_chain) {
    const TaskId id = g_.add_collective(t, group);
    for (TaskId p : deps)
      g_.add_edge(p, id);
    if (tp_chain != NO_TASK)
      g_.add_edge(tp_chain, id);
    tp_chain = id;
    return id;
  }

  /// Each rank's last compute task (those that have one): what a collective issued between two
  /// compute tasks of the group waits for.
  std::vector<TaskId> last_computes(const std::vector<Rank>& group) {
    std::vector<TaskId> out;
    for (Rank r : group)
      if (rs(r).last_compute != NO_TASK)
        out.push_back(rs(r).last_compute);
    return out;
  }

  /// The vocabulary-parallel cross-entropy of each output head (the model's, and one per
  /// multi-token-prediction depth) sums three per-token fp32 values over the TP ranks: the logits'
  /// maximum, the exponentials' sum and the target's logit. Three small all-reduces after the
  /// logits' forward; latency-bound. The next compute waits for the last.
  void loss_all_reduces(const std::vector<Rank>& group, const std::vector<TaskId>& producers, int stage, int mb,
                        TaskId& tp_chain) {
    if (grid_.tp == 1)
      return;
    const Bytes bytes(model::gpu_tokens(w_) * 4.0);
    const int64_t count = 3 * (1 + w_.model.mtp_layers);
    TaskId last = NO_TASK;
    for (int64_t i = 0; i < count; ++i) {
      Task t = tp_task(CollectiveOp::ALL_REDUCE, Phase::FORWARD, group.front(), stage, -1, mb);
      t.bytes = bytes;
      t.role = CommRole::LOSS;
      last = chain_tp(t, group, producers, tp_chain);
    }
    for (Rank r : group)
      rs(r).pending_wait = last;
  }

  /// With sequence parallelism, the factor on the TP all-gather into and the reduce-scatter out
  /// of an MoE layer's experts: Megatron's all-to-all dispatcher gathers the routed copies of the
  /// TP group's tokens (top_k per token) for the TP-split experts, not the tokens. 0 when the
  /// expert groups fold over the TP ranks (etp = 1): each GPU routes its own sequence share, so
  /// neither collective exists. 1 otherwise (and for a layer index below 0).
  double moe_copies(int layer) const {
    if (!sp_ || layer < 0 || !model::is_moe_layer(w_.model, layer))
      return 1.0;
    return grid_.folded() ? 0.0 : static_cast<double>(w_.model.moe.top_k);
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
      Task task = detail::collective_task(CommGroup::DP, op, Stream::DP_COMM, phase, p, layer, mb, bytes);
      task.rank = grid_.rank(0, p, t);
      task.bucket = bucket;
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

  /// Layers of local model chunk `chunk` of stage `p`: global chunk chunk*pp + p (model::chunk_span:
  /// even, or parallel.chunk_layers); the embedding sits in global chunk 0, the output (and the
  /// MTP layers) in the last one.
  model::StageLayout chunk_layout(int p, int chunk) const { return model::chunk_span(w_, chunk * grid_.pp + p); }

  /// Gradient items of a stage (or chunk) in backward order: output layer, layers last to first, embedding.
  /// Index i of the result: 0..; `layer_of[i]` is the local layer (-1 output, -2 embedding).
  void gradient_items(const model::StageLayout& layout, std::vector<double>& params, std::vector<int>& layer_of) const {
    params.clear();
    layer_of.clear();
    if (layout.has_output) {
      params.push_back(model::output_params(w_.model, grid_.tp, grid_.pp));
      layer_of.push_back(-1);
    }
    for (int64_t l = layout.num_layers - 1; l >= 0; --l) {
      params.push_back(model::layer_params_at(w_.model, layout.first_layer + l, grid_.tp, grid_.ep, grid_.etp).dense);
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

  // ---- ZeRO-1/2 parameter all-gathers under the forward (training.overlap_param_gather) -------

  /// Per model chunk, its DP buckets' parameter all-gathers (per TP rank) and which bucket holds
  /// each gradient item.
  struct ParamGathers {
    std::vector<std::vector<std::vector<TaskId>>> gather; ///< [chunk][bucket][tp rank]
    std::vector<std::vector<size_t>> bucket_of;           ///< [chunk][item]
    /// [chunk] local layer -> its routed experts' gather over their expert-data-parallel group,
    /// per TP rank (MoE layers whose experts have one).
    std::vector<std::map<int, std::vector<TaskId>>> experts;
    /// What the first forward of `chunk`'s local layer `l` passes to its experts' compute.
    [[nodiscard]] detail::MoeCpEmitter::ExpertShards experts_of(int chunk, int l) const {
      detail::MoeCpEmitter::ExpertShards xs;
      if (experts.empty())
        return xs;
      const auto& m = experts[static_cast<size_t>(chunk)];
      if (auto it = m.find(l); it != m.end())
        xs.gather = it->second;
      return xs;
    }
    /// What the forward of item `item` of `chunk` waits for (none without the overlap).
    [[nodiscard]] std::vector<TaskId> of(int chunk, size_t item) const {
      if (gather.empty())
        return {};
      const auto c = static_cast<size_t>(chunk);
      return gather[c][bucket_of[c][item]];
    }
  };

  /// Megatron's distributed optimizer with overlap_param_gather: the parameters the previous
  /// step's optimizer updated are all-gathered bucket by bucket as the forward reaches them, so a
  /// step starts with the gathers on the DP stream, chunk by chunk in forward order (a chunk's
  /// buckets from its first layers to its output layer, each followed by its MoE layers' routed
  /// experts over their expert-data-parallel group), and a chunk's first forward waits, layer by
  /// layer, for its bucket (and the experts' compute for theirs). The step then ends with the
  /// optimizer: the same period as the steady state of consecutive steps.
  ParamGathers overlapped_param_gathers(const std::vector<Rank>& group, int p, double weight_bytes) {
    ParamGathers out;
    if (!w_.training.overlap_param_gather || (zero_ != 1 && zero_ != 2) || grid_.dp == 1)
      return out;
    out.gather.resize(static_cast<size_t>(vp_));
    out.bucket_of.resize(static_cast<size_t>(vp_));
    out.experts.resize(static_cast<size_t>(vp_));
    for (int c = 0; c < vp_; ++c) {
      const model::StageLayout layout = chunk_layout(p, c);
      std::vector<double> params;
      std::vector<int> layer_of;
      gradient_items(layout, params, layer_of);
      const auto bk = buckets(params);
      auto& of = out.bucket_of[static_cast<size_t>(c)];
      for (size_t b = 0, i = 0; b < bk.size(); ++b)
        for (; i <= bk[b].first; ++i)
          of.push_back(b);
      auto& gathers = out.gather[static_cast<size_t>(c)];
      gathers.resize(bk.size());
      for (size_t b = bk.size(); b-- > 0;) {
        for (size_t i = 0; i < group.size(); ++i)
          gathers[b].push_back(dp_collective(group[i], p, static_cast<int>(i), {-2, c, static_cast<int>(b)},
                                             CollectiveOp::ALL_GATHER, Bytes(bk[b].second * weight_bytes),
                                             Phase::FORWARD, -1, -1, NO_TASK, Bytes(0.0), static_cast<int>(b)));
        // The bucket's MoE layers' experts, first layer first (items run last layer first).
        const size_t first_item = b == 0 ? 0 : bk[b - 1].first + 1;
        for (size_t item = bk[b].first + 1; item-- > first_item;) {
          const int l = layer_of[item];
          if (l < 0)
            continue;
          const int layer = static_cast<int>(layout.first_layer + l);
          const double experts = model::layer_params_at(w_.model, layer, grid_.tp, grid_.ep, grid_.etp).expert;
          if (experts <= 0)
            continue;
          std::vector<TaskId> ids;
          for (const Rank r : group)
            ids.push_back(moe_cp_->expert_gather(r, p, layer, -1, Phase::FORWARD, NO_TASK,
                                                 Bytes(experts * weight_bytes), Bytes(0.0)));
          if (ids.front() != NO_TASK)
            out.experts[static_cast<size_t>(c)][l] = std::move(ids);
        }
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
      st.fwd_first.assign(static_cast<size_t>(m_) * static_cast<size_t>(vp_), NO_TASK);
      st.fwd_last = st.bwd_first = st.bwd_last = st.fwd_out_wait = st.bwd_out_wait = st.fwd_first;
    }
    const double e = model::grad_bytes(w_);                // a gradient's bytes
    const double wb = model::weight_bytes(w_);             // a gathered parameter's bytes
    const double held = wb + model::fp8_weight_bytes(w_);  // and its memory
    const Bytes logits_act = model::logits_activations(w_);

    TaskId tp_chain = NO_TASK;
    int pass_index = 0;
    // Per chunk: passes that finalize gradients so far (BACKWARD, or W when backward is split).
    std::vector<int> grad_passes(static_cast<size_t>(vp_), 0);
    const ParamGathers param_gathers = overlapped_param_gathers(group, p, wb);
    std::vector<char> chunk_forwarded(static_cast<size_t>(vp_), 0);
    const std::vector<PassRef> order = stage_order(w_.parallel.schedule, p, grid_.pp, m_, vp_);
    // Combined 1F1B (parallel.ep_overlap): each forward next to a backward of another (chunk,
    // micro-batch) forms a pair whose second pass runs alongside the first (pair_role 1, 2).
    const std::vector<int> pair_role = combined_pairs(order);
    std::vector<PairState> pair(group.size());
    TaskId pair_start_tp = NO_TASK;
    for (size_t k = 0; k < order.size(); ++k) {
      const PassRef& pass = order[k];
      const size_t tasks_before = g_.size();
      if (pair_role[k] == 1) {
        // Where the pair starts: its second pass follows this, not the first pass.
        for (size_t i = 0; i < group.size(); ++i) {
          pair[i].start_compute = rs(group[i]).last_compute;
          pair[i].start_ep = moe_cp_->ep_chain(group[i]);
        }
        pair_start_tp = tp_chain;
      } else if (pair_role[k] == 2) {
        for (size_t i = 0; i < group.size(); ++i) {
          RankState& st = rs(group[i]);
          pair[i].first_last = st.last_compute;
          st.last_compute = pair[i].start_compute;
          st.pending_wait = NO_TASK; // the first pass's trailing collective: its own output's
          moe_cp_->ep_chain(group[i]) = pair[i].start_ep;
        }
        tp_chain = pair_start_tp;
      }
      const model::StageLayout layout = chunk_layout(p, pass.chunk);
      const int n_layers = static_cast<int>(layout.num_layers);
      std::vector<double> item_params;
      std::vector<int> item_layer;
      gradient_items(layout, item_params, item_layer);
      const auto item_buckets = buckets(item_params);
      // ZeRO-3: the dense parameters of local layer l (all of a dense layer; attention, norms,
      // router and shared experts of an MoE layer) gathered over DP as one collective; the first
      // and last layers also carry the embedding / output parameters of their chunk. An MoE
      // layer's routed experts are gathered over their expert-data-parallel group (expert_params).
      auto zero3_params = [&](int l) {
        double extra = 0;
        if (l == 0 && layout.has_embedding)
          extra += model::embedding_params(w_.model, grid_.tp);
        if (l == n_layers - 1 && layout.has_output)
          extra += model::output_params(w_.model, grid_.tp, grid_.pp);
        return model::layer_params_at(w_.model, layout.first_layer + l, grid_.tp, grid_.ep, grid_.etp).dense + extra;
      };
      auto expert_params = [&](int l) {
        return model::layer_params_at(w_.model, layout.first_layer + l, grid_.tp, grid_.ep, grid_.etp).expert;
      };

      const int mb = pass.micro_batch;
      const size_t slot = static_cast<size_t>(pass.chunk) * static_cast<size_t>(m_) + static_cast<size_t>(mb);
      // The chunk's first forward waits, layer by layer, for the parameter all-gathers issued at
      // the step's start (overlap_param_gather); item i of the chunk's gradient items.
      const bool first_forward = pass.phase == Phase::FORWARD && !chunk_forwarded[static_cast<size_t>(pass.chunk)]++;
      auto param_gather_of = [&](size_t i) {
        return first_forward ? param_gathers.of(pass.chunk, i) : std::vector<TaskId>{};
      };
      for (Rank r : group)
        rs(r).pass_overhead = o_.pass_overhead;
      const bool fwd = pass.phase == Phase::FORWARD;
      const bool weight = pass.phase == Phase::WEIGHT_GRAD;
      // Gradients become final in this pass (BACKWARD, or W when split) ...
      const bool grads_here = split_ ? weight : pass.phase == Phase::BACKWARD;
      if (grads_here)
        ++grad_passes[static_cast<size_t>(pass.chunk)];
      // ... for good in the chunk's last such pass.
      const bool last_backward = grads_here && grad_passes[static_cast<size_t>(pass.chunk)] == m_;
      auto mark_first = [&](std::vector<TaskId> RankState::*field, const std::vector<TaskId>& ids) {
        for (size_t i = 0; i < group.size(); ++i) {
          TaskId& slot_id = (rs(group[i]).*field)[slot];
          if (slot_id == NO_TASK)
            slot_id = ids[i];
        }
      };
      auto mark_last = [&](std::vector<TaskId> RankState::*field, const std::vector<TaskId>& ids) {
        for (size_t i = 0; i < group.size(); ++i)
          (rs(group[i]).*field)[slot] = ids[i];
      };

      // ZeRO-3 gathers: position j of the pass (layers in pass order) is gathered ahead, at most
      // prefetch + 1 layers resident; gather j waits for the task that freed position j-prefetch-1.
      // W passes need no parameters (weight gradients are input x output-gradient products).
      // Blocking fetch (training.zero3_fetch): nothing ahead; each gather waits for the rank's
      // compute so far (the implementation synchronizes the device first).
      const bool blocking = w_.training.zero3_fetch == Zero3Fetch::BLOCKING;
      const int prefetch = blocking ? 0 : w_.training.zero3_prefetch;
      std::vector<std::vector<TaskId>> gather(static_cast<size_t>(n_layers)); // per position, per TP rank
      std::vector<std::vector<TaskId>> xgather(static_cast<size_t>(n_layers)); // its experts' gathers
      std::vector<std::vector<TaskId>> freer(static_cast<size_t>(n_layers));  // task freeing position
      int issued = 0;
      const bool gathers = zero_ >= 3 && grid_.dp > 1 && !weight;
      // One ZeRO-3 collective of local layer l over the DP group of TP rank i, `bytes` per rank:
      // one task, or under blocking fetch one per weight tensor of the layer (the layer's bytes
      // split evenly), each a tensor-list collective whose host part costs the per-rank overhead
      // times the group's size. The first waits for `after` and allocates `alloc`; returns the last.
      const int calls_key = 64; // > the most tensors a layer gathers one by one
      auto zero3_collective = [&](size_t i, int kind, int j, int l, CollectiveOp op, double bytes, Phase phase,
                                  TaskId after, Bytes alloc) {
        int calls = 1;
        if (blocking) {
          calls = static_cast<int>(model::dense_weight_tensors(w_.model, layout.first_layer + l));
          if (l == 0 && layout.has_embedding)
            ++calls;
          if (l == n_layers - 1 && layout.has_output)
            ++calls;
        }
        const int layer = static_cast<int>(layout.first_layer + l);
        TaskId id = NO_TASK;
        for (int c = 0; c < calls; ++c) {
          id = dp_collective(group[i], p, static_cast<int>(i), {pass_index, kind, j * calls_key + c}, op,
                             Bytes(bytes / calls), phase, layer, mb, c == 0 ? after : NO_TASK,
                             c == 0 ? alloc : Bytes(0.0));
          if (blocking)
            g_.mutable_task(id).duration = o_.list_collective_per_rank * static_cast<double>(grid_.dp);
        }
        return id;
      };
      auto issue_gathers_up_to = [&](int upto) {
        if (!gathers)
          return;
        for (; issued <= std::min(upto, n_layers - 1); ++issued) {
          const int j = issued;
          const int l = fwd ? j : n_layers - 1 - j;
          const int layer = static_cast<int>(layout.first_layer + l);
          const double params = zero3_params(l);
          const double experts = expert_params(l);
          gather[static_cast<size_t>(j)].resize(group.size());
          xgather[static_cast<size_t>(j)].assign(group.size(), NO_TASK);
          for (size_t i = 0; i < group.size(); ++i) {
            const TaskId after = blocking ? rs(group[i]).last_compute
                                 : j - prefetch - 1 >= 0 ? freer[static_cast<size_t>(j - prefetch - 1)][i]
                                                         : NO_TASK;
            gather[static_cast<size_t>(j)][i] = zero3_collective(i, 0, j, l, CollectiveOp::ALL_GATHER, params * wb,
                                                                 pass.phase, after, Bytes(params * held));
            if (experts > 0)
              xgather[static_cast<size_t>(j)][i] = moe_cp_->expert_gather(
                  group[i], p, layer, mb, pass.phase, after, Bytes(experts * wb), Bytes(experts * held));
          }
        }
      };
      auto gather_of = [&](int j) { return gathers ? gather[static_cast<size_t>(j)] : std::vector<TaskId>{}; };
      auto gathered_bytes = [&](int l) { return gathers ? Bytes(zero3_params(l) * held) : Bytes(0.0); };
      // The experts' shards of position j (layer l); `frees`: the compute that uses them last.
      auto expert_shards = [&](int j, int l, bool frees) {
        detail::MoeCpEmitter::ExpertShards xs;
        const auto& xg = xgather[static_cast<size_t>(j)];
        if (!gathers || xg.empty() || xg.front() == NO_TASK) // no experts, or not sharded
          return xs;
        xs.gather = xg;
        xs.free = frees ? Bytes(expert_params(l) * held) : Bytes(0.0);
        return xs;
      };

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
      // ZeRO-3: a layer's gradients are reduce-scattered as soon as they exist.
      auto zero3_reduce = [&](int j, int l, const std::vector<TaskId>& producers) {
        if (zero_ < 3 || grid_.dp == 1)
          return;
        const double params = zero3_params(l);
        for (size_t i = 0; i < group.size(); ++i)
          zero3_collective(i, 2, j, l, CollectiveOp::REDUCE_SCATTER, params * e, Phase::BACKWARD, producers[i],
                           Bytes(0.0));
      };

      if (fwd) {
        for (int j = 0; j < n_layers; ++j) {
          issue_gathers_up_to(j + prefetch);
          const int l = j;
          const int layer = static_cast<int>(layout.first_layer + l);
          // The vocabulary-parallel embedding's output is summed over the TP ranks (an all-reduce,
          // or with SP a reduce-scatter and the first layer's all-gather) before the first layer.
          if (j == 0 && layout.has_embedding)
            tp_comm(group, last_computes(group), Phase::FORWARD, p, -1, mb, tp_chain, 1.0, 1.0, CommRole::EMBEDDING);
          const size_t layer_start = g_.size();
          const model::LayerActivations kept = kept_activations(l);
          // ZeRO-3's gather of the layer, or the overlapped ZeRO-1/2 gather of its bucket.
          const size_t item = (layout.has_output ? 1 : 0) + static_cast<size_t>(n_layers - 1 - l);
          auto attn = compute(group, Block::ATTENTION, Phase::FORWARD, p, layer, mb, kept.attention, Bytes(0.0),
                              gathers ? gather_of(j) : param_gather_of(item));
          mark_first(&RankState::fwd_first, attn);
          tp_comm(group, attn, Phase::FORWARD, p, layer, mb, tp_chain, 1.0, moe_copies(layer));
          auto mlp = compute(group, Block::MLP, Phase::FORWARD, p, layer, mb, kept.mlp, Bytes(0.0), {},
                             gathered_bytes(l),
                             gathers ? expert_shards(j, l, true)
                             : first_forward ? param_gathers.experts_of(pass.chunk, l)
                                             : detail::MoeCpEmitter::ExpertShards{});
          tp_comm(group, mlp, Phase::FORWARD, p, layer, mb, tp_chain, moe_copies(layer), 1.0);
          offload_copy(group, l, layer_start);
          freer[static_cast<size_t>(j)] = mlp;
          mark_last(&RankState::fwd_last, mlp);
        }
        if (layout.has_output) {
          auto logits = compute(group, Block::LOGITS, Phase::FORWARD, p, -1, mb, logits_act, Bytes(0.0),
                                param_gather_of(0));
          mark_first(&RankState::fwd_first, logits);
          mark_last(&RankState::fwd_last, logits);
          loss_all_reduces(group, logits, p, mb, tp_chain);
        }
      } else if (weight) {
        // Zero-bubble W pass: weight-gradient GEMMs only (no TP collective); frees the activations
        // (docs/schedules.md: they are kept until W, which needs the GEMM inputs).
        if (layout.has_output)
          item_done(compute(group, Block::LOGITS, Phase::WEIGHT_GRAD, p, -1, mb, Bytes(0.0), logits_act));
        for (int j = 0; j < n_layers; ++j) {
          const int l = n_layers - 1 - j;
          const int layer = static_cast<int>(layout.first_layer + l);
          const model::LayerActivations kept = kept_activations(l);
          compute(group, Block::MLP, Phase::WEIGHT_GRAD, p, layer, mb, Bytes(0.0), kept.mlp + working_.mlp);
          auto attn = compute(group, Block::ATTENTION, Phase::WEIGHT_GRAD, p, layer, mb, Bytes(0.0),
                              kept.attention + working_.attention);
          zero3_reduce(j, l, attn);
          item_done(attn);
        }
        if (layout.has_embedding)
          item_done(item_producer[item - 1]);
      } else {
        // Split backward (B): frees nothing, finalizes no gradient; otherwise the whole backward.
        const Bytes logits_free = split_ ? Bytes(0.0) : logits_act;
        if (layout.has_output) {
          auto logits = compute(group, Block::LOGITS, Phase::BACKWARD, p, -1, mb, Bytes(0.0), logits_free);
          mark_first(&RankState::bwd_first, logits);
          // The output layer's input gradient is summed over the TP ranks (an all-reduce, or with
          // SP a reduce-scatter and the last layer's all-gather; none into folded experts).
          const int last_layer = static_cast<int>(layout.first_layer + layout.num_layers) - 1;
          logits = backward_tp_comm(group, logits, Block::LOGITS, p, -1, mb, tp_chain, 1.0,
                                    grid_.folded() && n_layers > 0 ? moe_copies(last_layer) : 1.0, CommRole::LOGITS);
          mark_last(&RankState::bwd_last, logits); // a last chunk without layers ends here
          if (!split_)
            item_done(logits);
        }
        for (int j = 0; j < n_layers; ++j) {
          issue_gathers_up_to(j + prefetch);
          const int l = n_layers - 1 - j;
          const int layer = static_cast<int>(layout.first_layer + l);
          std::vector<TaskId> first_dep = gather_of(j);
          const size_t layer_start = g_.size();
          const model::LayerActivations kept = kept_activations(l);
          // A recomputed layer's backward also frees the working set its recomputation allocated.
          const bool again = w_.training.recomputes_layer(l);
          const model::LayerActivations freed{kept.attention + (again ? working_.attention : Bytes(0.0)),
                                              kept.mlp + (again ? working_.mlp : Bytes(0.0))};
          if (again) {
            auto ra = compute(group, Block::ATTENTION, Phase::RECOMPUTE, p, layer, mb, working_.attention, Bytes(0.0),
                              first_dep);
            mark_first(&RankState::bwd_first, ra);
            tp_comm(group, ra, Phase::RECOMPUTE, p, layer, mb, tp_chain, 1.0, moe_copies(layer));
            auto rm = compute(group, Block::MLP, Phase::RECOMPUTE, p, layer, mb, working_.mlp, Bytes(0.0), {},
                              Bytes(0.0), expert_shards(j, l, false));
            tp_comm(group, rm, Phase::RECOMPUTE, p, layer, mb, tp_chain, moe_copies(layer), 1.0);
            first_dep.clear();
            // Blocking fetch released the layer after its recomputation and gathers it again for
            // the backward (the ledger keeps it counted from the first gather).
            if (blocking && gathers)
              for (size_t i = 0; i < group.size(); ++i)
                first_dep.push_back(zero3_collective(i, 3, j, l, CollectiveOp::ALL_GATHER, zero3_params(l) * wb,
                                                     Phase::BACKWARD, rs(group[i]).last_compute, Bytes(0.0)));
          }
          auto mlp = compute(group, Block::MLP, Phase::BACKWARD, p, layer, mb, Bytes(0.0),
                             split_ ? Bytes(0.0) : freed.mlp, first_dep, Bytes(0.0), expert_shards(j, l, true));
          mark_first(&RankState::bwd_first, mlp);
          // The experts' backward gathers and scatters the routed copies' gradients (folded: only
          // the gradient all-gathered for the attention block's backward).
          backward_tp_comm(group, mlp, Block::MLP, p, layer, mb, tp_chain, moe_copies(layer),
                           grid_.folded() ? 1.0 : moe_copies(layer));
          auto attn = compute(group, Block::ATTENTION, Phase::BACKWARD, p, layer, mb, Bytes(0.0),
                              split_ ? Bytes(0.0) : freed.attention, {}, gathered_bytes(l));
          // The gradient all-gathered for the MLP below, unless that is a folded MoE layer.
          attn = backward_tp_comm(group, attn, Block::ATTENTION, p, layer, mb, tp_chain, 1.0,
                                  grid_.folded() ? moe_copies(layer - 1) : 1.0);
          offload_copy(group, l, layer_start);
          mark_last(&RankState::bwd_last, attn);
          freer[static_cast<size_t>(j)] = attn;
          if (!split_) {
            zero3_reduce(j, l, attn);
            item_done(attn);
          }
        }
        if (layout.has_embedding && !split_)
          item_done(item_producer[item - 1]);
      }
      // The pass's output is ready only once its trailing TP collective is done.
      for (Rank r : group) {
        RankState& st = rs(r);
        if (st.pending_wait != NO_TASK && !weight)
          (fwd ? st.fwd_out_wait : st.bwd_out_wait)[slot] = st.pending_wait;
      }
      if (pair_role[k] == 2) {
        // The pair ends when both passes have: the second's last compute task also waits for the
        // first's (what follows waits for it). Its compute, TP and EP tasks run alongside the
        // first pass's: trace lane 1.
        for (size_t i = 0; i < group.size(); ++i) {
          const TaskId last = rs(group[i]).last_compute;
          if (pair[i].first_last != NO_TASK && last != NO_TASK && last != pair[i].first_last)
            g_.add_edge(pair[i].first_last, last);
        }
        for (TaskId id = tasks_before; id < g_.size(); ++id) {
          Task& t = g_.mutable_task(id);
          if (t.stream == Stream::COMPUTE || t.stream == Stream::TP_COMM || t.stream == Stream::EP_COMM)
            t.lane = 1;
        }
      }
      ++pass_index;
    }
  }

  /// Per rank of the TP group being built: where the current combined 1F1B pair started (its last
  /// compute and EP tasks before it) and the first pass's last compute task.
  struct PairState {
    TaskId start_compute = NO_TASK;
    TaskId start_ep = NO_TASK;
    TaskId first_last = NO_TASK;
  };

  /// Combined 1F1B pairs of a stage's pass order: 0 alone, 1 the first, 2 the second of a pair.
  /// Greedy from the start: a forward and a backward next to each other, of different (chunk,
  /// micro-batch), pair up (the interleaved schedule's steady state: forward k + warm-up with
  /// backward k; without a pipeline: each forward with the previous micro-batch's backward).
  std::vector<int> combined_pairs(const std::vector<PassRef>& order) const {
    std::vector<int> role(order.size(), 0);
    if (!w_.parallel.ep_overlap)
      return role;
    for (size_t k = 0; k + 1 < order.size(); ++k) {
      const PassRef& a = order[k];
      const PassRef& b = order[k + 1];
      const bool f_and_b = (a.phase == Phase::FORWARD && b.phase == Phase::BACKWARD) ||
                           (a.phase == Phase::BACKWARD && b.phase == Phase::FORWARD);
      if (f_and_b && (a.micro_batch != b.micro_batch || a.chunk != b.chunk)) {
        role[k] = 1;
        role[k + 1] = 2;
        ++k;
      }
    }
    return role;
  }

  // ---- PP ----------------------------------------------------------------------------------

  void build_pp_sends() {
    if (grid_.pp == 1)
      return;
    const Bytes msg = model::pp_message_bytes(w_);
    // Megatron's scatter/gather (without SP): each TP rank sent 1/tp; the receiving TP group
    // all-gathers the whole activation before the next compute uses it.
    const bool gather = w_.parallel.pp_scatter_gather && !sp_ && grid_.tp > 1;
    for (int p = 0; p < grid_.pp; ++p) {
      for (int d = 0; d < replicas_; ++d) {
        std::vector<TaskId> chain(static_cast<size_t>(grid_.tp), NO_TASK);
        // Folded CP: the other CP ranks' sends, copies of CP index 0's (their order per (c, t)).
        const int copies = fold_cp_ ? grid_.cp : 1;
        std::vector<TaskId> copy_chain(static_cast<size_t>(copies * grid_.tp), NO_TASK);
        for (const PassRef& pass : stage_order(w_.parallel.schedule, p, grid_.pp, m_, vp_)) {
          if (pass.phase == Phase::WEIGHT_GRAD)
            continue; // W passes send nothing
          const bool fwd = pass.phase == Phase::FORWARD;
          // Global chunk c = chunk*pp + p sends to c + 1 (forward) or c - 1 (backward), on stage
          // (c +- 1) mod pp: with interleaving the last stage wraps to stage 0's next chunk.
          const int global = pass.chunk * grid_.pp + p;
          const int dst_global = fwd ? global + 1 : global - 1;
          if (dst_global < 0 || dst_global >= grid_.pp * vp_)
            continue;
          const int dst_stage = dst_global % grid_.pp;
          const size_t mb = static_cast<size_t>(pass.chunk) * static_cast<size_t>(m_) +
                            static_cast<size_t>(pass.micro_batch);
          const size_t dst_mb = static_cast<size_t>(dst_global / grid_.pp) * static_cast<size_t>(m_) +
                                static_cast<size_t>(pass.micro_batch);
          std::vector<TaskId> sends;
          std::vector<Rank> dsts;
          for (int t = 0; t < grid_.tp; ++t) {
            const Rank src = grid_.rank(d, p, t);
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
            const RankState& s = rs(src);
            g_.add_edge(fwd ? s.fwd_last[mb] : s.bwd_last[mb], send);
            const TaskId wait = fwd ? s.fwd_out_wait[mb] : s.bwd_out_wait[mb];
            if (wait != NO_TASK)
              g_.add_edge(wait, send);
            TaskId& last = chain[static_cast<size_t>(t)];
            if (last != NO_TASK)
              g_.add_edge(last, send);
            last = send;
            sends.push_back(send);
            dsts.push_back(dst);
            // They share their GPUs' links with the copied ring sends (which the simulated
            // ranks' own ring sends cross), so they run too; nothing waits for them.
            for (int c = 1; c < copies; ++c) {
              Task copy = task;
              copy.rank = grid_.rank(c, p, t);
              const Rank copy_pair[2] = {copy.rank, grid_.rank(c, dst_stage, t)};
              const TaskId id = g_.add_collective(copy, copy_pair);
              g_.add_edge(fwd ? s.fwd_last[mb] : s.bwd_last[mb], id);
              if (wait != NO_TASK)
                g_.add_edge(wait, id);
              TaskId& prev = copy_chain[static_cast<size_t>(c * grid_.tp + t)];
              if (prev != NO_TASK)
                g_.add_edge(prev, id);
              prev = id;
            }
          }
          if (gather) {
            const TaskId all_gather = g_.add_collective(
                tp_task(CollectiveOp::ALL_GATHER, pass.phase, dsts.front(), dst_stage, -1, pass.micro_batch), dsts);
            for (TaskId send : sends)
              g_.add_edge(send, all_gather);
            sends.assign(sends.size(), all_gather);
          }
          for (size_t i = 0; i < dsts.size(); ++i) {
            const RankState& r = rs(dsts[i]);
            for (TaskId entry : moe_cp_->entry_of(fwd ? r.fwd_first[dst_mb] : r.bwd_first[dst_mb]))
              g_.add_edge(sends[i], entry);
          }
        }
      }
    }
  }

  // ---- end of step: the gradients' last synchronization ------------------------------------

  /// After the DP reduction and before the optimizer (Megatron's finalize_model_grads and the
  /// gradient clipping): with SP, the gradients of the replicated weights computed on sequence
  /// shards all-reduce over the TP group; with pp > 1 and a copy of the input embedding on the
  /// last stage (a tied output layer, or the multi-token-prediction modules' embedding), the two
  /// copies' gradients all-reduce between the first and the last stage; then the gradient norm
  /// (and with fp16 the overflow check) all-reduces over the replica's tp*pp GPUs (Megatron's
  /// model-parallel group; its distributed optimizer also spans the DP replicas, whose latency
  /// this leaves out), so every optimizer waits for the slowest stage's gradients. Each waits for
  /// its GPUs' compute, DP stream and pending collective; the next one on a GPU waits for it.
  void build_grad_sync() {
    auto sync = [&](CommGroup group, Stream stream, int stage, Bytes bytes, CommRole role,
                    const std::vector<Rank>& ranks) {
      Task t = detail::collective_task(group, CollectiveOp::ALL_REDUCE, stream, Phase::OPTIMIZER, stage, -1, -1, bytes);
      t.rank = ranks.front();
      t.role = role;
      const TaskId id = g_.add_collective(t, ranks);
      for (Rank r : ranks) {
        RankState& st = rs(r);
        for (TaskId dep : {st.last_compute, st.dp_chain, st.pending_wait})
          if (dep != NO_TASK)
            g_.add_edge(dep, id);
        st.pending_wait = id;
      }
    };
    const double e = model::grad_bytes(w_); // a gradient's bytes, as the DP buckets
    for (int d = 0; d < replicas_; ++d) {
      std::vector<Rank> all; // the replica's model-parallel group
      for (int p = 0; p < grid_.pp; ++p) {
        std::vector<Rank> group;
        for (int t = 0; t < grid_.tp; ++t)
          group.push_back(grid_.rank(d, p, t));
        all.insert(all.end(), group.begin(), group.end());
        if (sp_)
          sync(CommGroup::TP, Stream::TP_COMM, p, Bytes(model::sequence_parallel_grad_params(w_, p) * e),
               CommRole::NORM_GRADS, group);
      }
      if (grid_.pp > 1 && (w_.model.tied_embeddings || w_.model.mtp_layers > 0)) {
        const Bytes bytes(static_cast<double>(w_.model.vocab) * static_cast<double>(w_.model.hidden) / grid_.tp * e);
        for (int t = 0; t < grid_.tp; ++t)
          sync(CommGroup::PP, Stream::PP_COMM, 0, bytes, CommRole::TIED_EMBEDDING,
               {grid_.rank(d, 0, t), grid_.rank(d, grid_.pp - 1, t)});
      }
      if (all.size() < 2)
        continue;
      std::sort(all.begin(), all.end());
      for (int i = 0; i < (w_.precision == Precision::FP16 ? 2 : 1); ++i)
        sync(CommGroup::DP, Stream::DP_COMM, -1, Bytes(4.0), CommRole::GRAD_NORM, all);
    }
  }

  // ---- optimizer and ZeRO-1/2 parameter all-gather ------------------------------------------

  void build_optimizer(int p, int t) {
    std::vector<double> item_params;
    std::vector<int> item_layer;
    gradient_items(model::stage_layout(w_, p), item_params, item_layer);
    const auto item_buckets = buckets(item_params);
    const double e = model::weight_bytes(w_); // the updated weights, gathered as stored
    for (int d = 0; d < replicas_; ++d) {
      const Rank r = grid_.rank(d, p, t);
      RankState& st = rs(r);
      const ComputeQuery q = optimizer_query(w_, p); // ZeRO: dense / (dp*cp), experts / expert_data_parallel
      Task task = compute_task(r, Block::OPTIMIZER, Phase::OPTIMIZER, p, -1, -1);
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
      // ZeRO-1/2: every rank updated its shard; gather the updated parameters (unless the next
      // step's forward does, overlapped_param_gathers).
      if ((zero_ == 1 || zero_ == 2) && grid_.dp > 1 && !w_.training.overlap_param_gather) {
        TaskId producer = opt;
        for (size_t b = 0; b < item_buckets.size(); ++b) {
          dp_collective(r, p, t, {-1, 3, static_cast<int>(b)}, CollectiveOp::ALL_GATHER,
                        Bytes(item_buckets[b].second * e), Phase::OPTIMIZER, -1, -1, producer, Bytes(0.0),
                        static_cast<int>(b));
          producer = NO_TASK;
        }
      }
      // ZeRO-2's experts, reduce-scattered every micro-batch, are gathered back likewise (ZeRO-1's
      // are all-reduced at the end of backward: the same volume).
      if (zero_ == 2 && !w_.training.overlap_param_gather)
        for (int c = 0; c < vp_; ++c) {
          const model::StageLayout span = chunk_layout(p, c);
          for (int64_t l = 0; l < span.num_layers; ++l) {
            const int layer = static_cast<int>(span.first_layer + l);
            const double experts = model::layer_params_at(w_.model, layer, grid_.tp, grid_.ep, grid_.etp).expert;
            if (experts > 0)
              moe_cp_->expert_gather(r, p, layer, -1, Phase::OPTIMIZER, opt, Bytes(experts * e), Bytes(0.0));
          }
        }
    }
  }

  const WorkloadSpec& w_;
  const BuildOptions& o_;
  RankGrid grid_;
  int m_ = 0;
  int replicas_ = 1;
  bool fold_cp_ = false; ///< only CP index 0 simulated (dense models, fold_dp)
  int zero_ = 0;
  int vp_ = 1;        ///< model chunks per stage
  bool split_ = false; ///< backward split into B and W passes (zero-bubble schedules)
  bool sp_ = false;
  model::LayerActivations stored_, working_;
  StepGraph g_;
  std::vector<RankState> ranks_;
  std::map<std::tuple<int, int, int, int, int>, TaskId> dp_tasks_;
  std::map<std::tuple<int, int, int, bool>, std::pair<ComputeCost, ComputeQuery>> cost_cache_;
  std::unique_ptr<detail::MoeCpEmitter> moe_cp_;
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
