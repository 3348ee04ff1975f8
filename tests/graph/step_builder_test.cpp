// build_step: the DAG of one training step against the closed forms of MODEL.md §4 (bytes per
// step per group) and the structure the engine relies on (stream chains, schedule order,
// producer -> send -> consumer edges, DP buckets after their gradients, fold_dp).

#include "common/specs.hpp"
#include "core/error.hpp"
#include "graph/schedule.hpp"
#include "graph/step_builder.hpp"
#include "model/transformer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;

namespace {

/// Compute time: 1 ms forward blocks, 2 ms backward, 0.1 ms logits, 0.5 ms optimizer.
Seconds fixed_time(const ComputeQuery& q) {
  switch (q.block) {
  case Block::LOGITS:
    return Seconds(1e-4);
  case Block::OPTIMIZER:
    return Seconds(5e-4);
  default:
    return Seconds(q.phase == Phase::BACKWARD ? 2e-3 : 1e-3);
  }
}

StepProgram build(const WorkloadSpec& w, bool fold = true) {
  BuildOptions o;
  o.fold_dp = fold;
  o.compute_time = fixed_time;
  return build_step(w, o);
}

/// tp=2, pp=4, dp=2, 8 layers (2 per stage), m=8 micro-batches of 2 sequences. One compute task
/// per block and pass, each block's TP collective after it (TpGradOverlap.* split the backward).
WorkloadSpec standard(Schedule s = Schedule::ONE_F_ONE_B) {
  WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(8), 2, 4, 2, 8, 2, s);
  w.training.dp_bucket = Bytes(8.0 * 1024 * 1024); // several buckets per stage
  w.parallel.tp_grad_overlap = false;
  return w;
}

std::vector<Rank> ranks_of(const StepGraph& g, const Task& t) {
  const auto p = g.participants(t);
  return {p.begin(), p.end()};
}

/// Whether `to` is reachable from `from` along successor edges.
bool reaches(const StepGraph& g, TaskId from, TaskId to) {
  std::vector<char> seen(g.size(), 0);
  std::vector<TaskId> stack{from};
  while (!stack.empty()) {
    const TaskId t = stack.back();
    stack.pop_back();
    if (t == to)
      return true;
    for (TaskId s : g.successors(t))
      if (!seen[s]) {
        seen[s] = 1;
        stack.push_back(s);
      }
  }
  return false;
}

bool has_edge(const StepGraph& g, TaskId a, TaskId b) {
  for (TaskId s : g.successors(a))
    if (s == b)
      return true;
  return false;
}

/// Compute tasks per rank, in id (= issue) order.
std::map<Rank, std::vector<TaskId>> compute_by_rank(const StepGraph& g) {
  std::map<Rank, std::vector<TaskId>> out;
  for (TaskId id = 0; id < g.size(); ++id)
    if (g.task(id).kind == TaskKind::COMPUTE)
      out[g.task(id).rank].push_back(id);
  return out;
}

} // namespace

// RankGrid is Megatron order: tp fastest, then dp, then pp; the inverse maps agree.
TEST(RankGrid, MegatronOrder) {
  const RankGrid g{4, 3, 2};
  EXPECT_EQ(g.size(), 24);
  EXPECT_EQ(g.rank(0, 0, 1), 1);
  EXPECT_EQ(g.rank(1, 0, 0), 4);
  EXPECT_EQ(g.rank(0, 1, 0), 8);
  for (Rank r = 0; r < g.size(); ++r)
    EXPECT_EQ(g.rank(g.dp_of(r), g.pp_of(r), g.tp_of(r)), r);
}

TEST(BuildStep, RequiresComputeTime) {
  BuildOptions o;
  EXPECT_THROW(build_step(standard(), o), ModelError);
}

// A graph that could not be held in memory is refused before any of it is allocated: 2^40 layers
// (a typo) would otherwise exhaust the machine. The standard layout simulates 8 GPUs (tp 2 x pp 4,
// DP folded) with 16 passes each: 32 layer passes per model layer, so the 10^7 limit falls
// between 312 500 and 312 504 layers (only the refusals are built here).
TEST(BuildStep, RefusesGraphsTooLargeToHold) {
  for (const int64_t layers : {int64_t{1} << 40, int64_t{312504}}) {
    WorkloadSpec w = standard();
    w.model.layers = layers;
    try {
      (void)build(w);
      ADD_FAILURE() << "built a graph of " << layers << " layers";
    } catch (const ModelError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("x 16 passes x 8 simulated GPUs"), std::string::npos) << msg;
      EXPECT_NE(msg.find("model.layers"), std::string::npos) << msg;
    }
  }
  EXPECT_NO_THROW((void)build(standard()));
  // Context parallelism's ring steps multiply the tasks of each layer pass. Folded, CP index 0
  // is simulated and the other CP ranks' sends are copied (cp^2 + 3 tasks a pass, bounded): cp 8
  // keeps the 8 simulated GPUs and charges 67 tasks a pass, so 3/67 of the layers reach it.
  // Unfolded, every CP rank of both DP replicas is simulated (16 times the GPUs) at 3 cp = 24
  // tasks a pass: 1/128 of the layers.
  WorkloadSpec ring = standard();
  ring.parallel.cp = 8;
  ring.model.layers = 312504 * 3 / 67 + 4;
  BuildOptions folding;
  folding.gpus_per_node = 2; // tp 2: each CP rank's TP group on a node of its own
  folding.compute_time = fixed_time;
  try {
    (void)build_step(ring, folding);
    ADD_FAILURE() << "built a folded cp 8 graph past the task limit";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("of about 67 tasks each"), std::string::npos) << e.what();
  }
  ring.model.layers = 312504 / 128 + 4;
  try {
    (void)build(ring, false);
    ADD_FAILURE() << "built an unfolded cp 8 graph past the task limit";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("of about 24 tasks each"), std::string::npos) << e.what();
  }
}

