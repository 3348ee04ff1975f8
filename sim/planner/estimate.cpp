// The planner's analytical step-time estimate (docs/planner.md, "Estimate").

#include "planner/planner.hpp"

#include "graph/step_builder.hpp"
#include "model/block_cost.hpp"
#include "model/memory.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"
#include "topology/degrade.hpp"

#include <algorithm>

namespace stepsim::planner {

namespace {

double d(int64_t v) {
  return static_cast<double>(v);
}

/// Alpha-beta figures of the links a group of `span` consecutive ranks crosses.
struct Link {
  double alpha = 0; ///< s
  double beta = 1;  ///< B/s per GPU
};

/// What the cluster's `degraded` section changes for a layout (docs/planner.md, "Under a
/// degradation"): on the nodes its ranks fill (ClusterSpec::up_nodes, down nodes skipped), the
/// slowest GPU of each pipeline stage, the per-GPU NIC share of the worst node and the worst
/// fat-tree leaf above them. A synchronous step waits for the slowest of each.
struct Degradation {
  std::vector<double> stage_speed; ///< per pipeline stage, its slowest GPU's speed, (0, 1]
  double nic_share = 0;            ///< B/s per GPU on the worst used node; 0 = as the spec
  double leaf = 1;                 ///< the worst used leaf's capacity over its nominal (cross-leaf groups)
};

Degradation degradation(const ClusterSpec& c, const WorkloadSpec& w) {
  const int64_t ranks = w.num_gpus();
  const int64_t stages = std::max(1, w.parallel.pp);
  Degradation out{.stage_speed = std::vector<double>(static_cast<size_t>(stages), 1.0)};
  const DegradedSpec& deg = c.degraded;
  if (deg.gpus.empty() && deg.nics.empty() && deg.leaves.empty())
    return out;
  // Rank r runs on GPU r % gpn of the (r / gpn)-th node up; its stage is the rank order's
  // (graph::RankGrid, pp slowest-varying).
  const graph::RankGrid grid{
      .tp = w.parallel.tp, .pp = w.parallel.pp, .dp = w.parallel.dp * w.parallel.cp, .cp = w.parallel.cp};
  const int gpn = std::max(1, c.gpus_per_node);
  const std::vector<int> up = c.up_nodes();
  std::vector<int64_t> first_rank(static_cast<size_t>(std::max(0, c.nodes)), -1);
  for (size_t i = 0; i < up.size() && static_cast<int64_t>(i) * gpn < ranks; ++i)
    first_rank[static_cast<size_t>(up[i])] = static_cast<int64_t>(i) * gpn;
  const auto in_use = [&](int node) {
    return node >= 0 && node < c.nodes && first_rank[static_cast<size_t>(node)] >= 0;
  };
  for (const DegradedSpec::Gpu& g : deg.gpus) {
    const int64_t rank = in_use(g.node) ? first_rank[static_cast<size_t>(g.node)] + g.gpu : ranks;
    if (rank < ranks) {
      double& speed = out.stage_speed[static_cast<size_t>(grid.pp_of(static_cast<graph::Rank>(rank)))];
      speed = std::min(speed, g.speed);
    }
  }
  // A node's GPUs reach the fabric through its NICs, nics/gpn of a NIC each, in lock step: each at
  // most its NIC's rate, and with a NIC down all of them share the working NICs' summed rate.
  const double nominal = c.nic.bandwidth.value() * c.nic.efficiency * std::max(1, c.nics_per_node) / gpn;
  for (const DegradedSpec::Nic& n : deg.nics) {
    if (!in_use(n.node))
      continue;
    double share = nominal;
    for (int k = 0; k < c.nics_per_node; ++k)
      if (!topology::nic_down(c, n.node, k))
        share = std::min(share, topology::nic_rate(c, n.node, k) * c.nics_per_node / gpn);
    if (const double summed = topology::node_network_rate(c, n.node); summed > 0)
      share = std::min(share, summed / gpn);
    out.nic_share = std::min(out.nic_share > 0 ? out.nic_share : nominal, share);
  }
  if (c.fabric.kind == FabricKind::FAT_TREE) {
    const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
    for (const DegradedSpec::Leaf& l : deg.leaves)
      for (int node = l.leaf * per_leaf; node < std::min(c.nodes, (l.leaf + 1) * per_leaf); ++node)
        if (in_use(node))
          out.leaf = std::min(out.leaf, topology::leaf_capacity(c, l.leaf, 1.0));
  }
  return out;
}

Link link_for(const ClusterSpec& c, int64_t span, const Degradation& deg = {}) {
  if (span <= c.gpus_per_node)
    return {c.nvswitch.latency.value(), c.nvswitch.bandwidth.value() * c.nvswitch.efficiency};
  double nic_share = deg.nic_share > 0 ? deg.nic_share
                                       : c.nic.bandwidth.value() * c.nic.efficiency *
                                             std::max(1, c.nics_per_node) / std::max(1, c.gpus_per_node);
  // A group wider than a leaf crosses the spine: a degraded leaf carries its share of that.
  if (c.fabric.kind == FabricKind::FAT_TREE &&
      span > static_cast<int64_t>(std::max(1, c.fabric.nodes_per_leaf)) * c.gpus_per_node)
    nic_share *= deg.leaf;
  return {c.nic.latency.value() + 2.0 * c.fabric.switch_latency.value(), nic_share};
}

/// Ring all-reduce of `bytes` over n ranks: 2(n-1) alpha + 2(n-1)/n S / beta (MODEL.md §4).
double all_reduce(double bytes, int64_t n, const Link& l) {
  if (n <= 1)
    return 0;
  return 2.0 * d(n - 1) * l.alpha + 2.0 * d(n - 1) / d(n) * bytes / l.beta;
}

/// All-gather or reduce-scatter of `bytes` (full size) over n ranks: (n-1) alpha + (n-1)/n S / beta.
double gather(double bytes, int64_t n, const Link& l) {
  if (n <= 1)
    return 0;
  return d(n - 1) * l.alpha + d(n - 1) / d(n) * bytes / l.beta;
}

/// The estimate of one layout (docs/planner.md, "Estimate"): each part a member function over the
/// figures the earlier parts found, per micro-batch on the slowest (last) stage.
class StepEstimator {
public:
  StepEstimator(const ClusterSpec& cluster, const WorkloadSpec& w, const graph::ComputeTimeFn& compute_time)
      : cluster_(cluster), w_(w), par_(w.parallel), compute_time_(compute_time), p_(par_.pp),
        v_(par_.schedule == Schedule::DUALPIPE ? 1 : par_.chunks_per_stage()), t_(par_.tp), dp_(par_.dp),
        m_(w.micro_batches()), e_(model::grad_bytes(w)), wb_(model::weight_bytes(w)),
        split_(splits_backward(par_.schedule)), last_(model::stage_layout(w, static_cast<int>(p_ - 1))),
        // DualPipe: a micro-batch crosses one of the stage's two chunks.
        layers_(d(last_.num_layers) / (par_.schedule == Schedule::DUALPIPE ? 2.0 : 1.0)),
        deg_(degradation(cluster, w)) {}

