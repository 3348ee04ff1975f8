// The layout checks (docs/schema.md, "Layout checks"): a workload against a cluster.

#include "config/config.hpp"

#include "config/stacks.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

namespace stepsim::config {

namespace {

/// a*b, or nullopt on overflow.
std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    return std::nullopt;
  }
  return out;
}

std::string str(int64_t v) {
  return std::to_string(v);
}

/// Schedule rules (docs/schedules.md): interleaving needs vp >= 2, pp >= 2, layers % (pp*vp) == 0
/// and, as in Megatron-LM, micro-batches % pp == 0; vp > 1 only with the interleaved schedule; the
/// zero-bubble schedules defer weight gradients, which full recomputation cannot do cheaply.
template <class Fail> void check_schedule(const WorkloadSpec& w, int64_t dp, const Fail& fail) {
  const ParallelSpec& p = w.parallel;
  if (p.vp < 1)
    fail("parallel.vp = " + str(p.vp) + " must be >= 1");
  if (p.schedule != Schedule::INTERLEAVED) {
    if (p.vp != 1)
      fail("parallel.vp = " + str(p.vp) +
           " needs parallel.schedule = interleaved (virtual stages are its model chunks)");
  } else {
    if (p.vp < 2)
      fail("parallel.schedule = interleaved needs parallel.vp >= 2 model chunks per GPU, found vp = " +
           str(p.vp));
    if (p.pp < 2)
      fail("parallel.schedule = interleaved needs parallel.pp >= 2, found pp = " + str(p.pp));
    const int64_t chunks = static_cast<int64_t>(p.pp) * p.vp;
    if (p.chunk_layers.empty() && w.model.layers % chunks != 0)
      fail("parallel.pp*vp = " + str(p.pp) + "*" + str(p.vp) + " = " + str(chunks) +
           " does not divide model.layers = " + str(w.model.layers) +
           " (every model chunk holds the same number of layers)");
    const int64_t per_step = w.batch.micro_batch * dp;
    const int64_t m = per_step > 0 ? w.batch.global_batch / per_step : 0;
    if (m % p.pp != 0)
      fail("parallel.schedule = interleaved needs the micro-batches per pipeline (" + str(m) +
           " = global_batch / (micro_batch*dp)) to be a multiple of parallel.pp = " + str(p.pp) +
           " (Megatron-LM's interleaved schedule)");
  }
  if ((p.schedule == Schedule::ZB_H1 || p.schedule == Schedule::ZB_H2) &&
      w.training.recompute == Recompute::FULL)
    fail(std::string("parallel.schedule = ") + (p.schedule == Schedule::ZB_H1 ? "zb-h1" : "zb-h2") +
         " cannot be combined with training.recompute = full: deferred weight-gradient passes need the "
         "recomputed "
         "activations kept until they run (use none or selective)");
}

