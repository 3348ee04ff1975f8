// ZeRO stages, sequence parallelism and activation recomputation in the step DAG, against the
// communication volumes of MODEL.md §4 and the memory annotations of MODEL.md §3.

#include "graph/step_builder.hpp"
#include "model/memory.hpp"
#include "model/transformer.hpp"

#include "common/graph_checks.hpp"
#include "common/specs.hpp"

#include <gtest/gtest.h>

#include <map>

using namespace stepsim;
using graph::CollectiveOp;
using graph::CommGroup;

namespace {

graph::StepProgram build(const WorkloadSpec& w, bool fold = true) {
  graph::BuildOptions o;
  o.fold_dp = fold;
  o.compute_time = [](const graph::ComputeQuery&) { return Seconds(1e-3); };
  return graph::build_step(w, o);
}

/// Bytes rank r sends per step in `group`'s collectives, at ring bus volume:
/// all-reduce 2(n-1)/n*S, all-gather and reduce-scatter (n-1)/n*S, send S. Those of the layers
/// and pipeline messages (MODEL.md §4); the collectives outside them (the embedding's, the
/// output layer's, the end of step's) have tests of their own (BuildStep.*OutsideTheLayers).
double volume(const graph::StepProgram& prog, graph::Rank r, CommGroup group) {
  double v = 0;
  for (const graph::Task& t : prog.graph.tasks()) {
    if (t.kind != graph::TaskKind::COLLECTIVE || t.group != group || t.role != graph::CommRole::NONE)
      continue;
    const auto parts = prog.graph.participants(t);
    if (std::find(parts.begin(), parts.end(), r) == parts.end())
      continue;
    const double n = static_cast<double>(parts.size());
    const double s = t.bytes.value();
    v += t.op == CollectiveOp::ALL_REDUCE ? 2.0 * (n - 1.0) / n * s
         : t.op == CollectiveOp::SEND     ? s
                                          : (n - 1.0) / n * s;
  }
  return v;
}

size_t count(const graph::StepProgram& prog, graph::Rank r, graph::Phase phase) {
  size_t k = 0;
  for (const graph::Task& t : prog.graph.tasks())
    if (t.kind == graph::TaskKind::COMPUTE && t.rank == r && t.phase == phase)
      ++k;
  return k;
}

WorkloadSpec small(int tp, int pp, int dp, int64_t m) {
  return test::workload(test::small_gpt(4), tp, pp, dp, m);
}

/// Every simulated rank's activation allocations are freed by the end of the step.
void expect_activations_balance(const graph::StepProgram& prog) {
  for (graph::Rank r : prog.simulated_ranks) {
    double alloc = 0, freed = 0;
    for (const graph::Task& t : prog.graph.tasks())
      if (t.kind == graph::TaskKind::COMPUTE && t.rank == r) {
        alloc += t.act_alloc.value();
        freed += t.act_free.value();
      }
    EXPECT_GT(alloc, 0.0) << "rank " << r;
    EXPECT_NEAR(alloc, freed, 1e-6 * alloc) << "rank " << r;
  }
}

} // namespace

// ZeRO-3 moves 1.5x the DP volume of plain data parallelism (one micro-batch): parameters
// all-gathered in forward and again in backward, gradients reduce-scattered, each (n-1)/n*2Psi,
// against one all-reduce of 2(n-1)/n*2Psi.
TEST(Zero, Stage3IsOneAndAHalfTimesDpVolume) {
  for (const int dp : {2, 4, 8}) {
    WorkloadSpec w = small(1, 2, dp, 1);
    const double base = volume(build(w), 0, CommGroup::DP);
    const double psi = model::params_on_rank(w, 0);
    EXPECT_NEAR(base, 2.0 * (dp - 1.0) / dp * 2.0 * psi, 1e-6 * base);
    w.parallel.zero_stage = 3;
    EXPECT_NEAR(volume(build(w), 0, CommGroup::DP), 1.5 * base, 1e-6 * base) << "dp " << dp;
  }
}