  Estimate run() {
    block_times();
    tp_collectives();
    moe();
    tp_input_linears();
    pass_times();
    Estimate est;
    est.compute = Seconds(d(m_) * (t_f_ + t_b_));
    est.tp_comm = Seconds(d(m_) * tp_per_mb_);
    est.ep_comm = Seconds(d(m_) * ep_per_mb_);
    est.bubble = Seconds(bubble());
    est.pp_comm = Seconds(pp_comm());
    est.dp_exposed = Seconds(dp_exposed());
    est.optimizer = Seconds(optimizer());
    est.step =
        est.compute + est.tp_comm + est.ep_comm + est.bubble + est.pp_comm + est.dp_exposed + est.optimizer;
    return est;
  }

private:
  using Block = graph::Block;
  using Phase = graph::Phase;

  /// A block's time on one GPU: context parallelism as the builder (blocks of s/cp tokens whose
  /// attention core meets all s keys, graph::block_query; kernel profiles see the whole
  /// sequence, graph::gpu_compute_cost).
  double time(Block b, Phase ph, int stage, bool windowed = false) const {
    return graph::gpu_compute_cost(w_, compute_time_, graph::block_query(w_, b, ph, stage, windowed))
        .time.value();
  }

  /// An attention block's time per layer: its windowed layers (a window shorter than the
  /// sequence; cp is 1 then) at their own cost.
  double attention(Phase ph) const {
    return (1.0 - win_share_) * time(Block::ATTENTION, ph, 0) +
           (win_share_ > 0 ? win_share_ * time(Block::ATTENTION, ph, 0, true) : 0.0);
  }

