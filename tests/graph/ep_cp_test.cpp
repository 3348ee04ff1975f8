// Expert and context parallelism in the step DAG (docs/moe.md): the expert all-to-all payloads of
// MODEL.md §4, routing skew on the experts' compute, expert and dense gradient groups, the rank
// order, and the CP ring: per-GPU attention FLOPs / cp plus (cp-1) K,V sends per layer.

#include "graph/step_builder.hpp"
#include "model/memory.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"

#include "common/graph_checks.hpp"
#include "common/specs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

using namespace stepsim;
using graph::Block;
using graph::CollectiveOp;
using graph::CommGroup;
using graph::Phase;

namespace {

graph::StepProgram build(const WorkloadSpec& w, bool fold = true) {
  graph::BuildOptions o;
  o.fold_dp = fold;
  // Time proportional to FLOPs, so durations compare like FLOPs.
  o.compute_time = [](const graph::ComputeQuery& q) { return Seconds(q.flops.value() * 1e-15); };
  return graph::build_step(w, o);
}

/// A small Mixtral-like model: 4 layers, h 512, 8 experts of 1024, top-2.
WorkloadSpec moe(int tp, int pp, int dp, int ep, int64_t m) {
  ModelSpec model = test::small_gpt(4, 512, 256);
  model.mlp = MlpKind::SWIGLU;
  model.moe.experts = 8;
  model.moe.top_k = 2;
  model.moe.expert_ffn_hidden = 1024;
  WorkloadSpec w = test::workload(model, tp, pp, dp, m);
  w.parallel.ep = ep;
  return w;
}

} // namespace

// MODEL.md §4: per MoE layer per micro-batch, all-to-all dispatch and combine of b*s*k*h*2 bytes
// per GPU in forward and the same two in backward, over the EP group.
TEST(ExpertParallel, AllToAllBytesPerLayerAreBSKH2PerDirection) {
  WorkloadSpec w = moe(1, 2, 4, 4, 3);
  w.batch.micro_batch = 2;
  w.batch.global_batch = 2 * 4 * 3;
  const auto prog = build(w);
  const double expected = 2.0 * 256 * 2 * 512 * 2; // b*s*k*h*2
  std::map<std::pair<int, int>, int> per_layer_mb; // (layer, mb) -> all-to-alls
  for (const graph::Task& t : prog.graph.tasks()) {
    if (t.group != CommGroup::EP)
      continue;
    EXPECT_EQ(t.op, CollectiveOp::ALL_TO_ALL);
    EXPECT_EQ(t.stream, graph::Stream::EP_COMM);
    EXPECT_DOUBLE_EQ(t.bytes.value(), expected);
    EXPECT_EQ(t.ranks_count, 4u);
    if (prog.graph.participants(t).front() == t.rank && t.rank == prog.grid.rank(0, t.stage, 0))
      ++per_layer_mb[{t.layer, t.micro_batch}];
  }
  // 4 layers x 3 micro-batches, each with 2 forward + 2 backward all-to-alls.
  ASSERT_EQ(per_layer_mb.size(), 12u);
  for (const auto& [k, n] : per_layer_mb)
    EXPECT_EQ(n, 4) << "layer " << k.first << " mb " << k.second;
}

// EP subdivides DP: EP groups are ep consecutive DP ranks (same tp, pp); expert gradients are
// reduced over the dp/ep GPUs holding the same experts, dense gradients over all dp.
TEST(ExpertParallel, GroupsFollowMegatronOrder) {
  const WorkloadSpec w = moe(2, 1, 8, 4, 1);
  const auto prog = build(w, false);
  const graph::RankGrid& g = prog.grid;
  bool saw_expert_reduce = false, saw_dense_reduce = false;
  for (const graph::Task& t : prog.graph.tasks()) {
    if (t.kind != graph::TaskKind::COLLECTIVE)
      continue;
    const auto parts = prog.graph.participants(t);
    if (t.group == CommGroup::EP) {
      std::set<int> ep_index;
      for (graph::Rank r : parts) {
        EXPECT_EQ(g.tp_of(r), g.tp_of(parts.front()));
        EXPECT_EQ(g.dp_of(r) / 4, g.dp_of(parts.front()) / 4);
        ep_index.insert(g.ep_of(r));
      }
      EXPECT_EQ(ep_index.size(), 4u);
    } else if (t.group == CommGroup::DP && t.layer >= 0) {
      saw_expert_reduce = true;
      EXPECT_EQ(parts.size(), 2u); // dp / ep
      EXPECT_EQ(g.ep_of(parts[0]), g.ep_of(parts[1]));
      EXPECT_DOUBLE_EQ(t.bytes.value(), model::layer_params_at(w.model, t.layer, 2, 4, 2).expert * 2.0);
    } else if (t.group == CommGroup::DP && t.role == graph::CommRole::NONE) {
      saw_dense_reduce = true;
      EXPECT_EQ(parts.size(), 8u);
    }
  }
  EXPECT_TRUE(saw_expert_reduce);
  EXPECT_TRUE(saw_dense_reduce);
}