// ZeRO-1 reduce-scatters gradients once and all-gathers the updated parameters: the same volume
// as one all-reduce. ZeRO-2 reduce-scatters every micro-batch (sharded gradients cannot
// accumulate locally): (m + 1)/2 times the all-reduce volume.
TEST(Zero, Stages1And2Volumes) {
  const int dp = 4;
  const int64_t m = 6;
  WorkloadSpec w = small(2, 2, dp, m);
  const double base = volume(build(w), 0, CommGroup::DP);
  w.parallel.zero_stage = 1;
  EXPECT_NEAR(volume(build(w), 0, CommGroup::DP), base, 1e-6 * base);
  w.parallel.zero_stage = 2;
  EXPECT_NEAR(volume(build(w), 0, CommGroup::DP), (m + 1) / 2.0 * base, 1e-6 * base);
}

// overlap_param_gather (Megatron's distributed optimizer): the parameter all-gathers move from
// after the optimizer to the step's start, the same buckets and bytes (the DP volume of ZeRO-1 and
// 2 unchanged), chunk by chunk in forward order (buckets from the last index to 0, as the forward
// meets them). Only each chunk's first forward waits for them, each layer for its own bucket; no
// gather waits for any compute or follows an optimizer.
TEST(Zero, OverlappedParameterGatherMovesTheGathersUnderTheForward) {
  for (const int zero : {1, 2}) {
    WorkloadSpec w = test::workload(test::small_gpt(8), 2, 2, 4, 6); // two layers per model chunk
    w.parallel.zero_stage = zero;
    w.parallel.vp = 2;
    w.parallel.schedule = Schedule::INTERLEAVED;
    w.training.dp_bucket = Bytes(4.0 * 1024 * 1024); // several buckets per chunk
    const auto plain = build(w);
    w.training.overlap_param_gather = true;
    const auto overlapped = build(w);
    EXPECT_NEAR(volume(overlapped, 0, CommGroup::DP), volume(plain, 0, CommGroup::DP),
                1e-6 * volume(plain, 0, CommGroup::DP));
    const graph::StepGraph& g = overlapped.graph;
    std::map<graph::Rank, std::vector<std::pair<int, int>>> order; // rank 0's gathers: (micro_batch, bucket)
    int waited = 0;
    for (graph::TaskId id = 0; id < g.size(); ++id) {
      const graph::Task& t = g.task(id);
      if (t.kind != graph::TaskKind::COLLECTIVE || t.op != CollectiveOp::ALL_GATHER ||
          t.group != CommGroup::DP)
        continue;
      EXPECT_EQ(t.phase, graph::Phase::FORWARD) << "zero " << zero;
      for (graph::TaskId pred : g.predecessors(id)) {
        EXPECT_NE(g.task(pred).kind, graph::TaskKind::COMPUTE);
      }
      for (graph::TaskId s : g.successors(id)) {
        const graph::Task& c = g.task(s);
        if (c.kind != graph::TaskKind::COMPUTE)
          continue;
        ++waited;
        EXPECT_EQ(c.phase, graph::Phase::FORWARD);
        EXPECT_EQ(c.micro_batch, 0); // the chunk's first forward only
        EXPECT_TRUE(c.block == graph::Block::ATTENTION || c.block == graph::Block::LOGITS);
      }
      if (g.participants(t).front() == 0)
        order[0].push_back({t.micro_batch, t.bucket});
    }
    EXPECT_GT(waited, 0);
    // Rank 0 (stage 0, two chunks): each chunk's buckets from the highest index down to 0.
    const auto& seq = order[0];
    ASSERT_EQ(seq.size(), 5u); // chunk 0: embedding and two layers; chunk 1: two layers
    int restarts = 0;
    for (size_t i = 1; i < seq.size(); ++i) {
      if (seq[i].second >= seq[i - 1].second) {
        ++restarts;
      } else {
        EXPECT_EQ(seq[i].second, seq[i - 1].second - 1);
      }
    }
    EXPECT_EQ(restarts, 1) << "one run of buckets per chunk";
    EXPECT_EQ(seq.back().second, 0);
    // Nothing gathers after the optimizer.
    for (graph::TaskId id = 0; id < g.size(); ++id) {
      if (g.task(id).block != graph::Block::OPTIMIZER)
        continue;
      for (graph::TaskId s : g.successors(id)) {
        EXPECT_NE(g.task(s).op, CollectiveOp::ALL_GATHER);
      }
    }
  }
}