/// Expert and context parallelism (docs/moe.md): ep needs experts, divides dp and the experts;
/// TP splits every expert's MLP; cp divides the sequence (tp*cp with sequence parallelism).
template <class Fail> void check_moe_and_cp(const WorkloadSpec& w, int64_t dp, const Fail& fail) {
  const ParallelSpec& p = w.parallel;
  const ModelSpec& m = w.model;
  const MoeSpec& moe = m.moe;
  if (p.ep > 1 && !moe.enabled())
    fail("parallel.ep = " + str(p.ep) + " needs a mixture-of-experts model (model.moe.experts)");
  if (p.etp > 0 && !moe.enabled())
    fail("parallel.etp = " + str(p.etp) + " needs a mixture-of-experts model (model.moe.experts)");
  if (p.etp > 1 && p.etp != p.tp)
    fail("parallel.etp = " + str(p.etp) + " is not modelled with parallel.tp = " + str(p.tp) +
         ": use 1 (every expert whole on its GPU, the expert groups folded over the TP ranks) or tp (every "
         "expert split like the dense MLP)");
  if (moe.enabled()) {
    const int etp = p.expert_tp();
    if (!p.folds_experts()) {
      if (dp % p.ep != 0)
        fail("parallel.ep = " + str(p.ep) + " does not divide parallel.dp = " + str(dp) +
             " (expert parallelism subdivides the data-parallel group; expert-data-parallel size = dp / ep; "
             "parallel.etp below tp folds it over the tensor-parallel ranks too)");
    } else {
      const int64_t stage_gpus = static_cast<int64_t>(p.tp) * p.cp * dp;
      if (stage_gpus % (static_cast<int64_t>(etp) * p.ep) != 0)
        fail("parallel.etp*ep = " + str(etp) + "*" + str(p.ep) + " does not divide tp*cp*dp = " +
             str(stage_gpus) + " (with etp < tp the expert groups fold over the GPUs of a pipeline stage)");
      if (p.tp > 1 && !p.sp)
        fail("parallel.etp = " + str(etp) + " below parallel.tp = " + str(p.tp) +
             " needs parallel.sp: true (each TP rank routes its own share of the sequence)");
    }
    if (moe.experts % p.ep != 0)
      fail("parallel.ep = " + str(p.ep) + " does not divide model.moe.experts = " + str(moe.experts) +
           " (every EP rank holds the same number of experts)");
    if (moe.expert_ffn_hidden % etp != 0)
      fail(std::string(p.folds_experts() ? "parallel.etp = " : "parallel.tp = ") + str(etp) +
           " does not divide model.moe.expert_ffn_hidden = " + str(moe.expert_ffn_hidden) +
           " (every expert's MLP is split across its expert-tensor-parallel GPUs)");
    if (moe.top_k > moe.experts)
      fail("model.moe.top_k = " + str(moe.top_k) + " exceeds model.moe.experts = " + str(moe.experts));
  }
  if (p.ep_dispatch == EpDispatch::DEDUPLICATED && (!moe.enabled() || p.ep < 2))
    fail("parallel.ep_dispatch = deduplicated needs a mixture-of-experts model with parallel.ep >= 2, found "
         "ep = " +
         str(p.ep));
  if (p.ep_overlap) {
    if (!moe.enabled() || p.ep < 2)
      fail("parallel.ep_overlap needs a mixture-of-experts model with parallel.ep >= 2 (it hides the expert "
           "all-to-alls), found ep = " +
           str(p.ep));
    if (p.pp > 1 && p.schedule != Schedule::INTERLEAVED)
      fail("parallel.ep_overlap with parallel.pp = " + str(p.pp) +
           " needs parallel.schedule = interleaved (Megatron-Core's combined 1F1B pairs the interleaved "
           "schedule's steady-state passes)");
    if (p.pp == 1 && p.schedule != Schedule::ONE_F_ONE_B)
      fail("parallel.ep_overlap with parallel.pp = 1 needs parallel.schedule = 1f1b (each forward runs with "
           "the "
           "previous micro-batch's backward)");
    if (w.training.recompute == Recompute::FULL)
      fail("parallel.ep_overlap cannot be combined with training.recompute = full (use none or selective)");
  }
  if (p.cp > 1 && m.window_below_sequence())
    fail("parallel.cp = " + str(p.cp) + " with model.sliding_window = " + str(m.sliding_window) +
         " is not modelled (ring attention over windowed layers); use cp = 1 or a window of at least seq_len "
         "/ 2");
  if (p.cp > 1) {
    const int64_t split = p.sp ? static_cast<int64_t>(p.cp) * p.tp : p.cp;
    if (m.seq_len % split != 0)
      fail("parallel.cp = " + str(p.cp) + " needs model.seq_len = " + str(m.seq_len) + " divisible by " +
           (p.sp ? "tp*cp = " : "cp = ") + str(split) + " (the sequence is split across CP ranks)");
  }
}