// ZeRO-3 with experts (FSDP with expert parallelism): per MoE layer, micro-batch and pass
// (forward, backward), the dense part (attention, norms, router) is all-gathered over all dp
// GPUs and the local experts over the dp/ep GPUs holding the same experts; the gradients are
// reduce-scattered over the same two groups every micro-batch. The layer's first layer on a
// stage also gathers the embedding, its last the output layer.
TEST(ExpertParallel, Zero3GathersExpertsOverTheirExpertDataParallelGroup) {
  WorkloadSpec w = moe(2, 1, 8, 4, 3); // tp 2, dp 8, ep 4: expert-data-parallel groups of 2
  w.parallel.zero_stage = 3;
  const auto prog = build(w, false);
  const graph::RankGrid& g = prog.grid;
  const double e = 2.0;
  // (op, layer, mb, phase, expert?) -> collectives of TP rank 0's groups
  std::map<std::tuple<int, int, int, int, bool>, int> seen;
  for (const graph::Task& t : prog.graph.tasks()) {
    if (t.kind != graph::TaskKind::COLLECTIVE || t.group != CommGroup::DP || t.layer < 0)
      continue;
    const auto parts = prog.graph.participants(t);
    const bool expert = parts.size() == 2u;
    if (expert) {
      EXPECT_EQ(g.ep_of(parts[0]), g.ep_of(parts[1]));
      EXPECT_EQ(g.tp_of(parts[0]), g.tp_of(parts[1]));
      EXPECT_DOUBLE_EQ(t.bytes.value(), model::layer_params_at(w.model, t.layer, 2, 4, 2).expert * e);
    } else {
      ASSERT_EQ(parts.size(), 8u);
      double dense = model::layer_params_at(w.model, t.layer, 2, 4, 2).dense;
      if (t.layer == 0)
        dense += model::embedding_params(w.model, 2);
      if (t.layer == w.model.layers - 1)
        dense += model::output_params(w.model, 2, 1);
      EXPECT_DOUBLE_EQ(t.bytes.value(), dense * e) << "layer " << t.layer;
    }
    if (t.op == CollectiveOp::ALL_GATHER) {
      EXPECT_DOUBLE_EQ(t.param_alloc.value(), t.bytes.value()) << "gathers hold what they bring";
    }
    if (g.tp_of(parts.front()) == 0 && (!expert || g.ep_of(parts.front()) == 0))
      ++seen[{static_cast<int>(t.op), t.layer, t.micro_batch, static_cast<int>(t.phase), expert}];
  }
  for (int layer = 0; layer < 4; ++layer)
    for (int mb = 0; mb < 3; ++mb)
      for (const bool expert : {false, true}) {
        const int ag = static_cast<int>(CollectiveOp::ALL_GATHER),
                  rs = static_cast<int>(CollectiveOp::REDUCE_SCATTER);
        const int fwd = static_cast<int>(Phase::FORWARD), bwd = static_cast<int>(Phase::BACKWARD);
        EXPECT_EQ((seen[{ag, layer, mb, fwd, expert}]), 1) << layer << " " << mb << " " << expert;
        EXPECT_EQ((seen[{ag, layer, mb, bwd, expert}]), 1) << layer << " " << mb << " " << expert;
        EXPECT_EQ((seen[{rs, layer, mb, bwd, expert}]), 1) << layer << " " << mb << " " << expert;
      }
  EXPECT_EQ(seen.size(), 4u * 3u * 6u);
}

// Every gathered byte is freed by the compute that uses it last (forward: the experts; backward:
// the experts for their shard, the attention for the dense part; the recomputation keeps them),
// and each experts' compute waits for its gather.
TEST(ExpertParallel, Zero3GatheredExpertsBalanceAndGateTheExperts) {
  for (const Recompute rc : {Recompute::NONE, Recompute::FULL}) {
    WorkloadSpec w = moe(1, 2, 4, 2, 4);
    w.parallel.zero_stage = 3;
    w.training.recompute = rc;
    const auto prog = build(w, false);
    for (graph::Rank r : prog.simulated_ranks) {
      const auto [alloc, freed] = test::gathered_and_freed(prog, r);
      EXPECT_GT(alloc, 0.0);
      EXPECT_NEAR(alloc, freed, 1e-6 * alloc) << "rank " << r;
    }
    for (graph::TaskId id = 0; id < prog.graph.size(); ++id) {
      const graph::Task& t = prog.graph.task(id);
      if (t.block != Block::EXPERTS || t.phase == Phase::WEIGHT_GRAD)
        continue;
      bool waits = false;
      for (graph::TaskId d : prog.graph.predecessors(id)) {
        const graph::Task& p = prog.graph.task(d);
        waits |= p.group == CommGroup::DP && p.op == CollectiveOp::ALL_GATHER && p.layer == t.layer &&
                 p.micro_batch == t.micro_batch && prog.graph.participants(p).size() == 2u;
      }
      EXPECT_TRUE(waits) << "experts of layer " << t.layer << " mb " << t.micro_batch << " phase "
                         << static_cast<int>(t.phase);
    }
  }
}