// Gradients reduced in fp32 (training.grad_reduce_in_fp32): the gradient reductions carry 4 bytes
// per parameter instead of 2 and the parameter gathers keep the weights' 2. ZeRO-0: an all-reduce
// of gradients, 2x; ZeRO-1: reduce-scatter + gather, (4 + 2) / (2 + 2); ZeRO-3: two gathers and
// a reduce-scatter, (2 + 2 + 4) / (2 + 2 + 2). The ledger's gradients double.
TEST(Zero, GradientsReducedInFp32) {
  WorkloadSpec w = small(2, 2, 4, 3);
  for (const int zero : {0, 1, 3}) {
    w.parallel.zero_stage = zero;
    w.training.grad_reduce_in_fp32 = false;
    const double plain = volume(build(w), 0, CommGroup::DP);
    const double grads = model::persistent_memory(w, test::a100(), 0).gradients.value();
    w.training.grad_reduce_in_fp32 = true;
    const double fp32 = volume(build(w), 0, CommGroup::DP);
    EXPECT_NEAR(fp32 / plain, zero == 0 ? 2.0 : zero == 1 ? 6.0 / 4.0 : 8.0 / 6.0, 1e-9) << "zero " << zero;
    EXPECT_DOUBLE_EQ(model::persistent_memory(w, test::a100(), 0).gradients.value(), 2.0 * grads)
        << "zero " << zero;
  }
}

// fp8 primary weights (training.fp8_params) gather the updated weights in fp8: ZeRO-1's DP
// volume, a gradient reduce-scatter (2 bytes per parameter) plus a weight all-gather, goes from
// 2 + 2 to 2 + 1 bytes; ZeRO-3's forward and backward gathers halve too (2 + 2 + 2 -> 1 + 1 + 2).
TEST(Zero, Fp8PrimaryWeightsGatherInFp8) {
  const int dp = 4;
  WorkloadSpec w = small(2, 2, dp, 3);
  w.precision = Precision::FP8;
  for (const int zero : {1, 3}) {
    w.parallel.zero_stage = zero;
    w.training.fp8_params = false;
    const double plain = volume(build(w), 0, CommGroup::DP);
    w.training.fp8_params = true;
    const double fp8 = volume(build(w), 0, CommGroup::DP);
    EXPECT_NEAR(fp8 / plain, zero == 1 ? 3.0 / 4.0 : 4.0 / 6.0, 1e-9) << "zero " << zero;
  }
}

// ZeRO-3's gathers as fp8 casts (training.fp8_all_gather, torchao's enable_fsdp_float8_all_gather):
// the transformer layers' forward and backward gathers halve, the embedding's stay 16-bit (torchao
// converts the layers' linears only) and the reduce-scatter stays 2 bytes per parameter. Rank 0
// holds stage 0: two layers (D parameters on its TP rank) and the embedding (X): per micro-batch
// 2 + 2 + 2 bytes per parameter become (1 + 1 + 2)·D + (2 + 2 + 2)·X.
TEST(Zero, Fp8AllGatherHalvesTheLayersZero3Gathers) {
  WorkloadSpec w = small(2, 2, 4, 3);
  w.precision = Precision::FP8;
  w.parallel.zero_stage = 3;
  const double plain = volume(build(w), 0, CommGroup::DP);
  w.training.fp8_all_gather = true;
  const double D = 2 * model::layer_params(w.model, 2), X = model::embedding_params(w.model, 2);
  EXPECT_NEAR(volume(build(w), 0, CommGroup::DP) / plain, (4 * D + 6 * X) / (6 * D + 6 * X), 1e-9);
}

