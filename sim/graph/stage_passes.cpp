#include "graph/stage_passes.hpp"

#include "model/moe.hpp"
#include "model/transformer.hpp"

#include <algorithm>

namespace stepsim::graph::detail {

// ---- one pass ------------------------------------------------------------------------------

/// One pass of the TP group: its layers' compute blocks and TP collectives, ZeRO-3's gathers
/// and reduce-scatters, and the gradient items it finalizes.
class StagePasses::Pass {
public:
  Pass(StagePasses& s, const PassRef& pass);

  /// Emits the pass and records where its output is ready.
  void emit();

private:
  /// One ZeRO-3 collective of chunk-local layer `l` over the DP group of TP rank `i`.
  struct Zero3Call {
    size_t i = 0;
    CollectivePurpose purpose = CollectivePurpose::ZERO3_GATHER;
    int l = 0;
    CollectiveOp op = CollectiveOp::ALL_GATHER;
    double bytes = 0; ///< per GPU
    Phase phase = Phase::FORWARD;
    TaskId after = NO_TASK; ///< what the first call waits for
    Bytes alloc{0.0};       ///< gathered into memory by the first call
  };

  void forward();
  /// A layer's attention block (`attention`) and MLP block (`mlp`'s memory and ZeRO-3 fields, at
  /// the attention's place) in a forward or recomputation, each followed by its TP collectives;
  /// the attention's tasks are the first of the pass's slot when none is yet (`first`). Returns
  /// the MLP's tasks.
  std::vector<TaskId> layer_forward(const BlockCall& attention, BlockCall mlp,
                                    std::vector<TaskId> RankState::*first);
  void weight_grad();
  void backward();
  void backward_layer(int j);
  /// training.grad_accumulation: fp32_pass: after the pass's weight gradients exist, one task per
  /// rank adding them into the fp32 accumulator (grad_accumulation_query: the rank's held
  /// gradients, an equal share per model chunk); the pass ends with it.
  void accumulate_gradients();

  [[nodiscard]] int layer_of(int l) const { return static_cast<int>(layout_.first_layer + l); }
  /// ZeRO-3: the dense parameters of local layer l (all of a dense layer; attention, norms,
  /// router and shared experts of an MoE layer) gathered over DP as one collective; the first
  /// and last layers also carry the embedding / output parameters of their chunk.
  [[nodiscard]] double zero3_params(int l) const;
  /// The embedding's and the output layer's parameters gathered with layer l (zero3_params' part
  /// outside the transformer layer).
  [[nodiscard]] double zero3_extra_params(int l) const;
  /// Bytes of layer l's ZeRO-3 all-gather: the transformer layer's parameters as ZeRO-3 gathers
  /// them (model::zero3_gather_bytes: fp8 casts with training.fp8_all_gather), the embedding and
  /// output layers as stored (torchao's float8 all-gather converts the layers' linears only).
  [[nodiscard]] double zero3_gather_bytes(int l) const;
  /// An MoE layer's routed experts, gathered over their expert-data-parallel group.
  [[nodiscard]] double expert_params(int l) const;
  /// The chunk's first forward waits, layer by layer, for the parameter all-gathers issued at
  /// the step's start (overlap_param_gather); item i of the chunk's gradient items.
  [[nodiscard]] std::vector<TaskId> param_gather_of(size_t i) const;
  void mark_first(std::vector<TaskId> RankState::*field, const std::vector<TaskId>& ids);
  void mark_last(std::vector<TaskId> RankState::*field, const std::vector<TaskId>& ids);
  /// One task, or under blocking fetch one per weight tensor of the layer (the layer's bytes
  /// split evenly), each a tensor-list collective whose host part costs the per-rank overhead
  /// times the group's size. Returns the last.
  TaskId zero3_collective(const Zero3Call& c);
  /// ZeRO-3 gathers: position j of the pass (layers in pass order) is gathered ahead, at most
  /// prefetch + 1 layers resident; gather j waits for the task that freed position j-prefetch-1.
  /// Blocking fetch: nothing ahead; each gather waits for the rank's compute so far.
  void issue_gathers_up_to(int upto);
  [[nodiscard]] std::vector<TaskId> gather_of(int j) const;
  [[nodiscard]] Bytes gathered_bytes(int l) const;
  /// The experts' shards of position j (layer l); `frees`: the compute that uses them last.
  [[nodiscard]] ExpertShards expert_shards(int j, int l, bool frees) const;
  /// The next gradient item is final (its producers per rank): its bucket's reduction when the
  /// item closes one (ZeRO-0/1 once, in the last pass; ZeRO-2 every pass).
  void item_done(const std::vector<TaskId>& producers);
  /// ZeRO-3: a layer's gradients are reduce-scattered as soon as they exist.
  void zero3_reduce(int l, const std::vector<TaskId>& producers);