// With uniform routing every EP rank's experts take the same time; a Zipf skew slows the most
// loaded EP rank's experts (which set the MoE layer's pace: the combine waits for them) by the
// max/mean load ratio of model::ep_imbalance.
TEST(ExpertParallel, ZipfSkewSlowsTheMoeLayerByMaxOverMeanLoad) {
  WorkloadSpec w = moe(1, 1, 8, 8, 1);
  auto expert_times = [](const graph::StepProgram& p, int layer) {
    std::vector<double> out;
    for (const graph::Task& t : p.graph.tasks())
      if (t.block == Block::EXPERTS && t.phase == Phase::FORWARD && t.layer == layer)
        out.push_back(t.duration.value());
    return out;
  };
  const auto uniform = expert_times(build(w), 1);
  ASSERT_EQ(uniform.size(), 8u);
  for (double d : uniform)
    EXPECT_DOUBLE_EQ(d, uniform.front());
  w.model.moe.routing.distribution = RoutingDistribution::ZIPF;
  w.model.moe.routing.zipf_exponent = 1.0;
  w.model.moe.routing.seed = 3;
  const auto skewed = expert_times(build(w), 1);
  const double slowest = *std::max_element(skewed.begin(), skewed.end());
  EXPECT_NEAR(slowest / uniform.front(), model::ep_imbalance(w, 1), 1e-9);
  EXPECT_GT(slowest / uniform.front(), 1.5);
}

// With TP and sequence parallelism Megatron's all-to-all dispatcher all-gathers the routed copies
// of the TP group's tokens for the TP-split experts and reduce-scatters them after: per MoE layer
// and pass the TP traffic is (1 + k + k + 1)·S instead of a dense layer's 4·S (S = b·s·h·2, k =
// top_k); without sequence parallelism the all-reduces are a dense layer's. The backward also
// all-gathers the input of each dense column-parallel linear again (QKV, a dense fc1: S each).
TEST(ExpertParallel, TpCollectivesOfAnMoeLayerCarryTheRoutedCopies) {
  WorkloadSpec w = moe(2, 1, 4, 2, 1);
  w.model.moe.first_dense_layers = 1; // layer 0 dense, layers 1-3 MoE
  w.parallel.sp = true;
  const double s = model::tp_collective_bytes(w).value();
  const double k = static_cast<double>(w.model.moe.top_k);
  auto tp_bytes = [](const graph::StepProgram& p, int layer, Phase phase) {
    double sum = 0;
    std::set<graph::TaskId> seen;
    for (graph::TaskId id = 0; id < p.graph.size(); ++id) {
      const graph::Task& t = p.graph.task(id);
      if (t.kind == graph::TaskKind::COLLECTIVE && t.group == CommGroup::TP && t.layer == layer &&
          t.phase == phase && t.micro_batch == 0 && p.graph.participants(t).front() == 0)
        sum += t.bytes.value();
    }
    return sum;
  };
  const graph::StepProgram prog = build(w);
  EXPECT_DOUBLE_EQ(tp_bytes(prog, 0, Phase::FORWARD), 4 * s);
  EXPECT_DOUBLE_EQ(tp_bytes(prog, 1, Phase::FORWARD), (2 + 2 * k) * s);
  EXPECT_DOUBLE_EQ(tp_bytes(prog, 0, Phase::BACKWARD), (4 + 2) * s);
  EXPECT_DOUBLE_EQ(tp_bytes(prog, 1, Phase::BACKWARD), (2 + 2 * k + 1) * s);
  w.parallel.sp = false;
  const graph::StepProgram no_sp = build(w);
  EXPECT_DOUBLE_EQ(tp_bytes(no_sp, 1, Phase::FORWARD), 2 * model::tp_collective_bytes(w).value());
}

