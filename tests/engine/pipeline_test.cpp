// Whole-step replays: pipeline bubbles against MODEL.md §5, folding of DP replicas, the ordering
// invariants of the replay, and input errors.

#include "common/specs.hpp"
#include "common/subprocess.hpp"
#include "core/error.hpp"
#include "engine/helpers.hpp"
#include "model/transformer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;
using stepsim::test::run_in_child;

namespace {

struct BubbleCase {
  Schedule schedule;
  int p;
  int m;
};

void PrintTo(const BubbleCase& c, std::ostream* os) {
  *os << "p=" << c.p << " m=" << c.m;
}

std::string bubble_name(const testing::TestParamInfo<BubbleCase>& info) {
  const BubbleCase& c = info.param;
  return std::string(c.schedule == Schedule::GPIPE ? "gpipe" : "1f1b") + "_p" + std::to_string(c.p) + "_m" +
         std::to_string(c.m);
}

class Bubble : public testing::TestWithParam<BubbleCase> {};

constexpr double T_BLOCK_F = 1e-3; // attention or MLP forward
constexpr double T_BLOCK_B = 2e-3; // attention or MLP backward
constexpr int LAYERS_PER_STAGE = 2;

/// Every attention or MLP block T_BLOCK_F forward and T_BLOCK_B backward; logits and optimizer free.
Seconds block_time(const ComputeQuery& q) {
  if (q.block == Block::LOGITS || q.block == Block::OPTIMIZER)
    return Seconds(0.0);
  return Seconds(q.phase == Phase::BACKWARD ? T_BLOCK_B : T_BLOCK_F);
}

} // namespace

// MODEL.md §5: uniform stages, free communication (enormous bandwidths, zero latencies, tp = dp =
// 1), constant block times (logits and optimizer 0): step = (m + p - 1)(t_f + t_b) and the idle
// fraction 1 - busy/step, averaged over ranks, is (p - 1)/(m + p - 1), for GPipe and 1F1B.
// Here t_f = 2 layers x 2 blocks x 1 ms, t_b = 2 x 2 x 2 ms.
TEST_P(Bubble, StepTimeAndIdleFraction) {
  const BubbleCase c = GetParam();
  const WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(LAYERS_PER_STAGE * c.p, 256, 128),
                                                 1, c.p, 1, c.m, 1, c.schedule);
  BuildOptions o;
  o.compute_time = block_time;
  const StepProgram prog = build_step(w, o);
  const ClusterSpec cluster = stepsim::test::free_comm_cluster(1, 8);
  engine::Replay replay(prog, cluster);
  const engine::ReplayResult r = replay.run();

  const double t_f = LAYERS_PER_STAGE * 2 * T_BLOCK_F, t_b = LAYERS_PER_STAGE * 2 * T_BLOCK_B;
  const double expected_step = (c.m + c.p - 1) * (t_f + t_b);
  EXPECT_NEAR(r.step_time.value(), expected_step, 0.005 * expected_step);

  std::map<Rank, double> busy;
  for (TaskId id = 0; id < prog.graph.size(); ++id) {
    const Task& t = prog.graph.task(id);
    if (t.kind == TaskKind::COMPUTE)
      busy[t.rank] += r.end[id].value() - r.start[id].value();
  }
  ASSERT_EQ(busy.size(), static_cast<size_t>(c.p));
  double idle = 0;
  for (const auto& [rank, b] : busy) {
    EXPECT_NEAR(b, c.m * (t_f + t_b), 1e-7 * b) << "rank " << rank; // every rank does the same work
    idle += 1.0 - b / r.step_time.value();
  }
  idle /= c.p;
  const double expected_idle = (c.p - 1.0) / (c.m + c.p - 1.0);
  EXPECT_NEAR(idle, expected_idle, 0.005 * expected_idle);
}

INSTANTIATE_TEST_SUITE_P(
    Pipeline, Bubble,
    testing::Values(BubbleCase{Schedule::GPIPE, 2, 4}, BubbleCase{Schedule::ONE_F_ONE_B, 2, 4},
                    BubbleCase{Schedule::GPIPE, 4, 8}, BubbleCase{Schedule::ONE_F_ONE_B, 4, 8},
                    BubbleCase{Schedule::GPIPE, 4, 16}, BubbleCase{Schedule::ONE_F_ONE_B, 4, 16},
                    BubbleCase{Schedule::GPIPE, 8, 8}, BubbleCase{Schedule::ONE_F_ONE_B, 8, 8}),
    bubble_name);