  StagePasses& s_;
  const WorkloadSpec& w_;
  const PassRef pass_;
  const model::StageLayout layout_;
  const int n_layers_;
  const GradientItems items_;
  const Buckets item_buckets_;
  const int mb_;
  const size_t slot_; ///< (chunk, micro-batch)
  const bool fwd_, weight_;
  bool first_forward_ = false;
  bool last_backward_ = false;
  const bool blocking_; ///< training.zero3_fetch: blocking
  const int prefetch_;
  bool gathers_; ///< ZeRO-3 gathers this pass's parameters
  /// ZeRO-3 with training.reshard_after_forward false: the forward's gathers stay until the
  /// layer's backward, which gathers nothing and frees them.
  const bool kept_;
  /// ... with a pipeline (model::zero3_held_for_step): gathered in the chunk's first forward, kept
  /// for the whole step, freed and reduce-scattered after the chunk's last backward.
  const bool held_for_step_;
  const bool reduce_now_;
  const double e_, wb_, held_; ///< a gradient's bytes, a gathered parameter's bytes, and its memory
  const Bytes logits_act_;
  std::vector<std::vector<TaskId>> gather_;  ///< per position, per TP rank
  std::vector<std::vector<TaskId>> xgather_; ///< its experts' gathers
  std::vector<std::vector<TaskId>> freer_;   ///< the task freeing a position
  int issued_ = 0;
  std::vector<std::vector<TaskId>> item_producer_;
  size_t item_ = 0;
  size_t bucket_ = 0;
};

StagePasses::Pass::Pass(StagePasses& s, const PassRef& pass)
    : s_(s), w_(s.w_), pass_(pass), layout_(s.o_.dp.chunk_layout(s.p_, pass.chunk)),
      n_layers_(static_cast<int>(layout_.num_layers)), items_(s.o_.dp.gradient_items(layout_)),
      item_buckets_(s.o_.dp.buckets(items_.params)), mb_(pass.micro_batch),
      slot_(static_cast<size_t>(pass.chunk) * static_cast<size_t>(s.o_.shape.micro_batches) +
            static_cast<size_t>(pass.micro_batch)),
      fwd_(pass.phase == Phase::FORWARD), weight_(pass.phase == Phase::WEIGHT_GRAD),
      blocking_(w_.training.zero3_fetch == Zero3Fetch::BLOCKING),
      prefetch_(blocking_ ? 0 : w_.training.zero3_prefetch),
      gathers_(s.o_.shape.zero >= 3 && s.grid_.dp > 1 && !weight_ &&
               (fwd_ || w_.training.reshard_after_forward)),
      kept_(s.o_.shape.zero >= 3 && s.grid_.dp > 1 && !w_.training.reshard_after_forward),
      held_for_step_(kept_ && s.grid_.pp > 1),
      // Gradients become final per item; ZeRO-0/1 reduce them once (last pass), ZeRO-2/3 every
      // pass (their gradients are sharded, so they cannot accumulate locally).
      reduce_now_(s.o_.shape.zero >= 2), e_(model::grad_bytes(w_)), wb_(model::zero3_gather_bytes(w_)),
      held_(wb_ + model::fp8_weight_bytes(w_)), logits_act_(model::logits_activations(w_)),
      gather_(static_cast<size_t>(n_layers_)), xgather_(static_cast<size_t>(n_layers_)),
      freer_(static_cast<size_t>(n_layers_)), item_producer_(items_.params.size()) {
  const auto chunk = static_cast<size_t>(pass.chunk);
  first_forward_ = fwd_ && !s.chunk_forwarded_[chunk]++;
  if (held_for_step_ && !first_forward_)
    gathers_ = false; // gathered once, in the chunk's first forward
  // Gradients become final in this pass (BACKWARD, or W when split) ...
  const bool grads_here = s.o_.shape.split ? weight_ : pass.phase == Phase::BACKWARD;
  if (grads_here)
    ++s.grad_passes_[chunk];
  // ... for good in the chunk's last such pass.
  last_backward_ = grads_here && s.grad_passes_[chunk] == s.chunk_passes_[chunk];
}

double StagePasses::Pass::zero3_extra_params(int l) const {
  const int tp = s_.grid_.tp;
  double extra = 0;
  if (l == 0 && layout_.has_embedding)
    extra += model::embedding_params(w_.model, tp);
  if (l == n_layers_ - 1 && layout_.has_output)
    extra += model::output_params(w_.model, tp, s_.grid_.pp);
  return extra;
}

double StagePasses::Pass::zero3_params(int l) const {
  return model::layer_params_at(w_.model, layer_of(l), s_.grid_.tp, s_.grid_.ep, s_.grid_.etp).dense +
         zero3_extra_params(l);
}

double StagePasses::Pass::zero3_gather_bytes(int l) const {
  const double dense =
      model::layer_params_at(w_.model, layer_of(l), s_.grid_.tp, s_.grid_.ep, s_.grid_.etp).dense;
  return dense * wb_ + zero3_extra_params(l) * model::weight_bytes(w_);
}

double StagePasses::Pass::expert_params(int l) const {
  return model::layer_params_at(w_.model, layer_of(l), s_.grid_.tp, s_.grid_.ep, s_.grid_.etp).expert;
}

std::vector<TaskId> StagePasses::Pass::param_gather_of(size_t i) const {
  return first_forward_ ? s_.param_gathers_.of(pass_.chunk, i) : std::vector<TaskId>{};
}

void StagePasses::Pass::mark_first(std::vector<TaskId> RankState::*field, const std::vector<TaskId>& ids) {
  const std::vector<Rank>& group = s_.group_.ranks;
  for (size_t i = 0; i < group.size(); ++i) {
    TaskId& slot_id = (s_.streams_[group[i]].*field)[slot_];
    if (slot_id == NO_TASK)
      slot_id = ids[i];
  }
}

void StagePasses::Pass::mark_last(std::vector<TaskId> RankState::*field, const std::vector<TaskId>& ids) {
  const std::vector<Rank>& group = s_.group_.ranks;
  for (size_t i = 0; i < group.size(); ++i)
    (s_.streams_[group[i]].*field)[slot_] = ids[i];
}

TaskId StagePasses::Pass::zero3_collective(const Zero3Call& c) {
  int calls = 1;
  if (blocking_) {
    calls = static_cast<int>(model::dense_weight_tensors(w_.model, layer_of(c.l)));
    if (c.l == 0 && layout_.has_embedding)
      ++calls;
    if (c.l == n_layers_ - 1 && layout_.has_output)
      ++calls;
  }
  const Rank rank = s_.group_.ranks[c.i];
  const DpGroup group = s_.o_.dp.zero3_group(s_.p_, static_cast<int>(c.i), rank,
                                             c.purpose == CollectivePurpose::ZERO3_REPLICATE);
  TaskId id = NO_TASK;
  for (int k = 0; k < calls; ++k) {
    id = s_.o_.dp.collective({.rank = rank,
                              .key = {.group = group,
                                      .purpose = c.purpose,
                                      .pass = s_.pass_index_,
                                      .layer = layer_of(c.l),
                                      .call = k},
                              .op = c.op,
                              .bytes = Bytes(c.bytes / calls),
                              .phase = c.phase,
                              .mb = mb_,
                              .producer = k == 0 ? c.after : NO_TASK,
                              .alloc = k == 0 ? c.alloc : Bytes(0.0)});
    if (blocking_)
      s_.g_.mutable_task(id).duration =
          s_.o_.build.list_collective_per_rank * static_cast<double>(s_.g_.task(id).ranks_count);
  }
  return id;
}

void StagePasses::Pass::issue_gathers_up_to(int upto) {
  if (!gathers_)
    return;
  const std::vector<Rank>& group = s_.group_.ranks;
  for (; issued_ <= std::min(upto, n_layers_ - 1); ++issued_) {
    const int j = issued_;
    const int l = fwd_ ? j : n_layers_ - 1 - j;
    const double params = zero3_params(l);
    const double bytes = zero3_gather_bytes(l);
    const double experts = expert_params(l);
    gather_[static_cast<size_t>(j)].resize(group.size());
    xgather_[static_cast<size_t>(j)].assign(group.size(), NO_TASK);
    for (size_t i = 0; i < group.size(); ++i) {
      const TaskId after = blocking_                ? s_.streams_[group[i]].last_compute
                           : j - prefetch_ - 1 >= 0 ? freer_[static_cast<size_t>(j - prefetch_ - 1)][i]
                                                    : NO_TASK;
      gather_[static_cast<size_t>(j)][i] = zero3_collective({.i = i,
                                                             .purpose = CollectivePurpose::ZERO3_GATHER,
                                                             .l = l,
                                                             .op = CollectiveOp::ALL_GATHER,
                                                             .bytes = bytes,
                                                             .phase = pass_.phase,
                                                             .after = after,
                                                             .alloc = Bytes(params * held_)});
      if (experts > 0)
        xgather_[static_cast<size_t>(j)][i] = s_.o_.moe_cp.expert_gather(
            {.rank = group[i],
             .site = {.phase = pass_.phase, .stage = s_.p_, .layer = layer_of(l), .mb = mb_},
             .after = after,
             .bytes = Bytes(experts * wb_),
             .held = Bytes(experts * held_)});
    }
  }
}

std::vector<TaskId> StagePasses::Pass::gather_of(int j) const {
  return gathers_ ? gather_[static_cast<size_t>(j)] : std::vector<TaskId>{};
}

Bytes StagePasses::Pass::gathered_bytes(int l) const {
  return gathers_ ? Bytes(zero3_params(l) * held_) : Bytes(0.0);
}

ExpertShards StagePasses::Pass::expert_shards(int j, int l, bool frees) const {
  ExpertShards xs;
  const auto& xg = xgather_[static_cast<size_t>(j)];
  if (!gathers_ || xg.empty() || xg.front() == NO_TASK) // no experts, or not sharded
    return xs;
  xs.gather = xg;
  xs.free = frees ? Bytes(expert_params(l) * held_) : Bytes(0.0);
  return xs;
}

void StagePasses::Pass::item_done(const std::vector<TaskId>& producers) {
  item_producer_[item_] = producers;
  const int zero = s_.o_.shape.zero;
  if (zero < 3 && (reduce_now_ || last_backward_) && s_.grid_.dp > 1 && bucket_ < item_buckets_.size() &&
      item_buckets_[bucket_].first == item_) {
    const CollectiveOp op = zero == 0 ? CollectiveOp::ALL_REDUCE : CollectiveOp::REDUCE_SCATTER;
    // ZeRO-0/1 reduce the accumulated gradients once per step; ZeRO-2 per micro-batch.
    const std::vector<Rank>& group = s_.group_.ranks;
    for (size_t i = 0; i < group.size(); ++i)
      s_.o_.dp.collective({.rank = group[i],
                           .key = {.group = {s_.p_, static_cast<int>(i)},
                                   .purpose = CollectivePurpose::GRAD_BUCKET,
                                   .pass = s_.pass_index_,
                                   .bucket = static_cast<int>(bucket_)},
                           .op = op,
                           .bytes = Bytes(item_buckets_[bucket_].second * e_),
                           .phase = Phase::BACKWARD,
                           .mb = zero >= 2 ? mb_ : -1,
                           .producer = producers[i]});
    ++bucket_;
  }
  ++item_;
}

void StagePasses::Pass::zero3_reduce(int l, const std::vector<TaskId>& producers) {
  if (s_.o_.shape.zero < 3 || s_.grid_.dp == 1)
    return;
  const double params = zero3_params(l);
  const int shard = s_.o_.dp.hybrid_shard();
  for (size_t i = 0; i < s_.group_.ranks.size(); ++i) {
    const TaskId reduced = zero3_collective({.i = i,
                                             .purpose = CollectivePurpose::ZERO3_REDUCE,
                                             .l = l,
                                             .op = CollectiveOp::REDUCE_SCATTER,
                                             .bytes = params * e_,
                                             .phase = Phase::BACKWARD,
                                             .after = producers[i]});
    // Hybrid sharding: the GPU's gradient shard all-reduced over the shard groups' replicas.
    if (shard > 0)
      zero3_collective({.i = i,
                        .purpose = CollectivePurpose::ZERO3_REPLICATE,
                        .l = l,
                        .op = CollectiveOp::ALL_REDUCE,
                        .bytes = params * e_ / shard,
                        .phase = Phase::BACKWARD,
                        .after = reduced});
  }
}

void StagePasses::Pass::emit() {
  for (Rank r : s_.group_.ranks)
    s_.streams_[r].pass_overhead = s_.o_.build.pass_overhead;
  if (fwd_)
    forward();
  else if (weight_)
    weight_grad();
  else
    backward();
  // The pass's output is ready only once its trailing TP collective is done.
  for (Rank r : s_.group_.ranks) {
    RankState& st = s_.streams_[r];
    if (st.pending_wait != NO_TASK && !weight_)
      (fwd_ ? st.fwd_out_wait : st.bwd_out_wait)[slot_] = st.pending_wait;
  }
}

void StagePasses::Pass::forward() {
  TpEmitter& tp = s_.o_.tp;
  TpGroup& group = s_.group_;
  const int p = s_.p_;
  for (int j = 0; j < n_layers_; ++j) {
    issue_gathers_up_to(j + prefetch_);
    const int l = j;
    const int layer = layer_of(l);
    // The vocabulary-parallel embedding's output is summed over the TP ranks (an all-reduce,
    // or with SP a reduce-scatter and the first layer's all-gather) before the first layer.
    if (j == 0 && layout_.has_embedding)
      tp.after_block(group, s_.streams_.last_computes(group.ranks),
                     {.site = {.phase = Phase::FORWARD, .stage = p, .layer = -1, .mb = mb_},
                      .role = CommRole::EMBEDDING});
    const size_t layer_start = s_.g_.size();
    const model::LayerActivations kept = s_.kept_activations(l);
    // ZeRO-3's gather of the layer, or the overlapped ZeRO-1/2 gather of its bucket.
    const size_t item = (layout_.has_output ? 1 : 0) + static_cast<size_t>(n_layers_ - 1 - l);
    const auto mlp = layer_forward({.block = Block::ATTENTION,
                                    .phase = Phase::FORWARD,
                                    .stage = p,
                                    .layer = layer,
                                    .mb = mb_,
                                    .alloc = kept.attention,
                                    .extra_dep = gathers_ ? gather_of(j) : param_gather_of(item)},
                                   {.alloc = kept.mlp,
                                    .param_free = kept_ ? Bytes(0.0) : gathered_bytes(l),
                                    .shards = gathers_         ? expert_shards(j, l, true)
                                              : first_forward_ ? s_.param_gathers_.experts_of(pass_.chunk, l)
                                                               : ExpertShards{}},
                                   &RankState::fwd_first);
    s_.offload_copy(l, layer_start);
    freer_[static_cast<size_t>(j)] = mlp;
    mark_last(&RankState::fwd_last, mlp);
  }
  if (layout_.has_output) {
    auto logits = s_.compute({.block = Block::LOGITS,
                              .phase = Phase::FORWARD,
                              .stage = p,
                              .layer = -1,
                              .mb = mb_,
                              .alloc = logits_act_,
                              .extra_dep = param_gather_of(0)});
    mark_first(&RankState::fwd_first, logits);
    mark_last(&RankState::fwd_last, logits);
    tp.loss_all_reduces(group, logits, p, mb_);
  }
}

std::vector<TaskId> StagePasses::Pass::layer_forward(const BlockCall& attention, BlockCall mlp,
                                                     std::vector<TaskId> RankState::*first) {
  TpEmitter& tp = s_.o_.tp;
  const TaskSite site{
      .phase = attention.phase, .stage = attention.stage, .layer = attention.layer, .mb = attention.mb};
  const auto attn = s_.compute(attention);
  mark_first(first, attn);
  tp.after_block(s_.group_, attn,
                 {.site = site, .ag_scale = tp.moe_copies(site.layer), .block = Block::ATTENTION});
  mlp.block = Block::MLP;
  mlp.phase = site.phase;
  mlp.stage = site.stage;
  mlp.layer = site.layer;
  mlp.mb = site.mb;
  return tp.after_block(s_.group_, s_.compute(mlp),
                        {.site = site, .rs_scale = tp.moe_copies(site.layer), .block = Block::MLP});
}

void StagePasses::Pass::weight_grad() {
  // Zero-bubble W pass: weight-gradient GEMMs only (no TP collective); frees the activations
  // (docs/schedules.md: they are kept until W, which needs the GEMM inputs).
  const int p = s_.p_;
  const model::LayerActivations& working = s_.working_;
  if (layout_.has_output)
    item_done(s_.compute({.block = Block::LOGITS,
                          .phase = Phase::WEIGHT_GRAD,
                          .stage = p,
                          .layer = -1,
                          .mb = mb_,
                          .free = logits_act_}));
  for (int j = 0; j < n_layers_; ++j) {
    const int l = n_layers_ - 1 - j;
    const int layer = layer_of(l);
    const model::LayerActivations kept = s_.kept_activations(l);
    s_.compute({.block = Block::MLP,
                .phase = Phase::WEIGHT_GRAD,
                .stage = p,
                .layer = layer,
                .mb = mb_,
                .free = kept.mlp + working.mlp});
    auto attn = s_.compute({.block = Block::ATTENTION,
                            .phase = Phase::WEIGHT_GRAD,
                            .stage = p,
                            .layer = layer,
                            .mb = mb_,
                            .free = kept.attention + working.attention});
    zero3_reduce(l, attn);
    item_done(attn);
  }
  if (layout_.has_embedding)
    item_done(item_producer_[item_ - 1]);
  accumulate_gradients();
}

void StagePasses::Pass::accumulate_gradients() {
  if (w_.training.grad_accumulation != GradAccumulation::FP32_PASS)
    return;
  const ComputeQuery q = grad_accumulation_query(w_, s_.p_);
  const ComputeCost cost = s_.o_.costs.time()(q);
  const double share = 1.0 / static_cast<double>(s_.o_.shape.vp);
  std::vector<TaskId> ids;
  for (Rank r : s_.group_.ranks) {
    Task t = compute_task(r, Block::OPTIMIZER, Phase::BACKWARD, s_.p_, -1, mb_);
    t.duration = cost.time * share;
    t.sources = cost.sources;
    t.flops = q.flops * share;
    t.bytes = q.bytes * share;
    ids.push_back(s_.streams_.add_compute(t));
  }
  mark_last(&RankState::bwd_last, ids);
}

void StagePasses::Pass::backward() {
  // Split backward (B): frees nothing, finalizes no gradient; otherwise the whole backward.
  const bool split = s_.o_.shape.split;
  if (layout_.has_output) {
    TpEmitter& tp = s_.o_.tp;
    auto logits = s_.compute({.block = Block::LOGITS,
                              .phase = Phase::BACKWARD,
                              .stage = s_.p_,
                              .layer = -1,
                              .mb = mb_,
                              .free = split ? Bytes(0.0) : logits_act_});
    mark_first(&RankState::bwd_first, logits);
    // The output layer's input gradient is summed over the TP ranks (an all-reduce, or with
    // SP a reduce-scatter and the last layer's all-gather; none into folded experts).
    const int last_layer = static_cast<int>(layout_.first_layer + layout_.num_layers) - 1;
    logits = tp.after_backward_block(
        s_.group_, logits, Block::LOGITS,
        {.site = {.phase = Phase::BACKWARD, .stage = s_.p_, .layer = -1, .mb = mb_},
         .ag_scale = s_.grid_.folded() && n_layers_ > 0 ? tp.moe_copies(last_layer) : 1.0,
         .role = CommRole::LOGITS});
    mark_last(&RankState::bwd_last, logits); // a last chunk without layers ends here
    if (!split)
      item_done(logits);
  }
  for (int j = 0; j < n_layers_; ++j)
    backward_layer(j);
  // Held for the step: the accumulated gradients are reduce-scattered once the chunk's last
  // backward is done (torch.distributed.pipelining's post-backward of every FSDP module).
  if (held_for_step_ && last_backward_) {
    const std::vector<TaskId> done = s_.streams_.last_computes(s_.group_.ranks);
    for (int l = n_layers_ - 1; l >= 0; --l)
      zero3_reduce(l, done);
  }
  if (layout_.has_embedding && !split)
    item_done(item_producer_[item_ - 1]);
  if (!split)
    accumulate_gradients();
}

void StagePasses::Pass::backward_layer(int j) {
  TpEmitter& tp = s_.o_.tp;
  TpGroup& group = s_.group_;
  const model::LayerActivations& working = s_.working_;
  const bool split = s_.o_.shape.split;
  const bool folded = s_.grid_.folded();
  const int p = s_.p_;
  issue_gathers_up_to(j + prefetch_);
  const int l = n_layers_ - 1 - j;
  const int layer = layer_of(l);
  std::vector<TaskId> first_dep = gather_of(j);
  const size_t layer_start = s_.g_.size();
  const model::LayerActivations kept = s_.kept_activations(l);
  // A recomputed layer's backward also frees the working set its recomputation allocated.
  const bool again = w_.training.recomputes_layer(l);
  const model::LayerActivations freed{kept.attention + (again ? working.attention : Bytes(0.0)),
                                      kept.mlp + (again ? working.mlp : Bytes(0.0))};
  if (again) {
    layer_forward({.block = Block::ATTENTION,
                   .phase = Phase::RECOMPUTE,
                   .stage = p,
                   .layer = layer,
                   .mb = mb_,
                   .alloc = working.attention,
                   .extra_dep = first_dep},
                  {.alloc = working.mlp, .shards = expert_shards(j, l, false)}, &RankState::bwd_first);
    first_dep.clear();
    // Blocking fetch released the layer after its recomputation and gathers it again for
    // the backward (the ledger keeps it counted from the first gather).
    if (blocking_ && gathers_) {
      const double bytes = zero3_gather_bytes(l);
      for (size_t i = 0; i < group.ranks.size(); ++i)
        first_dep.push_back(zero3_collective({.i = i,
                                              .purpose = CollectivePurpose::ZERO3_REGATHER,
                                              .l = l,
                                              .op = CollectiveOp::ALL_GATHER,
                                              .bytes = bytes,
                                              .phase = Phase::BACKWARD,
                                              .after = s_.streams_[group.ranks[i]].last_compute}));
    }
  }
  const TaskSite site{.phase = Phase::BACKWARD, .stage = p, .layer = layer, .mb = mb_};
  auto mlp = s_.compute({.block = Block::MLP,
                         .phase = Phase::BACKWARD,
                         .stage = p,
                         .layer = layer,
                         .mb = mb_,
                         .free = split ? Bytes(0.0) : freed.mlp,
                         .extra_dep = first_dep,
                         .shards = expert_shards(j, l, true)});
  mark_first(&RankState::bwd_first, mlp);
  // The experts' backward gathers and scatters the routed copies' gradients (folded: only
  // the gradient all-gathered for the attention block's backward).
  tp.after_backward_block(
      group, mlp, Block::MLP,
      {.site = site, .rs_scale = tp.moe_copies(layer), .ag_scale = folded ? 1.0 : tp.moe_copies(layer)});
  auto attn =
      s_.compute({.block = Block::ATTENTION,
                  .phase = Phase::BACKWARD,
                  .stage = p,
                  .layer = layer,
                  .mb = mb_,
                  .free = split ? Bytes(0.0) : freed.attention,
                  .param_free = !kept_                              ? gathered_bytes(l)
                                : held_for_step_ && !last_backward_ ? Bytes(0.0)
                                                                    : Bytes(zero3_params(l) * held_)});
  // The gradient all-gathered for the MLP below, unless that is a folded MoE layer.
  attn = tp.after_backward_block(group, attn, Block::ATTENTION,
                                 {.site = site, .ag_scale = folded ? tp.moe_copies(layer - 1) : 1.0});
  s_.offload_copy(l, layer_start);
  mark_last(&RankState::bwd_last, attn);
  freer_[static_cast<size_t>(j)] = attn;
  if (!split) {
    if (!held_for_step_)
      zero3_reduce(l, attn);
    item_done(attn);
  }
}

// ---- the stage's passes --------------------------------------------------------------------

StagePasses::StagePasses(const StagePassesOptions& o, int d, int p)
    : o_(o), w_(o.shape.workload), grid_(o.shape.grid), g_(o.graph), streams_(o.streams), p_(p),
      stored_(model::stored_layer_activations(w_)), working_(model::recompute_working_set(w_)),
      grad_passes_(static_cast<size_t>(o.shape.vp), 0), chunk_passes_(static_cast<size_t>(o.shape.vp), 0),
      chunk_forwarded_(static_cast<size_t>(o.shape.vp), 0) {
  for (int t = 0; t < grid_.tp; ++t) {
    group_.members.push_back(grid_.rank(d, p, t));
    if (t < o.shape.tp_simulated(d))
      group_.ranks.push_back(group_.members.back());
  }
  const size_t slots = static_cast<size_t>(o.shape.micro_batches) * static_cast<size_t>(o.shape.vp);
  for (Rank r : group_.ranks) {
    RankState& st = streams_[r];
    st.fwd_first.assign(slots, NO_TASK);
    st.fwd_last = st.bwd_first = st.bwd_last = st.fwd_out_wait = st.bwd_out_wait = st.fwd_first;
  }
  pair_.resize(group_.ranks.size());
}

void StagePasses::build() {
  param_gathers_ = o_.dp.overlapped_param_gathers(group_.ranks, p_);
  const std::vector<PassRef> order =
      stage_order(w_.parallel.schedule, p_, grid_.pp, o_.shape.micro_batches, o_.shape.vp);
  // Combined 1F1B (parallel.ep_overlap): each forward next to a backward of another (chunk,
  // micro-batch) forms a pair whose second pass runs alongside the first (pair_role 1, 2).
  for (const PassRef& pass : order)
    if (pass.phase == Phase::FORWARD)
      ++chunk_passes_[static_cast<size_t>(pass.chunk)];
  const std::vector<int> pair_role = combined_pairs(order);
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t tasks_before = g_.size();
    if (pair_role[k] == 1)
      open_pair();
    else if (pair_role[k] == 2)
      second_of_pair();
    Pass(*this, order[k]).emit();
    if (pair_role[k] == 2)
      close_pair(tasks_before);
    ++pass_index_;
  }
}