// fold_ep: one rank stands for its EP group. Its MoE layers carry the most loaded EP rank's
// experts (so each layer keeps the pace the combine sets), its all-to-alls still span the whole
// group, and it is the only rank simulated per (stage, tp, cp).
TEST(ExpertParallel, FoldEpKeepsOneRankWithTheLargestLoad) {
  WorkloadSpec w = moe(1, 2, 8, 8, 2);
  w.model.moe.routing.distribution = RoutingDistribution::ZIPF;
  w.model.moe.routing.zipf_exponent = 1.0;
  w.model.moe.routing.seed = 3;
  graph::BuildOptions o;
  o.fold_dp = true;
  o.fold_ep = true;
  o.compute_time = [](const graph::ComputeQuery& q) { return Seconds(q.flops.value() * 1e-15); };
  const graph::StepProgram folded = graph::build_step(w, o);
  EXPECT_EQ(folded.simulated_ranks.size(), 2u); // pp 2, one EP rank
  const graph::StepProgram group = build(w);
  for (int layer = 0; layer < 4; ++layer) {
    double slowest = 0, representative = 0;
    int representatives = 0;
    for (const graph::Task& t : group.graph.tasks())
      if (t.block == Block::EXPERTS && t.phase == Phase::FORWARD && t.layer == layer && t.micro_batch == 0)
        slowest = std::max(slowest, t.duration.value());
    for (const graph::Task& t : folded.graph.tasks())
      if (t.block == Block::EXPERTS && t.phase == Phase::FORWARD && t.layer == layer && t.micro_batch == 0) {
        representative = t.duration.value();
        ++representatives;
      }
    if (slowest == 0)
      continue; // a dense layer
    EXPECT_EQ(representatives, 1) << "layer " << layer;
    EXPECT_DOUBLE_EQ(representative, slowest) << "layer " << layer;
  }
  for (const graph::Task& t : folded.graph.tasks()) {
    if (t.kind == graph::TaskKind::COLLECTIVE && t.group == CommGroup::EP) {
      EXPECT_EQ(folded.graph.participants(t).size(), 8u);
    }
  }
}

// Folded expert groups (etp = 1 < tp, MoE parallel folding): a GPU's index q = t + tp*d in its
// stage splits as ep fastest, then the expert-data-parallel index. EP groups are ep consecutive GPUs
// of a stage, across TP ranks; expert gradients reduce over the tp*dp/ep GPUs with the same EP
// index and carry whole experts (not split by TP); each GPU's experts do the same FLOPs as with the
// experts split over TP, since it routes its own 1/tp of the tokens.
TEST(ExpertParallel, FoldedGroupsSpanTheTpRanks) {
  WorkloadSpec w = moe(2, 1, 8, 4, 1);
  w.parallel.sp = true;
  const graph::StepProgram unfolded_experts = build(w, false);
  w.parallel.etp = 1;
  const auto prog = build(w, false);
  const graph::RankGrid& g = prog.grid;
  ASSERT_TRUE(g.folded());
  EXPECT_EQ(g.edp(), 4);
  bool saw_a2a = false, saw_expert_reduce = false;
  for (const graph::Task& t : prog.graph.tasks()) {
    if (t.kind != graph::TaskKind::COLLECTIVE)
      continue;
    const auto parts = prog.graph.participants(t);
    if (t.group == CommGroup::EP) {
      saw_a2a = true;
      ASSERT_EQ(parts.size(), 4u);
      std::set<int> tps, eps;
      for (size_t i = 0; i < parts.size(); ++i) {
        EXPECT_EQ(g.stage_index(parts[i]) / 4, g.stage_index(parts[0]) / 4); // 4 consecutive GPUs
        tps.insert(g.tp_of(parts[i]));
        eps.insert(g.ep_of(parts[i]));
      }
      EXPECT_EQ(tps.size(), 2u);
      EXPECT_EQ(eps.size(), 4u);
    } else if (t.group == CommGroup::DP && t.layer >= 0) {
      saw_expert_reduce = true;
      ASSERT_EQ(parts.size(), 4u); // tp*dp / ep
      for (graph::Rank r : parts)
        EXPECT_EQ(g.ep_of(r), g.ep_of(parts[0]));
      // 8 experts / ep 4 = 2 whole experts of 3*h*f each.
      EXPECT_DOUBLE_EQ(t.bytes.value(), 2.0 * 3.0 * 512 * 1024 * 2.0);
      EXPECT_DOUBLE_EQ(t.bytes.value(), model::layer_params_at(w.model, t.layer, 2, 4, 1).expert * 2.0);
    }
  }
  EXPECT_TRUE(saw_a2a);
  EXPECT_TRUE(saw_expert_reduce);
  auto expert_flops = [](const graph::StepProgram& p) {
    double f = 0;
    for (const graph::Task& t : p.graph.tasks())
      if (t.block == Block::EXPERTS && t.rank == 0)
        f += t.flops.value();
    return f;
  };
  EXPECT_GT(expert_flops(prog), 0.0);
  EXPECT_DOUBLE_EQ(expert_flops(prog), expert_flops(unfolded_experts));
}

