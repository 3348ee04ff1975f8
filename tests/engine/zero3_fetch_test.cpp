// How ZeRO-3 gathers (docs/model.md, "ZeRO-3 fetch"). The blocking fetch (training.zero3_fetch:
// blocking), replayed: nothing overlaps, so the step is the sum of the rank's compute and of its DP
// collectives, and the tensor-list collectives' host time adds exactly (per-rank cost x DP size)
// per collective. Kept gathers (training.reshard_after_forward false) and hybrid sharding
// (parallel.dp_shard): the collectives each emits, and what folding keeps.

#include "common/specs.hpp"
#include "common/subprocess.hpp"
#include "engine/replay.hpp"
#include "graph/step_builder.hpp"

#include <gtest/gtest.h>

#include <set>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;
using stepsim::test::run_in_child;

namespace {

constexpr int DP = 8;

/// 4 GPT layers, ZeRO-3 over 8 GPUs of one node, full recomputation, 2 micro-batches; blocks
/// of fixed times.
WorkloadSpec blocking_workload() {
  WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4, 2048, 1024), 1, 1, DP, 2);
  w.parallel.zero_stage = 3;
  w.training.recompute = Recompute::FULL;
  w.training.zero3_fetch = Zero3Fetch::BLOCKING;
  return w;
}

struct Replayed {
  double step = 0;
  double compute = 0;     ///< Σ of rank 0's compute task times
  double dp = 0;          ///< Σ of the DP collectives' times (start to end)
  double collectives = 0; ///< how many DP collectives carry a host part
};

Replayed replay(double per_rank) {
  const auto r = run_in_child([=] {
    const WorkloadSpec w = blocking_workload();
    BuildOptions o;
    o.compute_time = [](const ComputeQuery& q) {
      return ComputeCost(Seconds(q.block == Block::OPTIMIZER ? 1e-4
                                 : q.phase == Phase::FORWARD ? 1e-3
                                                             : 2e-3));
    };
    o.list_collective_per_rank = Seconds(per_rank);
    const StepProgram prog = build_step(w, o);
    engine::Replay replay(prog, stepsim::test::dgx_cluster(1, DP, DP));
    const engine::ReplayResult res = replay.run();
    double compute = 0, dp = 0, listed = 0;
    for (TaskId id = 0; id < prog.graph.size(); ++id) {
      const Task& t = prog.graph.task(id);
      if (t.kind == TaskKind::COMPUTE && t.rank == 0)
        compute += res.end[id].value() - res.start[id].value();
      if (t.kind == TaskKind::COLLECTIVE && t.group == CommGroup::DP) {
        dp += res.end[id].value() - res.start[id].value();
        listed += t.duration.value() > 0 ? 1.0 : 0.0;
      }
    }
    return std::vector<double>{res.step_time.value(), compute, dp, listed};
  });
  EXPECT_TRUE(r.ok) << r.error;
  if (!r.ok)
    return {};
  return Replayed{r.values[0], r.values[1], r.values[2], r.values[3]};
}

} // namespace

// Every gather waits for the compute before it and every compute for its gathers: the step is
// the rank's compute plus its DP collectives, back to back.
TEST(Zero3Fetch, BlockingRunsNothingBesideTheCompute) {
  const Replayed r = replay(20e-6);
  ASSERT_GT(r.dp, 0.0);
  EXPECT_NEAR(r.step, r.compute + r.dp, 1e-9 * r.step);
}

// The host part of a tensor-list collective (a view and a copy per rank) delays its transfer by
// per-rank cost x DP group size: the step grows by exactly that per collective.
TEST(Zero3Fetch, ListCollectiveHostTimeAddsPerRankPerCollective) {
  const Replayed without = replay(0.0);
  const Replayed with = replay(30e-6);
  // Per micro-batch: 18 tensors (4 per layer, the embedding, the output layer) gathered three
  // times (forward, recomputation, backward) and reduce-scattered once.
  EXPECT_EQ(with.collectives, 2.0 * 4.0 * 18.0);
  EXPECT_EQ(without.collectives, 0.0);
  EXPECT_NEAR(with.step - without.step, with.collectives * DP * 30e-6, 1e-9 * with.step);
}

