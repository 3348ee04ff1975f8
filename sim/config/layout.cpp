// The layout checks (docs/schema.md, "Layout checks"): a workload against a cluster.

#include "config/config.hpp"

#include "config/stacks.hpp"
#include "config/workload_names.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

/// The broken rules of one layout, collected as LLVM's joinErrors does: each check adds its
/// reason and checking goes on; check_layout then throws them all in one ModelError, one per line
/// in the order found, each naming the workload file and the keys. A check whose arithmetic needs
/// an earlier rule to hold (a division by a degree) runs only when that rule held.
class Problems {
public:
  explicit Problems(std::string prefix) : prefix_(std::move(prefix)) {}
  void operator()(const std::string& why) { lines_.push_back(prefix_ + why); }
  [[nodiscard]] bool empty() const { return lines_.empty(); }
  void throw_all() const {
    if (lines_.empty())
      return;
    std::string all;
    for (const std::string& line : lines_)
      all += (all.empty() ? "" : "\n") + line;
    throw ModelError(all);
  }

private:
  std::string prefix_;
  std::vector<std::string> lines_;
};

std::string workload_name(const WorkloadSpec& w) {
  return w.source.empty() ? std::string("workload") : w.source;
}

std::string cluster_name(const ClusterSpec& c) {
  return c.source.empty() ? c.name : c.source;
}

/// check_precision's reason, or "" when the GPU has a peak for the precision.
std::string precision_problem(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  if (peak_flops(cluster.gpu, workload.precision).value() > 0)
    return "";
  return std::string("precision: ") + precision_name(workload.precision) + " needs gpu.peak_flops." +
         precision_name(workload.precision) + ", which " + cluster_name(cluster) + " does not give for " +
         cluster.gpu.kind;
}

std::string schedule_label(Schedule s) {
  return std::string(detail::name_of(detail::SCHEDULE_NAMES, s));
}

/// DualPipe: pp >= 2 even, an even number m of micro-batches with m/2 >= pp (each direction fills
/// its pipeline); DualPipeV: pp >= 2, m >= 2*pp (DeepSeek's DualPipe repository asserts the same).
/// Layers divide into the schedule's chunks (check_chunks). `dp`: as in check_schedule.
void check_dualpipe(const WorkloadSpec& w, std::optional<int64_t> dp, Problems& fail) {
  const ParallelSpec& p = w.parallel;
  const bool two_way = p.schedule == Schedule::DUALPIPE;
  const std::string name = std::string("parallel.schedule = ") + schedule_label(p.schedule);
  if (p.pp < 2 || (two_way && p.pp % 2 != 0))
    fail(name +
         (two_way ? " needs an even parallel.pp >= 2 (stage i and pp-1-i hold each other's chunks)"
                  : " needs parallel.pp >= 2") +
         ", found pp = " + str(p.pp));
  const auto per_step = dp ? checked_mul(w.batch.micro_batch, *dp) : std::nullopt;
  if (!per_step || *per_step <= 0)
    return;
  const int64_t m = w.batch.global_batch / *per_step;
  if (two_way && m % 2 != 0)
    fail(name + " needs an even number of micro-batches per pipeline (half fed from each end), found " +
         str(m) + " = global_batch / (micro_batch*dp)");
  else if (m < 2 * static_cast<int64_t>(p.pp))
    fail(name + " needs at least 2*pp = " + str(2 * static_cast<int64_t>(p.pp)) +
         " micro-batches per pipeline (" + (two_way ? "pp per direction" : "the V filled twice") +
         "), found " + str(m) + " = global_batch / (micro_batch*dp)");
}