// Per simulated rank: (l/pp) layers x m micro-batches x 4 blocks (attention and MLP, forward
// and backward), plus 2m logits tasks on the last stage, plus one optimizer step. With fold_dp
// only replica 0 is simulated.
TEST(BuildStep, TaskCountsPerRank) {
  for (Schedule s : {Schedule::GPIPE, Schedule::ONE_F_ONE_B}) {
    const WorkloadSpec w = standard(s);
    const StepProgram prog = build(w);
    EXPECT_EQ(prog.micro_batches, 8);
    std::vector<Rank> expected_ranks;
    for (int p = 0; p < 4; ++p)
      for (int t = 0; t < 2; ++t)
        expected_ranks.push_back(prog.grid.rank(0, p, t));
    std::sort(expected_ranks.begin(), expected_ranks.end());
    EXPECT_EQ(prog.simulated_ranks, expected_ranks);
    const auto by_rank = compute_by_rank(prog.graph);
    EXPECT_EQ(by_rank.size(), expected_ranks.size());
    for (const auto& [r, ids] : by_rank) {
      const int stage = prog.grid.pp_of(r);
      EXPECT_EQ(prog.grid.dp_of(r), 0);
      const size_t expected = 2 * 8 * 4 + (stage == 3 ? 2 * 8 : 0) + 1;
      EXPECT_EQ(ids.size(), expected) << "rank " << r;
      int logits = 0, opt = 0;
      for (TaskId id : ids) {
        const Task& t = prog.graph.task(id);
        logits += t.block == Block::LOGITS;
        opt += t.block == Block::OPTIMIZER;
        EXPECT_EQ(t.stage, stage);
      }
      EXPECT_EQ(logits, stage == 3 ? 16 : 0);
      EXPECT_EQ(opt, 1);
    }
  }
}

// Compute task durations and FLOPs come from the cost model: attention/MLP forward FLOPs are the
// per-TP-rank block FLOPs, backward twice that.
TEST(BuildStep, ComputeCostsFromModel) {
  const WorkloadSpec w = standard();
  const StepProgram prog = build(w);
  for (const Task& t : prog.graph.tasks()) {
    if (t.kind != TaskKind::COMPUTE)
      continue;
    const double k = t.phase == Phase::BACKWARD ? 2.0 : 1.0;
    switch (t.block) {
    case Block::ATTENTION:
      EXPECT_DOUBLE_EQ(t.flops.value(), k * model::attention_block_forward_flops(w.model, 2, 2).value());
      EXPECT_DOUBLE_EQ(t.duration.value(), k * 1e-3);
      break;
    case Block::MLP:
      EXPECT_DOUBLE_EQ(t.flops.value(), k * model::mlp_block_forward_flops(w.model, 2, 2).value());
      EXPECT_DOUBLE_EQ(t.duration.value(), k * 1e-3);
      break;
    case Block::LOGITS:
      EXPECT_DOUBLE_EQ(t.flops.value(), k * model::logits_forward_flops(w.model, 2, 2).value());
      break;
    case Block::OPTIMIZER:
      EXPECT_EQ(t.phase, Phase::OPTIMIZER);
      EXPECT_DOUBLE_EQ(t.duration.value(), 5e-4);
      break;
    default:
      ADD_FAILURE() << "compute task without a block";
    }
  }
}

// gpu.pass_overhead: each pass (one micro-batch through one chunk, forward or backward) charges
// the overhead once, to its first compute task, on every rank: a rank's compute time grows by
// 2·m·v·x exactly (x = overhead), whatever the schedule; the optimizer is not a pass.
TEST(BuildStep, PassOverheadChargedOncePerPass) {
  for (Schedule s : {Schedule::ONE_F_ONE_B, Schedule::INTERLEAVED}) {
    WorkloadSpec w = standard(s);
    if (s == Schedule::INTERLEAVED)
      w.parallel.vp = 2;
    const StepProgram plain = build(w);
    BuildOptions o;
    o.compute_time = fixed_time;
    o.pass_overhead = Seconds(3e-4);
    const StepProgram charged = build_step(w, o);
    ASSERT_EQ(plain.graph.size(), charged.graph.size());
    std::map<Rank, double> extra;
    int charged_tasks = 0;
    for (TaskId id = 0; id < plain.graph.size(); ++id) {
      const Task& a = plain.graph.task(id);
      const Task& b = charged.graph.task(id);
      if (a.kind != TaskKind::COMPUTE)
        continue;
      const double d = b.duration.value() - a.duration.value();
      if (d != 0) {
        EXPECT_NEAR(d, 3e-4, 1e-15);
        EXPECT_NE(b.block, Block::OPTIMIZER);
        ++charged_tasks;
      }
      extra[a.rank] += d;
    }
    const double passes = 2.0 * 8 * std::max(1, w.parallel.vp);
    for (const auto& [r, e] : extra)
      EXPECT_NEAR(e, passes * 3e-4, 1e-12) << "rank " << r;
    EXPECT_EQ(charged_tasks, static_cast<int>(passes) * static_cast<int>(extra.size()));
  }
}