namespace {

/// tp=2, pp=2, dp=4 on 2 nodes of 8 GPUs (one NIC per GPU): stage 0 on node 0, stage 1 on node 1,
/// every replica on its own NVLink ports and NICs: a symmetric cluster.
WorkloadSpec fold_workload() {
  WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4), 2, 2, 4, 4, 1);
  w.training.dp_bucket = Bytes(4.0 * 1024 * 1024);
  return w;
}

double fold_step(bool fold) {
  const auto r = run_in_child([fold] {
    const WorkloadSpec w = fold_workload();
    const ClusterSpec cluster = stepsim::test::dgx_cluster(2, 8, 8);
    BuildOptions o;
    o.fold_dp = fold;
    o.compute_time = [&cluster](const ComputeQuery& q) {
      return model::roofline_time(q.flops, q.bytes, cluster.gpu, Precision::BF16);
    };
    const StepProgram prog = build_step(w, o);
    return std::vector<double>{stepsim::test::step_time(prog, cluster, CollectiveForm::AUTO),
                               static_cast<double>(prog.graph.size())};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values[0] : NAN;
}

} // namespace

namespace {

/// cp 4, pp 2, dp 2 with tp 4 on 16 nodes of 4 GPUs (each CP rank's TP group on a node of its
/// own: every ring hop crosses nodes), or with tp 1 on 4 nodes of 4 (each CP group inside one
/// node). Block times from the roofline. Folded: CP index 0 of replica 0 with every copied send;
/// unfolded: every GPU.
std::vector<double> cp_fold_step(int tp, bool fold) {
  const auto r = run_in_child([tp, fold] {
    WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4, 1024, 2048), tp, 2, 2, 4, 1);
    w.parallel.cp = 4;
    w.training.dp_bucket = Bytes(4.0 * 1024 * 1024);
    const ClusterSpec cluster = stepsim::test::dgx_cluster(tp * 4, 4, 4);
    BuildOptions o;
    o.fold_dp = fold;
    o.gpus_per_node = cluster.gpus_per_node;
    o.compute_time = [&cluster](const ComputeQuery& q) {
      return model::roofline_time(q.flops, q.bytes, cluster.gpu, Precision::BF16);
    };
    const StepProgram prog = build_step(w, o);
    return std::vector<double>{stepsim::test::step_time(prog, cluster, CollectiveForm::AUTO),
                               static_cast<double>(prog.simulated_ranks.size()),
                               static_cast<double>(prog.graph.size())};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values : std::vector<double>{NAN, NAN, NAN};
}

} // namespace

// docs/engine.md: folding CP ranks is exact where every hop of the ring is alike. One GPU per TP
// rank and stage gives every GPU's step time.
TEST(FoldCp, SameStepTimeAsEveryCpRank) {
  for (const int tp : {4, 1}) {
    const std::vector<double> all = cp_fold_step(tp, false);
    const std::vector<double> folded = cp_fold_step(tp, true);
    EXPECT_EQ(all[1], 16.0 * tp);
    EXPECT_EQ(folded[1], 2.0 * tp);
    EXPECT_GT(all[0], 0.0);
    EXPECT_NEAR(folded[0], all[0], 1e-9 * all[0]) << "tp " << tp;
    EXPECT_LT(folded[2], all[2]);
  }
}

// Where the ring mixes NVLink and network hops (tp 2, two CP ranks per 4-GPU node), CP index 0
// does not stand for the others (the NVLink hops are faster): every CP rank stays simulated.
TEST(FoldCp, MixedRingHopsStayUnfolded) {
  WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4, 1024, 2048), 2, 2, 2, 4, 1);
  w.parallel.cp = 4;
  BuildOptions o;
  o.gpus_per_node = 4;
  o.compute_time = [](const ComputeQuery&) { return Seconds(1e-3); };
  EXPECT_EQ(build_step(w, o).simulated_ranks.size(), 2u * 2 * 4); // tp x pp x cp
  o.gpus_per_node = 0;                                            // unknown: not folded either
  EXPECT_EQ(build_step(w, o).simulated_ranks.size(), 2u * 2 * 4);
}