  /// The last stage's blocks (with the multi-token-prediction layers).
  void block_times() {
    const ModelSpec& mod = w_.model;
    int64_t windowed_layers = 0;
    if (mod.window_below_sequence())
      for (int64_t l = last_.first_layer; l < last_.first_layer + last_.num_layers; ++l)
        windowed_layers += mod.windowed_layer(l) ? 1 : 0;
    win_share_ = d(windowed_layers) / d(std::max<int64_t>(1, last_.num_layers));
    att_f_ = attention(Phase::FORWARD);
    mlp_f_ = time(Block::MLP, Phase::FORWARD, 0);
    att_b_ = attention(Phase::BACKWARD);
    mlp_b_ = time(Block::MLP, Phase::BACKWARD, 0);
    // Full recomputation: the share rf of the last stage's layers it repeats (recompute_layers of
    // each chunk, or all); the recomputation's time, TP and EP collectives are charged per layer
    // times rf.
    const bool full = w_.training.recompute == Recompute::FULL;
    const double last_chunk_layers = d(last_.num_layers) / d(v_);
    rf_ = !full ? 0.0
          : w_.training.recompute_layers == 0 || last_chunk_layers <= 0
              ? 1.0
              : std::min(d(w_.training.recompute_layers), last_chunk_layers) / last_chunk_layers;
    att_r_ = rf_ > 0 ? rf_ * attention(Phase::RECOMPUTE) : 0.0;
    mlp_r_ = rf_ > 0 ? rf_ * time(Block::MLP, Phase::RECOMPUTE, 0) : 0.0;
    lg_f_ = time(Block::LOGITS, Phase::FORWARD, static_cast<int>(p_ - 1));
    lg_b_ = time(Block::LOGITS, Phase::BACKWARD, static_cast<int>(p_ - 1));
  }

  /// TP: blocking collectives after every block (2 per layer per pass, recompute included).
  void tp_collectives() {
    tp_link_ = link_for(cluster_, t_, deg_);
    tp_one_ = all_reduce(model::tp_collective_bytes(w_).value(), t_, tp_link_);
    // Folded expert groups (etp 1 < tp): an MoE layer keeps half of them (no all-gather into its
    // experts, no reduce-scatter out of them; docs/moe.md), counted once the MoE layers are known.
    tp_per_mb_ = layers_ * tp_one_ * (4.0 + 2.0 * rf_);
    // Outside the layers (as the builder): the output layer's input gradient and the
    // cross-entropy's three per-token fp32 all-reduces; a single stage also sums the embedding.
    const double loss_one = all_reduce(model::gpu_tokens(w_) * 4.0, t_, tp_link_);
    tp_per_mb_ += tp_one_ * (p_ == 1 ? 2.0 : 1.0) + 3.0 * d(1 + w_.model.mtp_layers) * loss_one;
  }