// training.grad_accumulation: fp32_pass ends every backward pass (each micro-batch of each model
// chunk) with one accumulation task per rank (block OPTIMIZER in phase BACKWARD), costing the
// rank's held gradients' pass (here fixed_time's 0.5 ms) split evenly over its chunks; everything
// else is as without it, and the backward send of a stage below the last waits for it.
TEST(BuildStep, Fp32GradAccumulationEndsEveryBackwardPass) {
  for (Schedule sched : {Schedule::ONE_F_ONE_B, Schedule::INTERLEAVED}) {
    WorkloadSpec w = standard(sched);
    if (sched == Schedule::INTERLEAVED)
      w.parallel.vp = 2;
    const StepProgram fused = build(w);
    w.training.grad_accumulation = GradAccumulation::FP32_PASS;
    const StepProgram prog = build(w);
    const StepGraph& g = prog.graph;
    const int vp = std::max(1, w.parallel.vp);
    std::map<Rank, int> per_rank;
    for (TaskId id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      if (t.kind != TaskKind::COMPUTE || t.block != Block::OPTIMIZER || t.phase != Phase::BACKWARD)
        continue;
      ++per_rank[t.rank];
      EXPECT_NEAR(t.duration.value(), 5e-4 / vp, 1e-15);
      EXPECT_GE(t.micro_batch, 0);
      if (t.stage == 0)
        continue;
      bool sent = false; // its pass's backward send to the stage below follows it
      for (TaskId s : g.successors(id)) {
        const Task& c = g.task(s);
        sent = sent || (c.kind == TaskKind::COLLECTIVE && c.group == CommGroup::PP &&
                        c.phase == Phase::BACKWARD && c.micro_batch == t.micro_batch);
      }
      EXPECT_TRUE(sent) << "accumulation task " << id;
    }
    const int m = 8;
    ASSERT_FALSE(per_rank.empty());
    for (const auto& [r, n] : per_rank)
      EXPECT_EQ(n, m * vp) << "rank " << r;
    size_t ranks_with_compute = 0;
    std::set<Rank> seen;
    for (TaskId id = 0; id < fused.graph.size(); ++id)
      if (fused.graph.task(id).kind == TaskKind::COMPUTE && seen.insert(fused.graph.task(id).rank).second)
        ++ranks_with_compute;
    EXPECT_EQ(per_rank.size(), ranks_with_compute);
    EXPECT_EQ(g.size(), fused.graph.size() + static_cast<size_t>(m * vp) * per_rank.size());
  }
}

// Stream order: each rank's compute tasks form a chain (edge from each to the next in issue
// order), the chain follows the stage's schedule (first-layer attention forward / last-layer
// MLP backward of each pass in stage_order), and the optimizer comes last.
TEST(BuildStep, ComputeChainFollowsSchedule) {
  for (Schedule s : {Schedule::GPIPE, Schedule::ONE_F_ONE_B}) {
    const WorkloadSpec w = standard(s);
    const StepProgram prog = build(w);
    for (const auto& [r, ids] : compute_by_rank(prog.graph)) {
      for (size_t i = 1; i < ids.size(); ++i)
        EXPECT_TRUE(has_edge(prog.graph, ids[i - 1], ids[i])) << "rank " << r << " task " << ids[i];
      EXPECT_EQ(prog.graph.task(ids.back()).block, Block::OPTIMIZER);
      const int stage = prog.grid.pp_of(r);
      const int first_layer = 2 * stage;
      std::vector<PassRef> seen;
      for (TaskId id : ids) {
        const Task& t = prog.graph.task(id);
        if (t.layer == first_layer && t.block == Block::ATTENTION && t.phase == Phase::FORWARD)
          seen.push_back({Phase::FORWARD, t.micro_batch});
        if (t.layer == first_layer + 1 && t.block == Block::MLP && t.phase == Phase::BACKWARD)
          seen.push_back({Phase::BACKWARD, t.micro_batch});
      }
      const auto want = stage_order(s, stage, 4, 8);
      ASSERT_EQ(seen.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k)
        EXPECT_TRUE(seen[k].phase == want[k].phase && seen[k].micro_batch == want[k].micro_batch)
            << "rank " << r << " pass " << k;
    }
  }
}

// MODEL.md §4, TP: 2 all-reduces of b s h 2 bytes per layer per micro-batch forward and 2
// backward: per TP group per step 4 (l/pp) m b s h 2 bytes; each waits for the producing
// compute on every TP rank and the next compute on every TP rank waits for it. Outside the
// layers (Megatron's vocabulary-parallel embedding and output layer): the first stage sums the
// embedding's output (one b s h 2 all-reduce per micro-batch, before layer 0), the last stage the
// output layer's input gradient (one per micro-batch, after the logits' backward) and the
// cross-entropy's three per-token fp32 values (3 all-reduces of b s 4 bytes after the logits'
// forward).
TEST(BuildStep, TpBytesPerGroup) {
  const WorkloadSpec w = standard();
  const StepProgram prog = build(w);
  const StepGraph& g = prog.graph;
  std::map<std::vector<Rank>, double> bytes;
  std::map<std::vector<Rank>, int> count;
  std::map<std::pair<CommRole, int>, std::vector<double>> outside; // (role, stage) -> bytes
  const double b = 2, s = 512, h = 1024, l = 8, pp = 4, m = 8;
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.kind != TaskKind::COLLECTIVE || t.group != CommGroup::TP)
      continue;
    EXPECT_EQ(t.op, CollectiveOp::ALL_REDUCE);
    EXPECT_EQ(t.stream, Stream::TP_COMM);
    const auto ranks = ranks_of(g, t);
    if (t.role != CommRole::NONE) {
      outside[{t.role, t.stage}].push_back(t.bytes.value());
      ASSERT_EQ(ranks.size(), 2u);
      std::set<Rank> consumers;
      for (TaskId c : g.successors(id)) {
        if (g.task(c).kind != TaskKind::COMPUTE)
          continue;
        consumers.insert(g.task(c).rank);
        if (t.role == CommRole::EMBEDDING) { // layer 0's forward waits for it
          EXPECT_TRUE(g.task(c).layer == 0 && g.task(c).phase == Phase::FORWARD &&
                      g.task(c).micro_batch == t.micro_batch);
        }
      }
      for (TaskId p : g.predecessors(id)) {
        if (g.task(p).kind == TaskKind::COMPUTE && t.role == CommRole::LOGITS) {
          EXPECT_TRUE(g.task(p).block == Block::LOGITS && g.task(p).phase == Phase::BACKWARD);
        }
      }
      if (t.role == CommRole::EMBEDDING || t.role == CommRole::LOGITS) {
        EXPECT_EQ(consumers, std::set<Rank>(ranks.begin(), ranks.end()));
      }
      continue;
    }
    bytes[ranks] += t.bytes.value();
    ++count[ranks];
    // Producers on every TP rank; consumers on every TP rank (or end of pass / step).
    std::set<Rank> producers;
    for (TaskId p : g.predecessors(id))
      if (g.task(p).kind == TaskKind::COMPUTE) {
        producers.insert(g.task(p).rank);
        EXPECT_EQ(g.task(p).layer, t.layer);
        EXPECT_EQ(g.task(p).micro_batch, t.micro_batch);
        EXPECT_EQ(g.task(p).phase, t.phase);
      }
    EXPECT_EQ(producers, std::set<Rank>(ranks.begin(), ranks.end()));
    // (Or through the collectives outside the layers that follow it: a pass's trailing all-reduce
    // on the first stage precedes the next forward's embedding all-reduce, which layer 0 waits
    // for; the step's last one precedes the gradient norm's, which the optimizer waits for.)
    std::set<Rank> consumers;
    std::vector<TaskId> next(g.successors(id).begin(), g.successors(id).end());
    while (!next.empty()) {
      const TaskId s = next.back();
      next.pop_back();
      if (g.task(s).kind == TaskKind::COMPUTE)
        consumers.insert(g.task(s).rank);
      else if (g.task(s).role != CommRole::NONE)
        next.insert(next.end(), g.successors(s).begin(), g.successors(s).end());
    }
    EXPECT_TRUE(std::includes(consumers.begin(), consumers.end(), ranks.begin(), ranks.end()))
        << "all-reduce " << id;
  }
  EXPECT_EQ(bytes.size(), 4u); // one TP group per stage (replica 0 only)
  for (const auto& [ranks, total] : bytes) {
    ASSERT_EQ(ranks.size(), 2u);
    EXPECT_EQ(ranks[1], ranks[0] + 1);
    EXPECT_EQ(total, 4 * (l / pp) * m * b * s * h * 2);
    EXPECT_EQ(count[ranks], 4 * 2 * 8);
  }
  EXPECT_EQ(outside.size(), 3u);
  EXPECT_EQ(outside[std::pair(CommRole::EMBEDDING, 0)], std::vector<double>(8, b * s * h * 2));
  EXPECT_EQ(outside[std::pair(CommRole::LOGITS, 3)], std::vector<double>(8, b * s * h * 2));
  EXPECT_EQ(outside[std::pair(CommRole::LOSS, 3)], std::vector<double>(3 * 8, b * s * 4));
}