// docs/engine.md: folding DP replicas is exact on a symmetric cluster; folded and unfolded runs
// give the same step time (within 1e-9 relative).
TEST(FoldDp, SameStepTimeOnSymmetricCluster) {
  const double folded = fold_step(true);
  const double full = fold_step(false);
  EXPECT_GT(folded, 0.0);
  EXPECT_NEAR(folded, full, 1e-9 * full);
}

namespace {

/// The step time of `w` (in a child process) on `nodes` nodes of `gpus_per_node` GPUs with free
/// NVLink and each GPU's own NIC at 25 GB/s with no latency, every compute block 1 ms.
double nic_bound_step(const WorkloadSpec& w, int nodes, int gpus_per_node) {
  const auto r = run_in_child([&w, nodes, gpus_per_node] {
    ClusterSpec cluster = stepsim::test::free_comm_cluster(nodes, gpus_per_node);
    cluster.nic = LinkSpec{BytesPerSec(25e9), Seconds(0.0), 1.0};
    BuildOptions o;
    o.compute_time = [](const ComputeQuery&) { return Seconds(1e-3); };
    const StepProgram prog = build_step(w, o);
    return std::vector<double>{stepsim::test::step_time(prog, cluster, CollectiveForm::AUTO)};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values[0] : NAN;
}

/// tp=2, pp=2, one micro-batch, stage s on node s. Step time with and without Megatron's
/// pipeline scatter/gather.
double scatter_gather_step(bool scatter_gather) {
  WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4), 2, 2, 1, 1, 1);
  w.parallel.pp_scatter_gather = scatter_gather;
  return nic_bound_step(w, 2, 2);
}

} // namespace

// Narayanan et al. 2021 sec. 4.1: with scatter/gather each TP rank sends S/t over its NIC instead
// of S; with free NVLink the all-gather costs nothing, so the one forward and one backward
// message on the critical path save 2 S (1 - 1/t) / beta.
TEST(PipelineScatterGather, SavesTheSplitOfBothMessages) {
  const WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4), 2, 2, 1, 1, 1);
  const double s = model::tp_collective_bytes(w).value();
  const double plain = scatter_gather_step(false);
  const double sg = scatter_gather_step(true);
  const double expected = 2.0 * s * (1.0 - 1.0 / 2.0) / 25e9;
  ASSERT_GT(expected, 1e-5);
  EXPECT_NEAR(plain - sg, expected, 0.01 * expected);
}

namespace {

/// pp = 2 (one GPU per node, each GPU's own NIC at 25 GB/s, no latency), m micro-batches of 1F1B,
/// every attention or MLP block T_BLOCK_F forward and T_BLOCK_B backward (logits, optimizer 0),
/// untied embeddings.
double two_stage_step(int m, bool blocking) {
  const auto r = run_in_child([m, blocking] {
    WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(2 * LAYERS_PER_STAGE, 256, 128), 1, 2,
                                             1, m, 1, Schedule::ONE_F_ONE_B);
    w.parallel.pp_p2p_blocking = blocking;
    w.model.tied_embeddings = false; // no embedding all-reduce between the two stages
    ClusterSpec cluster = stepsim::test::free_comm_cluster(2, 1);
    cluster.nic = LinkSpec{BytesPerSec(25e9), Seconds(0.0), 1.0};
    BuildOptions o;
    o.compute_time = block_time;
    const StepProgram prog = build_step(w, o);
    return std::vector<double>{stepsim::test::step_time(prog, cluster, CollectiveForm::AUTO)};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values[0] : NAN;
}

} // namespace

// docs/model.md, "Blocking pipeline sends": with pp = 2 under DeepSpeed's instruction order every
// message is on both stages' critical path. Stage 1 sends each gradient, then receives the next
// activation; stage 0 receives the gradient, then sends its next activation; so each of the m
// activations and m gradients (c = S / beta each) adds to the (m + 1)(t_f + t_b) of free
// communication: step = (m + 1)(t_f + t_b) + 2 m c. Sends beside the compute hide some of them.
TEST(PipelineBlockingP2p, EveryMessageOnTheCriticalPath) {
  const WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(2 * LAYERS_PER_STAGE, 256, 128), 1,
                                                 2, 1, 1, 1, Schedule::ONE_F_ONE_B);
  const double c = model::pp_message_bytes(w).value() / 25e9;
  ASSERT_GT(c, 1e-6);
  const double t_f = LAYERS_PER_STAGE * 2 * T_BLOCK_F, t_b = LAYERS_PER_STAGE * 2 * T_BLOCK_B;
  for (const int m : {1, 2, 5}) {
    const double blocking = two_stage_step(m, true);
    const double expected = (m + 1) * (t_f + t_b) + 2.0 * m * c;
    EXPECT_NEAR(blocking, expected, 1e-6 * expected) << "m " << m;
    // One micro-batch has both messages on the critical path either way; more hide some.
    if (m == 1)
      EXPECT_NEAR(two_stage_step(m, false), blocking, 1e-6 * blocking);
    else
      EXPECT_LT(two_stage_step(m, false), blocking - 0.5 * c) << "m " << m;
  }
}