/// Schedule rules (docs/schedules.md): interleaving needs vp >= 2, pp >= 2, layers % (pp*vp) == 0
/// and, as in Megatron-LM, micro-batches % pp == 0; vp > 1 only with the interleaved schedule; the
/// zero-bubble schedules defer weight gradients, which full recomputation cannot do cheaply.
/// `dp`: the data-parallel size when it is known and the batch sizes are valid.
void check_schedule(const WorkloadSpec& w, std::optional<int64_t> dp, Problems& fail) {
  const ParallelSpec& p = w.parallel;
  if (p.vp < 1) {
    fail("parallel.vp = " + str(p.vp) + " must be >= 1");
    return; // the rules below count model chunks pp*vp
  }
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
    const int64_t per_step = dp ? w.batch.micro_batch * *dp : 0;
    const int64_t m = per_step > 0 ? w.batch.global_batch / per_step : 0;
    if (dp && m % p.pp != 0)
      fail("parallel.schedule = interleaved needs the micro-batches per pipeline (" + str(m) +
           " = global_batch / (micro_batch*dp)) to be a multiple of parallel.pp = " + str(p.pp) +
           " (Megatron-LM's interleaved schedule)");
  }
  if (p.bidirectional())
    check_dualpipe(w, dp, fail);
  if (p.pp_p2p_blocking && p.schedule != Schedule::ONE_F_ONE_B)
    fail(std::string("parallel.pp_p2p_blocking = true needs parallel.schedule = 1f1b (DeepSpeed's "
                     "TrainSchedule, whose instruction order it follows), found ") +
         schedule_label(p.schedule));
  if (splits_backward(p.schedule) && w.training.recompute == Recompute::FULL)
    fail(std::string("parallel.schedule = ") + schedule_label(p.schedule) +
         " cannot be combined with training.recompute = full: deferred weight-gradient passes need the "
         "recomputed "
         "activations kept until they run (use none or selective)");
}