// With folded expert groups and SP, an MoE layer's tokens stay split over the TP ranks: no TP
// all-gather into the experts nor reduce-scatter out of them. Per layer and pass: forward the
// attention's reduce-scatter and the all-gather into the next layer; backward the all-gather into
// the attention's backward, the re-gather of its input and its reduce-scatter, plus the all-gather
// into a dense MLP below (a dense layer's backward: 4·S and its two re-gathers).
TEST(ExpertParallel, FoldedMoeLayersSkipTheTpCollectivesAroundTheExperts) {
  WorkloadSpec w = moe(2, 1, 4, 2, 1);
  w.model.moe.first_dense_layers = 1; // layer 0 dense, layers 1-3 MoE
  w.parallel.sp = true;
  w.parallel.etp = 1;
  const double s = model::tp_collective_bytes(w).value();
  const graph::StepProgram prog = build(w);
  auto tp_bytes = [&](int layer, Phase phase) {
    double sum = 0;
    for (const graph::Task& t : prog.graph.tasks())
      if (t.kind == graph::TaskKind::COLLECTIVE && t.group == CommGroup::TP && t.layer == layer &&
          t.phase == phase && t.micro_batch == 0 && prog.graph.participants(t).front() == 0)
        sum += t.bytes.value();
    return sum;
  };
  EXPECT_DOUBLE_EQ(tp_bytes(0, Phase::FORWARD), 4 * s);
  EXPECT_DOUBLE_EQ(tp_bytes(0, Phase::BACKWARD), 6 * s);
  EXPECT_DOUBLE_EQ(tp_bytes(1, Phase::FORWARD), 2 * s);
  EXPECT_DOUBLE_EQ(tp_bytes(1, Phase::BACKWARD), 4 * s);
  for (int layer : {2, 3}) {
    EXPECT_DOUBLE_EQ(tp_bytes(layer, Phase::FORWARD), 2 * s) << layer;
    EXPECT_DOUBLE_EQ(tp_bytes(layer, Phase::BACKWARD), 3 * s) << layer;
  }
}

// Combined 1F1B (parallel.ep_overlap) without a pipeline: F0 B0 F1 B1 F2 B2 F3 B3 pairs each
// forward with the previous micro-batch's backward, (B0, F1), (B1, F2), (B2, F3). The second pass
// of a pair (lane 1) starts from where the pair started, not after the first pass; the pair ends
// when both have (the second's last compute task waits for the first's).
TEST(ExpertParallel, CombinedPairsRunTheSecondPassAlongsideTheFirst) {
  WorkloadSpec w = moe(1, 1, 4, 4, 4);
  w.parallel.ep_overlap = true;
  const graph::StepProgram prog = build(w);
  const graph::StepGraph& g = prog.graph;
  // Rank 0's compute tasks per (phase, micro-batch), in stream (id) order.
  std::map<std::pair<Phase, int>, std::vector<graph::TaskId>> passes;
  for (graph::TaskId id = 0; id < g.size(); ++id) {
    const graph::Task& t = g.task(id);
    if (t.kind == graph::TaskKind::COMPUTE && t.rank == 0 && t.phase != Phase::OPTIMIZER)
      passes[{t.phase, t.micro_batch}].push_back(id);
  }
  ASSERT_EQ(passes.size(), 8u);
  for (const auto& [key, ids] : passes)
    for (graph::TaskId id : ids) {
      const bool second = key.first == Phase::FORWARD && key.second > 0;
      EXPECT_EQ(g.task(id).lane, second ? 1 : 0) << "mb " << key.second;
    }
  auto preds = [&](graph::TaskId id) {
    const auto p = g.predecessors(id);
    return std::set<graph::TaskId>(p.begin(), p.end());
  };
  for (int mb = 1; mb < 4; ++mb) {
    const auto& fwd = passes.at({Phase::FORWARD, mb});
    const auto& bwd = passes.at({Phase::BACKWARD, mb - 1});
    const auto& before = passes.at({Phase::FORWARD, mb - 1}); // the pass before the pair
    // The second pass (F mb) starts after the pass before the pair, not after B mb-1.
    const auto first_preds = preds(fwd.front());
    EXPECT_EQ(first_preds.count(before.back()), 1u) << mb;
    for (graph::TaskId b : bwd)
      EXPECT_EQ(first_preds.count(b), 0u) << mb;
    // The pair ends when both passes have.
    EXPECT_EQ(preds(fwd.back()).count(bwd.back()), 1u) << mb;
  }
  // Without the option: one stream order, lane 0 everywhere.
  w.parallel.ep_overlap = false;
  const graph::StepProgram plain = build(w);
  for (const graph::Task& t : plain.graph.tasks())
    EXPECT_EQ(t.lane, 0);
}