// Replay invariants on a full step (tp=2, pp=2, dp=2 unfolded, both schedules' worth of
// structure, TP/PP/DP collectives): every task runs once with 0 <= start <= end; a successor
// never starts before its predecessor ends; compute tasks last exactly their duration (a GPU's
// compute stream is a chain, so nothing shares the host); listeners see every task once with the
// same interval; step_time is the latest end.
TEST(Replay, OrderingInvariants) {
  const WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4), 2, 2, 2, 4, 1);
  BuildOptions o;
  o.fold_dp = false;
  const ClusterSpec cluster = stepsim::test::dgx_cluster(1, 8, 8);
  o.compute_time = [&cluster](const ComputeQuery& q) {
    return model::roofline_time(q.flops, q.bytes, cluster.gpu, Precision::BF16);
  };
  const StepProgram prog = build_step(w, o);
  engine::Replay replay(prog, cluster);
  std::vector<int> seen(prog.graph.size(), 0);
  std::vector<engine::TaskEvent> events(prog.graph.size());
  replay.subscribe([&](const engine::TaskEvent& e) {
    ASSERT_LT(e.id, seen.size());
    ++seen[e.id];
    events[e.id] = e;
  });
  const engine::ReplayResult r = replay.run();
  ASSERT_EQ(r.start.size(), prog.graph.size());
  ASSERT_EQ(r.end.size(), prog.graph.size());
  double latest = 0;
  for (TaskId id = 0; id < prog.graph.size(); ++id) {
    const double s = r.start[id].value(), e = r.end[id].value();
    EXPECT_GE(s, 0.0) << id;
    EXPECT_LE(s, e) << id;
    EXPECT_EQ(seen[id], 1) << id;
    EXPECT_EQ(events[id].start.value(), s);
    EXPECT_EQ(events[id].end.value(), e);
    latest = std::max(latest, e);
    for (TaskId p : prog.graph.predecessors(id))
      EXPECT_GE(s, r.end[p].value()) << "task " << id << " starts before predecessor " << p << " ends";
    const Task& t = prog.graph.task(id);
    if (t.kind == TaskKind::COMPUTE) {
      EXPECT_NEAR(e - s, t.duration.value(), 1e-12 + 1e-9 * t.duration.value()) << id;
    }
  }
  EXPECT_EQ(r.step_time.value(), latest);
  EXPECT_GT(r.flows, 0u);
  EXPECT_GE(r.activities, r.flows);
}

// A program whose simulated ranks exceed the cluster is a SimulationError, not a crash.
TEST(ReplayErrors, SimulatedRankBeyondCluster) {
  const auto prog = stepsim::test::collectives_program({{0, 9}}, Bytes(1e6));
  const ClusterSpec cluster = stepsim::test::dgx_cluster(1, 8, 8);
  engine::Replay replay(prog, cluster);
  EXPECT_THROW(replay.run(), SimulationError);
}