  /// MoE layers of the last stage (docs/moe.md, as the builder costs them): the router block, the
  /// shared experts as the dense MLP block and the most loaded EP rank's routed experts as the
  /// balanced experts block (their own GEMMs), each scaled by FLOPs; per layer and micro-batch a dispatch and
  /// a combine all-to-all each way (and again in a full recomputation) over the ep GPUs t (folded: etp)
  /// apart, blocking.
  void moe() {
    if (w_.model.moe.enabled()) {
      moe_layers_ = d(model::moe_layers_in(w_.model, last_.first_layer, last_.num_layers));
      int64_t layer = last_.first_layer;
      while (layer < last_.first_layer + last_.num_layers && !model::is_moe_layer(w_.model, layer))
        ++layer;
      if (moe_layers_ > 0) {
        const model::MoeWork moe = model::moe_forward_work(w_, model::ep_max_rank_assignments(w_, layer));
        const double shared = moe.shared / graph::block_query(w_, Block::MLP, Phase::FORWARD, 0).flops;
        const double routed = moe.routed / graph::block_query(w_, Block::EXPERTS, Phase::FORWARD, 0).flops;
        mlp_f_moe_ = time(Block::ROUTER, Phase::FORWARD, 0) + mlp_f_ * shared +
                     time(Block::EXPERTS, Phase::FORWARD, 0) * routed;
        mlp_b_moe_ = time(Block::ROUTER, Phase::BACKWARD, 0) + mlp_b_ * shared +
                     time(Block::EXPERTS, Phase::BACKWARD, 0) * routed +
                     (rf_ > 0 ? rf_ * (time(Block::ROUTER, Phase::FORWARD, 0) +
                                       time(Block::EXPERTS, Phase::RECOMPUTE, 0) * routed) +
                                    mlp_r_ * shared
                              : 0.0);
        if (par_.ep > 1)
          ep_per_mb_ = moe_layers_ * all_to_all() * (4.0 + 2.0 * rf_);
      }
    }
    dense_layers_ = layers_ - moe_layers_;
    if (par_.folds_experts() && par_.sp)
      tp_per_mb_ -= moe_layers_ * tp_one_ * (2.0 + rf_);
  }

  /// One EP all-to-all: each GPU sends 1/ep of the payload to every peer: to the ep peers in its
  /// node over NVLink, to the others over its NIC share, both at once. EP peers are t GPUs apart,
  /// or etp when the expert groups fold over the TP ranks.
  [[nodiscard]] double all_to_all() const {
    const int64_t stride = par_.folds_experts() ? par_.expert_tp() : t_;
    const Link ep_link = link_for(cluster_, stride * par_.ep, deg_);
    const Link nvlink = link_for(cluster_, 1);
    const int64_t in_node = std::clamp<int64_t>(cluster_.gpus_per_node / stride, 1, par_.ep);
    const double bytes = model::ep_all_to_all_bytes(w_).value() / d(par_.ep);
    return d(par_.ep - 1) * ep_link.alpha +
           std::max(d(in_node - 1) * bytes / nvlink.beta, d(par_.ep - in_node) * bytes / ep_link.beta);
  }

  /// The backward's collective of each column-parallel input linear (QKV, a dense fc1; as the
  /// builder's TpEmitter::after_backward_block): beside its weight-gradient GEMM with
  /// tp_grad_overlap, which hides up to that GEMM's time of it (the whole all-reduce, or SP's
  /// reduce-scatter, half of tp_one); with SP the input's re-gather (another half) beside the
  /// data gradient, or exposed without the overlap. Not for MLA's attention, nor the zero-bubble
  /// schedules' B passes.
  void tp_input_linears() {
    if (t_ <= 1 || split_)
      return;
    if (!w_.model.mla.enabled())
      input_linear(Block::ATTENTION, layers_);
    if (dense_layers_ > 0)
      input_linear(Block::MLP, dense_layers_);
  }

  /// tp_input_linears' change to the TP time for `count` blocks of `b`.
  void input_linear(Block b, double count) {
    const graph::ComputeQuery q = graph::block_query(w_, b, Phase::BACKWARD, 0);
    const graph::ComputeCost c = graph::gpu_compute_cost(w_, compute_time_, q);
    const auto [dgrad_s, wgrad_s] = graph::input_linear_times(w_, b, c, q);
    const double dgrad = dgrad_s.value(), wgrad = wgrad_s.value();
    const double summed = par_.sp ? tp_one_ / 2.0 : tp_one_; // the reduce-scatter, or the all-reduce
    double delta = 0;
    if (par_.tp_grad_overlap)
      delta -= std::min(summed, wgrad);
    if (par_.sp)
      delta += par_.tp_grad_overlap ? std::max(0.0, tp_one_ / 2.0 - dgrad) : tp_one_ / 2.0;
    tp_per_mb_ += count * delta;
  }