// training.reshard_after_forward false (FSDP2's fully_shard(reshard_after_forward=False)): the
// forward's gathers stay until each layer's backward, which gathers nothing. Per layer and
// micro-batch the DP all-gathers carry P·w bytes instead of 2·P·w (P the layer's parameters, w
// a gathered parameter's bytes), none in the backward; the reduce-scatters are unchanged.
TEST(Zero3Reshard, KeptGathersAreTheForwardsAlone) {
  const auto volumes = [](bool reshard) {
    WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4, 2048, 1024), 1, 1, DP, 2);
    w.parallel.zero_stage = 3;
    w.training.reshard_after_forward = reshard;
    BuildOptions o;
    o.compute_time = [](const ComputeQuery&) { return ComputeCost(Seconds(1e-3)); };
    const StepProgram prog = build_step(w, o);
    std::vector<double> v(3, 0.0); // gathers in the forward, gathers in the backward, reduce-scatters
    for (TaskId id = 0; id < prog.graph.size(); ++id) {
      const Task& t = prog.graph.task(id);
      if (t.kind != TaskKind::COLLECTIVE || t.group != CommGroup::DP || t.rank != 0)
        continue;
      if (t.op == CollectiveOp::ALL_GATHER)
        v[t.phase == Phase::FORWARD ? 0 : 1] += t.bytes.value();
      else if (t.op == CollectiveOp::REDUCE_SCATTER)
        v[2] += t.bytes.value();
    }
    return v;
  };
  const std::vector<double> resharded = volumes(true);
  const std::vector<double> kept = volumes(false);
  ASSERT_GT(resharded[0], 0.0);
  EXPECT_DOUBLE_EQ(resharded[1], resharded[0]); // the backward gathers everything again
  EXPECT_DOUBLE_EQ(kept[0], resharded[0]);
  EXPECT_EQ(kept[1], 0.0);
  EXPECT_DOUBLE_EQ(kept[2], resharded[2]);
}

// With a pipeline (pp 2, 4 micro-batches) kept gathers are held for the step, as FSDP2 runs under
// torch.distributed.pipelining: each stage gathers its layers once, in the first micro-batch's
// forward, and reduce-scatters them once, after the last micro-batch's backward. Per step a
// stage's gathers move 1/8 of the bytes they move resharding (2 per layer and micro-batch) and its
// reduce-scatters 1/4 (1 per layer and micro-batch); the backward gathers nothing.
TEST(Zero3Reshard, APipelineHoldsTheGathersForTheStep) {
  constexpr int m = 4;
  struct Seen {
    double fwd = 0, bwd = 0, scattered = 0;
    std::set<int> fwd_mbs, scatter_mbs;
  };
  const auto seen = [](bool reshard) {
    WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4, 2048, 1024), 1, 2, DP, m);
    w.parallel.zero_stage = 3;
    w.training.reshard_after_forward = reshard;
    BuildOptions o;
    o.fold_dp = false;
    o.compute_time = [](const ComputeQuery&) { return ComputeCost(Seconds(1e-3)); };
    const StepProgram prog = build_step(w, o);
    Seen s;
    for (TaskId id = 0; id < prog.graph.size(); ++id) {
      const Task& t = prog.graph.task(id);
      if (t.kind != TaskKind::COLLECTIVE || t.group != CommGroup::DP || t.rank != 0)
        continue;
      if (t.op == CollectiveOp::ALL_GATHER) {
        (t.phase == Phase::FORWARD ? s.fwd : s.bwd) += t.bytes.value();
        if (t.phase == Phase::FORWARD)
          s.fwd_mbs.insert(t.micro_batch);
      } else if (t.op == CollectiveOp::REDUCE_SCATTER) {
        s.scattered += t.bytes.value();
        s.scatter_mbs.insert(t.micro_batch);
      }
    }
    return s;
  };
  const Seen resharded = seen(true);
  const Seen held = seen(false);
  ASSERT_GT(held.fwd, 0.0);
  EXPECT_DOUBLE_EQ(resharded.fwd, m * held.fwd);
  EXPECT_DOUBLE_EQ(resharded.bwd, m * held.fwd);
  EXPECT_EQ(held.bwd, 0.0);
  EXPECT_DOUBLE_EQ(resharded.scattered, m * held.scattered);
  EXPECT_EQ(held.fwd_mbs, std::set<int>{0});
  EXPECT_EQ(held.scatter_mbs, std::set<int>{m - 1});
}

// Kept gathers take the backward's gathers off a communication-bound step: it gets shorter.
TEST(Zero3Reshard, KeptGathersShortenACommunicationBoundStep) {
  const auto step = [](bool reshard) {
    const auto r = run_in_child([=] {
      WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4, 2048, 1024), 1, 1, DP, 2);
      w.parallel.zero_stage = 3;
      w.training.reshard_after_forward = reshard;
      BuildOptions o;
      o.compute_time = [](const ComputeQuery&) { return ComputeCost(Seconds(1e-5)); }; // comm-bound
      const StepProgram prog = build_step(w, o);
      engine::Replay replay(prog, stepsim::test::dgx_cluster(1, DP, DP));
      return std::vector<double>{replay.run().step_time.value()};
    });
    EXPECT_TRUE(r.ok) << r.error;
    return r.ok ? r.values[0] : 0.0;
  };
  const double resharded = step(true);
  const double kept = step(false);
  ASSERT_GT(kept, 0.0);
  EXPECT_LT(kept, resharded);
}