// Blocking fetch (training.zero3_fetch): one collective per weight tensor (a GPT layer's QKV,
// projection, fc1 and fc2; the embedding and output tensors with the first and last layers), a
// recomputed layer gathered again for its backward (three gathers of the parameters per step
// against two: 4/3 of the DP volume with the reduce-scatter), every gather after the rank's
// compute so far, and each collective charged the per-rank host time times the DP group's size.
TEST(Zero, Stage3BlockingFetchGathersTensorByTensor) {
  const int dp = 4;
  WorkloadSpec w = small(1, 1, dp, 1); // 4 layers, one stage
  w.parallel.zero_stage = 3;
  w.training.recompute = Recompute::FULL;
  const auto prefetch = build(w);
  w.training.zero3_fetch = Zero3Fetch::BLOCKING;
  graph::BuildOptions o;
  o.compute_time = [](const graph::ComputeQuery&) { return Seconds(1e-3); };
  o.list_collective_per_rank = Seconds(20e-6);
  const auto blocking = graph::build_step(w, o);
  auto dp_tasks = [](const graph::StepProgram& p, CollectiveOp op) {
    std::vector<graph::TaskId> ids;
    for (graph::TaskId id = 0; id < p.graph.size(); ++id) {
      const graph::Task& t = p.graph.task(id);
      if (t.kind == graph::TaskKind::COLLECTIVE && t.group == CommGroup::DP && t.op == op)
        ids.push_back(id);
    }
    return ids;
  };
  const size_t tensors = 4 * 4 + 2; // per layer QKV, proj, fc1, fc2; the embedding, the output layer
  EXPECT_EQ(dp_tasks(prefetch, CollectiveOp::ALL_GATHER).size(), 2u * 4u);
  EXPECT_EQ(dp_tasks(prefetch, CollectiveOp::REDUCE_SCATTER).size(), 4u);
  const auto gathers = dp_tasks(blocking, CollectiveOp::ALL_GATHER);
  EXPECT_EQ(gathers.size(), 3 * tensors);
  EXPECT_EQ(dp_tasks(blocking, CollectiveOp::REDUCE_SCATTER).size(), tensors);
  const double v = volume(prefetch, 0, CommGroup::DP);
  EXPECT_NEAR(volume(blocking, 0, CommGroup::DP), 4.0 / 3.0 * v, 1e-9 * v);
  for (const graph::Task& t : blocking.graph.tasks()) {
    if (t.kind == graph::TaskKind::COLLECTIVE && t.group == CommGroup::DP &&
        t.role == graph::CommRole::NONE && t.op != CollectiveOp::ALL_REDUCE) {
      EXPECT_NEAR(t.duration.value(), dp * 20e-6, 1e-15);
    }
  }
  // Each gather waits for a compute task or the DP collective before it (a layer's first gather
  // for the rank's last compute, the others for their predecessor); none of the prefetching
  // order's gathers ahead of the compute remain: a gather never waits on nothing but comm of an
  // earlier layer.
  size_t after_compute = 0;
  for (graph::TaskId id : gathers) {
    const auto preds = blocking.graph.predecessors(id);
    EXPECT_FALSE(preds.empty() && id != gathers.front()) << "gather " << id;
    for (graph::TaskId pr : preds)
      after_compute += blocking.graph.task(pr).kind == graph::TaskKind::COMPUTE ? 1 : 0;
  }
  // Forward: a layer's first gather after the previous layer's compute (3 of 4 layers; the first
  // has none before it); backward: each layer gathered after the compute before it, and again
  // after its recomputation (4 + 4).
  EXPECT_EQ(after_compute, 3u + 4u + 4u);
}

// ZeRO-3 gathers are annotated with the bytes they bring in, and the compute task that last uses
// the layer frees them: per rank, gathered bytes allocated == freed.
TEST(Zero, Stage3GatheredParametersBalance) {
  WorkloadSpec w = small(1, 2, 4, 3);
  w.parallel.zero_stage = 3;
  const auto prog = build(w, false);
  for (graph::Rank r : prog.simulated_ranks) {
    const auto [alloc, freed] = test::gathered_and_freed(prog, r);
    EXPECT_GT(alloc, 0.0);
    EXPECT_NEAR(alloc, freed, 1e-6 * alloc) << "rank " << r;
  }
}