  /// Per micro-batch on the slowest (last) stage: forward, backward (+ recompute), W; each of the
  /// v chunk passes each way also pays the host's pass overhead.
  void pass_times() {
    const double pass = d(v_) * cluster_.gpu.pass_overhead.value();
    t_f_ = layers_ * att_f_ + dense_layers_ * mlp_f_ + moe_layers_ * mlp_f_moe_ + lg_f_ + pass;
    t_b_ = layers_ * (att_b_ + att_r_) + dense_layers_ * (mlp_b_ + mlp_r_) + moe_layers_ * mlp_b_moe_ +
           lg_b_ + pass;
    // training.grad_accumulation: fp32_pass: each backward ends with the pass over the rank's
    // gradients, a share per chunk: v shares, the whole rank's, per micro-batch (as the builder).
    if (w_.training.grad_accumulation == GradAccumulation::FP32_PASS)
      t_b_ += compute_time_(graph::grad_accumulation_query(w_, p_ - 1)).time.value();
    // Activation offloading, as the builder: an offloaded layer's copy out (forward) and back
    // (backward) at gpu.host_bandwidth runs beside the layer's compute, which waits for the rest.
    if (w_.training.offload_layers > 0 && cluster_.gpu.host_bandwidth.value() > 0 && layers_ > 0) {
      const double copy = (model::stored_layer_activations(w_).total() / cluster_.gpu.host_bandwidth).value();
      const double offloaded = d(w_.training.offload_layers) * d(v_);
      const double layer_f = (t_f_ - lg_f_ - pass) / layers_, layer_b = (t_b_ - lg_b_ - pass) / layers_;
      t_f_ += offloaded * std::max(0.0, copy - layer_f);
      t_b_ += offloaded * std::max(0.0, copy - layer_b);
    }
    // W share of backward: the weight-gradient GEMMs, as many FLOPs as the forward's GEMMs.
    const auto gemm_share = [this](Block b) { return graph::block_work(w_, b).weight_grad_share(); };
    t_w_ = split_ ? layers_ * (att_b_ * gemm_share(Block::ATTENTION) + mlp_b_ * gemm_share(Block::MLP)) +
                        lg_b_ * gemm_share(Block::LOGITS)
                  : 0.0;
    // Combined 1F1B (ep_overlap): a pair's all-to-alls run under the other pass's compute, but each
    // pass's own all-to-alls stay between its blocks and the two passes' share the network: about
    // the shorter pass's compute is hidden (the simulation decides; docs/planner.md).
    if (par_.ep_overlap || par_.bidirectional()) // DualPipe pairs its passes likewise
      ep_per_mb_ = std::max(0.0, ep_per_mb_ - std::min(t_f_, t_b_));
    // A slow GPU (degraded.gpus): its stage's passes run at its speed and every collective of the
    // synchronous step waits for it, so the steady state runs at the pace of the slowest stage;
    // the fill and drain (the bubble) cross the other stages at theirs, and the DP terms keep
    // the overlap they have at full speed (the reduction's tail after the slow GPU's last
    // backward is the same, as the simulation shows: tests/degraded).
    t_f_healthy_ = t_f_, t_b_healthy_ = t_b_, t_w_healthy_ = t_w_;
    const double pace = slowest_stage();
    t_f_ *= pace, t_b_ *= pace, t_w_ *= pace;
  }