// Uneven model chunks (parallel.chunk_layers): 6 layers over pp 2 x vp 2 as [1, 2, 3, 0] put layer
// 0 on stage 0's first chunk, layers 1-2 on stage 1's, 3-5 on stage 0's second and only the output
// layer on stage 1's second; every micro-batch still runs each layer once per pass.
TEST(PipelineLayout, UnevenChunksPlaceTheirLayers) {
  WorkloadSpec w = test::workload(test::small_gpt(6, 512, 256), 1, 2, 1, 4);
  w.parallel.schedule = Schedule::INTERLEAVED;
  w.parallel.vp = 2;
  w.parallel.chunk_layers = {1, 2, 3, 0};
  const graph::StepProgram prog = build(w);
  std::map<int, std::set<int>> layers_of_stage;
  std::map<std::pair<int, int>, int> passes; // (layer, phase) -> tasks of micro-batch 0
  bool logits_on_last = false;
  for (const graph::Task& t : prog.graph.tasks()) {
    if (t.kind != graph::TaskKind::COMPUTE || t.micro_batch != 0)
      continue;
    if (t.block == Block::ATTENTION) {
      layers_of_stage[t.stage].insert(t.layer);
      ++passes[{t.layer, static_cast<int>(t.phase)}];
    }
    if (t.block == Block::LOGITS)
      logits_on_last = logits_on_last || t.stage == 1;
  }
  EXPECT_EQ(layers_of_stage[0], (std::set<int>{0, 3, 4, 5}));
  EXPECT_EQ(layers_of_stage[1], (std::set<int>{1, 2}));
  EXPECT_TRUE(logits_on_last);
  for (const auto& [key, n] : passes)
    EXPECT_EQ(n, 1) << "layer " << key.first;
  EXPECT_EQ(passes.size(), 12u); // 6 layers x forward, backward
  // Parameters per stage follow the chunks: stage 0 holds 4 layers and the embedding.
  EXPECT_DOUBLE_EQ(model::params_on_rank(w, 0),
                   4 * model::layer_params(w.model, 1) + model::embedding_params(w.model, 1));
}

// Folding simulates every CP rank and one EP group (ep consecutive DP ranks).
TEST(ExpertParallel, FoldingKeepsOneEpGroup) {
  const auto prog = build(moe(2, 2, 8, 4, 2));
  EXPECT_EQ(prog.simulated_ranks.size(), 2u * 2u * 4u);
  // Folded expert groups of ep 4 GPUs: two replicas of tp 2 hold one.
  WorkloadSpec w = moe(2, 2, 8, 4, 2);
  w.parallel.sp = true;
  w.parallel.etp = 1;
  EXPECT_EQ(build(w).simulated_ranks.size(), 2u * 2u * 2u);
}

// CP = 2 halves the attention FLOPs per GPU (queries s/2 against all s keys; projections of s/2
// tokens), halves the MLP's, and adds the ring: per layer and micro-batch cp-1 = 1 send of the
// local K,V block (2*b*(s/2)*kv*2 bytes) in forward and one of twice that (K,V with dK,dV) in
// backward, from every CP rank to the next.
TEST(ContextParallel, Cp2HalvesAttentionFlopsAndAddsRingTraffic) {
  ModelSpec m = test::llama2_70b();
  m.layers = 2;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 4;
  m.ffn_hidden = 2816;
  m.seq_len = 4096;
  WorkloadSpec w = test::workload(m, 1, 1, 2, 2);
  auto flops = [](const graph::StepProgram& p, graph::Rank r, Block b) {
    double f = 0;
    for (const graph::Task& t : p.graph.tasks())
      if (t.kind == graph::TaskKind::COMPUTE && t.rank == r && t.block == b && t.phase == Phase::FORWARD)
        f += t.flops.value();
    return f;
  };
  const auto base = build(w);
  w.parallel.cp = 2;
  w.parallel.dp = 1;
  w.batch.global_batch = 2;
  const auto cp = build(w, false); // every CP rank simulated (folded: CP index 0, below)
  graph::BuildOptions fo;
  fo.gpus_per_node = 1; // tp 1 on one-GPU nodes: every ring hop crosses nodes
  fo.compute_time = [](const graph::ComputeQuery&) { return Seconds(1e-3); };
  EXPECT_NEAR(flops(cp, 0, Block::ATTENTION) / flops(base, 0, Block::ATTENTION), 0.5, 1e-12);
  EXPECT_NEAR(flops(cp, 1, Block::ATTENTION) / flops(base, 0, Block::ATTENTION), 0.5, 1e-12);
  EXPECT_NEAR(flops(cp, 0, Block::MLP) / flops(base, 0, Block::MLP), 0.5, 1e-12);
  const double block = 2.0 * 2048 * (4 * 64) * 2; // K and V of s/cp tokens, 4 KV heads of 64
  int fwd = 0, bwd = 0;
  for (const graph::Task& t : cp.graph.tasks()) {
    if (t.group != CommGroup::CP)
      continue;
    EXPECT_EQ(t.op, CollectiveOp::SEND);
    EXPECT_EQ(t.stream, graph::Stream::CP_COMM);
    const auto parts = cp.graph.participants(t);
    EXPECT_EQ(cp.grid.cp_of(parts[1]), (cp.grid.cp_of(parts[0]) + 1) % 2);
    if (t.phase == Phase::FORWARD) {
      ++fwd;
      EXPECT_DOUBLE_EQ(t.bytes.value(), block);
    } else {
      ++bwd;
      EXPECT_DOUBLE_EQ(t.bytes.value(), 2 * block);
    }
  }
  EXPECT_EQ(fwd, 2 * 2 * 2); // layers x micro-batches x CP ranks, (cp-1) = 1 step each
  EXPECT_EQ(bwd, 2 * 2 * 2);
  // Rank order tp, cp, dp, pp: the two CP ranks of a TP-1 replica are GPUs 0 and 1.
  EXPECT_EQ(cp.grid.cp_of(1), 1);
  EXPECT_EQ(cp.simulated_ranks.size(), 2u);
  // Folded (docs/engine.md): CP index 0 alone, the same ring sends (rank 1's copying rank 0's).
  const auto folded = graph::build_step(w, fo);
  EXPECT_EQ(folded.simulated_ranks, std::vector<graph::Rank>{0});
  EXPECT_NEAR(flops(folded, 0, Block::ATTENTION), flops(cp, 0, Block::ATTENTION),
              1e-9 * flops(cp, 0, Block::ATTENTION));
  int sends = 0;
  for (const graph::Task& t : folded.graph.tasks())
    sends += t.group == CommGroup::CP ? 1 : 0;
  EXPECT_EQ(sends, fwd + bwd);
  for (const graph::Task& t : folded.graph.tasks()) {
    if (t.kind == graph::TaskKind::COMPUTE) {
      EXPECT_EQ(t.rank, 0);
    }
  }
}

