#include "graph/step_builder.hpp"

#include "core/error.hpp"
#include "graph/block_costs.hpp"
#include "graph/dp_emitter.hpp"
#include "graph/emit.hpp"
#include "graph/moe_cp_emitter.hpp"
#include "graph/pp_emitter.hpp"
#include "graph/rank_streams.hpp"
#include "graph/schedule.hpp"
#include "graph/stage_passes.hpp"
#include "graph/tp_emitter.hpp"

#include <algorithm>
#include <cstdio>

namespace stepsim::graph {

namespace {

using detail::StepShape;

/// The units (blocks of `unit` consecutive replicas) simulated: the first, and with distinct
/// ranks each unit holding one, plus the first unit without one standing for the rest. With
/// kinds, a unit whose distinct ranks sit at the same places with the same kinds as an earlier
/// unit's is alike to it and not simulated.
void fold_distinct(StepShape& s, const std::vector<Rank>& distinct_ranks, const std::vector<int>& kinds,
                   int unit) {
  const RankGrid& grid = s.grid;
  if (!kinds.empty() && kinds.size() != distinct_ranks.size())
    throw ModelError("graph: distinct_kind holds " + std::to_string(kinds.size()) + " kinds for " +
                     std::to_string(distinct_ranks.size()) + " distinct ranks");
  const size_t units = static_cast<size_t>((grid.dp + unit - 1) / unit);
  // Per unit: (place in the unit, kind) of its distinct ranks; the place is the rank less the
  // unit's first rank at that stage (ranks run t + tp * (d + dp * p)).
  std::vector<std::vector<std::pair<Rank, int>>> marks(units);
  for (size_t i = 0; i < distinct_ranks.size(); ++i) {
    const Rank r = distinct_ranks[i];
    if (r < 0 || r >= grid.size())
      continue;
    const size_t u = static_cast<size_t>((r / grid.tp) % grid.dp / unit);
    const Rank place = r - grid.rank(static_cast<int>(u) * unit, grid.pp_of(r), 0);
    marks[u].emplace_back(grid.pp_of(r) * grid.tp * grid.dp + place,
                          kinds.empty() ? static_cast<int>(u) : kinds[i]);
  }
  std::vector<std::vector<std::pair<Rank, int>>> met; // the simulated units' marks
  for (size_t u = 0; u < units; ++u) {
    std::sort(marks[u].begin(), marks[u].end());
    if (std::find(met.begin(), met.end(), marks[u]) != met.end())
      continue;
    met.push_back(marks[u]);
    for (int d = static_cast<int>(u) * unit; d < std::min(grid.dp, static_cast<int>(u + 1) * unit); ++d)
      s.replicas.push_back(d);
  }
}

/// BuildOptions::replica_class: the first unit of each class simulated, the other units'
/// replicas copying the sends of the replica at the same place in it.
void fold_by_class(StepShape& s, const std::vector<int>& replica_class, int unit) {
  const int dp = s.grid.dp;
  if (replica_class.size() != static_cast<size_t>(dp))
    throw ModelError("graph: replica_class holds " + std::to_string(replica_class.size()) +
                     " classes for the step's " + std::to_string(dp) + " DP replicas");
  std::vector<std::pair<int, int>> first_unit; // (class, its first unit), in the order met
  s.copied.assign(static_cast<size_t>(dp), {});
  for (int u = 0; u * unit < dp; ++u) {
    const int cls = replica_class[static_cast<size_t>(u * unit)];
    for (int d = u * unit; d < std::min(dp, (u + 1) * unit); ++d)
      if (replica_class[static_cast<size_t>(d)] != cls)
        throw ModelError("graph: replicas " + std::to_string(u * unit) + " and " + std::to_string(d) +
                         " are folded together but given different classes");
    const auto met = std::find_if(first_unit.begin(), first_unit.end(),
                                  [cls](const std::pair<int, int>& f) { return f.first == cls; });
    if (met == first_unit.end()) {
      first_unit.emplace_back(cls, u);
      for (int d = u * unit; d < std::min(dp, (u + 1) * unit); ++d)
        s.replicas.push_back(d);
      continue;
    }
    for (int d = u * unit; d < std::min(dp, (u + 1) * unit); ++d)
      s.copied[static_cast<size_t>(met->second * unit + d - u * unit)].push_back(d);
  }
}

/// The simulated replicas and what is folded. Folded: all CP ranks of one EP group, or of one
/// EP rank with fold_ep (docs/moe.md); without experts, CP index 0 alone, the other CP ranks'
/// ring and pipeline sends copying its own, where every ring hop is alike: between nodes (one TP
/// group per node) or inside one node (docs/engine.md).
StepShape shape_of(const WorkloadSpec& w, const BuildOptions& o) {
  const ParallelSpec& par = w.parallel;
  StepShape s{.workload = w,
              .grid = RankGrid{par.tp, par.pp, par.dp * par.cp, par.cp, par.ep, par.expert_tp()},
              .micro_batches = static_cast<int>(w.micro_batches())};
  const RankGrid& grid = s.grid;
  const int node = o.gpus_per_node;
  // ZeRO-3 hybrid sharding (parallel.dp_shard): each shard group of `shard` DP indices gathers and
  // reduce-scatters on its own. Inside one node its traffic loads only that node's links, so the
  // first group is simulated for all (the all-reduces of a shard position span the others, as a
  // folded DP collective does); a group spanning nodes shares NICs and switches with the others,
  // and every replica is simulated.
  const bool hybrid = par.zero_stage >= 3 && par.shard_group() < par.dp;
  const int shard = par.shard_group() * grid.cp;
  const bool fold_dp = o.fold_dp && (!hybrid || (node > 0 && node % (grid.tp * shard) == 0));
  const bool classes = fold_dp && !o.replica_class.empty();
  const bool sampled = fold_dp && !classes && o.sampled_units > 0;
  const bool alike = o.distinct_ranks.empty() && !classes && !sampled;
  const bool fold_ep = o.fold_ep && alike;
  const bool alike_hops = node > 0 && (grid.tp == node || node % (grid.tp * grid.cp) == 0);
  s.fold_cp = fold_dp && !hybrid && alike && grid.cp > 1 && grid.ep == 1 && !grid.folded() && alike_hops;
  int unit = s.fold_cp ? 1 : !fold_dp ? grid.dp : hybrid ? shard : grid.cp * (fold_ep ? 1 : grid.ep);
  if (fold_dp && !fold_ep && grid.folded()) {
    // Expert groups folded over the TP ranks: the first replicas (whole CP groups) whose GPUs
    // make up whole EP groups, etp*ep consecutive GPUs of a stage.
    unit = grid.cp;
    while ((grid.tp * unit) % (grid.etp * grid.ep) != 0 && unit < grid.dp)
      unit += grid.cp;
  }
  s.unit = unit;
  if (classes) {
    fold_by_class(s, o.replica_class, unit);
  } else if (sampled) {
    for (int d = 0; d < std::min(grid.dp, o.sampled_units * unit); ++d)
      s.replicas.push_back(d);
  } else {
    fold_distinct(s, o.distinct_ranks, o.distinct_kind, unit);
    if (s.fold_cp) {
      s.copied.assign(static_cast<size_t>(grid.dp), {});
      for (int c = 1; c < grid.cp; ++c)
        s.copied.front().push_back(c);
    }
  }
  s.zero = par.zero_stage;
  s.sp = par.sp && grid.tp > 1;
  // One rank per TP group (BuildOptions::fold_tp): a dense model whose replicas fold alike.
  // A replica with a TP group only partly distinct keeps every rank.
  s.fold_tp = o.fold_tp && fold_dp && !classes && !sampled && grid.ep == 1 && grid.cp == 1 && grid.tp > 1;
  s.whole_tp.assign(static_cast<size_t>(grid.dp), false);
  std::vector<int> distinct_in_group(static_cast<size_t>(grid.size() / grid.tp), 0);
  for (Rank r : o.distinct_ranks)
    if (r >= 0 && r < grid.size())
      ++distinct_in_group[static_cast<size_t>(r / grid.tp)];
  for (size_t group = 0; group < distinct_in_group.size(); ++group)
    if (distinct_in_group[group] != 0 && distinct_in_group[group] != grid.tp)
      s.whole_tp[static_cast<size_t>(grid.dp_of(static_cast<Rank>(group) * grid.tp))] = true;
  s.vp = par.chunks_per_stage();
  s.split = splits_backward(par.schedule);
  return s;
}

/// The graph has a few tasks per layer, pass and simulated GPU (about 2.5 measured without
/// context parallelism; the ring attention of cp ranks adds its steps: about 5 at cp 2 and 9 at
/// cp 4, bounded here by 3 cp; cp^2 + 3 when the other CP ranks' sends are copied in full).
/// Refuses one that could not be held in memory before allocating any of it: a typo such as
/// 10^9 layers, or cp 8 on a long pipeline, would otherwise exhaust the machine's memory.
void refuse_oversized(const StepShape& s) {
  constexpr double kMaxLayerPasses = 1e7; // at 3 tasks each: ~3e7 tasks, ~8 GB
  const RankGrid& grid = s.grid;
  const ParallelSpec& par = s.workload.parallel;
  const double per_gpu = static_cast<double>(s.workload.model.layers) * s.vp / par.model_chunks();
  const double passes = static_cast<double>(s.micro_batches) * (s.split ? 3.0 : 2.0);
  double gpus = 0;
  for (int d : s.replicas)
    gpus += static_cast<double>(grid.pp) * s.tp_simulated(d);
  const double layer_passes = per_gpu * passes * gpus;
  // Tasks per layer pass, an upper bound: with folded CP and no sampling, the other CP ranks'
  // ring sends are copied too (cp - 1 steps of cp sends).
  const double cp = grid.cp;
  const double per_pass = s.fold_cp ? cp * cp + 3.0 : 3.0 * cp;
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

/// Emits the step in the order it runs: each stage's TP groups' passes (compute, TP, ZeRO-3 and
/// gradient buckets, MoE and CP blocks), the pipeline sends between them, the CP rings, the end
/// of step's gradient synchronization, and the optimizer.
class Builder {
public:
  Builder(const WorkloadSpec& w, const BuildOptions& o)
      : o_(o), shape_(shape_of(w, o)), streams_(g_, shape_.grid.size()),
        costs_(w, o.compute_time, shape_.split),
        moe_cp_({.shape = shape_,
                 .representative_ep = o.fold_dp && o.fold_ep && o.distinct_ranks.empty(),
                 .graph = g_,
                 .streams = streams_,
                 .costs = costs_}),
        tp_({.shape = shape_, .graph = g_, .streams = streams_, .costs = costs_, .moe_cp = moe_cp_}),
        dp_({.shape = shape_, .graph = g_, .streams = streams_, .moe_cp = moe_cp_}) {}

  StepProgram build() {
    const RankGrid& grid = shape_.grid;
    for (int p = 0; p < grid.pp; ++p)
      for (int d : shape_.replicas)
        detail::StagePasses({.shape = shape_,
                             .build = o_,
                             .graph = g_,
                             .streams = streams_,
                             .costs = costs_,
                             .tp = tp_,
                             .dp = dp_,
                             .moe_cp = moe_cp_},
                            d, p)
            .build();
    detail::emit_pp_sends({.shape = shape_, .graph = g_, .streams = streams_, .tp = tp_, .moe_cp = moe_cp_});
    moe_cp_.finish();
    dp_.grad_sync();
    for (int p = 0; p < grid.pp; ++p)
      for (int t = 0; t < grid.tp; ++t)
        dp_.optimizer(p, t, o_.compute_time);
    g_.finalize();

    StepProgram out;
    out.grid = grid;
    out.micro_batches = shape_.micro_batches;
    out.replica_unit = shape_.unit;
    for (int p = 0; p < grid.pp; ++p)
      for (int d : shape_.replicas)
        for (int t = 0; t < shape_.tp_simulated(d); ++t)
          out.simulated_ranks.push_back(grid.rank(d, p, t));
    std::sort(out.simulated_ranks.begin(), out.simulated_ranks.end());
    out.graph = std::move(g_);
    return out;
  }

private:
  const BuildOptions& o_;
  StepShape shape_;
  StepGraph g_;
  detail::RankStreams streams_;
  detail::BlockCosts costs_;
  detail::MoeCpEmitter moe_cp_;
  detail::TpEmitter tp_;
  detail::DpEmitter dp_;
};

} // namespace

StepProgram build_step(const WorkloadSpec& w, const BuildOptions& options) {
  if (!options.compute_time)
    throw ModelError("build_step: BuildOptions.compute_time is required");
  if (w.parallel.dp < 1 || w.micro_batches() < 1)
    throw ModelError("build_step: layout not checked (dp or micro-batches < 1)");
  const StepShape shape = shape_of(w, options);
  refuse_oversized(shape);
  return Builder(w, options).build();
}

} // namespace stepsim::graph