// ZeRO-3 hybrid sharding (parallel.dp_shard, HSDP): with dp 8 and shard groups of 4, every gather
// and reduce-scatter runs within one group of 4 consecutive DP ranks, and each reduce-scatter is
// followed by an all-reduce of the GPU's shard (1/4 of the layer's gradient bytes) over the 2
// ranks holding the same shard (d and d + 4). Every replica is simulated.
TEST(Zero3HybridShard, ShardGroupsGatherAndReplicasAllReduce) {
  WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4, 2048, 1024), 1, 1, DP, 2);
  w.parallel.zero_stage = 3;
  w.parallel.dp_shard = 4;
  BuildOptions o;
  o.compute_time = [](const ComputeQuery&) { return ComputeCost(Seconds(1e-3)); };
  const StepProgram prog = build_step(w, o);
  int gathers = 0, scatters = 0, replicated = 0;
  double scattered_bytes = 0, replicated_bytes = 0;
  std::vector<int> ranks_seen(DP, 0);
  for (TaskId id = 0; id < prog.graph.size(); ++id) {
    const Task& t = prog.graph.task(id);
    if (t.kind != TaskKind::COLLECTIVE || t.group != CommGroup::DP)
      continue;
    const auto ranks = prog.graph.participants(t);
    if (t.op == CollectiveOp::ALL_REDUCE) {
      ASSERT_EQ(ranks.size(), 2u);
      EXPECT_EQ(ranks[1], ranks[0] + 4); // the same shard position in the two groups
      ++replicated;
      replicated_bytes += t.bytes.value();
      continue;
    }
    ASSERT_EQ(ranks.size(), 4u);
    EXPECT_EQ(ranks[0] % 4, 0); // a whole group of consecutive ranks
    for (size_t k = 0; k < ranks.size(); ++k) {
      EXPECT_EQ(ranks[k], ranks[0] + static_cast<Rank>(k));
      ++ranks_seen[static_cast<size_t>(ranks[k])];
    }
    if (t.op == CollectiveOp::ALL_GATHER)
      ++gathers;
    else if (t.op == CollectiveOp::REDUCE_SCATTER) {
      ++scatters;
      scattered_bytes += t.bytes.value();
    }
  }
  // 4 layers x 2 micro-batches: a gather in the forward and the backward, a reduce-scatter, per
  // shard group (2), and an all-reduce per shard position (4).
  EXPECT_EQ(gathers, 4 * 2 * 2 * 2);
  EXPECT_EQ(scatters, 4 * 2 * 2);
  EXPECT_EQ(replicated, 4 * 2 * 4);
  // Per layer and micro-batch, 4 all-reduces of a quarter against 2 reduce-scatters of the whole.
  EXPECT_NEAR(replicated_bytes, scattered_bytes / 2, 1e-6 * scattered_bytes);
  for (int count : ranks_seen)
    EXPECT_EQ(count, ranks_seen[0]); // every rank takes part alike
  EXPECT_EQ(prog.simulated_ranks.size(), static_cast<size_t>(DP));
}

// Shard groups inside one node load only that node's links: one group is simulated for all
// (its replicas' all-reduces span the others), with the step of every replica simulated. dp 16 on
// 2 nodes of 8, groups of 4.
TEST(Zero3HybridShard, GroupsInsideANodeFoldToOne) {
  const auto step = [](bool fold) {
    const auto r = run_in_child([=] {
      WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4, 2048, 1024), 1, 1, 16, 2);
      w.parallel.zero_stage = 3;
      w.parallel.dp_shard = 4;
      BuildOptions o;
      o.compute_time = [](const ComputeQuery&) { return ComputeCost(Seconds(1e-4)); };
      o.fold_dp = fold;
      o.gpus_per_node = 8;
      const StepProgram prog = build_step(w, o);
      engine::Replay replay(prog, stepsim::test::dgx_cluster(2, 8, 8));
      return std::vector<double>{replay.run().step_time.value(),
                                 static_cast<double>(prog.simulated_ranks.size())};
    });
    EXPECT_TRUE(r.ok) << r.error;
    return r.ok ? r.values : std::vector<double>{0.0, 0.0};
  };
  const std::vector<double> folded = step(true);
  const std::vector<double> every = step(false);
  EXPECT_EQ(folded[1], 4.0);
  EXPECT_EQ(every[1], 16.0);
  ASSERT_GT(every[0], 0.0);
  EXPECT_NEAR(folded[0], every[0], 1e-9 * every[0]);
}