std::vector<TaskId> StagePasses::compute(const BlockCall& call) {
  if (o_.moe_cp.handles(call.block,
                        call.layer)) // MoE MLP blocks, CP ring attention (graph/moe_cp_emitter.hpp)
    return o_.moe_cp.emit(group_.ranks, call);
  const auto [dur, q] =
      o_.costs.task_cost(call.block, call.phase, call.stage, o_.costs.windowed(call.block, call.layer));
  std::vector<TaskId> ids;
  ids.reserve(group_.ranks.size());
  for (size_t i = 0; i < group_.ranks.size(); ++i) {
    Task t = compute_task(group_.ranks[i], call.block, call.phase, call.stage, call.layer, call.mb);
    t.duration = dur.time;
    t.sources = dur.sources;
    t.flops = q.flops;
    t.bytes = q.bytes;
    t.act_alloc = call.alloc;
    t.act_free = call.free;
    t.param_free = call.param_free;
    const TaskId id = streams_.add_compute(t);
    if (!call.extra_dep.empty() && call.extra_dep[i] != NO_TASK)
      g_.add_edge(call.extra_dep[i], id);
    ids.push_back(id);
  }
  return ids;
}

bool StagePasses::offloaded(int l) const {
  return l < w_.training.offload_layers;
}

model::LayerActivations StagePasses::kept_activations(int l) const {
  if (offloaded(l))
    return {};
  if (w_.training.recompute == Recompute::FULL && !w_.training.recomputes_layer(l))
    return working_;
  return stored_;
}