// Sequence parallelism turns each TP all-reduce into a reduce-scatter plus an all-gather of the
// same payload: twice the collectives, the same bytes sent (2(n-1)/n*S either way); PP messages
// shrink by t.
TEST(SequenceParallel, TpVolumeWithTheBackwardRegather) {
  WorkloadSpec w = small(4, 2, 1, 4);
  const auto plain = build(w);
  w.parallel.sp = true;
  auto tp_tasks = [](const graph::StepProgram& p) {
    size_t k = 0;
    for (const graph::Task& t : p.graph.tasks())
      k += t.group == CommGroup::TP && t.role == graph::CommRole::NONE ? 1 : 0;
    return k;
  };
  // Each all-reduce becomes a reduce-scatter and an all-gather of the same payload (the same
  // volume), and the backward all-gathers each column-parallel linear's input again (QKV, fc1: the
  // forward kept it split): per layer and micro-batch 4 all-reduces (8 (t-1)/t S) become 10
  // collectives (10 (t-1)/t S), with or without the overlap of the backward's collectives.
  for (const bool overlap : {true, false}) {
    w.parallel.tp_grad_overlap = overlap;
    const auto sp = build(w);
    EXPECT_EQ(2 * tp_tasks(sp), 5 * tp_tasks(plain));
    EXPECT_NEAR(volume(sp, 0, CommGroup::TP), 1.25 * volume(plain, 0, CommGroup::TP),
                1e-6 * volume(plain, 0, CommGroup::TP));
    EXPECT_NEAR(volume(sp, 0, CommGroup::PP), volume(plain, 0, CommGroup::PP) / 4.0,
                1e-6 * volume(plain, 0, CommGroup::PP));
  }
}

// Megatron's scatter/gather of pipeline messages: every PP send carries 1/t of the activation,
// and each received message is all-gathered once by the receiving TP group (its full payload,
// (t-1)/t*S sent per rank). With SP the flag changes nothing (the message is already split).
TEST(PipelineScatterGather, SendsShrinkByTAndOneGatherPerMessage) {
  const int t = 4;
  WorkloadSpec w = small(t, 2, 1, 4);
  const auto plain = build(w);
  w.parallel.pp_scatter_gather = true;
  const auto sg = build(w);
  auto tasks = [](const graph::StepProgram& p, CommGroup g, CollectiveOp op) {
    size_t k = 0;
    for (const graph::Task& x : p.graph.tasks())
      k += x.kind == graph::TaskKind::COLLECTIVE && x.group == g && x.op == op ? 1 : 0;
    return k;
  };
  const size_t sends = tasks(plain, CommGroup::PP, CollectiveOp::SEND);
  ASSERT_GT(sends, 0u);
  EXPECT_EQ(tasks(sg, CommGroup::PP, CollectiveOp::SEND), sends);
  EXPECT_EQ(tasks(plain, CommGroup::TP, CollectiveOp::ALL_GATHER), 0u);
  EXPECT_EQ(tasks(sg, CommGroup::TP, CollectiveOp::ALL_GATHER), sends / t); // one per TP group message
  EXPECT_NEAR(volume(sg, 0, CommGroup::PP), volume(plain, 0, CommGroup::PP) / t,
              1e-9 * volume(plain, 0, CommGroup::PP));
  // Rank 0 (stage 0) receives m gradient messages; stage 1 rank receives m activations. Each
  // gather moves (t-1)/t of the full b*s*h message on top of the TP collectives.
  const double full = model::tp_collective_bytes(w).value();
  const double gathered = 4.0 * (t - 1.0) / t * full;
  EXPECT_NEAR(volume(sg, 0, CommGroup::TP) - volume(plain, 0, CommGroup::TP), gathered, 1e-9 * gathered);
  EXPECT_TRUE(sg.graph.finalized());

  w.parallel.sp = true;
  const auto with_sp = build(w);
  w.parallel.pp_scatter_gather = false;
  const auto sp_only = build(w);
  EXPECT_EQ(with_sp.graph.tasks().size(), sp_only.graph.tasks().size());
  EXPECT_NEAR(volume(with_sp, 0, CommGroup::PP), volume(sp_only, 0, CommGroup::PP), 0.0);
}