// MODEL.md §4, PP: per stage boundary per TP rank, b s h 2 bytes forward and the same backward
// per micro-batch: 2 m b s h 2 bytes per step. Each send goes from its producer's output to the
// first compute of the same micro-batch and phase on the neighbour stage.
TEST(BuildStep, PpBytesPerBoundary) {
  for (Schedule sched : {Schedule::GPIPE, Schedule::ONE_F_ONE_B}) {
    const WorkloadSpec w = standard(sched);
    const StepProgram prog = build(w);
    const StepGraph& g = prog.graph;
    std::map<std::pair<int, int>, double> bytes; // (lower stage, tp rank) -> bytes
    for (TaskId id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      if (t.kind != TaskKind::COLLECTIVE || t.group != CommGroup::PP || t.role == CommRole::TIED_EMBEDDING)
        continue;
      EXPECT_EQ(t.op, CollectiveOp::SEND);
      EXPECT_EQ(t.stream, Stream::PP_COMM);
      const auto ranks = ranks_of(g, t);
      ASSERT_EQ(ranks.size(), 2u);
      const int src_stage = prog.grid.pp_of(ranks[0]), dst_stage = prog.grid.pp_of(ranks[1]);
      EXPECT_EQ(src_stage, t.stage);
      EXPECT_EQ(prog.grid.tp_of(ranks[0]), prog.grid.tp_of(ranks[1]));
      EXPECT_EQ(dst_stage, t.phase == Phase::FORWARD ? src_stage + 1 : src_stage - 1);
      bytes[{std::min(src_stage, dst_stage), prog.grid.tp_of(ranks[0])}] += t.bytes.value();
      // The consumer: first compute of the same micro-batch and phase on the destination.
      bool consumer = false;
      for (TaskId s : g.successors(id)) {
        const Task& c = g.task(s);
        if (c.kind == TaskKind::COMPUTE && c.rank == ranks[1] && c.micro_batch == t.micro_batch &&
            c.phase == t.phase)
          consumer = true;
      }
      EXPECT_TRUE(consumer) << "send " << id;
      // The producer: a compute of the same micro-batch and phase on the source.
      bool producer = false;
      for (TaskId p : g.predecessors(id)) {
        const Task& c = g.task(p);
        if (c.kind == TaskKind::COMPUTE && c.rank == ranks[0] && c.micro_batch == t.micro_batch &&
            c.phase == t.phase)
          producer = true;
      }
      EXPECT_TRUE(producer) << "send " << id;
    }
    const double b = 2, s = 512, h = 1024, m = 8;
    EXPECT_EQ(bytes.size(), 3u * 2u);
    for (const auto& [key, total] : bytes)
      EXPECT_EQ(total, 2 * m * b * s * h * 2) << "boundary " << key.first << " tp " << key.second;
  }
}

// A stage's output crosses the boundary only after its trailing TP all-reduce: each forward send
// (tp > 1) is reachable from the all-reduce of the last local layer's MLP of that micro-batch.
TEST(BuildStep, SendWaitsForTrailingTpAllReduce) {
  const WorkloadSpec w = standard();
  const StepProgram prog = build(w);
  const StepGraph& g = prog.graph;
  std::map<std::tuple<int, int, int>, TaskId> last_ar; // (stage, mb, phase) -> TP all-reduce
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.group == CommGroup::TP && ((t.phase == Phase::FORWARD && t.layer == 2 * t.stage + 1) ||
                                     (t.phase == Phase::BACKWARD && t.layer == 2 * t.stage)))
      last_ar[{t.stage, t.micro_batch, static_cast<int>(t.phase)}] = id; // the later one wins
  }
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.group != CommGroup::PP || t.op != CollectiveOp::SEND)
      continue;
    const auto it = last_ar.find({t.stage, t.micro_batch, static_cast<int>(t.phase)});
    ASSERT_NE(it, last_ar.end());
    EXPECT_TRUE(reaches(g, it->second, id)) << "send " << id;
  }
}