// Folded CP (docs/engine.md): the other CP ranks' ring and pipeline sends are copies of CP index
// 0's, between the same GPUs as unfolded and as many: cp 4, pp 2, tp 1 on one-GPU nodes.
TEST(ContextParallel, FoldedCopiesEveryRingAndPipelineSend) {
  WorkloadSpec w = test::workload(test::small_gpt(2, 512, 1024), 1, 2, 1, 2);
  w.parallel.cp = 4;
  graph::BuildOptions o;
  o.gpus_per_node = 1;
  o.compute_time = [](const graph::ComputeQuery&) { return Seconds(1e-3); };
  const auto count = [](const graph::StepProgram& p) {
    std::map<std::tuple<int, graph::Rank, graph::Rank>, int> n;
    for (const graph::Task& t : p.graph.tasks())
      if (t.op == CollectiveOp::SEND) {
        const auto parts = p.graph.participants(t);
        ++n[{static_cast<int>(t.group), parts[0], parts[1]}];
      }
    return n;
  };
  const auto folded = graph::build_step(w, o);
  EXPECT_EQ(folded.simulated_ranks.size(), 2u); // CP index 0 of both stages
  o.fold_dp = false;
  const auto all = graph::build_step(w, o);
  EXPECT_EQ(all.simulated_ranks.size(), 8u);
  EXPECT_EQ(count(folded), count(all));
  EXPECT_EQ(count(all).size(), 2u * 4 + 2u * 4); // 4 ring pairs per stage; 4 CP ranks' PP sends each way
}

// parallel.tp_grad_overlap splits a backward block at its column-parallel input linear only where
// it has one (docs/model.md, "TP in the backward"): the attention and a dense MLP, not an MoE
// layer's experts, nor MLA's attention (replicated down-projections), nor any block of a
// zero-bubble schedule's B pass. Counted: weight-gradient pieces per layer and micro-batch.
TEST(ExpertParallel, BackwardSplitAtColumnParallelInputsOnly) {
  const auto pieces = [](const graph::StepProgram& p, Block b) {
    int n = 0;
    for (const graph::Task& t : p.graph.tasks())
      n += t.kind == graph::TaskKind::COMPUTE && t.rank == 0 && t.block == b && t.piece == 2 ? 1 : 0;
    return n;
  };
  WorkloadSpec w = moe(2, 1, 4, 4, 1);
  w.model.moe.first_dense_layers = 1; // layer 0 dense, layers 1-3 MoE
  const auto prog = build(w);
  EXPECT_EQ(pieces(prog, Block::ATTENTION), 4);
  EXPECT_EQ(pieces(prog, Block::MLP), 1); // the dense layer's
  EXPECT_EQ(pieces(prog, Block::EXPERTS), 0);
  w.model.mla = MlaSpec{.q_lora_rank = 0,
                        .kv_lora_rank = 128,
                        .qk_nope_head_dim = 32,
                        .qk_rope_head_dim = 16,
                        .v_head_dim = 32};
  EXPECT_EQ(pieces(build(w), Block::ATTENTION), 0);
  w.model.mla = MlaSpec{};
  w.parallel.schedule = Schedule::ZB_H1;
  const auto zb = build(w);
  EXPECT_EQ(pieces(zb, Block::ATTENTION) + pieces(zb, Block::MLP), 0);
}

// Dense gradients are all-reduced over dp*cp GPUs (CP ranks hold the same weights).
TEST(ContextParallel, DenseGradientsSpanDpTimesCp) {
  WorkloadSpec w = test::workload(test::small_gpt(2, 512, 256), 1, 1, 2, 1);
  w.parallel.cp = 2;
  const auto prog = build(w);
  bool saw = false;
  for (const graph::Task& t : prog.graph.tasks())
    if (t.group == CommGroup::DP) {
      saw = true;
      EXPECT_EQ(t.ranks_count, 4u);
    }
  EXPECT_TRUE(saw);
}