  /// The slowest stage's pass times over the last stage's at full speed: 1 on a healthy
  /// cluster. Another stage's passes are the last stage's without the output layer, scaled by
  /// its layers (as many, unless the split is uneven).
  [[nodiscard]] double slowest_stage() const {
    const size_t last = deg_.stage_speed.size() - 1;
    double pace = 1.0 / deg_.stage_speed[last];
    const double whole = t_f_ + t_b_;
    const double body = whole - lg_f_ - lg_b_;
    for (size_t s = 0; s < last && whole > 0; ++s)
      if (deg_.stage_speed[s] < 1.0) {
        const double layers = d(model::stage_layout(w_, static_cast<int>(s)).num_layers);
        pace =
            std::max(pace, body * layers / std::max(1.0, d(last_.num_layers)) / whole / deg_.stage_speed[s]);
      }
    return pace;
  }

  [[nodiscard]] double bubble() const {
    const double t_f = t_f_healthy_, t_b = t_b_healthy_, t_w = t_w_healthy_;
    const double per_mb = t_f + t_b + tp_per_mb_ + ep_per_mb_;
    switch (par_.schedule) {
    case Schedule::GPIPE:
    case Schedule::ONE_F_ONE_B:
      return d(p_ - 1) * per_mb;
    case Schedule::INTERLEAVED:
      return d(p_ - 1) * per_mb / d(v_);
    case Schedule::ZB_H1:
      return d(p_ - 1) * std::max(per_mb - 2.0 * t_w, t_f);
    case Schedule::ZB_H2:
      return d(p_ - 1) * (t_f + layers_ * 2.0 * tp_one_);
    case Schedule::DUALPIPE: // DeepSeek-V3's Table 2: (p/2 - 1)(F&B + B - 3W), F&B one overlapped pair
      return d(p_ / 2 - 1) * std::max(per_mb + t_b - 3.0 * t_w, t_f);
    case Schedule::DUALPIPE_V: // the same over 2p chunks of half a stage
      return d(p_ - 1) * std::max(per_mb + t_b - 3.0 * t_w, t_f) / 2.0;
    }
    return 0;
  }

  /// PP: one message per chunk boundary per micro-batch each way; the fill and drain see
  /// 2(p v - 1) of them, the steady state hides the rest behind compute.
  [[nodiscard]] double pp_comm() const {
    if (p_ <= 1)
      return 0;
    const Link pp_link = link_for(cluster_, 2 * t_ * dp_, deg_);
    double msg = pp_link.alpha + model::pp_message_bytes(w_).value() / pp_link.beta;
    if (par_.pp_scatter_gather && !par_.sp && t_ > 1) // the receiving TP group all-gathers the slices
      msg += tp_link_.alpha + d(t_ - 1) / d(t_) * model::tp_collective_bytes(w_).value() / tp_link_.beta;
    return 2.0 * d(p_ * v_ - 1) * msg;
  }

