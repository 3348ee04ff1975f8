#include "runner/simulate.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/attention_kernel.hpp"
#include "kernels/step_kernels.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"
#include "topology/degrade.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>

namespace stepsim::runner {

namespace {

/// The fixed cost of one kernel launch: `gpu.launch_overhead` when set (>= 0), else the profile's,
/// else 0 (no profile: the roofline charges no launches).
Seconds gpu_launch_overhead(const GpuSpec& gpu, const kernels::KernelTable* table) {
  if (gpu.launch_overhead.value() >= 0)
    return gpu.launch_overhead;
  return table != nullptr ? table->launch_overhead() : Seconds(0.0);
}

/// The optimizer step's kernels on one rank of `stage` (model::optimizer_step_bytes).
std::vector<kernels::KernelCall> optimizer_calls(const WorkloadSpec& w, int stage) {
  return kernels::optimizer_kernels(
      w, std::max<int64_t>(1, std::llround(model::optimizer_params_on_rank(w, stage))),
      std::max<int64_t>(1, std::llround(model::gradients_held_on_rank(w, stage))));
}

/// Compute times from a kernel table, cached per (block, phase) (and stage for the optimizer).
class ProfiledTimes {
public:
  ProfiledTimes(std::shared_ptr<const kernels::KernelTable> table, const WorkloadSpec& w, const GpuSpec& gpu)
      : table_(std::move(table)), w_(w),
        gemm_efficiency_(gpu.gemm_efficiency > 0 ? gpu.gemm_efficiency : 1.0),
        memory_bound_efficiency_(gpu.memory_bound_efficiency > 0 ? gpu.memory_bound_efficiency : 1.0),
        launch_overhead_(gpu_launch_overhead(gpu, table_.get())) {
    // The fused attention kernel the workload names, against the profile's attention rows.
    const int cc = kernels::compute_capability_tenths(table_->profile().header.compute_capability);
    try {
      attention_rate_fwd_ =
          kernels::attention_kernel_rate(w.training.attention_kernel, kernels::KernelKind::ATTENTION_FWD, cc);
      attention_rate_bwd_ =
          kernels::attention_kernel_rate(w.training.attention_kernel, kernels::KernelKind::ATTENTION_BWD, cc);
    } catch (const ConfigError& e) {
      if (w.training.flash_attention)
        throw ConfigError(w.source + ": " + e.what());
    }
  }

  graph::ComputeCost operator()(const graph::ComputeQuery& q) {
    const bool optimizer = q.block == graph::Block::OPTIMIZER || q.phase == graph::Phase::OPTIMIZER;
    const auto key = std::make_tuple(static_cast<int>(q.block), static_cast<int>(q.phase),
                                     optimizer ? q.stage : -1, q.windowed);
    if (auto it = cache_.find(key); it != cache_.end())
      return it->second;
    // The optimizer block in the backward phase is the gradient accumulation pass
    // (graph::grad_accumulation_query); its query carries one add per gradient.
    const bool accumulation = q.block == graph::Block::OPTIMIZER && q.phase == graph::Phase::BACKWARD;
    const graph::ComputeCost cost =
        accumulation ? sum(kernels::grad_accumulation_kernels(std::llround(q.flops.value())))
        : optimizer  ? sum(optimizer_calls(w_, q.stage))
                     : sum(kernels::block_kernels(w_, q.block, q.phase, q.windowed));
    cache_.emplace(key, cost);
    return cost;
  }

private:
  /// Sum of table time × factor plus one launch overhead per kernel launch; shares by source.
  graph::ComputeCost sum(const std::vector<kernels::KernelCall>& calls) const {
    double total = 0, dgrad = 0, wgrad = 0, gemm = 0;
    graph::TimeSources s;
    for (const kernels::KernelCall& c : calls) {
      const kernels::KernelTime k = table_->lookup(c.shape);
      // Calibration (docs/calibration.md): GEMM/attention rates, memory-bound rates and the
      // per-kernel fixed cost.
      const bool tensor_core = c.shape.kind == kernels::KernelKind::GEMM ||
                               c.shape.kind == kernels::KernelKind::ATTENTION_FWD ||
                               c.shape.kind == kernels::KernelKind::ATTENTION_BWD;
      const double attention_rate = c.shape.kind == kernels::KernelKind::ATTENTION_FWD   ? attention_rate_fwd_
                                    : c.shape.kind == kernels::KernelKind::ATTENTION_BWD ? attention_rate_bwd_
                                                                                         : 1.0;
      const double t = k.time.value() * c.time_factor /
                           (attention_rate * (tensor_core ? gemm_efficiency_ : memory_bound_efficiency_)) +
                       launch_overhead_.value() * c.launches;
      total += t;
      dgrad += c.part == kernels::CallPart::INPUT_DGRAD ? t : 0.0;
      wgrad += c.part == kernels::CallPart::INPUT_WGRAD ? t : 0.0;
      gemm += c.shape.kind == kernels::KernelKind::GEMM ? t : 0.0;
      switch (k.source) {
      case kernels::Source::MEASURED:
        s.measured += t;
        break;
      case kernels::Source::INTERPOLATED:
        s.interpolated += t;
        break;
      case kernels::Source::MODELLED:
        s.modelled += t;
        break;
      }
    }
    if (total <= 0)
      return graph::ComputeCost(Seconds(0.0), graph::TimeSources{.modelled = 1.0});
    s.measured /= total;
    s.interpolated /= total;
    s.modelled /= total;
    graph::ComputeCost cost(Seconds(total), s);
    cost.input_dgrad = Seconds(dgrad);
    cost.input_wgrad = Seconds(wgrad);
    cost.gemm = Seconds(gemm);
    return cost;
  }