// MODEL.md §4, DP: per (stage, tp rank), the gradient buckets all-reduce 2 bytes per parameter
// held: sum of bucket bytes = 2 params_on_rank(stage); every bucket but the last reaches the
// bucket size; buckets span the whole DP group in rank order; each bucket starts after the last
// backward pass has produced its gradients, and the optimizer waits for every bucket.
TEST(BuildStep, DpBucketsCoverGradients) {
  for (bool fold : {true, false}) {
    const WorkloadSpec w = standard();
    const StepProgram prog = build(w, fold);
    const StepGraph& g = prog.graph;
    std::map<std::pair<int, int>, std::vector<TaskId>> buckets;
    for (TaskId id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      if (t.group != CommGroup::DP || t.role == CommRole::GRAD_NORM)
        continue;
      EXPECT_EQ(t.op, CollectiveOp::ALL_REDUCE);
      EXPECT_EQ(t.stream, Stream::DP_COMM);
      const auto ranks = ranks_of(g, t);
      ASSERT_EQ(ranks.size(), 2u);
      const int tpr = prog.grid.tp_of(ranks[0]);
      for (int d = 0; d < 2; ++d)
        EXPECT_EQ(ranks[static_cast<size_t>(d)], prog.grid.rank(d, t.stage, tpr));
      buckets[{t.stage, tpr}].push_back(id);
    }
    EXPECT_EQ(buckets.size(), 8u);
    for (const auto& [key, ids] : buckets) {
      double total = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        total += g.task(ids[i]).bytes.value();
        if (i + 1 < ids.size()) {
          EXPECT_GE(g.task(ids[i]).bytes.value(), w.training.dp_bucket.value());
        }
      }
      EXPECT_GT(ids.size(), 1u);
      EXPECT_NEAR(total, 2 * model::params_on_rank(w, key.first), 1e-12 * total) << "stage " << key.first;
      // Every simulated replica: the bucket follows the backward of the micro-batch processed
      // last, and the optimizer of that rank follows every bucket.
      for (int d = 0; d < (fold ? 1 : 2); ++d) {
        const Rank r = prog.grid.rank(d, key.first, key.second);
        TaskId last_bwd = 0, opt = 0;
        for (TaskId id = 0; id < g.size(); ++id) {
          const Task& t = g.task(id);
          if (t.kind == TaskKind::COMPUTE && t.rank == r && t.phase == Phase::BACKWARD)
            last_bwd = id;
          if (t.kind == TaskKind::COMPUTE && t.rank == r && t.block == Block::OPTIMIZER)
            opt = id;
        }
        EXPECT_TRUE(reaches(g, last_bwd, ids.back()));
        for (TaskId b : ids)
          EXPECT_TRUE(reaches(g, b, opt)) << "bucket " << b << " -> optimizer of rank " << r;
      }
    }
  }
}

// fold_dp = false: every replica's compute exists (every rank simulated, same task counts as
// replica 0), TP and PP traffic per replica as in the folded graph, DP buckets unchanged; each
// replica's gradient norm all-reduce (over its own tp*pp GPUs) is its own.
TEST(BuildStep, NoFoldSimulatesEveryReplica) {
  const WorkloadSpec w = standard();
  const StepProgram folded = build(w, true);
  const StepProgram full = build(w, false);
  std::vector<Rank> all(16);
  for (Rank r = 0; r < 16; ++r)
    all[static_cast<size_t>(r)] = r;
  EXPECT_EQ(full.simulated_ranks, all);
  const auto by_rank = compute_by_rank(full.graph);
  EXPECT_EQ(by_rank.size(), 16u);
  for (const auto& [r, ids] : by_rank)
    EXPECT_EQ(
        ids.size(),
        compute_by_rank(folded.graph).at(full.grid.rank(0, full.grid.pp_of(r), full.grid.tp_of(r))).size());
  auto count = [](const StepGraph& g, CommGroup grp, bool norm = false) {
    size_t n = 0;
    for (const Task& t : g.tasks())
      n += t.group == grp && (t.role == CommRole::GRAD_NORM) == norm;
    return n;
  };
  EXPECT_EQ(count(full.graph, CommGroup::TP), 2 * count(folded.graph, CommGroup::TP));
  EXPECT_EQ(count(full.graph, CommGroup::PP), 2 * count(folded.graph, CommGroup::PP));
  EXPECT_EQ(count(full.graph, CommGroup::DP), count(folded.graph, CommGroup::DP));
  EXPECT_EQ(count(folded.graph, CommGroup::DP, true), 1u);
  EXPECT_EQ(count(full.graph, CommGroup::DP, true), 2u);
  EXPECT_EQ(full.graph.size(), 2 * folded.graph.size() - count(folded.graph, CommGroup::DP));
}