  /// DP (docs/planner.md): gradients of the heaviest stage, ring over dp ranks t apart. MoE: the
  /// dense gradients so; the experts' are reduced over their expert-data-parallel group of dp/ep
  /// (all-reduced after the last backward with ZeRO-0/1, reduce-scattered every micro-batch with
  /// ZeRO-2; ZeRO-3: zero3_exposed).
  [[nodiscard]] double dp_exposed() const {
    if (dp_ <= 1)
      return 0;
    const Link dp_link = link_for(cluster_, t_ * dp_, deg_);
    double grads = 0, expert_grads = 0;
    for (int s = 0; s < p_; ++s) {
      const double experts = model::expert_params_on_rank(w_, s);
      grads = std::max(grads, (model::params_on_rank(w_, s) - experts) * e_);
      expert_grads = std::max(expert_grads, experts * e_);
    }
    const double bucket = std::min(grads, w_.training.dp_bucket.value());
    const double last_pass = t_b_healthy_ / d(v_); // backward of the last chunk pass overlaps the reduction
    const int64_t edp = model::expert_data_parallel(par_);
    // The experts' parameters, gathered back after the optimizer (ZeRO-2) or under the forward
    // (overlap_param_gather), as the dense ones below.
    const bool overlap = w_.training.overlap_param_gather;
    const auto gathered_back = [&](double bytes, double piece, int64_t n) {
      const double all = gather(bytes * wb_ / e_, n, dp_link);
      return overlap ? std::max(gather(piece * wb_ / e_, n, dp_link), all / d(v_) - t_f_healthy_ / d(v_))
                     : all;
    };
    double exposed = 0;
    if (expert_grads > 0 && edp > 1 && par_.zero_stage < 3) {
      const double expert_layer = moe_layers_ > 0 ? expert_grads / moe_layers_ : expert_grads;
      if (par_.zero_stage == 2)
        exposed +=
            d(m_ * v_) * std::max(0.0, gather(expert_grads, edp, dp_link) / d(v_) - t_b_healthy_ / d(v_)) +
            gather(expert_layer, edp, dp_link) + gathered_back(expert_grads, expert_layer, edp);
      else if (overlap) // ZeRO-1 with the gather under the forward: the reduce-scatter stays
        exposed +=
            std::max(gather(expert_grads, edp, dp_link) - last_pass, gather(expert_layer, edp, dp_link)) +
            gathered_back(expert_grads, expert_layer, edp);
      else // ZeRO-1: an all-reduce of the same volume as the reduce-scatter and the gather
        exposed += std::max(all_reduce(expert_grads, edp, dp_link) - last_pass,
                            all_reduce(expert_layer, edp, dp_link));
    }
    // ZeRO-1/2's parameter all-gather: after the optimizer, or with overlap_param_gather under
    // the next step's forward. The first stage's first forward pass waits for its chunk's
    // buckets layer by layer, and every later stage waits for that pass: what the gathers take
    // beyond one chunk forward (t_F/v), or at least one bucket, is exposed.
    const double param_exposed = gathered_back(grads, bucket, dp_);
    switch (par_.zero_stage) {
    case 0:
      return exposed +
             std::max(all_reduce(grads, dp_, dp_link) - last_pass, all_reduce(bucket, dp_, dp_link));
    case 1:
      return exposed + (std::max(gather(grads, dp_, dp_link) - last_pass, gather(bucket, dp_, dp_link)) +
                        param_exposed);
    case 2: {
      const double rs = gather(grads, dp_, dp_link) / d(v_);
      return exposed + (d(m_ * v_) * std::max(0.0, rs - t_b_healthy_ / d(v_)) + gather(bucket, dp_, dp_link) +
                        param_exposed);
    }
    default:
      return zero3_exposed(dp_link);
    }
  }

