// The planner's analytical step-time estimate (docs/planner.md, "Estimate").

#include "planner/planner.hpp"

#include "model/block_cost.hpp"
#include "model/memory.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"

#include <algorithm>

namespace stepsim::planner {

namespace {

double d(int64_t v) { return static_cast<double>(v); }

/// Alpha-beta figures of the links a group of `span` consecutive ranks crosses.
struct Link {
  double alpha = 0; ///< s
  double beta = 1;  ///< B/s per GPU
};

Link link_for(const ClusterSpec& c, int64_t span) {
  if (span <= c.gpus_per_node)
    return {c.nvswitch.latency.value(), c.nvswitch.bandwidth.value() * c.nvswitch.efficiency};
  const double nic_share = c.nic.bandwidth.value() * c.nic.efficiency * std::max(1, c.nics_per_node) /
                           std::max(1, c.gpus_per_node);
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

} // namespace

Estimate estimate_step(const ClusterSpec& cluster, const WorkloadSpec& w, const graph::ComputeTimeFn& compute_time) {
  using graph::Block;
  using graph::Phase;
  const ParallelSpec& par = w.parallel;
  const int64_t p = par.pp, v = std::max(1, par.vp), t = par.tp, dp = par.dp;
  const int64_t m = w.micro_batches();
  const double e = model::grad_bytes(w); // a gradient's bytes
  const double wb = model::weight_bytes(w);            // a gathered weight's bytes
  const bool full = w.training.recompute == Recompute::FULL;
  const bool split = par.schedule == Schedule::ZB_H1 || par.schedule == Schedule::ZB_H2;

  // Context parallelism, as the builder: blocks of s/cp tokens whose attention core meets all s
  // keys (graph::block_query), and kernel profiles see the whole sequence (graph::gpu_compute_cost).
  using graph::block_query;
  auto time = [&](Block b, Phase ph, int stage, bool windowed = false) {
    return graph::gpu_compute_cost(w, compute_time, block_query(w, b, ph, stage, windowed)).time.value();
  };
  // The last (slowest) stage's layers, with the multi-token-prediction ones. Attention per
  // layer: its windowed layers (a window shorter than the sequence; cp is 1 then) at their own cost.
  const ModelSpec& mod = w.model;
  const model::StageLayout last = model::stage_layout(w, static_cast<int>(p - 1));
  int64_t windowed_layers = 0;
  if (mod.window_below_sequence())
    for (int64_t l = last.first_layer; l < last.first_layer + last.num_layers; ++l)
      windowed_layers += mod.windowed_layer(l) ? 1 : 0;
  const double win_share = d(windowed_layers) / d(std::max<int64_t>(1, last.num_layers));
  const auto attention = [&](Phase ph) {
    return (1.0 - win_share) * time(Block::ATTENTION, ph, 0) +
           (win_share > 0 ? win_share * time(Block::ATTENTION, ph, 0, true) : 0.0);
  };
  const double att_f = attention(Phase::FORWARD), mlp_f = time(Block::MLP, Phase::FORWARD, 0);
  const double att_b = attention(Phase::BACKWARD), mlp_b = time(Block::MLP, Phase::BACKWARD, 0);
  // Full recomputation: the share rf of the last stage's layers it repeats (recompute_layers of
  // each chunk, or all); the recomputation's time, TP and EP collectives are charged per layer
  // times rf.
  const double last_chunk_layers = d(last.num_layers) / d(v);
  const double rf = !full ? 0.0
                    : w.training.recompute_layers == 0 || last_chunk_layers <= 0
                        ? 1.0
                        : std::min(d(w.training.recompute_layers), last_chunk_layers) / last_chunk_layers;
  const double att_r = rf > 0 ? rf * attention(Phase::RECOMPUTE) : 0.0;
  const double mlp_r = rf > 0 ? rf * time(Block::MLP, Phase::RECOMPUTE, 0) : 0.0;
  const double lg_f = time(Block::LOGITS, Phase::FORWARD, static_cast<int>(p - 1));
  const double lg_b = time(Block::LOGITS, Phase::BACKWARD, static_cast<int>(p - 1));

  // TP: blocking collectives after every block (2 per layer per pass, recompute included).
  const Link tp_link = link_for(cluster, t);
  const double tp_one = all_reduce(model::tp_collective_bytes(w).value(), t, tp_link);
  const double layers = d(last.num_layers);
  // Folded expert groups (etp 1 < tp): an MoE layer keeps half of them (no all-gather into its
  // experts, no reduce-scatter out of them; docs/moe.md), counted once the MoE layers are known.
  double tp_per_mb = layers * tp_one * (4.0 + 2.0 * rf);
  // Outside the layers (as the builder): the output layer's input gradient and the
  // cross-entropy's three per-token fp32 all-reduces; a single stage also sums the embedding.
  const double loss_one = all_reduce(model::gpu_tokens(w) * 4.0, t, tp_link);
  tp_per_mb += tp_one * (p == 1 ? 2.0 : 1.0) + 3.0 * d(1 + w.model.mtp_layers) * loss_one;

  // MoE layers of the last stage (docs/moe.md, as the builder costs them): the router block, and
  // the shared and the most loaded EP rank's routed experts as the dense MLP block scaled by
  // FLOPs; per layer and micro-batch a dispatch and a combine all-to-all each way (and again in a
  // full recomputation) over the ep GPUs t (folded: etp) apart, blocking.
  double moe_layers = 0, mlp_f_moe = 0, mlp_b_moe = 0, ep_per_mb = 0;
  if (w.model.moe.enabled()) {
    moe_layers = d(model::moe_layers_in(w.model, last.first_layer, last.num_layers));
    int64_t layer = last.first_layer;
    while (layer < last.first_layer + last.num_layers && !model::is_moe_layer(w.model, layer))
      ++layer;
    if (moe_layers > 0) {
      const model::MoeWork moe = model::moe_forward_work(w, model::ep_max_rank_assignments(w, layer));
      const Flops experts = moe.routed + moe.shared;
      const double scale = experts / block_query(w, Block::MLP, Phase::FORWARD, 0).flops;
      mlp_f_moe = time(Block::ROUTER, Phase::FORWARD, 0) + mlp_f * scale;
      mlp_b_moe = time(Block::ROUTER, Phase::BACKWARD, 0) + mlp_b * scale +
                  (rf > 0 ? rf * time(Block::ROUTER, Phase::FORWARD, 0) + mlp_r * scale : 0.0);
      if (par.ep > 1) {
        // Each GPU sends 1/ep of the payload to every peer: to the ep peers in its node over
        // NVLink, to the others over its NIC share, both at once.
        // EP peers are t GPUs apart, or etp when the expert groups fold over the TP ranks.
        const int64_t stride = par.folds_experts() ? par.expert_tp() : t;
        const Link ep_link = link_for(cluster, stride * par.ep);
        const Link nvlink = link_for(cluster, 1);
        const int64_t in_node = std::clamp<int64_t>(cluster.gpus_per_node / stride, 1, par.ep);
        const double bytes = model::ep_all_to_all_bytes(w).value() / d(par.ep);
        const double a2a = d(par.ep - 1) * ep_link.alpha + std::max(d(in_node - 1) * bytes / nvlink.beta,
                                                                    d(par.ep - in_node) * bytes / ep_link.beta);
        ep_per_mb = moe_layers * a2a * (4.0 + 2.0 * rf);
      }
    }
  }
  const double dense_layers = layers - moe_layers;
  if (par.folds_experts() && par.sp)
    tp_per_mb -= moe_layers * tp_one * (2.0 + rf);
  // The backward's collective of each column-parallel input linear (QKV, a dense fc1; as the
  // builder's backward_tp_comm): beside its weight-gradient GEMM with tp_grad_overlap, which
  // hides up to that GEMM's time of it (the whole all-reduce, or SP's reduce-scatter, half of
  // tp_one); with SP the input's re-gather (another half) beside the data gradient, or exposed
  // without the overlap. Not for MLA's attention, nor the zero-bubble schedules' B passes.
  if (t > 1 && !split) {
    const auto input_linear = [&](Block b) {
      const graph::ComputeQuery q = block_query(w, b, Phase::BACKWARD, 0);
      const graph::ComputeCost c = graph::gpu_compute_cost(w, compute_time, q);
      const auto [dgrad, wgrad] = graph::input_linear_times(w, b, c, q);
      return std::make_pair(dgrad.value(), wgrad.value());
    };
    const double summed = par.sp ? tp_one / 2.0 : tp_one; // the reduce-scatter, or the all-reduce
    const auto adjust = [&](Block b, double count) {
      const auto [dgrad, wgrad] = input_linear(b);
      double delta = 0;
      if (par.tp_grad_overlap)
        delta -= std::min(summed, wgrad);
      if (par.sp)
        delta += par.tp_grad_overlap ? std::max(0.0, tp_one / 2.0 - dgrad) : tp_one / 2.0;
      tp_per_mb += count * delta;
    };
    if (!w.model.mla.enabled())
      adjust(Block::ATTENTION, layers);
    if (dense_layers > 0)
      adjust(Block::MLP, dense_layers);
  }

  // Per micro-batch on the slowest (last) stage: forward, backward (+ recompute), TP; each of the
  // v chunk passes each way also pays the host's pass overhead.
  const double pass = d(v) * cluster.gpu.pass_overhead.value();
  double t_f = layers * att_f + dense_layers * mlp_f + moe_layers * mlp_f_moe + lg_f + pass;
  double t_b = layers * (att_b + att_r) + dense_layers * (mlp_b + mlp_r) + moe_layers * mlp_b_moe + lg_b + pass;
  // Activation offloading, as the builder: an offloaded layer's copy out (forward) and back
  // (backward) at gpu.host_bandwidth runs beside the layer's compute, which waits for the rest.
  if (w.training.offload_layers > 0 && cluster.gpu.host_bandwidth.value() > 0 && layers > 0) {
    const double copy = (model::stored_layer_activations(w).total() / cluster.gpu.host_bandwidth).value();
    const double offloaded = d(w.training.offload_layers) * d(v);
    const double layer_f = (t_f - lg_f - pass) / layers, layer_b = (t_b - lg_b - pass) / layers;
    t_f += offloaded * std::max(0.0, copy - layer_f);
    t_b += offloaded * std::max(0.0, copy - layer_b);
  }
  // W share of backward: the weight-gradient GEMMs, as many FLOPs as the forward's GEMMs.
  const auto gemm_share = [&](Block b) { return graph::block_work(w, b).weight_grad_share(); };
  const double t_w = split ? layers * (att_b * gemm_share(Block::ATTENTION) + mlp_b * gemm_share(Block::MLP)) +
                                 lg_b * gemm_share(Block::LOGITS)
                           : 0.0;
  // Combined 1F1B (ep_overlap): a pair's all-to-alls run under the other pass's compute, but each
  // pass's own all-to-alls stay between its blocks and the two passes' share the network: about
  // the shorter pass's compute is hidden (the simulation decides; docs/planner.md).
  if (par.ep_overlap)
    ep_per_mb = std::max(0.0, ep_per_mb - std::min(t_f, t_b));
  const double per_mb = t_f + t_b + tp_per_mb + ep_per_mb;

  Estimate est;
  est.compute = Seconds(d(m) * (t_f + t_b));
  est.tp_comm = Seconds(d(m) * tp_per_mb);
  est.ep_comm = Seconds(d(m) * ep_per_mb);
  double bubble = 0;
  switch (par.schedule) {
  case Schedule::GPIPE:
  case Schedule::ONE_F_ONE_B: bubble = d(p - 1) * per_mb; break;
  case Schedule::INTERLEAVED: bubble = d(p - 1) * per_mb / d(v); break;
  case Schedule::ZB_H1: bubble = d(p - 1) * std::max(per_mb - 2.0 * t_w, t_f); break;
  case Schedule::ZB_H2: bubble = d(p - 1) * (t_f + layers * 2.0 * tp_one); break;
  }
  est.bubble = Seconds(bubble);

  // PP: one message per chunk boundary per micro-batch each way; the fill and drain see
  // 2(p v - 1) of them, the steady state hides the rest behind compute.
  if (p > 1) {
    const Link pp_link = link_for(cluster, 2 * t * dp);
    double msg = pp_link.alpha + model::pp_message_bytes(w).value() / pp_link.beta;
    if (par.pp_scatter_gather && !par.sp && t > 1) // the receiving TP group all-gathers the slices
      msg += tp_link.alpha + d(t - 1) / d(t) * model::tp_collective_bytes(w).value() / tp_link.beta;
    est.pp_comm = Seconds(2.0 * d(p * v - 1) * msg);
  }

  // DP (docs/planner.md): gradients of the heaviest stage, ring over dp ranks t apart. MoE: the
  // dense gradients so; the experts' are reduced over their expert-data-parallel group of dp/ep
  // (all-reduced after the last backward with ZeRO-0/1, reduce-scattered every micro-batch with
  // ZeRO-2; ZeRO-3 below).
  double dp_exposed = 0;
  if (dp > 1) {
    const Link dp_link = link_for(cluster, t * dp);
    double grads = 0, expert_grads = 0;
    for (int s = 0; s < p; ++s) {
      const double experts = model::expert_params_on_rank(w, s);
      grads = std::max(grads, (model::params_on_rank(w, s) - experts) * e);
      expert_grads = std::max(expert_grads, experts * e);
    }
    const double bucket = std::min(grads, w.training.dp_bucket.value());
    const double last_pass = t_b / d(v); // backward of the last chunk pass overlaps the reduction
    const int64_t edp = model::expert_data_parallel(par);
    // The experts' parameters, gathered back after the optimizer (ZeRO-2) or under the forward
    // (overlap_param_gather), as the dense ones below.
    const bool overlap = w.training.overlap_param_gather;
    const auto gathered_back = [&](double bytes, double piece, int64_t n) {
      const double all = gather(bytes * wb / e, n, dp_link);
      return overlap ? std::max(gather(piece * wb / e, n, dp_link), all / d(v) - t_f / d(v)) : all;
    };
    if (expert_grads > 0 && edp > 1 && par.zero_stage < 3) {
      const double expert_layer = moe_layers > 0 ? expert_grads / moe_layers : expert_grads;
      if (par.zero_stage == 2)
        dp_exposed += d(m * v) * std::max(0.0, gather(expert_grads, edp, dp_link) / d(v) - t_b / d(v)) +
                      gather(expert_layer, edp, dp_link) + gathered_back(expert_grads, expert_layer, edp);
      else if (overlap) // ZeRO-1 with the gather under the forward: the reduce-scatter stays
        dp_exposed += std::max(gather(expert_grads, edp, dp_link) - last_pass, gather(expert_layer, edp, dp_link)) +
                      gathered_back(expert_grads, expert_layer, edp);
      else // ZeRO-1: an all-reduce of the same volume as the reduce-scatter and the gather
        dp_exposed += std::max(all_reduce(expert_grads, edp, dp_link) - last_pass,
                               all_reduce(expert_layer, edp, dp_link));
    }
    // ZeRO-1/2's parameter all-gather: after the optimizer, or with overlap_param_gather under
    // the next step's forward. The first stage's first forward pass waits for its chunk's
    // buckets layer by layer, and every later stage waits for that pass: what the gathers take
    // beyond one chunk forward (t_F/v), or at least one bucket, is exposed.
    const double param_exposed = gathered_back(grads, bucket, dp);
    switch (par.zero_stage) {
    case 0: dp_exposed += std::max(all_reduce(grads, dp, dp_link) - last_pass, all_reduce(bucket, dp, dp_link)); break;
    case 1:
      dp_exposed += std::max(gather(grads, dp, dp_link) - last_pass, gather(bucket, dp, dp_link)) + param_exposed;
      break;
    case 2: {
      const double rs = gather(grads, dp, dp_link) / d(v);
      dp_exposed += d(m * v) * std::max(0.0, rs - t_b / d(v)) + gather(bucket, dp, dp_link) + param_exposed;
      break;
    }
    default: {
      // ZeRO-3: per pass, gathers (forward, backward) and a reduce-scatter per layer vs the pass.
      // A backward pass's gathers are prefetched during its forward, but the next forward's first
      // gather queues behind the backward's last reduce-scatter on the DP stream: both are
      // exposed once per micro-batch and chunk.
      // MoE: the largest layer's dense part over dp, its local experts over dp/ep (docs/moe.md).
      double per_layer = gather(model::layer_params(w.model, par.tp) * wb, dp, dp_link);
      if (w.model.moe.enabled()) {
        per_layer = 0;
        const int64_t edp = model::expert_data_parallel(par);
        for (int64_t l = 0; l < w.model.layers; ++l) {
          const model::LayerParams lp = model::layer_params_at(w.model, l, par.tp, par.ep, par.expert_tp());
          per_layer = std::max(per_layer, gather(lp.dense * wb, dp, dp_link) + gather(lp.expert * wb, edp, dp_link));
        }
      }
      const double passes = d(m * v);
      const double chunk_layers = layers / d(v);
      if (w.training.zero3_fetch == Zero3Fetch::BLOCKING) {
        // Blocking fetch: nothing overlaps. Per layer and pass, each weight tensor's gather in the
        // forward, in the backward (and again after a full recomputation) and its reduce-scatter,
        // each with the tensor-list host part (docs/model.md, "ZeRO-3 fetch").
        const double k = d(model::dense_weight_tensors(w.model, w.model.layers - 1));
        const double params = model::layer_params(w.model, par.tp);
        const double host = d(dp) * cluster.gpu.list_collective_per_rank.value();
        const double gathers = w.training.recompute == Recompute::FULL ? 3.0 : 2.0;
        const double per_layer_pass =
            k * (gathers * (gather(params * wb / k, dp, dp_link) + host) + gather(params * e / k, dp, dp_link) + host);
        dp_exposed = passes * chunk_layers * per_layer_pass;
        break;
      }
      const double fwd_gap = std::max(0.0, chunk_layers * per_layer - t_f / d(v));
      const double bwd_gap = std::max(0.0, 2.0 * chunk_layers * per_layer - t_b / d(v));
      dp_exposed = passes * (fwd_gap + bwd_gap + 2.0 * per_layer);
      break;
    }
    }
  }
  est.dp_exposed = Seconds(dp_exposed);

  // Optimizer (the builder's query for the heaviest stage).
  double opt = 0;
  for (int s = 0; s < p; ++s) {
    opt = std::max(opt, compute_time(graph::optimizer_query(w, s)).time.value());
  }
  est.optimizer = Seconds(opt);
  est.step = est.compute + est.tp_comm + est.ep_comm + est.bubble + est.pp_comm + est.dp_exposed + est.optimizer;
  return est;
}

} // namespace stepsim::planner