// The collectives outside the layers with sequence parallelism (Megatron-Core): the embedding's
// output is reduce-scattered and layer 0's input all-gathered, the output layer's input gradient
// reduce-scattered and the last layer's output gradient all-gathered, b s h 2 bytes each, once per
// micro-batch; then at the end of the step (finalize_model_grads and the gradient clipping), after
// every GPU's last DP bucket: per stage one TP all-reduce of the gradients SP leaves partial (per
// layer two LayerNorms, 2h each, and the two row-parallel biases, h each; the final LayerNorm on
// the last stage), per TP rank one all-reduce of the tied embedding's gradient (V h / t) between
// the first and the last stage, and one all-reduce of the gradient norm (one fp32) over the
// replica's t p GPUs, which every optimizer waits for; fp16 adds the overflow check's.
TEST(BuildStep, CollectivesOutsideTheLayers) {
  for (Precision precision : {Precision::BF16, Precision::FP16}) {
    WorkloadSpec w = standard();
    w.parallel.sp = true;
    w.precision = precision;
    const StepProgram prog = build(w);
    const StepGraph& g = prog.graph;
    const double b = 2, s = 512, h = 1024, v = 32000, t = 2, m = 8;
    std::map<std::tuple<CommRole, CollectiveOp, int>, std::vector<double>> seen; // (role, op, stage) -> bytes
    std::vector<TaskId> norms;
    for (TaskId id = 0; id < g.size(); ++id) {
      const Task& task = g.task(id);
      if (task.kind != TaskKind::COLLECTIVE || task.role == CommRole::NONE)
        continue;
      seen[{task.role, task.op, task.stage}].push_back(task.bytes.value());
      const auto ranks = ranks_of(g, task);
      switch (task.role) {
      case CommRole::TIED_EMBEDDING:
        ASSERT_EQ(ranks.size(), 2u);
        EXPECT_EQ(prog.grid.pp_of(ranks[0]), 0);
        EXPECT_EQ(prog.grid.pp_of(ranks[1]), 3);
        EXPECT_EQ(prog.grid.tp_of(ranks[0]), prog.grid.tp_of(ranks[1]));
        break;
      case CommRole::GRAD_NORM: {
        EXPECT_EQ(ranks.size(), 8u); // t * p of replica 0
        norms.push_back(id);
        // After every GPU's DP buckets.
        for (TaskId other = 0; other < g.size(); ++other)
          if (g.task(other).group == CommGroup::DP && g.task(other).bucket >= 0 &&
              g.task(other).phase == Phase::BACKWARD) {
            EXPECT_TRUE(reaches(g, other, id)) << "bucket " << other;
          }
        break;
      }
      default:
        EXPECT_EQ(ranks.size(), 2u);
        break; // a TP group
      }
    }
    const std::vector<double> per_mb(8, b * s * h * 2);
    EXPECT_EQ((seen[{CommRole::EMBEDDING, CollectiveOp::REDUCE_SCATTER, 0}]), per_mb);
    EXPECT_EQ((seen[{CommRole::EMBEDDING, CollectiveOp::ALL_GATHER, 0}]), per_mb);
    EXPECT_EQ((seen[{CommRole::LOGITS, CollectiveOp::REDUCE_SCATTER, 3}]), per_mb);
    EXPECT_EQ((seen[{CommRole::LOGITS, CollectiveOp::ALL_GATHER, 3}]), per_mb);
    EXPECT_EQ((seen[{CommRole::LOSS, CollectiveOp::ALL_REDUCE, 3}]), std::vector<double>(3 * m, b * s * 4));
    for (int stage = 0; stage < 4; ++stage)
      EXPECT_EQ((seen[{CommRole::NORM_GRADS, CollectiveOp::ALL_REDUCE, stage}]),
                std::vector<double>(1, (2 * (2 * 2 * h + 2 * h) + (stage == 3 ? 2 * h : 0)) * 2))
          << "stage " << stage;
    EXPECT_EQ((seen[{CommRole::TIED_EMBEDDING, CollectiveOp::ALL_REDUCE, 0}]),
              std::vector<double>(2, v * h / t * 2));
    EXPECT_EQ((seen[{CommRole::GRAD_NORM, CollectiveOp::ALL_REDUCE, -1}]),
              std::vector<double>(precision == Precision::FP16 ? 2 : 1, 4.0));
    // Every optimizer waits for the last gradient-norm all-reduce.
    ASSERT_FALSE(norms.empty());
    int optimizers = 0;
    for (TaskId id = 0; id < g.size(); ++id)
      if (g.task(id).block == Block::OPTIMIZER) {
        ++optimizers;
        EXPECT_TRUE(has_edge(g, norms.back(), id));
      }
    EXPECT_EQ(optimizers, 8);
  }
  // Untied, or without a pipeline: no embedding copy to synchronize; no SP: no partial gradients.
  WorkloadSpec untied = standard();
  untied.model.tied_embeddings = false;
  WorkloadSpec flat = stepsim::test::workload(stepsim::test::small_gpt(8), 2, 1, 2, 8, 2);
  for (const WorkloadSpec& w : {untied, flat}) {
    const StepProgram prog = build(w);
    for (const Task& task : prog.graph.tasks()) {
      EXPECT_NE(task.role, CommRole::TIED_EMBEDDING);
      EXPECT_NE(task.role, CommRole::NORM_GRADS);
    }
  }
}

// Degenerate parallelism: tp = 1 has no TP collectives, pp = 1 no sends, dp = 1 no DP buckets.
TEST(BuildStep, NoCollectivesForUnitGroups) {
  const WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4), 1, 1, 1, 4);
  const StepProgram prog = build(w);
  for (const Task& t : prog.graph.tasks())
    EXPECT_EQ(t.kind, TaskKind::COMPUTE);
  EXPECT_EQ(prog.graph.size(), 4u * 4 * 4 + 2 * 4 + 1);
  EXPECT_EQ(prog.simulated_ranks, std::vector<Rank>{0});
}

// Sliding-window layers: their attention tasks carry the windowed FLOPs and query, the others
// the full ones (every full_attention_every-th layer), in forward, backward, the selective
// recomputation and the zero-bubble B/W split; over a step the attention tasks add up to the
// model's per-layer FLOPs.
TEST(BuildStep, SlidingWindowLayersCostTheirSpan) {
  for (const Schedule s : {Schedule::ONE_F_ONE_B, Schedule::ZB_H1}) {
    WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(8, 1024, 4096), 2, 4, 2, 8, 2, s);
    w.model.sliding_window = 256;
    w.model.full_attention_every = 2;
    w.training.recompute = Recompute::SELECTIVE;
    w.training.flash_attention = true;
    BuildOptions o;
    o.compute_time = [](const ComputeQuery& q) { return Seconds(q.windowed ? 1e-4 : 1e-3); };
    const StepProgram prog = build_step(w, o);
    const ModelSpec& m = w.model;
    double attention_flops = 0;
    int windowed = 0, full = 0;
    for (const Task& t : prog.graph.tasks()) {
      if (t.kind != TaskKind::COMPUTE || t.block != Block::ATTENTION || t.rank != 0)
        continue;
      const bool win = m.windowed_layer(t.layer);
      (win ? windowed : full) += 1;
      if (t.phase == Phase::FORWARD) { // (the zero-bubble split shares the backward's time)
        EXPECT_EQ(t.duration.value(), win ? 1e-4 : 1e-3) << t.layer;
      }
      attention_flops += t.flops.value();
    }
    EXPECT_EQ(windowed, full) << "layers 0 and 1 of stage 0, each in every pass";
    // Rank 0 holds layers 0 and 1: per micro-batch forward 1x, backward 2x + the recomputed core.
    double expected = 0;
    for (int layer : {0, 1}) {
      const bool win = m.windowed_layer(layer);
      expected += 3 * model::attention_block_forward_flops(m, 2, 2, win).value() +
                  model::attention_core_flops(m, 2, 2, win).value();
    }
    EXPECT_LT(std::abs(attention_flops - 8 * expected) / expected, 1e-9) << static_cast<int>(s);
  }
}