// Full recomputation adds one forward of every layer before its backward (2 tasks per layer per
// micro-batch) and its 2 TP all-reduces; selective adds no task (the attention core's FLOPs go
// into the attention backward).
TEST(Recompute, FullAddsAForwardPerLayer) {
  const int64_t m = 5;
  WorkloadSpec w = small(2, 2, 1, m);
  const auto none = build(w);
  w.training.recompute = Recompute::FULL;
  const auto full = build(w);
  const int64_t layers_per_stage = w.model.layers / 2;
  EXPECT_EQ(count(none, 0, graph::Phase::RECOMPUTE), 0u);
  EXPECT_EQ(count(full, 0, graph::Phase::RECOMPUTE), static_cast<size_t>(2 * layers_per_stage * m));
  const double tp_none = volume(none, 0, CommGroup::TP), tp_full = volume(full, 0, CommGroup::TP);
  EXPECT_NEAR(tp_full, tp_none * 6.0 / 4.0, 1e-6 * tp_none); // 4 all-reduces per layer become 6
  w.training.recompute = Recompute::SELECTIVE;
  const auto sel = build(w);
  EXPECT_EQ(count(sel, 0, graph::Phase::RECOMPUTE), 0u);
  double bwd_attn_none = 0, bwd_attn_sel = 0;
  for (const graph::Task& t : none.graph.tasks())
    if (t.rank == 0 && t.phase == graph::Phase::BACKWARD && t.block == graph::Block::ATTENTION)
      bwd_attn_none += t.flops.value();
  for (const graph::Task& t : sel.graph.tasks())
    if (t.rank == 0 && t.phase == graph::Phase::BACKWARD && t.block == graph::Block::ATTENTION)
      bwd_attn_sel += t.flops.value();
  const double core = model::attention_core_flops(w.model, 1, 2).value() * layers_per_stage * m;
  EXPECT_NEAR(bwd_attn_sel - bwd_attn_none, core, 1e-6 * core);
}

// Every rank's activation allocations are freed by the end of the step.
TEST(MemoryAnnotations, ActivationsBalancePerRank) {
  for (const Recompute rc : {Recompute::NONE, Recompute::SELECTIVE, Recompute::FULL}) {
    WorkloadSpec w = small(2, 2, 2, 4);
    w.training.recompute = rc;
    expect_activations_balance(build(w));
  }
}

// Full recomputation of the first N layers of each model chunk (training.recompute_layers,
// Megatron's block method): N layers' recompute tasks per micro-batch (2 per layer) and their TP
// collectives (2 more all-reduces each); the other layers keep everything and are not repeated.
// Every rank's allocations are still freed, and a layer past the recomputed ones allocates the
// whole working set in its forward.
TEST(Recompute, FirstLayersOfEachChunkOnly) {
  const int64_t m = 4;
  WorkloadSpec w = test::workload(test::small_gpt(8), 2, 2, 1, m, 1, Schedule::INTERLEAVED);
  w.parallel.vp = 2; // 2 chunks of 2 layers per stage
  w.training.recompute = Recompute::FULL;
  const auto all = build(w);
  w.training.recompute_layers = 1;
  const auto first = build(w);
  w.training.recompute = Recompute::NONE;
  w.training.recompute_layers = 0;
  const auto none = build(w);
  EXPECT_EQ(count(all, 0, graph::Phase::RECOMPUTE), static_cast<size_t>(2 * 4 * m));
  EXPECT_EQ(count(first, 0, graph::Phase::RECOMPUTE), static_cast<size_t>(2 * 2 * m)); // 1 of 2 per chunk
  const double tp_none = volume(none, 0, CommGroup::TP), tp_first = volume(first, 0, CommGroup::TP);
  EXPECT_NEAR(tp_first, tp_none * 5.0 / 4.0, 1e-6 * tp_none); // half the layers add 2 to 4
  expect_activations_balance(first);
  // Stage 0 holds layers 0, 1 (chunk 0) and 4, 5 (chunk 1): layer 0 keeps its input, layer 1 all.
  WorkloadSpec full = w;
  full.training.recompute = Recompute::FULL;
  const double input = model::stored_layer_activations(full).total().value();
  const double plain = model::recompute_working_set(full).total().value();
  double fwd_alloc[2] = {0, 0};
  for (const graph::Task& t : first.graph.tasks())
    if (t.rank == 0 && t.phase == graph::Phase::FORWARD && t.micro_batch == 0 &&
        (t.layer == 0 || t.layer == 1))
      fwd_alloc[t.layer] += t.act_alloc.value();
  EXPECT_NEAR(fwd_alloc[0], input, 1e-6 * input);
  EXPECT_NEAR(fwd_alloc[1], plain, 1e-6 * plain);
  EXPECT_GT(plain, 2.0 * input);
}