  std::shared_ptr<const kernels::KernelTable> table_;
  WorkloadSpec w_;
  double gemm_efficiency_ = 1.0;
  double memory_bound_efficiency_ = 1.0;
  double attention_rate_fwd_ = 1.0; ///< training.attention_kernel's rate (kernels/attention_kernel.hpp)
  double attention_rate_bwd_ = 1.0;
  Seconds launch_overhead_;
  std::map<std::tuple<int, int, int, bool>, graph::ComputeCost> cache_;
};

} // namespace

std::shared_ptr<const kernels::KernelTable> load_kernel_table(const ClusterSpec& cluster) {
  if (cluster.gpu.profile.empty())
    return nullptr;
  try {
    return std::make_shared<const kernels::KernelTable>(
        kernels::KernelTable::load(cluster.gpu.profile, cluster.gpu));
  } catch (const ConfigError& e) { // the profile's own error, placed under the key that named it
    throw ConfigError(cluster.source + ": key 'gpu.profile': " + e.what());
  }
}

graph::ComputeTimeFn compute_time_model(const ClusterSpec& cluster, const WorkloadSpec& workload,
                                        std::shared_ptr<const kernels::KernelTable> table) {
  if (table) {
    auto times = std::make_shared<ProfiledTimes>(std::move(table), workload, cluster.gpu);
    return [times](const graph::ComputeQuery& q) { return (*times)(q); };
  }
  const GpuSpec gpu = cluster.gpu;
  const Precision precision = workload.precision;
  if (precision != Precision::FP8) {
    return [gpu, precision](const graph::ComputeQuery& q) {
      return graph::ComputeCost(model::roofline_time(q.flops, q.bytes, gpu, precision));
    };
  }
  // fp8 training: a block's linear GEMMs at the fp8 peak, its attention core and the logits at
  // the bf16 peak; the block runs at the FLOP-weighted harmonic mean of the two.
  const ModelSpec m = workload.model;
  const double core =
      model::attention_core_flops(m, 1, 1).value() / model::attention_block_forward_flops(m, 1, 1).value();
  return [gpu, core](const graph::ComputeQuery& q) {
    double fp16_share = 0;
    switch (q.block) {
    case graph::Block::ATTENTION:
      fp16_share = core;
      break;
    case graph::Block::MLP:
    case graph::Block::EXPERTS:
      fp16_share = 0;
      break;
    default:
      fp16_share = 1;
      break;
    }
    const double peak =
        1.0 / (fp16_share / gpu.peak_bf16.value() + (1.0 - fp16_share) / gpu.peak_fp8.value());
    return graph::ComputeCost(model::roofline_time(q.flops, q.bytes, gpu, FlopsPerSec(peak)));
  };
}

graph::ComputeTimeFn compute_time_model(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  return compute_time_model(cluster, workload, load_kernel_table(cluster));
}

Seconds list_collective_per_rank(const ClusterSpec& cluster, const kernels::KernelTable* table) {
  return std::max(cluster.gpu.list_collective_per_rank, gpu_launch_overhead(cluster.gpu, table));
}

double overlap_slowdown(const ClusterSpec& cluster, const kernels::KernelTable* table) {
  if (cluster.gpu.overlap_slowdown >= 1.0)
    return cluster.gpu.overlap_slowdown;
  return table ? table->overlap_slowdown() : 1.0;
}

std::vector<kernels::KernelShape> compute_kernel_shapes(const WorkloadSpec& workload) {
  std::vector<kernels::KernelShape> out = kernels::block_kernel_shapes(workload);
  std::set<kernels::KernelShape> seen(out.begin(), out.end());
  for (int stage = 0; stage < workload.parallel.pp; ++stage) {
    for (const kernels::KernelCall& c : optimizer_calls(workload, stage))
      if (seen.insert(c.shape).second)
        out.push_back(c.shape);
  }
  return out;
}

bool non_blocking(const ClusterSpec& c) {
  if (c.fabric.kind == FabricKind::RAIL_OPTIMIZED)
    return c.fabric.oversubscription <= 1.0;
  return c.fabric.kind == FabricKind::FAT_TREE && c.fabric.oversubscription <= 1.0 &&
         (c.fabric.tiers < 3 || c.fabric.spine_oversubscription <= 1.0);
}

double kernel_cv(const ClusterSpec& cluster, const WorkloadSpec& workload) {
  return workload.training.variability.cv_or(cluster.gpu.kernel_cv);
}

std::vector<int> placement_classes(const ClusterSpec& c, const ParallelSpec& par,
                                   const std::vector<std::vector<int>>& jobs_nodes, size_t j) {
  const int gpn = c.gpus_per_node;
  const int tp = par.tp;
  const int dp = par.dp * par.cp;
  if (c.fabric.kind == FabricKind::GRAPH || par.expert_tp() != tp || gpn % tp != 0 || (tp * dp) % gpn != 0)
    return {};
  const int block = gpn / tp; // replicas sharing a node at each stage
  if (block % (par.cp * par.ep) != 0)
    return {};
  const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
  const int per_pod = c.fabric.tiers >= 3 ? std::max(1, c.fabric.leaves_per_pod) : c.nodes;
  std::vector<std::vector<int>> leaf_load(static_cast<size_t>((c.nodes + per_leaf - 1) / per_leaf),
                                          std::vector<int>(jobs_nodes.size(), 0));
  std::vector<std::vector<int>> pod_load(leaf_load.size() / static_cast<size_t>(per_pod) + 1,
                                         std::vector<int>(jobs_nodes.size(), 0));
  for (size_t k = 0; k < jobs_nodes.size(); ++k)
    for (const int node : jobs_nodes[k]) {
      ++leaf_load[static_cast<size_t>(node / per_leaf)][k];
      ++pod_load[static_cast<size_t>(node / per_leaf / per_pod)][k];
    }
  const auto alike = [&](int node) {
    for (int g = 0; g < gpn; ++g)
      if (topology::gpu_speed(c, node, g) != 1.0)
        return false;
    return !c.network_degraded_at(node);
  };
  // The order in which a replica meets a leaf or pod: which of its stages share one.
  const auto index = [](std::vector<int>& seen, int x) {
    const auto at = std::find(seen.begin(), seen.end(), x);
    if (at != seen.end())
      return static_cast<int>(at - seen.begin());
    seen.push_back(x);
    return static_cast<int>(seen.size()) - 1;
  };
  const std::vector<int>& nodes = jobs_nodes.at(j);
  std::map<std::vector<int>, int> class_of_key;
  std::vector<int> out(static_cast<size_t>(dp));
  for (int b = 0; b * block < dp; ++b) {
    std::vector<int> key;
    std::vector<int> leaves, pods;
    for (int p = 0; p < par.pp; ++p) {
      const int node = nodes.at(static_cast<size_t>(tp * (b * block + dp * p) / gpn));
      if (!alike(node)) {
        key = {-1, b};
        break;
      }
      const int leaf = node / per_leaf;
      const int pod = leaf / per_pod;
      key.push_back(index(leaves, leaf));
      key.push_back(index(pods, pod));
      const std::vector<int>& ll = leaf_load[static_cast<size_t>(leaf)];
      const std::vector<int>& pl = pod_load[static_cast<size_t>(pod)];
      key.insert(key.end(), ll.begin(), ll.end());
      key.insert(key.end(), pl.begin(), pl.end());
    }
    const int cls = class_of_key.emplace(key, static_cast<int>(class_of_key.size())).first->second;
    for (int d = b * block; d < std::min(dp, (b + 1) * block); ++d)
      out[static_cast<size_t>(d)] = cls;
  }
  return out;
}

std::optional<ClusterSpec> paced_tp_groups(const ClusterSpec& cluster, int tp, int ranks) {
  const std::vector<int> gpus = topology::rank_gpus(cluster);
  const int per_node = std::max(1, cluster.gpus_per_node);
  std::map<int, double> speed; // GPU -> speed, the slow ones
  for (const auto& g : cluster.degraded.gpus)
    if (g.speed < 1.0)
      speed[g.node * per_node + g.gpu] = g.speed;
  if (speed.empty() || tp < 1)
    return std::nullopt;
  std::map<int, double> paced; // GPU -> its group's pace, for every member of a slow group
  const int n = std::min(ranks, static_cast<int>(gpus.size()));
  for (int first = 0; first + tp <= n; first += tp) {
    double pace = 1.0;
    for (int r = first; r < first + tp; ++r) {
      const auto it = speed.find(gpus[static_cast<size_t>(r)]);
      if (it != speed.end())
        pace = std::min(pace, it->second);
    }
    if (pace < 1.0)
      for (int r = first; r < first + tp; ++r)
        paced[gpus[static_cast<size_t>(r)]] = pace;
  }
  if (paced.empty())
    return std::nullopt;
  ClusterSpec out = cluster;
  std::erase_if(out.degraded.gpus,
                [&](const DegradedSpec::Gpu& g) { return paced.contains(g.node * per_node + g.gpu); });
  for (const auto& [gpu, pace] : paced)
    out.degraded.gpus.push_back(DegradedSpec::Gpu{
        .node = gpu / per_node, .gpu = gpu % per_node, .speed = pace, .where = "the pace of its TP group"});
  return out;
}

std::pair<int, int> sampled_units(const graph::StepProgram& program) {
  const int unit = std::max(1, program.replica_unit);
  std::set<int> simulated;
  for (const graph::Rank r : program.simulated_ranks)
    simulated.insert(program.grid.dp_of(r) / unit);
  return {static_cast<int>(simulated.size()), (program.grid.dp + unit - 1) / unit};
}

namespace {

/// Sampled replicas (training.variability.replicas) stand for alike ones: refused where the
/// replicas differ otherwise than by their noise (docs/variability.md, "Sampled replicas").
void refuse_sampled_replicas(const ClusterSpec& cluster, const WorkloadSpec& workload,
                             const SimulateOptions& options) {
  const auto refuse = [&](const std::string& why) {
    throw ConfigError(workload.source + ": key 'training.variability.replicas': " + why +
                      "; omit the key to simulate every replica");
  };
  if (!topology::degraded_ranks(cluster, workload.num_gpus()).empty() || topology::network_degraded(cluster))
    refuse("the simulated replicas stand for alike ones, and " + cluster.source +
           "'s degraded section makes some differ");
  if (!non_blocking(cluster))
    refuse("the simulated replicas stand for alike ones, and " + cluster.source +
           "'s oversubscribed fabric places replicas unlike each other");
  if (!options.replica_class.empty())
    refuse("not with several jobs on one fabric (stepsim jobs), whose replicas are placed unlike each other");
}

} // namespace

StepSetup prepare_step(const ClusterSpec& cluster, const WorkloadSpec& workload,
                       const SimulateOptions& options) {
  StepSetup setup;
  const std::shared_ptr<const kernels::KernelTable> table = load_kernel_table(cluster);
  // With noise no two GPUs are alike: every rank is simulated (docs/variability.md), unless the
  // workload samples its replicas ("Sampled replicas").
  const bool noisy = kernel_cv(cluster, workload) > 0;
  const int sampled = noisy ? workload.training.variability.replicas : 0;
  if (sampled > 0)
    refuse_sampled_replicas(cluster, workload, options);
  const bool fold_dp = options.fold_dp && (!noisy || sampled > 0);
  // Symmetry sampling, and one rank per EP group, where every node sees the same traffic
  // (docs/engine.md, docs/moe.md "Folding").
  // A degraded cluster (docs/degraded.md): the units holding a degraded rank are simulated too.
  // Slower GPUs leave the network symmetric (a collective's flows all start when it does), so
  // sampling stays; a degraded NIC, leaf or link turns it off (the nodes no longer all see the
  // same traffic). One rank per EP group stands for its group only when all ranks are alike.
  std::vector<graph::Rank> distinct = topology::degraded_ranks(cluster, workload.num_gpus());
  const bool symmetric =
      fold_dp && options.sample_collectives && non_blocking(cluster) && !topology::network_degraded(cluster);
  const bool fold_ep = symmetric && workload.parallel.ep > 1 && distinct.empty() && sampled == 0;
  // On an oversubscribed fabric the replicas' pipeline sends share the uplinks: one replica per
  // class of placement, the others' sends copied (as `stepsim jobs` folds, docs/engine.md).
  std::vector<int> classes = options.replica_class;
  if (fold_dp && classes.empty() && !non_blocking(cluster)) {
    // The job's k-th node: the k-th that is up (ClusterSpec::up_nodes).
    std::vector<int> nodes = cluster.up_nodes();
    nodes.resize(std::min(nodes.size(), static_cast<size_t>(workload.num_gpus() / cluster.gpus_per_node)));
    classes = placement_classes(cluster, workload.parallel, {nodes}, 0);
  }
  // One rank per TP group where its TP ranks' other traffic cannot meet the simulated rank's:
  // the group inside one NVSwitch node, a NIC per GPU, a symmetric network (a replica with a slow
  // GPU in a group smaller than its node keeps every rank; docs/engine.md, "Folding TP").
  const ParallelSpec& par = workload.parallel;
  const bool fold_tp = options.fold_tp && symmetric && classes.empty() && sampled == 0 && par.tp > 1 &&
                       par.ep == 1 && par.cp == 1 && cluster.gpus_per_node % par.tp == 0 &&
                       cluster.intra == IntraNodeKind::NVSWITCH &&
                       cluster.nics_per_node >= cluster.gpus_per_node;
  // A TP group holding a slow GPU runs at that GPU's pace: each TP collective waits for it. With
  // one rank per TP group filling its node (no other group's traffic crosses its NVLink ports
  // while its healthy members are ahead), the group is replayed at its slowest member's speed on
  // every member, so it folds like the others (docs/degraded.md, "Folding").
  if (fold_tp && !distinct.empty() && par.tp == cluster.gpus_per_node) {
    setup.replayed_cluster = paced_tp_groups(cluster, par.tp, workload.num_gpus());
    if (setup.replayed_cluster)
      distinct = topology::degraded_ranks(*setup.replayed_cluster, workload.num_gpus());
  }
  // On a symmetric network the units holding slow GPUs at the same places and speeds are alike:
  // one of them is simulated (graph::BuildOptions::distinct_kind).
  std::vector<int> kinds;
  if (symmetric && !distinct.empty()) {
    const ClusterSpec& replayed = setup.replayed_cluster ? *setup.replayed_cluster : cluster;
    const std::vector<int> gpus = topology::rank_gpus(replayed);
    const int per_node = std::max(1, replayed.gpus_per_node);
    std::map<double, int> kind_of;
    for (graph::Rank r : distinct) {
      const int gpu = gpus.at(static_cast<size_t>(r));
      const double speed = topology::gpu_speed(replayed, gpu / per_node, gpu % per_node);
      kinds.push_back(kind_of.emplace(speed, static_cast<int>(kind_of.size())).first->second);
    }
  }
  graph::BuildOptions build{.fold_dp = fold_dp,
                            .fold_ep = fold_ep,
                            .fold_tp = fold_tp,
                            .gpus_per_node = cluster.gpus_per_node,
                            .compute_time = compute_time_model(cluster, workload, table),
                            .pass_overhead = cluster.gpu.pass_overhead,
                            .list_collective_per_rank = list_collective_per_rank(cluster, table.get()),
                            .host_bandwidth = cluster.gpu.host_bandwidth,
                            .distinct_ranks = std::move(distinct),
                            .distinct_kind = std::move(kinds),
                            .replica_class = std::move(classes),
                            .sampled_units = fold_dp ? sampled : 0};
  setup.program = graph::build_step(workload, build);
  if (sampled > 0 && sampled_units(setup.program).second <= sampled) {
    // As many units sampled as the job holds: every one is simulated, exactly as without sampling.
    WorkloadSpec whole = workload;
    whole.training.variability.replicas = 0;
    return prepare_step(cluster, whole, options);
  }
  setup.replay = engine::ReplayOptions{.collective_form = options.collective_form,
                                       .algorithms = workload.collectives,
                                       .overlap_slowdown = overlap_slowdown(cluster, table.get())};
  if (symmetric)
    setup.replay.sample_above_ranks = SAMPLE_ABOVE_RANKS;
  setup.replay.sample_ep = fold_ep;
  setup.replay.sample_tp = fold_tp;
  // A TP group filling its node: nothing else crosses its GPUs' NVLink ports.
  setup.replay.sample_tp_sends = fold_tp && par.tp == cluster.gpus_per_node;
  if (workload.parallel.ep_dispatch == EpDispatch::DEDUPLICATED)
    setup.replay.ep_dedup = {.experts = workload.model.moe.experts,
                             .top_k = workload.model.moe.top_k,
                             .groups = workload.model.moe.routing.groups,
                             .group_top_k = workload.model.moe.routing.group_top_k};
  return setup;
}

engine::ReplayResult run_replay(engine::Replay& replay) {
  try {
    return replay.run();
  } catch (const engine::AlgorithmNotApplicable& e) {
    // The algorithm was forced by the workload's `collectives` map: bad input, named by its key.
    throw ConfigError("workload key 'collectives." + std::string(graph::to_string(e.group())) +
                      "' = " + std::string(collectives::to_string(e.algorithm())) + ": cannot run " +
                      std::string(to_string(e.op())) + " over the " + std::to_string(e.ranks()) +
                      " GPUs of this group (docs/collectives.md lists what each algorithm runs; auto "
                      "picks one that can)");
  }
}

Simulation simulate(const ClusterSpec& cluster, const WorkloadSpec& workload,
                    const SimulateOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  Simulation sim;
  StepSetup setup = prepare_step(cluster, workload, options);
  sim.program = std::move(setup.program);
  const auto t_built = std::chrono::steady_clock::now();
  const graph::StepsOptions steps{.steps = options.steps,
                                  .kernel_cv = kernel_cv(cluster, workload),
                                  .seed = static_cast<uint64_t>(workload.training.variability.seed)};
  const bool noisy = steps.kernel_cv > 0;
  const bool series = noisy || options.steps != 1;
  // Several steps, or noisy ones: one DAG of the steps in a row (graph::repeat_steps).
  const graph::StepProgram chained = series ? graph::repeat_steps(sim.program, steps) : graph::StepProgram{};
  const graph::StepProgram& replayed = series ? chained : sim.program;
  engine::Replay replay(replayed, setup.replayed_cluster ? *setup.replayed_cluster : cluster, setup.replay);
  if (options.progress) {
    const std::size_t total = replayed.graph.size();
    replay.subscribe([&options, total, done = std::size_t{0}](const engine::TaskEvent&) mutable {
      options.progress(++done, total);
    });
  }
  sim.result = run_replay(replay);
  const auto t_replayed = std::chrono::steady_clock::now();
  std::optional<report::Variability> variability;
  if (series) {
    // The outputs describe the first step: its tasks, its draws, its times.
    graph::StepSeries s = graph::step_series(sim.program, options.steps, sim.result.end);
    sim.result.step_time = s.step_times.front();
    // Sampled replicas: every step also waits for the slowest of the replicas not simulated.
    std::optional<report::Variability::Sampled> sampled;
    if (const auto [simulated, units] = sampled_units(sim.program); noisy && simulated < units) {
      sampled = report::sampled_wait(graph::replica_times(sim.program, options.steps, sim.result.end), units);
      for (Seconds& t : s.step_times)
        t += sampled->wait;
    }
    if (noisy)
      sim.program = graph::noisy_step(sim.program, steps, 0);
    const size_t n = sim.program.graph.size();
    sim.result.start.resize(n);
    sim.result.end.resize(n);
    sim.result.algorithm.resize(n);
    variability = report::variability_of(s, steps.kernel_cv, workload.training.variability.seed);
    variability->sampled = sampled;
  }
  sim.summary = report::summarize(sim.program, sim.result.start, sim.result.end, cluster, workload);
  sim.summary.variability = std::move(variability);
  const auto t_end = std::chrono::steady_clock::now();
  sim.wall_s = std::chrono::duration<double>(t_end - t0).count();
  const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  log().debug("runner: build {:.3f} s ({} tasks), replay {:.3f} s, summary {:.3f} s (wall)",
              seconds(t0, t_built), sim.program.graph.size(), seconds(t_built, t_replayed),
              seconds(t_replayed, t_end));
  return sim;
}

} // namespace stepsim::runner