  /// ZeRO-3: per pass, gathers (forward, backward) and a reduce-scatter per layer vs the pass.
  /// A backward pass's gathers are prefetched during its forward, but the next forward's first
  /// gather queues behind the backward's last reduce-scatter on the DP stream: both are exposed
  /// once per micro-batch and chunk. MoE: the largest layer's dense part over dp, its local
  /// experts over dp/ep (docs/moe.md).
  /// Hybrid sharding (parallel.dp_shard): the gathers and reduce-scatters within a shard group
  /// of dp_shard replicas, and in the backward each layer's gradient shard all-reduced over the
  /// dp/dp_shard replicas.
  [[nodiscard]] double zero3_exposed(const Link& all_dp) const {
    const double wb = model::zero3_gather_bytes(w_); // a parameter as ZeRO-3 gathers it
    const int64_t shard = par_.shard_group();        // dp without hybrid sharding
    const Link dp_link = shard < dp_ ? link_for(cluster_, t_ * shard, deg_) : all_dp;
    const double layer = model::layer_params(w_.model, par_.tp);
    double per_layer = gather(layer * wb, shard, dp_link);
    const double replicate = shard < dp_ ? all_reduce(layer * e_ / d(shard), dp_ / shard, all_dp) : 0.0;
    if (w_.model.moe.enabled()) {
      per_layer = 0;
      const int64_t edp = model::expert_data_parallel(par_);
      for (int64_t l = 0; l < w_.model.layers; ++l) {
        const model::LayerParams lp = model::layer_params_at(w_.model, l, par_.tp, par_.ep, par_.expert_tp());
        per_layer =
            std::max(per_layer, gather(lp.dense * wb, dp_, dp_link) + gather(lp.expert * wb, edp, dp_link));
      }
    }
    const double passes = d(m_ * v_);
    const double chunk_layers = layers_ / d(v_);
    if (w_.training.zero3_fetch == Zero3Fetch::BLOCKING) {
      // Blocking fetch: nothing overlaps. Per layer and pass, each weight tensor's gather in the
      // forward, in the backward (and again after a full recomputation) and its reduce-scatter,
      // each with the tensor-list host part (docs/model.md, "ZeRO-3 fetch").
      const double k = d(model::dense_weight_tensors(w_.model, w_.model.layers - 1));
      // plan() prices the knob with its launch floor (runner::list_collective_per_rank).
      const double host = d(shard) * cluster_.gpu.list_collective_per_rank.value();
      const double gathers = w_.training.recompute == Recompute::FULL ? 3.0 : 2.0;
      const double per_layer_pass = k * (gathers * (gather(layer * wb / k, shard, dp_link) + host) +
                                         gather(layer * e_ / k, shard, dp_link) + host) +
                                    replicate;
      return passes * chunk_layers * per_layer_pass;
    }
    const double fwd_gap = std::max(0.0, chunk_layers * per_layer - t_f_healthy_ / d(v_));
    if (model::zero3_held_for_step(w_)) {
      // Held for the step: each chunk's layers gathered under its first forward only, and the
      // stage's accumulated gradients reduce-scattered after its last backward, exposed on the
      // stage that ends last.
      const double reduce = gather(layer * e_, shard, dp_link) + replicate;
      return d(v_) * (fwd_gap + per_layer) + layers_ * reduce;
    }
    // The backward gathers again and reduce-scatters, or only reduce-scatters when the forward's
    // gathers are kept (reshard_after_forward false).
    const double bwd_collectives = w_.training.reshard_after_forward ? 2.0 : 1.0;
    const double bwd_gap =
        std::max(0.0, chunk_layers * (bwd_collectives * per_layer + replicate) - t_b_healthy_ / d(v_));
    return passes * (fwd_gap + bwd_gap + 2.0 * per_layer + replicate);
  }

  /// The optimizer: the builder's query for the heaviest stage.
  [[nodiscard]] double optimizer() const {
    double opt = 0;
    for (int s = 0; s < p_; ++s)
      opt = std::max(opt, compute_time_(graph::optimizer_query(w_, s)).time.value() /
                              deg_.stage_speed[static_cast<size_t>(s)]);
    return opt;
  }

  const ClusterSpec& cluster_;
  const WorkloadSpec& w_;
  const ParallelSpec& par_;
  const graph::ComputeTimeFn& compute_time_;
  const int64_t p_, v_, t_, dp_, m_;
  const double e_;                ///< a gradient's bytes
  const double wb_;               ///< a gathered weight's bytes
  const bool split_;              ///< zero-bubble B and W passes
  const model::StageLayout last_; ///< the last (slowest) stage's layers, with the MTP ones
  const double layers_;
  const Degradation deg_;
  double t_f_healthy_ = 0, t_b_healthy_ = 0, t_w_healthy_ = 0; ///< pass times at full speed (the bubble's)
  double win_share_ = 0;                                       ///< the last stage's windowed layers' share
  double att_f_ = 0, mlp_f_ = 0, att_b_ = 0, mlp_b_ = 0, att_r_ = 0, mlp_r_ = 0, lg_f_ = 0, lg_b_ = 0;
  double rf_ = 0; ///< full recomputation's share of the layers
  Link tp_link_;
  double tp_one_ = 0, tp_per_mb_ = 0;
  double moe_layers_ = 0, dense_layers_ = 0, mlp_f_moe_ = 0, mlp_b_moe_ = 0, ep_per_mb_ = 0;
  double t_f_ = 0, t_b_ = 0, t_w_ = 0;
};

} // namespace

Estimate estimate_step(const ClusterSpec& cluster, const WorkloadSpec& w,
                       const graph::ComputeTimeFn& compute_time) {
  return StepEstimator(cluster, w, compute_time).run();
}

} // namespace stepsim::planner