/// Layers per model chunk (docs/schedules.md): an even split over pp (vp) or parallel.chunk_layers,
/// and activation offloading of fewer layers than the smallest chunk holds.
template <class Fail> void check_chunks(const WorkloadSpec& workload, int64_t pp, const Fail& fail) {
  const ModelSpec& m = workload.model;
  if (workload.parallel.chunk_layers.empty()) {
    if (m.layers % pp != 0)
      fail("parallel.pp = " + str(pp) + " does not divide model.layers = " + str(m.layers) +
           " (every pipeline stage holds the same number of layers; parallel.chunk_layers splits them "
           "unevenly)");
  } else {
    const auto& c = workload.parallel.chunk_layers;
    const int64_t chunks = static_cast<int64_t>(pp) * std::max(1, workload.parallel.vp);
    if (static_cast<int64_t>(c.size()) != chunks)
      fail("parallel.chunk_layers lists " + str(static_cast<int64_t>(c.size())) +
           " model chunks, expected pp*vp = " + str(chunks));
    int64_t sum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      sum += c[i];
      if (c[i] == 0 && i + 1 != c.size())
        fail("parallel.chunk_layers[" + str(static_cast<int64_t>(i)) +
             "] = 0: only the last model chunk (it holds the output layer) may have no layers");
    }
    if (sum != m.layers)
      fail("parallel.chunk_layers adds up to " + str(sum) +
           " layers, expected model.layers = " + str(m.layers));
  }
  if (const int64_t n = workload.training.offload_layers; n > 0) {
    // Megatron offloads fewer layers than a model chunk holds, and none it recomputes.
    int64_t smallest = m.layers / (static_cast<int64_t>(pp) * std::max(1, workload.parallel.vp));
    for (int64_t c : workload.parallel.chunk_layers)
      if (c > 0)
        smallest = std::min(smallest, c);
    if (n >= smallest)
      fail("training.offload_layers = " + str(n) + " must be fewer than a model chunk's layers (" +
           str(smallest) + ")");
    if (workload.training.recompute != Recompute::NONE)
      fail("training.offload_layers needs training.recompute: none (Megatron does not offload recomputed "
           "layers)");
  }
}

} // namespace

void check_precision(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  if (peak_flops(cluster.gpu, workload.precision).value() > 0)
    return;
  throw ModelError((workload.source.empty() ? std::string("workload") : workload.source) +
                   ": precision: " + precision_name(workload.precision) + " needs gpu.peak_flops." +
                   precision_name(workload.precision) + ", which " +
                   (cluster.source.empty() ? cluster.name : cluster.source) + " does not give for " +
                   cluster.gpu.kind);
}

