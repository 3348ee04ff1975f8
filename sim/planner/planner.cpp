#include "planner/planner.hpp"

#include "config/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "model/memory.hpp"
#include "model/transformer.hpp"
#include "runner/simulate.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>

namespace stepsim::planner {

namespace {

/// Per-candidate diagnostics describe() the layout: only build the line when it is shown.
bool debug_log() {
  return log().should_log(spdlog::level::debug);
}

double gib(Bytes b) {
  return b.value() / (1024.0 * 1024.0 * 1024.0);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int> divisors(int64_t n, int64_t limit) {
  std::vector<int> out;
  for (int64_t k = 1; k <= std::min(n, limit); ++k)
    if (n % k == 0)
      out.push_back(static_cast<int>(k));
  return out;
}

bool same_layout(const WorkloadSpec& a, const WorkloadSpec& b) {
  const ParallelSpec &x = a.parallel, &y = b.parallel;
  return x.tp == y.tp && x.pp == y.pp && x.dp == y.dp && x.cp == y.cp && x.ep == y.ep &&
         x.expert_tp() == y.expert_tp() && x.vp == y.vp && x.schedule == y.schedule && x.sp == y.sp &&
         x.zero_stage == y.zero_stage && x.dp_shard == y.dp_shard &&
         a.training.reshard_after_forward == b.training.reshard_after_forward &&
         a.batch.micro_batch == b.batch.micro_batch &&
         a.training.recompute == b.training.recompute; // offloading is what the planner adds to make it fit
}

/// The ZeRO-3 sharding variants of a candidate, (parallel.dp_shard, training.reshard_after_forward):
/// other stages (0, true). The workload's hybrid sharding and kept gathers apply where they are
/// modelled (shard groups dividing the candidate's dp; kept gathers with a dense model and, with a
/// pipeline, a schedule that does not split the backward); with SearchSpace::vary_sharding also
/// sharding over all of DP, shard groups of the replicas one node holds (HSDP as PyTorch's
/// HYBRID_SHARD sets it up), and each with its gathers kept (check_layout drops what a layout
/// cannot run: blocking fetch).
std::vector<std::pair<int, bool>> zero3_sharding(const ClusterSpec& cluster, const WorkloadSpec& base,
                                                 const SearchSpace& space, int zero, int tp, int cp, int pp,
                                                 int dp, Schedule schedule) {
  if (zero != 3)
    return {{0, true}};
  const int stated =
      base.parallel.dp_shard > 0 && dp % base.parallel.dp_shard == 0 ? base.parallel.dp_shard : 0;
  const bool can_keep = !base.model.moe.enabled() && (pp == 1 || !splits_backward(schedule));
  const bool kept = !base.training.reshard_after_forward && can_keep;
  if (!space.vary_sharding)
    return {{stated, !kept}};
  std::vector<int> shards{0};
  const int node = cluster.gpus_per_node;
  if (node % (tp * cp) == 0) {
    const int per_node = node / (tp * cp);
    if (per_node > 1 && per_node < dp && dp % per_node == 0)
      shards.push_back(per_node);
  }
  if (stated > 0 && std::find(shards.begin(), shards.end(), stated) == shards.end())
    shards.push_back(stated);
  std::vector<std::pair<int, bool>> out;
  for (const int shard : shards) {
    out.emplace_back(shard, true);
    if (can_keep)
      out.emplace_back(shard, false);
  }
  return out;
}

} // namespace

std::string schedule_name(Schedule s) {
  switch (s) {
  case Schedule::GPIPE:
    return "gpipe";
  case Schedule::ONE_F_ONE_B:
    return "1f1b";
  case Schedule::INTERLEAVED:
    return "interleaved";
  case Schedule::ZB_H1:
    return "zb-h1";
  case Schedule::ZB_H2:
    return "zb-h2";
  case Schedule::DUALPIPE:
    return "dualpipe";
  case Schedule::DUALPIPE_V:
    return "dualpipev";
  }
  return "?";
}

std::string recompute_name(const TrainingSpec& t) {
  switch (t.recompute) {
  case Recompute::NONE:
    return "none";
  case Recompute::FULL:
    return t.recompute_layers > 0 ? "full[" + std::to_string(t.recompute_layers) + " per chunk]" : "full";
  case Recompute::SELECTIVE:
    break;
  }
  if (t.recompute_modules == RecomputeModules{})
    return "selective";
  std::string modules;
  const RecomputeModules& m = t.recompute_modules;
  for (const auto& [on, name] :
       {std::pair{m.core_attn, "core_attn"}, std::pair{m.layernorm, "layernorm"}, std::pair{m.mlp, "mlp"},
        std::pair{m.moe_act, "moe_act"}, std::pair{m.mla_up_proj, "mla_up_proj"},
        std::pair{m.alternate_linears, "alternate_linears"}})
    if (on)
      modules += (modules.empty() ? "" : ",") + std::string(name);
  return "selective[" + modules + "]";
}

std::string describe(const WorkloadSpec& w) {
  const ParallelSpec& p = w.parallel;
  return "tp" + std::to_string(p.tp) + (p.cp > 1 ? " cp" + std::to_string(p.cp) : std::string()) + " pp" +
         std::to_string(p.pp) + " dp" + std::to_string(p.dp) +
         (p.ep > 1 ? " ep" + std::to_string(p.ep) : std::string()) +
         (p.folds_experts() ? " etp" + std::to_string(p.etp) : std::string()) +
         (p.ep_overlap ? " ep_overlap" : "") + " vp" + std::to_string(p.vp) + " mb" +
         std::to_string(w.batch.micro_batch) + " zero" + std::to_string(p.zero_stage) +
         (p.zero_stage >= 3 && p.shard_group() < p.dp ? " shard" + std::to_string(p.dp_shard)
                                                      : std::string()) +
         (p.zero_stage >= 3 && !w.training.reshard_after_forward ? " kept" : "") + " " +
         recompute_name(w.training) +
         (w.training.offload_layers > 0 ? " offload" + std::to_string(w.training.offload_layers)
                                        : std::string()) +
         (p.sp ? " sp" : "") + " " + schedule_name(p.schedule);
}

std::vector<WorkloadSpec> enumerate_layouts(const ClusterSpec& cluster, const WorkloadSpec& base,
                                            const SearchSpace& space) {
  const int64_t gpus = static_cast<int64_t>(cluster.up_nodes().size()) * cluster.gpus_per_node; // nodes up
  const int64_t max_tp = space.max_tp > 0 ? space.max_tp : 2 * static_cast<int64_t>(cluster.gpus_per_node);
  const std::vector<Recompute> recomputes =
      space.vary_recompute ? std::vector<Recompute>{Recompute::NONE, Recompute::SELECTIVE, Recompute::FULL}
                           : std::vector<Recompute>{base.training.recompute};
  std::vector<WorkloadSpec> out;
  const auto accepted = [&](WorkloadSpec& w) { // invalid layouts are never proposed
    try {
      w = config::check_layout(cluster, w).workload;
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  // Context parallelism: the workload's, or for long sequences (SearchSpace::vary_cp) every cp up
  // to max_cp that divides the GPUs; a model replica is tp*cp*pp GPUs.
  std::vector<int> cps{std::max(1, base.parallel.cp)};
  if (space.vary_cp && (base.parallel.cp > 1 || base.model.seq_len >= space.cp_from_seq_len))
    cps = divisors(gpus, space.max_cp);
  for (const int cp : cps) {
    if (gpus % cp != 0)
      continue;
    for (int tp : divisors(gpus / cp, max_tp)) {
      for (int pp : divisors(gpus / cp / tp, base.model.layers)) {
        const int dp = static_cast<int>(gpus / (cp * tp * pp));
        for (int64_t mb : space.micro_batches) {
          if (mb < 1 || base.batch.global_batch % (mb * dp) != 0)
            continue;
          const int64_t m = base.batch.global_batch / (mb * dp);
          // Schedules (with their vp) to try.
          std::vector<std::pair<Schedule, int>> schedules;
          if (!space.vary_schedule) {
            schedules.emplace_back(base.parallel.schedule, base.parallel.vp);
          } else if (pp == 1) {
            schedules.emplace_back(Schedule::ONE_F_ONE_B, 1);
          } else {
            for (Schedule s : {Schedule::GPIPE, Schedule::ONE_F_ONE_B, Schedule::ZB_H1, Schedule::ZB_H2})
              schedules.emplace_back(s, 1);
            // DualPipe and DualPipeV exist to hide the expert all-to-alls: MoE models only
            // (check_layout drops the layouts whose pp or micro-batches they cannot run).
            if (base.model.moe.enabled())
              for (Schedule s : {Schedule::DUALPIPE, Schedule::DUALPIPE_V})
                schedules.emplace_back(s, 1);
            if (m % pp == 0)
              for (int vp = 2; vp <= space.max_vp; ++vp)
                if (base.model.layers % (static_cast<int64_t>(pp) * vp) == 0)
                  schedules.emplace_back(Schedule::INTERLEAVED, vp);
          }
          // Expert parallelism (MoE): every ep dividing both dp and the experts; with the workload's
          // etp below tp (folded expert groups), every ep dividing tp*cp*dp/etp and the experts.
          std::vector<int> eps{base.parallel.ep};
          if (space.vary_ep && base.model.moe.enabled()) {
            eps.clear();
            const int etp = base.parallel.etp;
            const int64_t pool = etp > 0 && etp < tp && tp % etp == 0
                                     ? static_cast<int64_t>(tp) * cp * dp / etp
                                     : static_cast<int64_t>(dp);
            for (int e : divisors(pool, base.model.moe.experts))
              if (base.model.moe.experts % e == 0)
                eps.push_back(e);
          }
          std::vector<bool> sps =
              space.vary_sp ? std::vector<bool>{false, true} : std::vector<bool>{base.parallel.sp};
          std::vector<int> zeros =
              space.vary_zero ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{base.parallel.zero_stage};
          for (bool sp : sps) {
            if (sp && tp == 1)
              continue;
            for (int zero : zeros) {
              if (zero > 0 && dp == 1 && space.vary_zero)
                continue; // ZeRO over one rank is ZeRO-0
              for (Recompute rc : recomputes)
                for (const auto& [schedule, vp] : schedules)
                  for (int ep : eps) {
                    WorkloadSpec w = base;
                    w.parallel.cp = cp;
                    w.parallel.ep = ep;
                    w.parallel.tp = tp;
                    w.parallel.pp = pp;
                    w.parallel.dp = dp;
                    w.parallel.vp = vp;
                    w.parallel.schedule = schedule;
                    // The workload's uneven chunks fit its own pp*vp only: others split evenly.
                    if (static_cast<int64_t>(pp) * vp !=
                        static_cast<int64_t>(base.parallel.pp) * std::max(1, base.parallel.vp))
                      w.parallel.chunk_layers.clear();
                    w.parallel.sp = sp;
                    w.parallel.zero_stage = zero;
                    // A varied key is the candidate's own: a training stack does not reset it.
                    if (space.vary_sp)
                      w.stack.set_by_caller(StackKey::SP);
                    if (space.vary_zero)
                      w.stack.set_by_caller(StackKey::ZERO_STAGE);
                    // The workload's overlap_param_gather applies to the distributed optimizer's
                    // stages (1, 2) only: other stages have no such all-gather.
                    if (zero != 1 && zero != 2)
                      w.training.overlap_param_gather = false;
                    w.batch.micro_batch = mb;
                    w.training.recompute = rc;
                    if (rc != Recompute::FULL) // the workload's recompute_layers belong to full recomputation
                      w.training.recompute_layers = 0;
                    for (const auto& [shard, reshard] :
                         zero3_sharding(cluster, base, space, zero, tp, cp, pp, dp, schedule)) {
                      WorkloadSpec v = w;
                      v.parallel.dp_shard = shard;
                      v.training.reshard_after_forward = reshard;
                      if (accepted(v))
                        out.push_back(std::move(v));
                    }
                  }
            }
          }
        }
      }
    }
  }
  return out;
}

Bytes peak_memory(const ClusterSpec& cluster, const WorkloadSpec& w) {
  return model::worst_static_peak(w, cluster.gpu);
}

bool fits_in_memory(const ClusterSpec& cluster, const WorkloadSpec& w) {
  return peak_memory(cluster, w) <= cluster.gpu.hbm_capacity && fits_host_memory(cluster, w);
}

Bytes memory_budget(const ClusterSpec& cluster, const SearchSpace& space) {
  return cluster.gpu.hbm_capacity * (1.0 - space.headroom);
}

bool fits_host_memory(const ClusterSpec& cluster, const WorkloadSpec& w) {
  if (cluster.gpu.host_memory.value() <= 0)
    return true;
  for (int s = 0; s < w.parallel.pp; ++s)
    if (model::offloaded_activations(w, s) > cluster.gpu.host_memory)
      return false;
  return true;
}

bool offload_to_fit(const ClusterSpec& cluster, WorkloadSpec& w, const SearchSpace& space, Bytes& peak) {
  if (!space.try_offload || cluster.gpu.host_bandwidth.value() <= 0 ||
      w.training.recompute != Recompute::NONE || w.training.offload_layers > 0)
    return false;
  // Each offloaded layer per chunk lowers the peak (the ledger is monotone in it): the first that
  // fits is the fewest. check_layout bounds it by the smallest chunk.
  for (int64_t n = 1;; ++n) {
    WorkloadSpec o = w;
    o.training.offload_layers = n;
    try {
      o = config::check_layout(cluster, o).workload;
    } catch (const Error&) {
      return false;
    }
    if (!fits_host_memory(cluster, o)) // more offloaded layers only need more of it
      return false;
    const Bytes p = peak_memory(cluster, o);
    if (p <= memory_budget(cluster, space)) {
      w = std::move(o);
      peak = p;
      return true;
    }
  }
}

void recompute_fewest(const ClusterSpec& cluster, WorkloadSpec& w, const SearchSpace& space, Bytes& peak) {
  if (!space.fewest_recomputed || w.training.recompute != Recompute::FULL || w.training.recompute_layers > 0)
    return;
  // The ledger grows with each layer not recomputed: the first count that fits is the fewest.
  int64_t smallest = w.model.layers;
  for (const int64_t c : model::chunk_layer_counts(w))
    if (c > 0)
      smallest = std::min(smallest, c);
  for (int64_t n = 1; n < smallest; ++n) {
    WorkloadSpec o = w;
    o.training.recompute_layers = n;
    const Bytes p = peak_memory(cluster, o);
    if (p <= memory_budget(cluster, space)) {
      w = std::move(o);
      peak = p;
      return;
    }
  }
}

size_t leader_count(const std::vector<Candidate>& ranked, const PlanOptions& options) {
  if (options.which == Simulate::ALL)
    return ranked.size();
  size_t n = std::min(ranked.size(), static_cast<size_t>(std::max(0, options.top)));
  if (n == 0)
    return 0;
  const double bound = ranked.front().estimate.step.value() * (1.0 + std::max(0.0, options.margin));
  while (n < ranked.size() && ranked[n].estimate.step.value() <= bound)
    ++n;
  return n;
}

PlanResult plan(const ClusterSpec& cluster, const WorkloadSpec& given, const PlanOptions& options) {
  PlanResult r;
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<WorkloadSpec> all = enumerate_layouts(cluster, given, options.space);
  r.enumerated = all.size();
  r.enumerate_s = seconds_since(t0);
  log().info("plan: {} layouts enumerated in {:.3f} s", r.enumerated, r.enumerate_s);

  t0 = std::chrono::steady_clock::now();
  const auto table = runner::load_kernel_table(cluster);
  // The estimate prices the host parts as the simulation does (the tensor-list floor).
  ClusterSpec priced = cluster;
  priced.gpu.list_collective_per_rank = runner::list_collective_per_rank(cluster, table.get());
  const auto rank = [&](const WorkloadSpec& w, Bytes peak, bool is_given) {
    const Estimate est = estimate_step(priced, w, runner::compute_time_model(cluster, w, table));
    r.ranked.push_back({w, est, peak, is_given});
    if (debug_log())
      log().debug("plan: estimated {}: step {:.6f} s, peak {:.2f} GiB", describe(w), est.step.value(),
                  gib(peak));
  };
  for (const WorkloadSpec& layout : all) {
    WorkloadSpec w = layout;
    Bytes peak = peak_memory(cluster, w);
    if ((peak > memory_budget(cluster, options.space) || !fits_host_memory(cluster, w)) &&
        !offload_to_fit(cluster, w, options.space, peak)) {
      if (debug_log())
        log().debug("plan: filtered out {}: static peak {:.2f} GiB of {:.2f} GiB HBM{}", describe(w),
                    gib(peak), gib(memory_budget(cluster, options.space)),
                    fits_host_memory(cluster, w) ? "" : ", host memory exceeded");
      continue;
    }
    ++r.fit;
    const bool is_given = same_layout(w, given);
    WorkloadSpec fewer = w;
    Bytes fewer_peak = peak;
    recompute_fewest(cluster, fewer, options.space, fewer_peak);
    if (fewer.training.recompute_layers == w.training.recompute_layers) {
      rank(w, peak, is_given);
      continue;
    }
    // The workload's own layout stays as given, beside its variant recomputing fewer layers.
    if (is_given)
      rank(w, peak, true);
    rank(fewer, fewer_peak, false);
  }
  std::stable_sort(r.ranked.begin(), r.ranked.end(),
                   [](const Candidate& a, const Candidate& b) { return a.estimate.step < b.estimate.step; });
  r.estimate_s = seconds_since(t0);
  log().info("plan: {} of {} layouts fit in memory, {} estimated in {:.3f} s", r.fit, r.enumerated,
             r.ranked.size(), r.estimate_s);

  const size_t top = std::min(r.ranked.size(), static_cast<size_t>(std::max(0, options.top)));
  r.leaders = leader_count(r.ranked, options);
  r.within_margin = options.which == Simulate::ALL ? 0 : r.leaders - top;
  r.simulated.assign(r.ranked.begin(), r.ranked.begin() + static_cast<std::ptrdiff_t>(r.leaders));
  if (options.include_given) {
    const bool listed =
        std::any_of(r.simulated.begin(), r.simulated.end(), [](const Candidate& c) { return c.given; });
    const auto it =
        std::find_if(r.ranked.begin(), r.ranked.end(), [](const Candidate& c) { return c.given; });
    if (!listed && it != r.ranked.end())
      r.simulated.push_back(*it);
  }
  if (!options.simulate)
    return r;
  t0 = std::chrono::steady_clock::now();
  std::vector<WorkloadSpec> specs;
  for (const Candidate& c : r.simulated)
    specs.push_back(c.workload);
  log().info("plan: simulating {} candidates, {} at once ({} leaders of {} estimated layouts)", specs.size(),
             std::max(1, options.jobs), r.leaders, r.ranked.size());
  r.outcomes = simulate_all(cluster, specs,
                            SimulateAllOptions{.jobs = options.jobs,
                                               .steps = options.steps,
                                               .extrapolate = options.extrapolate,
                                               .progress = options.progress});
  r.simulate_s = seconds_since(t0);
  for (size_t i = 0; i < r.outcomes.size() && debug_log(); ++i)
    log().debug("plan: simulated {}: {}", describe(specs[i]),
                r.outcomes[i].ok ? fmt::format("step {:.6f} s", r.outcomes[i].step_s) : r.outcomes[i].error);
  log().info("plan: simulations done in {:.3f} s", r.simulate_s);
  return r;
}

} // namespace stepsim::planner
