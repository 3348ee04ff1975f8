// The memory ledger over simulated time (driven by the replay's task timeline) against the static
// ledger of MODEL.md §3: 1F1B holds min(p - i, m) micro-batches on stage i, GPipe all m, and the
// timeline's peak equals the static formula; the track never goes negative and ends where it
// started (persistent state only). One simulation per TEST (SimGrid).

#include "engine/replay.hpp"
#include "model/memory.hpp"
#include "model/moe.hpp"
#include "model/transformer.hpp"
#include "report/memory_timeline.hpp"

#include "common/specs.hpp"
#include "engine/helpers.hpp"

#include <gtest/gtest.h>

using namespace stepsim;

namespace {

using Simulated = test::Replayed;
constexpr auto simulate = test::replay_step;

void expect_timeline_matches_static(const WorkloadSpec& w) {
  const ClusterSpec c = test::dgx_cluster(1, 8, 8);
  const Simulated run = simulate(w, c);
  const report::MemoryReport rep =
      report::memory_timeline(run.program, run.result.start, run.result.end, c, w, true);
  for (int p = 0; p < w.parallel.pp; ++p) {
    const model::MemoryLedger expected = model::static_memory(w, c.gpu, p);
    EXPECT_NEAR(rep.stage_peaks[static_cast<size_t>(p)].value(), expected.peak().value(), 1.0)
        << "stage " << p << ": static " << report::gib(expected.peak());
  }
  for (const CounterSeries& track : rep.tracks) {
    ASSERT_GE(track.samples.size(), 2u);
    const double first = track.samples.front().second;
    for (const auto& [t, bytes] : track.samples)
      EXPECT_GE(bytes, first - 1.0) << "GPU " << track.gpu << " dips below its persistent state at t=" << t;
    EXPECT_NEAR(track.samples.back().second, first, 1.0)
        << "GPU " << track.gpu << " does not end where it started";
  }
}

/// ZeRO-3 with prefetch 1: the simulated gathered bytes exceed `at_least` and stay within two
/// gathered layers (plus the embedding stage 0 gathers with its first layer); the tracks balance.
void expect_zero3_gathered_bounded(const WorkloadSpec& w, double at_least) {
  const ClusterSpec c = test::dgx_cluster(1, 8, 8);
  const Simulated run = simulate(w, c);
  const report::MemoryReport rep =
      report::memory_timeline(run.program, run.result.start, run.result.end, c, w, true);
  const double layer = model::gathered_layer_bytes(w).value();
  EXPECT_GT(rep.worst.zero3_gathered.value(), at_least);
  const double embedding = model::embedding_params(w.model, 1) * 2.0;
  EXPECT_LE(rep.worst.zero3_gathered.value(), 2.0 * layer + embedding + 1.0);
  for (const CounterSeries& track : rep.tracks)
    EXPECT_NEAR(track.samples.back().second, track.samples.front().second, 1.0);
}

WorkloadSpec small(int tp, int pp, int dp, int64_t m, Schedule s) {
  WorkloadSpec w = test::workload(test::small_gpt(8), tp, pp, dp, m, 1, s);
  return w;
}

} // namespace

TEST(MemoryTimeline, OneFOneBHoldsPMinusIMicroBatches) {
  expect_timeline_matches_static(small(1, 4, 2, 8, Schedule::ONE_F_ONE_B));
}

TEST(MemoryTimeline, GpipeHoldsAllMicroBatches) {
  expect_timeline_matches_static(small(1, 4, 2, 6, Schedule::GPIPE));
}

TEST(MemoryTimeline, FullRecomputeWithTensorAndSequenceParallel) {
  WorkloadSpec w = small(2, 2, 2, 5, Schedule::ONE_F_ONE_B);
  w.training.recompute = Recompute::FULL;
  w.parallel.sp = true;
  expect_timeline_matches_static(w);
}

TEST(MemoryTimeline, SelectiveRecomputeGpipe) {
  WorkloadSpec w = small(2, 2, 2, 3, Schedule::GPIPE);
  w.training.recompute = Recompute::SELECTIVE;
  expect_timeline_matches_static(w);
}

// ZeRO-3: at most prefetch + 1 gathered layers are resident; the ledger balances.
TEST(MemoryTimeline, Zero3GatheredLayersBounded) {
  WorkloadSpec w = small(1, 2, 4, 2, Schedule::ONE_F_ONE_B);
  w.parallel.zero_stage = 3;
  w.training.zero3_prefetch = 1;
  expect_zero3_gathered_bounded(w, 0.0);
}