namespace {

/// The checks of check_layout on a workload whose stack is expanded.
Layout check_expanded(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  const std::string prefix = (workload.source.empty() ? std::string("workload") : workload.source) + ": ";
  const std::string cluster_name = cluster.source.empty() ? cluster.name : cluster.source;
  const auto fail = [&](const std::string& why) { throw ModelError(prefix + why); };
  const ModelSpec& m = workload.model;
  const ParallelSpec& p = workload.parallel;
  const int64_t tp = p.tp;
  const int64_t pp = p.pp;

  if (p.tp < 1 || p.pp < 1 || p.dp < 0) {
    fail("parallel: tp and pp must be >= 1 and dp >= 1 (or 0 to derive it), found tp = " + str(tp) +
         ", pp = " + str(pp) + ", dp = " + str(p.dp));
  }
  if (p.zero_stage < 0 || p.zero_stage > 3) {
    fail("parallel.zero_stage = " + str(p.zero_stage) + " but only stages 0, 1, 2 and 3 exist");
  }
  if (workload.batch.micro_batch < 1 || workload.batch.global_batch < 1) {
    fail("batch: global_batch and micro_batch must be >= 1, found " + str(workload.batch.global_batch) +
         " and " + str(workload.batch.micro_batch));
  }
  check_precision(cluster, workload);
  if (workload.training.offload_layers > 0 && cluster.gpu.host_bandwidth.value() <= 0) {
    fail("training.offload_layers moves activations to host memory and needs gpu.host_bandwidth (GPU <-> "
         "host, "
         "per direction), which " +
         cluster_name + " does not give");
  }
  if (workload.precision == Precision::FP8 && cluster.gpu.peak_bf16.value() <= 0) {
    fail("precision: fp8 runs the attention core, logits and norms in bf16 and needs gpu.peak_flops.bf16, "
         "which " +
         cluster_name + " does not give for " + cluster.gpu.kind);
  }

  const int64_t gpus = static_cast<int64_t>(cluster.nodes) * cluster.gpus_per_node;
  const std::string gpus_text = str(gpus) + " GPUs (" + cluster_name + ": " + str(cluster.nodes) +
                                " nodes * " + str(cluster.gpus_per_node) + " GPUs)";
  // Context parallelism multiplies the GPUs of one model replica: GPUs = tp*cp*pp*dp.
  const int64_t cp = p.cp;
  if (p.cp < 1 || p.ep < 1)
    fail("parallel: cp and ep must be >= 1, found cp = " + str(p.cp) + ", ep = " + str(p.ep));
  const auto tp_pp = checked_mul(tp * pp, cp).value_or(0);
  const std::string tp_pp_name = cp > 1 ? "tp*cp*pp" : "tp*pp";
  const std::string tp_pp_factors =
      cp > 1 ? str(tp) + "*" + str(cp) + "*" + str(pp) : str(tp) + "*" + str(pp);
  int64_t dp = p.dp;
  if (dp == 0) {
    if (tp_pp == 0 || gpus % tp_pp != 0) {
      fail("parallel: dp is omitted, but the cluster's " + gpus_text + " are not divisible by " + tp_pp_name +
           " = " + tp_pp_factors + " = " + str(tp_pp));
    }
    dp = gpus / tp_pp;
  } else {
    const auto total = checked_mul(tp_pp, dp);
    if (!total || *total != gpus) {
      fail("parallel: " + tp_pp_name + "*dp = " + tp_pp_factors + "*" + str(dp) + " = " +
           (total ? str(*total) : std::string("(overflow)")) + " but the cluster has " + gpus_text);
    }
  }

  const auto divides = [&](const char* degree_name, int64_t degree, const char* dim_name, int64_t dim,
                           const char* why) {
    if (dim % degree != 0) {
      fail(std::string(degree_name) + " = " + str(degree) + " does not divide " + dim_name + " = " +
           str(dim) + " (" + why + ")");
    }
  };
  divides("parallel.tp", tp, "model.heads", m.heads, "attention heads are split across TP ranks");
  divides("parallel.tp", tp, "model.kv_heads", m.kv_heads, "key/value heads are split across TP ranks");
  divides("parallel.tp", tp, "model.ffn_hidden", m.ffn_hidden, "the MLP is split across TP ranks");
  divides("parallel.tp", tp, "model.vocab", m.vocab, "the embedding and logits are split across TP ranks");
  check_chunks(workload, pp, fail);
  if (workload.training.overlap_param_gather && workload.parallel.zero_stage != 1 &&
      workload.parallel.zero_stage != 2)
    fail("training.overlap_param_gather overlaps the distributed optimizer's parameter all-gather and needs "
         "parallel.zero_stage 1 or 2, found " +
         str(workload.parallel.zero_stage));
  if (workload.training.zero3_fetch == Zero3Fetch::BLOCKING && workload.parallel.zero_stage != 3)
    fail("training.zero3_fetch: blocking is how ZeRO-3 gathers parameters and needs parallel.zero_stage 3, "
         "found " +
         str(workload.parallel.zero_stage));
  if (workload.training.recompute_layers > 0 && workload.training.recompute != Recompute::FULL)
    fail("training.recompute_layers = " + str(workload.training.recompute_layers) +
         " needs training.recompute: full");

  const auto per_step = checked_mul(workload.batch.micro_batch, dp);
  if (!per_step || workload.batch.global_batch % *per_step != 0) {
    fail("batch.global_batch = " + str(workload.batch.global_batch) +
         " is not divisible by batch.micro_batch*parallel.dp = " + str(workload.batch.micro_batch) + "*" +
         str(dp) + (p.dp == 0 ? " (dp derived)" : "") + " = " +
         (per_step ? str(*per_step) : std::string("(overflow)")));
  }
  check_schedule(workload, dp, fail);
  check_moe_and_cp(workload, dp, fail);
  if (p.sp && tp == 1) {
    fail("parallel.sp = true needs parallel.tp > 1, found tp = 1 (sequence parallelism splits along TP)");
  }
  if (p.sp && m.seq_len % tp != 0) {
    fail("parallel.sp = true needs model.seq_len = " + str(m.seq_len) +
         " divisible by parallel.tp = " + str(tp) + " (seq_len % tp = " + str(m.seq_len % tp) + ")");
  }
  Layout layout{.workload = workload, .dp_derived = p.dp == 0};
  layout.workload.parallel.dp = static_cast<int>(dp);
  return layout;
}

} // namespace

Layout check_layout(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  // The stack's values first (docs/stacks.md): the checks judge the workload that runs. Its
  // layout-dependent values need dp, derived here as the checks below derive it.
  const ParallelSpec& p = workload.parallel;
  const int64_t gpus = static_cast<int64_t>(cluster.nodes) * cluster.gpus_per_node;
  const int64_t replica = static_cast<int64_t>(std::max(p.tp, 0)) * std::max(p.pp, 0) * std::max(p.cp, 0);
  int64_t dp = p.dp;
  if (dp == 0)
    dp = replica > 0 && gpus % replica == 0 ? gpus / replica : 0;
  WorkloadSpec expanded = workload;
  expand_stack(expanded, dp);
  return check_expanded(cluster, expanded);
}

} // namespace stepsim::config