void StagePasses::offload_copy(int l, size_t layer_start) {
  if (!offloaded(l))
    return;
  const Seconds copy = stored_.total() / o_.build.host_bandwidth;
  for (const Rank r : group_.ranks) {
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

std::vector<int> StagePasses::combined_pairs(const std::vector<PassRef>& order) const {
  std::vector<int> role(order.size(), 0);
  if (w_.parallel.bidirectional()) { // the schedule names its pairs
    for (size_t k = 1; k < order.size(); ++k)
      if (order[k].paired) {
        role[k - 1] = 1;
        role[k] = 2;
      }
    return role;
  }
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

void StagePasses::open_pair() {
  for (size_t i = 0; i < group_.ranks.size(); ++i) {
    pair_[i].start_compute = streams_[group_.ranks[i]].last_compute;
    pair_[i].start_ep = streams_[group_.ranks[i]].ep_chain;
  }
  pair_start_tp_ = group_.chain;
}

void StagePasses::second_of_pair() {
  for (size_t i = 0; i < group_.ranks.size(); ++i) {
    RankState& st = streams_[group_.ranks[i]];
    pair_[i].first_last = st.last_compute;
    st.last_compute = pair_[i].start_compute;
    st.pending_wait = NO_TASK; // the first pass's trailing collective: its own output's
    st.ep_chain = pair_[i].start_ep;
  }
  group_.chain = pair_start_tp_;
}

void StagePasses::close_pair(size_t tasks_before) {
  // What follows waits for the second pass's last compute task, which also waits for the first's.
  for (size_t i = 0; i < group_.ranks.size(); ++i) {
    const TaskId last = streams_[group_.ranks[i]].last_compute;
    if (pair_[i].first_last != NO_TASK && last != NO_TASK && last != pair_[i].first_last)
      g_.add_edge(pair_[i].first_last, last);
  }
  for (TaskId id = static_cast<TaskId>(tasks_before); id < g_.size(); ++id) {
    Task& t = g_.mutable_task(id);
    if (t.stream == Stream::COMPUTE || t.stream == Stream::TP_COMM || t.stream == Stream::EP_COMM)
      t.lane = 1;
  }
}

} // namespace stepsim::graph::detail