// Activation offloading of MoE layers: an offloaded layer's copy out (forward) and back
// (backward) at gpu.host_bandwidth extends its compute to the copy time on every rank, the wait
// sitting on its last compute task (the experts', before the combine all-to-all), never on a
// collective; layers not offloaded keep their compute.
TEST(ExpertParallel, OffloadedMoeLayersWaitForTheirCopies) {
  WorkloadSpec w = moe(1, 1, 4, 4, 2); // 4 layers, one chunk per stage
  w.training.offload_layers = 2;
  graph::BuildOptions o;
  o.compute_time = [](const graph::ComputeQuery& q) { return Seconds(q.flops.value() * 1e-15); };
  o.host_bandwidth = BytesPerSec(1e6); // copies far longer than any layer's compute
  const auto prog = graph::build_step(w, o);
  const double copy = model::stored_layer_activations(w).total().value() / 1e6;
  std::map<std::tuple<int, int, int, int>, double> busy; // (rank, layer, mb, phase) -> compute seconds
  for (const graph::Task& t : prog.graph.tasks()) {
    if (t.kind == graph::TaskKind::COLLECTIVE) {
      EXPECT_EQ(t.duration.value(), 0.0);
    } else if (t.layer >= 0) {
      busy[{t.rank, t.layer, t.micro_batch, static_cast<int>(t.phase)}] += t.duration.value();
    }
  }
  ASSERT_FALSE(busy.empty());
  for (const auto& [key, seconds] : busy) {
    const int layer = std::get<1>(key);
    if (layer < 2)
      EXPECT_NEAR(seconds, copy, 1e-9 * copy) << "layer " << layer;
    else
      EXPECT_LT(seconds, 1e-3 * copy) << "layer " << layer;
  }
}

// The routed experts' parameters under the distributed optimizer (expert-data-parallel group of
// dp/ep GPUs, S = a layer's local experts at 2 bytes): ZeRO-1 all-reduces them at the end of
// backward, 2(n-1)/n S; with overlap_param_gather it reduce-scatters them there and gathers them
// at the step's start, (n-1)/n S each, the same volume, the gather before the layer's first
// forward experts and after nothing else; ZeRO-2 reduce-scatters every micro-batch and gathers
// once after the optimizer: (m + 1)(n-1)/n S.
TEST(ExpertParallel, ExpertParametersFollowTheDistributedOptimizer) {
  const int64_t m = 3;
  WorkloadSpec w = moe(1, 1, 8, 4, m); // expert-data-parallel groups of 2
  const double s = model::layer_params_at(w.model, 0, 1, 4, 1).expert * 2.0;
  ASSERT_GT(s, 0.0);
  // Per expert-data-parallel collective of layer 0 on rank 0: (op, phase) -> bytes at bus volume.
  auto expert_traffic = [&](const WorkloadSpec& spec) {
    const auto prog = build(spec);
    std::map<std::pair<CollectiveOp, Phase>, double> out;
    for (graph::TaskId id = 0; id < prog.graph.size(); ++id) {
      const graph::Task& t = prog.graph.task(id);
      const auto parts = prog.graph.participants(t);
      if (t.group != CommGroup::DP || t.layer != 0 || parts.size() != 2 || parts.front() != 0)
        continue;
      out[{t.op, t.phase}] += (t.op == CollectiveOp::ALL_REDUCE ? 1.0 : 0.5) * t.bytes.value();
      if (t.op == CollectiveOp::ALL_GATHER && t.phase == Phase::FORWARD) {
        EXPECT_TRUE(prog.graph.predecessors(id).empty() ||
                    prog.graph.task(prog.graph.predecessors(id)[0]).kind == graph::TaskKind::COLLECTIVE);
        bool gates_experts = false;
        for (graph::TaskId c : prog.graph.successors(id))
          gates_experts |= prog.graph.task(c).block == Block::EXPERTS &&
                           prog.graph.task(c).micro_batch == 0 && prog.graph.task(c).phase == Phase::FORWARD;
        EXPECT_TRUE(gates_experts);
      }
    }
    return out;
  };
  w.parallel.zero_stage = 1;
  using Key = std::pair<CollectiveOp, Phase>;
  EXPECT_EQ(expert_traffic(w), (std::map<Key, double>{{{CollectiveOp::ALL_REDUCE, Phase::BACKWARD}, s}}));
  w.training.overlap_param_gather = true;
  EXPECT_EQ(expert_traffic(w),
            (std::map<Key, double>{{{CollectiveOp::REDUCE_SCATTER, Phase::BACKWARD}, 0.5 * s},
                                   {{CollectiveOp::ALL_GATHER, Phase::FORWARD}, 0.5 * s}}));
  w.parallel.zero_stage = 2;
  w.training.overlap_param_gather = false;
  EXPECT_EQ(expert_traffic(w),
            (std::map<Key, double>{{{CollectiveOp::REDUCE_SCATTER, Phase::BACKWARD}, 0.5 * s * m},
                                   {{CollectiveOp::ALL_GATHER, Phase::OPTIMIZER}, 0.5 * s}}));
}