// A forced algorithm that cannot run the group's operation (tree has no reduce-scatter) is an
// engine::AlgorithmNotApplicable carrying the group, algorithm, operation and GPU count; the
// engine knows no workload key, so its message names none (runner/ adds it).
TEST(ReplayErrors, ForcedAlgorithmThatCannotRunIsTyped) {
  const auto prog = stepsim::test::collectives_program({stepsim::test::iota_ranks(0, 8)}, Bytes(1e6),
                                                       graph::CollectiveOp::REDUCE_SCATTER);
  engine::Replay replay(prog, stepsim::test::dgx_cluster(1, 8, 8),
                        {.algorithms = {.dp = collectives::Algorithm::TREE}});
  try {
    replay.run();
    ADD_FAILURE() << "expected engine::AlgorithmNotApplicable";
  } catch (const engine::AlgorithmNotApplicable& e) {
    EXPECT_EQ(e.group(), graph::CommGroup::DP);
    EXPECT_EQ(e.algorithm(), collectives::Algorithm::TREE);
    EXPECT_EQ(e.op(), CollectiveOp::REDUCE_SCATTER);
    EXPECT_EQ(e.ranks(), 8u);
    EXPECT_EQ(std::string(e.what()),
              "engine: the dp group's algorithm tree cannot run reduce_scatter over its 8 GPUs");
  }
}

// With fold_dp the DP all-reduces still run over every DP rank. When the cluster is too small
// for the program's grid (tp*pp*dp = 8 GPUs on a 4-GPU node; replica 0's ranks fit), replay must
// report a SimulationError ("a rank beyond the cluster's GPUs", engine/replay.hpp), not read past
// the platform's GPU table. Run in a child so that a crash is reported as a failure.
TEST(ReplayErrors, FoldedDpRankBeyondCluster) {
  const auto r = run_in_child([] {
    const WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(2), 2, 1, 4, 2, 1);
    BuildOptions o;
    o.compute_time = [](const ComputeQuery&) { return Seconds(1e-4); };
    const StepProgram prog = build_step(w, o);
    const ClusterSpec cluster = stepsim::test::dgx_cluster(1, 4, 4);
    try {
      engine::Replay replay(prog, cluster, engine::ReplayOptions{CollectiveForm::FINE});
      replay.run();
    } catch (const SimulationError&) {
      return std::vector<double>{1.0};
    }
    return std::vector<double>{0.0};
  });
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.values.at(0), 1.0) << "replay ran a DP collective over ranks the cluster does not have";
}

// An unfinalized graph is rejected before SimGrid starts.
TEST(ReplayErrors, GraphNotFinalized) {
  StepProgram prog;
  Task t;
  t.rank = 0;
  t.duration = Seconds(1.0);
  prog.graph.add_task(t);
  prog.simulated_ranks = {0};
  const ClusterSpec cluster = stepsim::test::dgx_cluster(1, 8, 8);
  engine::Replay replay(prog, cluster);
  EXPECT_THROW(replay.run(), SimulationError);
}

namespace {

/// ZeRO-1 over dp = 4 GPUs, one per node, one micro-batch, every gradient item its own DP bucket.
double param_gather_step(bool overlap) {
  WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4), 1, 1, 4, 1, 1);
  w.parallel.zero_stage = 1;
  w.training.dp_bucket = Bytes(1.0);
  w.training.overlap_param_gather = overlap;
  return nic_bound_step(w, 4, 1);
}

} // namespace

// overlap_param_gather: the all-gathers run in forward order from the step's start, each a ring
// of (n-1)/n S / beta. Layer 0 waits for the embedding's and its own gather; each later layer's
// gather (0.76 ms) ends before the 2 ms forward of the layer before it, and the final norm's before
// the logits: the step saves the gathers of layers 1-3 and of the norm against gathering all of
// them after the optimizer.
TEST(OverlapParamGather, HidesAllButTheFirstBucketsUnderTheForward) {
  const WorkloadSpec w = stepsim::test::workload(stepsim::test::small_gpt(4), 1, 1, 4, 1, 1);
  auto gather = [](double params) { return 0.75 * params * 2.0 / 25e9; };
  const double layer = gather(model::layer_params(w.model, 1));
  ASSERT_LT(layer, 2e-3);
  const double expected = 3.0 * layer + gather(model::output_params(w.model, 1, 1));
  const double plain = param_gather_step(false);
  const double overlapped = param_gather_step(true);
  EXPECT_NEAR(plain - overlapped, expected, 0.01 * expected);
}