/// Expert and context parallelism (docs/moe.md): ep needs experts, divides dp and the experts;
/// TP splits every expert's MLP; cp divides the sequence (tp*cp with sequence parallelism).
/// `dp`: the data-parallel size when it is known.
void check_moe_and_cp(const WorkloadSpec& w, std::optional<int64_t> dp, Problems& fail) {
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
    if (!dp) {
      // the rules over the data-parallel group need its size
    } else if (!p.folds_experts()) {
      if (*dp % p.ep != 0)
        fail("parallel.ep = " + str(p.ep) + " does not divide parallel.dp = " + str(*dp) +
             " (expert parallelism subdivides the data-parallel group; expert-data-parallel size = dp / ep; "
             "parallel.etp below tp folds it over the tensor-parallel ranks too)");
    } else {
      const int64_t stage_gpus = static_cast<int64_t>(p.tp) * p.cp * *dp;
      if (etp > 0 && stage_gpus % (static_cast<int64_t>(etp) * p.ep) != 0)
        fail("parallel.etp*ep = " + str(etp) + "*" + str(p.ep) + " does not divide tp*cp*dp = " +
             str(stage_gpus) + " (with etp < tp the expert groups fold over the GPUs of a pipeline stage)");
      if (p.tp > 1 && !p.sp)
        fail("parallel.etp = " + str(etp) + " below parallel.tp = " + str(p.tp) +
             " needs parallel.sp: true (each TP rank routes its own share of the sequence)");
    }
    if (moe.experts % p.ep != 0)
      fail("parallel.ep = " + str(p.ep) + " does not divide model.moe.experts = " + str(moe.experts) +
           " (every EP rank holds the same number of experts)");
    if (etp > 0 && moe.expert_ffn_hidden % etp != 0)
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
    if (p.pp > 1 && p.schedule != Schedule::INTERLEAVED && !p.bidirectional())
      fail("parallel.ep_overlap with parallel.pp = " + str(p.pp) +
           " needs parallel.schedule = interleaved (Megatron-Core's combined 1F1B pairs the interleaved "
           "schedule's steady-state passes; dualpipe and dualpipev pair their own)");
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

/// The model chunks of the layout (ParallelSpec::model_chunks) with a usable pp.
int64_t model_chunks(ParallelSpec p, int64_t pp) {
  p.pp = static_cast<int>(pp);
  p.vp = std::max(1, p.vp);
  return p.model_chunks();
}

/// Layers per model chunk (docs/schedules.md): an even split over pp (vp) or parallel.chunk_layers,
/// and activation offloading of fewer layers than the smallest chunk holds.
void check_chunks(const WorkloadSpec& workload, int64_t pp, Problems& fail) {
  const ModelSpec& m = workload.model;
  if (workload.parallel.chunk_layers.empty()) {
    if (m.layers % pp != 0)
      fail("parallel.pp = " + str(pp) + " does not divide model.layers = " + str(m.layers) +
           " (every pipeline stage holds the same number of layers; parallel.chunk_layers splits them "
           "unevenly)");
  } else {
    const auto& c = workload.parallel.chunk_layers;
    const int64_t chunks = model_chunks(workload.parallel, pp);
    if (static_cast<int64_t>(c.size()) != chunks)
      fail("parallel.chunk_layers lists " + str(static_cast<int64_t>(c.size())) + " model chunks, expected " +
           (workload.parallel.schedule == Schedule::DUALPIPE_V ? "2*pp (dualpipev's V)" : "pp*vp") + " = " +
           str(chunks));
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
    int64_t smallest = m.layers / model_chunks(workload.parallel, pp);
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

/// The ranges a spec built in code may break (a file's reader refuses them): the degrees, the
/// ZeRO stage and the batch sizes. Returns whether the degrees tp, pp, cp, ep and dp are usable,
/// which every rule dividing by one of them needs.
bool check_ranges(const WorkloadSpec& w, Problems& fail) {
  const ParallelSpec& p = w.parallel;
  const bool tp_pp = p.tp >= 1 && p.pp >= 1 && p.dp >= 0;
  if (!tp_pp)
    fail("parallel: tp and pp must be >= 1 and dp >= 1 (or 0 to derive it), found tp = " + str(p.tp) +
         ", pp = " + str(p.pp) + ", dp = " + str(p.dp));
  if (p.zero_stage < 0 || p.zero_stage > 3)
    fail("parallel.zero_stage = " + str(p.zero_stage) + " but only stages 0, 1, 2 and 3 exist");
  if (w.batch.micro_batch < 1 || w.batch.global_batch < 1)
    fail("batch: global_batch and micro_batch must be >= 1, found " + str(w.batch.global_batch) + " and " +
         str(w.batch.micro_batch));
  return tp_pp;
}

/// What the workload needs of the cluster's GPU: a peak for its precision (bf16 too for fp8),
/// and a host link for activation offloading.
void check_gpu_needs(const ClusterSpec& cluster, const WorkloadSpec& w, Problems& fail) {
  if (const std::string why = precision_problem(cluster, w); !why.empty())
    fail(why);
  if (w.training.offload_layers > 0 && cluster.gpu.host_bandwidth.value() <= 0)
    fail("training.offload_layers moves activations to host memory and needs gpu.host_bandwidth (GPU <-> "
         "host, per direction), which " +
         cluster_name(cluster) + " does not give");
  if (w.precision == Precision::FP8 && cluster.gpu.peak_bf16.value() <= 0)
    fail("precision: fp8 runs the attention core, logits and norms in bf16 and needs gpu.peak_flops.bf16, "
         "which " +
         cluster_name(cluster) + " does not give for " + cluster.gpu.kind);
}

/// The data-parallel size: parallel.dp, or the cluster's GPUs over tp*cp*pp when it is omitted;
/// nullopt (a problem reported) when the GPUs do not match.
std::optional<int64_t> data_parallel(const ClusterSpec& cluster, const WorkloadSpec& w, Problems& fail) {
  const ParallelSpec& p = w.parallel;
  const int64_t tp = p.tp, pp = p.pp, cp = p.cp;
  // Ranks go to the nodes that are up (docs/degraded.md).
  const int64_t up = static_cast<int64_t>(cluster.up_nodes().size());
  const int64_t gpus = up * cluster.gpus_per_node;
  const std::string gpus_text = str(gpus) + " GPUs (" + cluster_name(cluster) + ": " + str(up) + " nodes" +
                                (up < cluster.nodes ? " up of " + str(cluster.nodes) : std::string()) +
                                " * " + str(cluster.gpus_per_node) + " GPUs)";
  // Context parallelism multiplies the GPUs of one model replica: GPUs = tp*cp*pp*dp.
  const auto tp_pp = checked_mul(tp * pp, cp).value_or(0);
  const std::string tp_pp_name = cp > 1 ? "tp*cp*pp" : "tp*pp";
  const std::string tp_pp_factors =
      cp > 1 ? str(tp) + "*" + str(cp) + "*" + str(pp) : str(tp) + "*" + str(pp);
  if (p.dp == 0) {
    if (tp_pp == 0 || gpus % tp_pp != 0) {
      fail("parallel: dp is omitted, but the cluster's " + gpus_text + " are not divisible by " + tp_pp_name +
           " = " + tp_pp_factors + " = " + str(tp_pp));
      return std::nullopt;
    }
    return gpus / tp_pp;
  }
  const auto total = checked_mul(tp_pp, p.dp);
  if (total && *total > gpus && *total <= static_cast<int64_t>(cluster.nodes) * cluster.gpus_per_node) {
    // The job fits the cluster but not the nodes that are up: the first down node's entry says why.
    const DegradedSpec::Node& down = cluster.degraded.nodes.front();
    throw ConfigError(down.where + ": key 'degraded.nodes': node " + str(down.node) +
                      " is down and the job needs " + str(*total / cluster.gpus_per_node) + " nodes (" +
                      tp_pp_name + "*dp = " + str(*total) + " GPUs), but only " + str(up) + " of the " +
                      str(cluster.nodes) + " nodes are up");
  }
  if (!total || *total != gpus) {
    fail("parallel: " + tp_pp_name + "*dp = " + tp_pp_factors + "*" + str(p.dp) + " = " +
         (total ? str(*total) : std::string("(overflow)")) + " but the cluster has " + gpus_text);
    return std::nullopt;
  }
  return p.dp;
}

/// Tensor parallelism splits the heads, the MLP and the vocabulary.
void check_tp_split(const WorkloadSpec& w, Problems& fail) {
  const int64_t tp = w.parallel.tp;
  const ModelSpec& m = w.model;
  const auto divides = [&](const char* dim_name, int64_t dim, const char* why) {
    if (dim % tp != 0)
      fail("parallel.tp = " + str(tp) + " does not divide " + dim_name + " = " + str(dim) + " (" + why + ")");
  };
  divides("model.heads", m.heads, "attention heads are split across TP ranks");
  divides("model.kv_heads", m.kv_heads, "key/value heads are split across TP ranks");
  divides("model.ffn_hidden", m.ffn_hidden, "the MLP is split across TP ranks");
  divides("model.vocab", m.vocab, "the embedding and logits are split across TP ranks");
}

/// Training options that need a ZeRO stage or a recomputation mode.
void check_training_needs(const WorkloadSpec& w, Problems& fail) {
  const TrainingSpec& t = w.training;
  const int zero = w.parallel.zero_stage;
  if (t.overlap_param_gather && zero != 1 && zero != 2)
    fail("training.overlap_param_gather overlaps the distributed optimizer's parameter all-gather and needs "
         "parallel.zero_stage 1 or 2, found " +
         str(zero));
  if (t.zero3_fetch == Zero3Fetch::BLOCKING && zero != 3)
    fail("training.zero3_fetch: blocking is how ZeRO-3 gathers parameters and needs parallel.zero_stage 3, "
         "found " +
         str(zero));
  if (!t.reshard_after_forward) {
    // Kept from a micro-batch's forward to its backward (one stage), or with a pipeline for the
    // whole step, as torch.distributed.pipelining runs FSDP2 (docs/model.md, "ZeRO-3 fetch").
    const std::string why = "training.reshard_after_forward: false keeps ZeRO-3's gathered parameters "
                            "from the forward to the backward and needs ";
    if (zero != 3)
      fail(why + "parallel.zero_stage 3, found " + str(zero));
    if (t.zero3_fetch != Zero3Fetch::PREFETCH)
      fail(why + "training.zero3_fetch: prefetch");
    if (w.parallel.pp > 1 && splits_backward(w.parallel.schedule))
      fail(why +
           "a schedule that does not split the backward (with a pipeline the parameters stay "
           "gathered until the stage's last backward; not modelled for " +
           schedule_label(w.parallel.schedule) + ")");
    if (w.model.moe.enabled())
      fail(why + "a dense model (not modelled with experts)");
  }
  if (t.recompute_layers > 0 && t.recompute != Recompute::FULL)
    fail("training.recompute_layers = " + str(t.recompute_layers) + " needs training.recompute: full");
}

/// ZeRO-3 hybrid sharding: shard groups of dp_shard replicas that divide dp; below dp, ZeRO-3 of a
/// dense model (the experts' expert-data-parallel groups are not split into shard groups).
void check_hybrid_sharding(const WorkloadSpec& w, int64_t dp, Problems& fail) {
  const int64_t s = w.parallel.dp_shard;
  if (s == 0 || s == dp)
    return;
  if (s == 1 && w.parallel.cp == 1)
    fail("parallel.dp_shard = 1 shards nothing: every replica holds the whole model (plain data "
         "parallelism, parallel.zero_stage 0)");
  if (dp % s != 0)
    fail("parallel.dp_shard = " + str(s) + " does not divide parallel.dp = " + str(dp) +
         " (the shard groups replicate each other)");
  if (w.parallel.zero_stage != 3)
    fail("parallel.dp_shard = " + str(s) +
         " shards ZeRO-3 over groups of DP replicas and needs "
         "parallel.zero_stage 3, found " +
         str(w.parallel.zero_stage));
  if (w.model.moe.enabled())
    fail("parallel.dp_shard = " + str(s) + " is not modelled with experts (a dense model's hybrid sharding)");
}

/// The global batch splits into micro-batches over the DP replicas.
void check_batch_split(const WorkloadSpec& w, int64_t dp, Problems& fail) {
  const auto per_step = checked_mul(w.batch.micro_batch, dp);
  if (!per_step || w.batch.global_batch % *per_step != 0)
    fail("batch.global_batch = " + str(w.batch.global_batch) +
         " is not divisible by batch.micro_batch*parallel.dp = " + str(w.batch.micro_batch) + "*" + str(dp) +
         (w.parallel.dp == 0 ? " (dp derived)" : "") + " = " +
         (per_step ? str(*per_step) : std::string("(overflow)")));
}

/// Sequence parallelism splits the sequence along TP.
void check_sequence_parallel(const WorkloadSpec& w, Problems& fail) {
  const int64_t tp = w.parallel.tp;
  if (!w.parallel.sp)
    return;
  if (tp == 1)
    fail("parallel.sp = true needs parallel.tp > 1, found tp = 1 (sequence parallelism splits along TP)");
  if (w.model.seq_len % tp != 0)
    fail("parallel.sp = true needs model.seq_len = " + str(w.model.seq_len) +
         " divisible by parallel.tp = " + str(tp) + " (seq_len % tp = " + str(w.model.seq_len % tp) + ")");
}

} // namespace

void check_precision(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  if (const std::string why = precision_problem(cluster, workload); !why.empty())
    throw ModelError(workload_name(workload) + ": " + why);
}

namespace {

/// The checks of check_layout on a workload whose stack is expanded.
Layout check_expanded(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  Problems problems(workload_name(workload) + ": ");
  const ParallelSpec& p = workload.parallel;
  const bool tp_pp = check_ranges(workload, problems);
  const bool batch = workload.batch.micro_batch >= 1 && workload.batch.global_batch >= 1;
  check_gpu_needs(cluster, workload, problems);
  const bool cp_ep = p.cp >= 1 && p.ep >= 1;
  if (!cp_ep)
    problems("parallel: cp and ep must be >= 1, found cp = " + str(p.cp) + ", ep = " + str(p.ep));
  // Every rule below divides by a degree: none runs over an unusable one.
  std::optional<int64_t> dp;
  if (tp_pp && cp_ep) {
    dp = data_parallel(cluster, workload, problems);
    check_tp_split(workload, problems);
    check_chunks(workload, p.pp, problems);
  }
  check_training_needs(workload, problems);
  if (dp)
    check_hybrid_sharding(workload, *dp, problems);
  if (dp && batch)
    check_batch_split(workload, *dp, problems);
  if (tp_pp && cp_ep) {
    check_schedule(workload, batch ? dp : std::nullopt, problems);
    check_moe_and_cp(workload, dp, problems);
    check_sequence_parallel(workload, problems);
  }
  problems.throw_all();
  Layout layout{.workload = workload, .dp_derived = p.dp == 0};
  layout.workload.parallel.dp = static_cast<int>(*dp);
  return layout;
}

} // namespace

Layout check_layout(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  // The stack's values first (docs/stacks.md): the checks judge the workload that runs. Its
  // layout-dependent values need dp, derived here as the checks derive it.
  const ParallelSpec& p = workload.parallel;
  const int64_t gpus = static_cast<int64_t>(cluster.up_nodes().size()) * cluster.gpus_per_node;
  const int64_t replica = static_cast<int64_t>(std::max(p.tp, 0)) * std::max(p.pp, 0) * std::max(p.cp, 0);
  int64_t dp = p.dp;
  if (dp == 0)
    dp = replica > 0 && gpus % replica == 0 ? gpus / replica : 0;
  WorkloadSpec expanded = workload;
  expand_stack(expanded, dp);
  return check_expanded(cluster, expanded);
}

} // namespace stepsim::config