// ZeRO-3 with the forward's gathers kept to the backward (reshard_after_forward false): at the
// turn from forward to backward every layer is gathered, with the embedding and the output layer
// (one stage): the simulated peak is the static ledger's, which charges all of them.
TEST(MemoryTimeline, Zero3KeptGathersHoldEveryLayerAtTheTurn) {
  WorkloadSpec w = small(1, 1, 8, 2, Schedule::ONE_F_ONE_B);
  w.parallel.zero_stage = 3;
  w.training.reshard_after_forward = false;
  const ClusterSpec c = test::dgx_cluster(1, 8, 8);
  const Simulated run = simulate(w, c); // one simulation per test process (SimGrid)
  const report::MemoryReport rep =
      report::memory_timeline(run.program, run.result.start, run.result.end, c, w, true);
  EXPECT_NEAR(rep.stage_peaks[0].value(), model::static_memory(w, c.gpu, 0).peak().value(), 1.0);
  const double everything = model::gathered_layer_bytes(w).value() * static_cast<double>(w.model.layers) +
                            (model::embedding_params(w.model, 1) + model::output_params(w.model, 1, 1)) * 2.0;
  EXPECT_NEAR(rep.worst.zero3_gathered.value(), everything, 1.0);
  EXPECT_NEAR(model::static_memory(w, c.gpu, 0).zero3_gathered.value(), everything, 1.0);
}

// ZeRO-3 with a pipeline and reshard_after_forward false (FSDP2 under torch.distributed.pipelining):
// each stage gathers its 4 layers in their first forward and holds them, with the stage's
// unsharded gradients, for the whole step. The simulated peak of every stage is the static
// ledger's, whose gathered part is the stage's 4 layers (with the embedding on stage 0, the output
// layer on stage 1) and whose gradients add the stage's parameters at a gradient's bytes; the
// tracks end where they started (the last backward frees what the first forward gathered).
TEST(MemoryTimeline, Zero3HeldForTheStepHoldsTheStagesLayersAndGradients) {
  WorkloadSpec w = small(1, 2, 4, 4, Schedule::ONE_F_ONE_B);
  w.parallel.zero_stage = 3;
  w.training.reshard_after_forward = false;
  ASSERT_TRUE(model::zero3_held_for_step(w));
  expect_timeline_matches_static(w);
  const ClusterSpec c = test::dgx_cluster(1, 8, 8);
  const double layer = model::gathered_layer_bytes(w).value();
  const model::MemoryLedger first = model::static_memory(w, c.gpu, 0);
  EXPECT_NEAR(first.zero3_gathered.value(), 4 * layer + model::embedding_params(w.model, 1) * 2.0, 1.0);
  WorkloadSpec resharded = w;
  resharded.training.reshard_after_forward = true;
  const double stage_params = 4 * model::layer_params(w.model, 1) + model::embedding_params(w.model, 1);
  EXPECT_NEAR(first.gradients.value() - model::static_memory(resharded, c.gpu, 0).gradients.value(),
              stage_params * model::grad_bytes(w), 1.0);
}

// ZeRO-3 with experts: the gathered dense part and local experts of at most prefetch + 1 layers
// are resident, the largest of them what the static ledger charges; the ledger balances.
TEST(MemoryTimeline, Zero3WithExpertsGathersBoundedLayers) {
  WorkloadSpec w = small(1, 2, 4, 2, Schedule::ONE_F_ONE_B);
  w.model.mlp = MlpKind::SWIGLU;
  w.model.moe.experts = 8;
  w.model.moe.top_k = 2;
  w.model.moe.expert_ffn_hidden = 512;
  w.parallel.ep = 2; // expert-data-parallel groups of 2: the experts are sharded too
  w.parallel.zero_stage = 3;
  w.training.zero3_prefetch = 1;
  const double layer = model::gathered_layer_bytes(w).value();
  const model::LayerParams p = model::layer_params_at(w.model, 1, 1, 2, 1);
  EXPECT_DOUBLE_EQ(layer, (p.dense + p.expert) * 2.0);
  expect_zero3_gathered_bounded(w, layer);
}

// A layout that does not fit is an answer: fits_in_memory false, naming the GPU, the excess and
// the ledger.
TEST(MemoryTimeline, DoesNotFitIsReportedWithReason) {
  WorkloadSpec w = test::workload(test::small_gpt(8, 4096, 4096), 1, 2, 1, 4);
  ClusterSpec c = test::dgx_cluster(1, 2, 2);
  c.gpu.hbm_capacity = Bytes(8.0 * 1024 * 1024 * 1024);
  const Simulated run = simulate(w, c);
  const report::MemoryReport rep =
      report::memory_timeline(run.program, run.result.start, run.result.end, c, w, false);
  EXPECT_FALSE(rep.fits_in_memory);
  EXPECT_GT(rep.worst.peak(), c.gpu.hbm_capacity);
  EXPECT_NE(rep.reason.find("GPU " + std::to_string(rep.worst_rank)), std::string::npos) << rep.reason;
  EXPECT_NE(rep.reason.find("over by"), std::string::npos) << rep.reason;
  EXPECT_NE(rep.reason.find("activations"), std::string::npos) << rep.reason;
}