// Selective recomputation of the dense MLP (recompute_modules: mlp): each MLP backward task
// carries the repeated forward (3x the forward's FLOPs), and without core_attn the attention
// backward carries no repeated core (2x).
TEST(BuildStep, SelectiveMlpRecomputeInTheBackwardTasks) {
  WorkloadSpec w = standard();
  w.training.recompute = Recompute::SELECTIVE;
  w.training.recompute_modules = {.core_attn = false, .mlp = true};
  const StepProgram prog = build(w);
  int mlp = 0, attn = 0;
  for (const Task& t : prog.graph.tasks()) {
    if (t.kind != TaskKind::COMPUTE || t.phase != Phase::BACKWARD)
      continue;
    if (t.block == Block::MLP) {
      EXPECT_DOUBLE_EQ(t.flops.value(), 3 * model::mlp_block_forward_flops(w.model, 2, 2).value());
      ++mlp;
    } else if (t.block == Block::ATTENTION) {
      EXPECT_DOUBLE_EQ(t.flops.value(), 2 * model::attention_block_forward_flops(w.model, 2, 2).value());
      ++attn;
    }
  }
  EXPECT_GT(mlp, 0);
  EXPECT_EQ(mlp, attn);
}

// Multi-token prediction: the last stage (with interleaving, the last model chunk) runs one more
// layer (global index = layers) in every micro-batch's forward and backward; no other stage does.
TEST(BuildStep, MultiTokenPredictionLayerOnTheLastStage) {
  for (const Schedule s : {Schedule::ONE_F_ONE_B, Schedule::INTERLEAVED}) {
    WorkloadSpec w = standard(s);
    if (s == Schedule::INTERLEAVED)
      w.parallel.vp = 2;
    w.model.mtp_layers = 1;
    const StepProgram prog = build(w);
    std::map<int, int> forwards; // stage -> forward attention tasks of layer 8 (rank 0 of its TP group)
    for (const Task& t : prog.graph.tasks())
      if (t.kind == TaskKind::COMPUTE && t.block == Block::ATTENTION && t.layer == 8 &&
          t.phase == Phase::FORWARD)
        ++forwards[t.stage];
    ASSERT_EQ(forwards.size(), 1u) << static_cast<int>(s);
    EXPECT_EQ(forwards.begin()->first, 3);
    EXPECT_EQ(forwards.begin()->second, 8 * 2) << "8 micro-batches on 2 TP ranks";
  }
}

// parallel.tp_grad_overlap (docs/model.md, "TP in the backward"): each backward attention and MLP
// block becomes two compute tasks, the block up to its input linear's data gradient and that
// linear's weight gradient (its share of the block's FLOPs under a FLOP-blind cost: QKV and fc1
// each as many FLOPs as their forward GEMM). The all-reduce summing the input gradient follows
// the first piece only; the next compute waits for both. FLOPs and activation frees are conserved.
TEST(TpGradOverlap, BackwardBlocksSplitAroundTheirCollective) {
  WorkloadSpec w = standard();
  const StepProgram plain = build(w);
  w.parallel.tp_grad_overlap = true;
  const StepProgram prog = build(w);
  const auto flops_of = [](const StepProgram& p, Phase ph, Block b) {
    double f = 0;
    for (const Task& t : p.graph.tasks())
      f += t.kind == TaskKind::COMPUTE && t.phase == ph && t.block == b ? t.flops.value() : 0.0;
    return f;
  };
  const auto freed = [](const StepProgram& p) {
    double f = 0;
    for (const Task& t : p.graph.tasks())
      f += t.act_free.value();
    return f;
  };
  for (Block b : {Block::ATTENTION, Block::MLP, Block::LOGITS})
    EXPECT_NEAR(flops_of(prog, Phase::BACKWARD, b), flops_of(plain, Phase::BACKWARD, b),
                1e-9 * flops_of(plain, Phase::BACKWARD, b));
  EXPECT_NEAR(freed(prog), freed(plain), 1e-9 * freed(plain));
  const auto by_rank = compute_by_rank(prog.graph);
  for (const auto& [r, ids] : by_rank) {
    const int stage = prog.grid.pp_of(r);
    // 2 blocks x 2 layers x 8 micro-batches gain a piece; the logits' backward (all of it its GEMMs'
    // FLOPs under this cost) stays whole.
    EXPECT_EQ(ids.size(), 2u * 8 * 4 + 2 * 2 * 8 + (stage == 3 ? 2 * 8 : 0) + 1) << "rank " << r;
  }
  const double a = model::attention_block_forward_flops(w.model, 2, 2).value();
  const double qkv = model::qkv_projection_flops(w.model, 2, 2).value();
  const double fc1 = model::mlp_input_projection_flops(w.model, 2, 2).value();
  int checked = 0;
  for (TaskId id = 0; id < prog.graph.size(); ++id) {
    const Task& t = prog.graph.task(id);
    if (t.kind != TaskKind::COLLECTIVE || t.group != CommGroup::TP || t.phase != Phase::BACKWARD ||
        t.layer < 0)
      continue;
    ASSERT_EQ(t.op, CollectiveOp::ALL_REDUCE);
    // The all-reduce's compute predecessors: each rank's first piece, whose successor on the
    // compute stream is the weight gradient, which the all-reduce does not wait for.
    for (TaskId p : prog.graph.predecessors(id)) {
      const Task& first = prog.graph.task(p);
      if (first.kind != TaskKind::COMPUTE)
        continue;
      TaskId wgrad = ~TaskId{0};
      for (TaskId s : prog.graph.successors(p))
        if (prog.graph.task(s).kind == TaskKind::COMPUTE && prog.graph.task(s).block == first.block &&
            prog.graph.task(s).phase == Phase::BACKWARD)
          wgrad = s;
      ASSERT_NE(wgrad, ~TaskId{0});
      const double gemm = first.block == Block::ATTENTION ? qkv : fc1;
      EXPECT_NEAR(prog.graph.task(wgrad).flops.value(), gemm, 1e-9 * gemm);
      const double block =
          first.block == Block::ATTENTION ? 2 * a : 2 * model::mlp_block_forward_flops(w.model, 2, 2).value();
      EXPECT_NEAR(first.flops.value(), block - gemm, 1e-9 * block);
      // The pass's next compute task waits for both the weight gradient and the all-reduce.
      for (TaskId next : prog.graph.successors(wgrad)) {
        const Task& n = prog.graph.task(next);
        if (n.kind != TaskKind::COMPUTE || n.phase != Phase::BACKWARD || n.micro_batch != first.micro_batch)
          continue;
        const auto preds = prog.graph.predecessors(next);
        EXPECT_NE(std::find(preds.begin(), preds.end(), id), preds.end());
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// parallel.tp_comm_overlap (docs/model.md, "TP communication overlap"), tp 2 with SP: every
// forward block's reduce-scatter and all-gather become a first chunk of (tp - 1)/tp of the bytes,
// beside the block's linears, and a last chunk of 1/tp after them; the backward's gradient
// all-gather likewise beside the weight gradient. The attention block's linears (its forward FLOPs
// less the core's, under this FLOP-shared cost) are carved off its end; the MLP is all linears,
// so all of it is (an empty head before it). Bytes per op and compute FLOPs do not change.
TEST(TpCommOverlap, ForwardCollectivesPipelinedWithTheLinears) {
  WorkloadSpec w = standard();
  w.parallel.sp = true;
  w.parallel.tp_grad_overlap = true;
  const StepProgram plain = build(w);
  w.parallel.tp_comm_overlap = true;
  const StepProgram prog = build(w);
  const auto tp_bytes = [](const StepProgram& p, CollectiveOp op, Phase ph) {
    double b = 0;
    int n = 0;
    for (const Task& t : p.graph.tasks())
      if (t.kind == TaskKind::COLLECTIVE && t.group == CommGroup::TP && t.op == op && t.phase == ph &&
          t.role == CommRole::NONE) {
        b += t.bytes.value();
        ++n;
      }
    return std::pair(b, n);
  };
  for (CollectiveOp op : {CollectiveOp::REDUCE_SCATTER, CollectiveOp::ALL_GATHER}) {
    const auto [before, n_before] = tp_bytes(plain, op, Phase::FORWARD);
    const auto [after, n_after] = tp_bytes(prog, op, Phase::FORWARD);
    EXPECT_DOUBLE_EQ(after, before);
    EXPECT_EQ(n_after, 2 * n_before);
  }
  const double bsh2 = 2.0 * 512 * 1024 * 2;
  const double a = model::attention_block_forward_flops(w.model, 2, 2).value();
  const double core = model::attention_core_flops(w.model, 2, 2).value();
  int tails = 0;
  for (TaskId id = 0; id < prog.graph.size(); ++id) {
    const Task& t = prog.graph.task(id);
    if (t.kind == TaskKind::COLLECTIVE && t.group == CommGroup::TP && t.phase == Phase::FORWARD &&
        t.role == CommRole::NONE) {
      EXPECT_DOUBLE_EQ(t.bytes.value(), bsh2 / 2); // tp 2: both chunks half the payload
    }
    if (t.kind != TaskKind::COMPUTE || t.piece != 3)
      continue;
    ++tails;
    // The attention block's linears; the MLP is all linears (an empty head before it).
    EXPECT_NEAR(t.duration.value(), t.block == Block::ATTENTION ? 1e-3 * (a - core) / a : 1e-3, 1e-12);
    // The first chunk of the block's reduce-scatter runs beside the tail: it follows the head.
    TaskId head = ~TaskId{0};
    for (TaskId p : prog.graph.predecessors(id))
      if (prog.graph.task(p).kind == TaskKind::COMPUTE && prog.graph.task(p).block == t.block)
        head = p;
    ASSERT_NE(head, ~TaskId{0});
    bool chunk_beside = false;
    for (TaskId s : prog.graph.successors(head)) {
      const Task& c = prog.graph.task(s);
      chunk_beside |= c.kind == TaskKind::COLLECTIVE && c.op == CollectiveOp::REDUCE_SCATTER &&
                      !reaches(prog.graph, id, s);
    }
    EXPECT_TRUE(chunk_beside);
  }
  // One tail per attention and MLP forward: 2 blocks x 2 layers x 8 micro-batches x 2 ranks x 4 stages.
  EXPECT_EQ(tails, 2 * 2 * 8 * 2 * 4);
  // The backward's gradient all-gathers are split too; the reduce-scatters are not.
  EXPECT_DOUBLE_EQ(tp_bytes(prog, CollectiveOp::ALL_GATHER, Phase::BACKWARD).first,
                   tp_bytes(plain, CollectiveOp::ALL_GATHER, Phase::BACKWARD).first);
  EXPECT_EQ(tp_bytes(prog, CollectiveOp::REDUCE_SCATTER, Phase::BACKWARD).second,
            tp_bytes(plain, CollectiveOp::REDUCE_SCATTER, Phase::BACKWARD).second);
}
