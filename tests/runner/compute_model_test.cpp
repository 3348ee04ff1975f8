// Compute times from kernel profiles (runner::compute_time_model), where they came from
// (summary compute_source), the overlap slowdown in the engine, and `stepsim kernels`.
// SimGrid allows one simulation per process: each simulation runs in a forked child.

#include "runner/simulate.hpp"

#include "common/specs.hpp"
#include "common/subprocess.hpp"
#include "config/config.hpp"
#include "core/error.hpp"
#include "graph/compute_cost.hpp"
#include "kernels/attention_kernel.hpp"
#include "kernels/profile.hpp"
#include "kernels/step_kernels.hpp"
#include "kernels/workload_kernels.hpp"
#include "model/transformer.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <unistd.h>

namespace stepsim {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = STEPSIM_SOURCE_DIR;
const fs::path kA100Profile = kSourceDir / "kernels_profiles/data/A100-SXM4-80GB.csv";

/// A cluster of A100s whose compute times come from `profile` ("" = roofline).
ClusterSpec a100_cluster(int nodes, int gpus_per_node, const std::string& profile) {
  ClusterSpec c = test::dgx_cluster(nodes, gpus_per_node, gpus_per_node);
  c.gpu.kind = "A100-SXM4-80GB";
  c.gpu.profile = profile;
  return c;
}

/// One GPU, compute-bound: a 4-layer GPT with h = 8192, 64 heads of 128, s = 1024, 16
/// micro-batches of 1, fused attention (GEMMs take ~85-90 % of the compute time, the optimizer
/// most of the rest).
WorkloadSpec compute_bound_workload() {
  ModelSpec m = test::small_gpt(4, 8192, 1024);
  m.heads = 64;
  m.kv_heads = 64;
  WorkloadSpec w = test::workload(m, 1, 1, 1, 16);
  w.training.flash_attention = true; // one fused attention kernel per pass
  return w;
}

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / ("stepsim-runner-" + name + "-" + std::to_string(getpid()) + ".csv");
}

/// The bundled A100 profile with every GEMM row's time multiplied by `factor`.
fs::path scaled_gemm_profile(double factor) {
  kernels::KernelProfile p = kernels::read_profile(kA100Profile);
  for (kernels::ProfileRow& r : p.rows)
    if (r.shape.kind == kernels::KernelKind::GEMM)
      r.time = r.time * factor;
  const fs::path out = temp_file("gemm-x" + std::to_string(factor));
  std::ofstream f(out);
  kernels::write_profile(f, p);
  return out;
}

/// A "measured" profile with a row for every shape `w` looks up, at the bundled model's times;
/// `drop` (if given) is left out.
fs::path measured_profile(const WorkloadSpec& w, const ClusterSpec& c, kernels::KernelKind drop,
                          bool drop_any) {
  const kernels::KernelTable bundled = kernels::KernelTable::load(kA100Profile, c.gpu);
  kernels::KernelProfile p;
  p.header = bundled.profile().header;
  p.header.obtained = kernels::Provenance::MEASURED;
  p.header.sources.clear();
  p.header.notes.clear();
  for (const kernels::KernelShape& s : runner::compute_kernel_shapes(w))
    if (!drop_any || s.kind != drop)
      p.rows.push_back(kernels::ProfileRow{s, bundled.lookup(s).time, "cublaslt"});
  const fs::path out = temp_file(std::string("measured-") + (drop_any ? kernels::to_string(drop) : "all"));
  std::ofstream f(out);
  kernels::write_profile(f, p);
  return out;
}

/// Simulates in a child; returns {step_time, compute_s, measured, interpolated, modelled, roofline}.
std::vector<double> simulate_in_child(const ClusterSpec& c, const WorkloadSpec& w) {
  const test::ChildResult r = test::run_in_child([&] {
    const runner::Simulation sim = runner::simulate(c, w);
    const report::Summary& s = sim.summary;
    return std::vector<double>{s.step_time.value(),       s.compute.value(),
                               s.compute_source.measured, s.compute_source.interpolated,
                               s.compute_source.modelled, s.compute_source.roofline};
  });
  EXPECT_TRUE(r.ok) << r.error;
  return r.ok ? r.values : std::vector<double>(6, 0.0);
}

double source_sum(const std::vector<double>& v) {
  return v[2] + v[3] + v[4] + v[5];
}

graph::ComputeQuery query(graph::Block block, graph::Phase phase) {
  return graph::ComputeQuery{
      .block = block, .phase = phase, .stage = 0, .flops = Flops(0.0), .bytes = Bytes(0.0)};
}

// --- the compute-time model (no simulation) ------------------------------------------------

// With a profile, a task's time is the sum over its kernels of table time × factor + one launch
// overhead each; the roofline (no profile) is the old formula, all of it `roofline`.
TEST(ComputeModel, SumsKernelTimesPlusLaunchOverhead) {
  const ClusterSpec c = a100_cluster(1, 1, kA100Profile.string());
  const WorkloadSpec w = compute_bound_workload();
  const auto table = runner::load_kernel_table(c);
  ASSERT_TRUE(table);
  const graph::ComputeTimeFn fn = runner::compute_time_model(c, w, table);
  for (graph::Phase phase : {graph::Phase::FORWARD, graph::Phase::BACKWARD}) {
    double expected = 0;
    for (const kernels::KernelCall& k : kernels::block_kernels(
             w, Block::MLP, phase == graph::Phase::FORWARD ? Phase::FORWARD : Phase::BACKWARD))
      expected += table->lookup(k.shape).time.value() * k.time_factor + table->launch_overhead().value();
    const graph::ComputeCost cost = fn(query(graph::Block::MLP, phase));
    EXPECT_NEAR(cost.time.value(), expected, 1e-12 * expected);
    EXPECT_DOUBLE_EQ(cost.sources.modelled, 1.0); // the bundled profile is modelled
  }
  const graph::ComputeCost opt = fn(query(graph::Block::OPTIMIZER, graph::Phase::OPTIMIZER));
  EXPECT_GT(opt.time.value(), 0.0);

  const graph::ComputeTimeFn roof = runner::compute_time_model(a100_cluster(1, 1, ""), w);
  const graph::ComputeQuery q{.block = graph::Block::MLP,
                              .phase = graph::Phase::FORWARD,
                              .stage = 0,
                              .flops = Flops(1e12),
                              .bytes = Bytes(1e9)};
  const graph::ComputeCost rc = roof(q);
  EXPECT_DOUBLE_EQ(rc.time.value(), model::roofline_time(q.flops, q.bytes, c.gpu, w.precision).value());
  EXPECT_DOUBLE_EQ(rc.sources.roofline, 1.0);
}

// fp8 training on the roofline (no profile): the MLP block runs at the fp8 peak, the logits at
// the bf16 peak, the attention block at the FLOP-weighted harmonic mean (its core is bf16).
TEST(ComputeModel, Fp8RooflineMixesThePeaks) {
  ClusterSpec c = a100_cluster(1, 1, "");
  c.gpu.peak_fp8 = c.gpu.peak_bf16 * 2.0;
  WorkloadSpec w = compute_bound_workload();
  w.precision = Precision::FP8;
  const graph::ComputeTimeFn fp8 = runner::compute_time_model(c, w);
  const double bf16_time = model::roofline_time(Flops(1e12), Bytes(1.0), c.gpu, Precision::BF16).value();
  auto at = [&](graph::Block b) {
    return fp8(graph::ComputeQuery{.block = b,
                                   .phase = graph::Phase::FORWARD,
                                   .stage = 0,
                                   .flops = Flops(1e12),
                                   .bytes = Bytes(1.0)})
        .time.value();
  };
  EXPECT_NEAR(at(graph::Block::MLP), bf16_time / 2, 1e-12);
  EXPECT_NEAR(at(graph::Block::LOGITS), bf16_time, 1e-12);
  const double core = model::attention_core_flops(w.model, 1, 1).value() /
                      model::attention_block_forward_flops(w.model, 1, 1).value();
  EXPECT_NEAR(at(graph::Block::ATTENTION), bf16_time * (core + (1 - core) / 2), 1e-12);
}

// Doubling every GEMM row of a (modelled) profile halves the calibrated GEMM ceiling: each GEMM of
// a task takes exactly twice as long, the other kernels do not change.
TEST(ComputeModel, DoublingGemmRowsDoublesGemmTime) {
  const ClusterSpec c1 = a100_cluster(1, 1, kA100Profile.string());
  const fs::path doubled = scaled_gemm_profile(2.0);
  const ClusterSpec c2 = a100_cluster(1, 1, doubled.string());
  const WorkloadSpec w = compute_bound_workload();
  const auto t1 = runner::load_kernel_table(c1);
  const graph::ComputeCost a =
      runner::compute_time_model(c1, w, t1)(query(graph::Block::MLP, graph::Phase::FORWARD));
  const graph::ComputeCost b =
      runner::compute_time_model(c2, w)(query(graph::Block::MLP, graph::Phase::FORWARD));
  double gemm = 0;
  for (const kernels::KernelCall& k : kernels::block_kernels(w, Block::MLP, Phase::FORWARD))
    if (k.shape.kind == kernels::KernelKind::GEMM)
      gemm += t1->lookup(k.shape).time.value();
  EXPECT_NEAR(b.time.value() - a.time.value(), gemm, 1e-9 * gemm);
  fs::remove(doubled);
}

// Routed experts are priced as their own GEMMs (kernels::block_kernels, EXPERTS), not as the dense
// MLP per FLOP. One expert per EP rank (E = ep) at top-1 holds the dense MLP's very GEMMs and
// activation: it costs the MLP block less its norm and residual add. Finer experts at the same
// routed FLOPs (512 experts of 2048 instead of 64, top-8, ep 8, h 7168, one 4096-token sequence:
// 512 tokens per expert instead of 4096) run at their smaller GEMMs' lower rate on the H100
// profile: more time per FLOP.
TEST(ComputeModel, RoutedExpertsRunAtTheirOwnGemmsRate) {
  ClusterSpec c = test::dgx_cluster(1, 1, 1);
  c.gpu.kind = "H100-SXM5-80GB";
  c.gpu.profile = (kSourceDir / "kernels_profiles/data/H100-SXM5-80GB.csv").string();
  const auto table = runner::load_kernel_table(c);
  ASSERT_TRUE(table);
  const auto time_of = [&](const WorkloadSpec& w, Block b, graph::Phase p) {
    const graph::ComputeQuery q = graph::block_query(w, b, p, 0);
    return std::pair{graph::gpu_compute_cost(w, runner::compute_time_model(c, w, table), q).time.value(),
                     q.flops.value()};
  };
  // SwiGLU, one micro-batch of `seq` tokens, ep 8 over dp 8.
  const auto moe = [](int64_t hidden, int64_t seq, int64_t ffn, int64_t experts, int64_t top_k,
                      int64_t width) {
    WorkloadSpec w = test::workload(test::small_gpt(2, hidden, seq), 1, 1, 8, 1);
    w.model.mlp = MlpKind::SWIGLU;
    w.model.ffn_hidden = ffn;
    w.model.moe.experts = experts;
    w.model.moe.top_k = top_k;
    w.model.moe.expert_ffn_hidden = width;
    w.parallel.ep = 8;
    return w;
  };
  const WorkloadSpec one = moe(4096, 2048, 11008, 8, 1, 11008);
  const WorkloadSpec coarse = moe(7168, 4096, 18432, 64, 8, 2048);
  const WorkloadSpec fine = moe(7168, 4096, 18432, 512, 8, 2048);
  EXPECT_DOUBLE_EQ(one.tokens_per_local_expert(), 2048.0);
  EXPECT_DOUBLE_EQ(coarse.tokens_per_local_expert(), 4096.0 * 8 * 8 / 64);
  EXPECT_DOUBLE_EQ(fine.tokens_per_local_expert(), 4096.0 * 8 * 8 / 512);
  const double launch = table->launch_overhead().value();
  for (const graph::Phase p : {graph::Phase::FORWARD, graph::Phase::BACKWARD}) {
    const auto [mlp, mlp_flops] = time_of(one, Block::MLP, p);
    const auto [experts, experts_flops] = time_of(one, Block::EXPERTS, p);
    EXPECT_DOUBLE_EQ(experts_flops, mlp_flops); // the same GEMMs
    // The MLP block less its norm and its residual add (a copy), each kernel's table time plus a
    // launch (the cluster leaves both efficiencies at 1).
    double norm_and_residual = 0;
    for (const kernels::KernelCall& k : kernels::block_kernels(
             one, Block::MLP, p == graph::Phase::FORWARD ? Phase::FORWARD : Phase::BACKWARD))
      if (k.shape.kind == kernels::KernelKind::RMSNORM || k.shape.kind == kernels::KernelKind::LAYERNORM ||
          k.shape.kind == kernels::KernelKind::MEMCPY)
        norm_and_residual += table->lookup(k.shape).time.value() * k.time_factor + launch;
    ASSERT_GT(norm_and_residual, 0.0);
    EXPECT_NEAR(experts, mlp - norm_and_residual, 1e-9 * mlp);
    const auto [f, f_flops] = time_of(fine, Block::EXPERTS, p);
    const auto [k, k_flops] = time_of(coarse, Block::EXPERTS, p);
    EXPECT_DOUBLE_EQ(f_flops, k_flops);
    EXPECT_GT(f, k);
  }
}

// training.attention_kernel: only the fused attention kernels' times change, by the published
// rate ratio on the H100 profile (flash2: x 529/333 forward, x 518/318 backward); on the A100
// profile flash2 is the profile's own rate, and flash3 is refused.
TEST(ComputeModel, AttentionKernelScalesTheFusedCoreOnly) {
  const ClusterSpec h100 = [] {
    ClusterSpec c = test::dgx_cluster(1, 1, 1);
    c.gpu.kind = "H100-SXM5-80GB";
    c.gpu.profile = (kSourceDir / "kernels_profiles/data/H100-SXM5-80GB.csv").string();
    return c;
  }();
  const WorkloadSpec cudnn = compute_bound_workload();
  WorkloadSpec flash2 = cudnn;
  flash2.training.attention_kernel = AttentionKernel::FLASH2;
  WorkloadSpec flash3 = cudnn;
  flash3.training.attention_kernel = AttentionKernel::FLASH3;
  const auto table = runner::load_kernel_table(h100);
  ASSERT_TRUE(table);
  for (const auto& [phase, pass, flash2_slower, flash3_slower] :
       {std::tuple{graph::Phase::FORWARD, Phase::FORWARD, 529.0 / 333.0, 529.0 / 602.0},
        std::tuple{graph::Phase::BACKWARD, Phase::BACKWARD, 518.0 / 318.0, 518.0 / 559.0}}) {
    double attention = 0;
    for (const kernels::KernelCall& k : kernels::block_kernels(cudnn, Block::ATTENTION, pass))
      if (k.shape.kind == kernels::KernelKind::ATTENTION_FWD ||
          k.shape.kind == kernels::KernelKind::ATTENTION_BWD)
        attention += table->lookup(k.shape).time.value() * k.time_factor;
    ASSERT_GT(attention, 0.0);
    const auto at = [&](const WorkloadSpec& w) {
      return runner::compute_time_model(h100, w, table)(query(graph::Block::ATTENTION, phase)).time.value();
    };
    EXPECT_NEAR(at(flash2) - at(cudnn), attention * (flash2_slower - 1), 1e-9 * attention);
    EXPECT_NEAR(at(flash3) - at(cudnn), attention * (flash3_slower - 1), 1e-9 * attention);
    // The MLP has no attention kernel.
    EXPECT_DOUBLE_EQ(
        runner::compute_time_model(h100, flash2, table)(query(graph::Block::MLP, phase)).time.value(),
        runner::compute_time_model(h100, cudnn, table)(query(graph::Block::MLP, phase)).time.value());
  }
  const ClusterSpec a100 = a100_cluster(1, 1, kA100Profile.string());
  const auto a100_table = runner::load_kernel_table(a100);
  EXPECT_DOUBLE_EQ(runner::compute_time_model(a100, flash2, a100_table)(
                       query(graph::Block::ATTENTION, graph::Phase::BACKWARD))
                       .time.value(),
                   runner::compute_time_model(a100, cudnn, a100_table)(
                       query(graph::Block::ATTENTION, graph::Phase::BACKWARD))
                       .time.value());
  EXPECT_THROW((void)runner::compute_time_model(a100, flash3, a100_table), ConfigError);
}

// --- whole steps ---------------------------------------------------------------------------

// A compute-bound step (one GPU, no communication) with all GEMM times doubled: compute_s grows
// by the GEMM share of compute, close to 2x, and equals the sum of the task durations.
TEST(ProfiledStep, DoubledGemmsMakeAComputeBoundStepAboutTwiceAsSlow) {
  const WorkloadSpec w = compute_bound_workload();
  const fs::path doubled = scaled_gemm_profile(2.0);
  const auto base = simulate_in_child(a100_cluster(1, 1, kA100Profile.string()), w);
  const auto slow = simulate_in_child(a100_cluster(1, 1, doubled.string()), w);
  fs::remove(doubled);
  ASSERT_GT(base[1], 0.0);
  const double ratio = slow[1] / base[1];
  EXPECT_GT(ratio, 1.8);
  EXPECT_LT(ratio, 2.0);
  EXPECT_NEAR(slow[0] / base[0], ratio, 0.01); // compute-bound: the step follows
}

// compute_source sums to 1: 100 % modelled with the bundled profile, 100 % roofline without one,
// 100 % measured when the profile has a row for every shape (and then the same times as the model
// it was made from), and a mix when one kind is missing.
TEST(ProfiledStep, ComputeSourceSharesSumToOne) {
  const WorkloadSpec w = compute_bound_workload();
  const ClusterSpec bundled = a100_cluster(1, 1, kA100Profile.string());
  const auto modelled = simulate_in_child(bundled, w);
  EXPECT_NEAR(source_sum(modelled), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(modelled[4], 1.0);

  const auto roofline = simulate_in_child(a100_cluster(1, 1, ""), w);
  EXPECT_DOUBLE_EQ(roofline[5], 1.0);

  const fs::path all = measured_profile(w, bundled, kernels::KernelKind::GEMM, false);
  const auto measured = simulate_in_child(a100_cluster(1, 1, all.string()), w);
  EXPECT_DOUBLE_EQ(measured[2], 1.0);
  EXPECT_NEAR(measured[1], modelled[1], 1e-6 * modelled[1]); // rows hold 7 digits

  const fs::path some = measured_profile(w, bundled, kernels::KernelKind::ATTENTION_BWD, true);
  const auto mixed = simulate_in_child(a100_cluster(1, 1, some.string()), w);
  EXPECT_NEAR(source_sum(mixed), 1.0, 1e-12);
  EXPECT_GT(mixed[2], 0.5);
  EXPECT_GT(mixed[3] + mixed[4], 0.0); // attention backward: not measured
  fs::remove(all);
  fs::remove(some);
}

// --- overlap slowdown ------------------------------------------------------------------------

// Exact semantics: a 1 ms compute task on GPU 0 and a send from GPU 0 that takes x < 1 ms start
// together. While the send runs, compute progresses at 1/f: it ends at x + (1 ms - x/f).
TEST(OverlapSlowdown, ComputeSlowsExactlyWhileItsGpuCommunicates) {
  const double f = 1.5, work = 1e-3;
  const test::ChildResult r = test::run_in_child([&] {
    graph::StepProgram prog;
    graph::Task compute;
    compute.kind = graph::TaskKind::COMPUTE;
    compute.rank = 0;
    compute.duration = Seconds(work);
    const graph::TaskId c = prog.graph.add_task(compute);
    graph::Task send;
    send.kind = graph::TaskKind::COLLECTIVE;
    send.group = graph::CommGroup::PP;
    send.op = graph::CollectiveOp::SEND;
    send.stream = graph::Stream::PP_COMM;
    send.rank = 0;
    send.bytes = Bytes(96e6); // ~0.4 ms at 240 GB/s
    const graph::Rank pair[2] = {0, 1};
    const graph::TaskId s = prog.graph.add_collective(send, pair);
    prog.graph.finalize();
    prog.simulated_ranks = {0, 1};
    prog.grid = graph::RankGrid{2, 1, 1};
    prog.micro_batches = 1;
    engine::Replay replay(prog, test::dgx_cluster(1, 2, 2), engine::ReplayOptions{.overlap_slowdown = f});
    const engine::ReplayResult res = replay.run();
    return std::vector<double>{res.end[c].value(), res.end[s].value()};
  });
  ASSERT_TRUE(r.ok) << r.error;
  const double x = r.values[1];
  ASSERT_GT(x, 0.0);
  ASSERT_LT(x, work);
  EXPECT_NEAR(r.values[0], x + (work - x / f), 1e-9);
}

// A data-parallel step whose gradient all-reduces overlap the backward: factor 1 (given or
// defaulted) changes nothing; factor 1.5 makes it slower, by at most 1.5x.
TEST(OverlapSlowdown, DataParallelStepSlowsByAtMostTheFactor) {
  const WorkloadSpec w = test::workload(test::small_gpt(8, 2048, 1024), 1, 1, 2, 2);
  ClusterSpec c = a100_cluster(1, 2, "");
  const auto unset = simulate_in_child(c, w);
  c.gpu.overlap_slowdown = 1.0;
  const auto one = simulate_in_child(c, w);
  c.gpu.overlap_slowdown = 1.5;
  const auto slowed = simulate_in_child(c, w);
  EXPECT_EQ(unset[0], one[0]); // bit for bit
  EXPECT_EQ(unset[1], one[1]);
  EXPECT_GT(slowed[0], one[0]);
  EXPECT_LE(slowed[0], 1.5 * one[0]);
  EXPECT_GT(slowed[1], one[1]);
  EXPECT_LE(slowed[1], 1.5 * one[1]);
}

// The factor comes from gpu.overlap_slowdown, else from the profile's header, else 1.
TEST(OverlapSlowdown, FactorFromClusterThenProfile) {
  ClusterSpec c = a100_cluster(1, 1, kA100Profile.string());
  const auto table = runner::load_kernel_table(c);
  EXPECT_DOUBLE_EQ(runner::overlap_slowdown(c, table.get()), table->overlap_slowdown());
  EXPECT_DOUBLE_EQ(runner::overlap_slowdown(c, nullptr), 1.0);
  c.gpu.overlap_slowdown = 1.3;
  EXPECT_DOUBLE_EQ(runner::overlap_slowdown(c, table.get()), 1.3);
}

// A tensor-list collective copies each rank's slice with a kernel of its own: its host time per
// rank is gpu.list_collective_per_rank, never less than one launch (gpu.launch_overhead when set,
// else the profile's; none without a profile).
TEST(ListCollectiveHost, AtLeastOneLaunchPerRank) {
  ClusterSpec c = a100_cluster(1, 8, kA100Profile.string());
  const auto table = runner::load_kernel_table(c);
  const Seconds launch = table->launch_overhead();
  ASSERT_GT(launch.value(), 0.0);
  EXPECT_EQ(c.gpu.list_collective_per_rank.value(), 0.0); // unset: the floor alone
  EXPECT_EQ(runner::list_collective_per_rank(c, table.get()), launch);
  EXPECT_EQ(runner::list_collective_per_rank(c, nullptr), Seconds(0.0));
  c.gpu.list_collective_per_rank = Seconds(16.57e-6);
  EXPECT_EQ(runner::list_collective_per_rank(c, table.get()), Seconds(16.57e-6));
  c.gpu.list_collective_per_rank = launch * 0.5;
  EXPECT_EQ(runner::list_collective_per_rank(c, table.get()), launch);
  c.gpu.launch_overhead = Seconds(6e-6);
  EXPECT_EQ(runner::list_collective_per_rank(c, table.get()), Seconds(6e-6));
  EXPECT_EQ(runner::list_collective_per_rank(c, nullptr), Seconds(6e-6));
}

// The simulation charges that floor: a blocking ZeRO-3 with the knob unset runs as with the knob
// at one launch, and faster than at two.
TEST(ListCollectiveHost, BlockingZero3PaysTheFloorWithTheKnobUnset) {
  WorkloadSpec w = test::workload(test::small_gpt(4, 2048, 1024), 1, 1, 8, 2);
  w.parallel.zero_stage = 3;
  w.training.zero3_fetch = Zero3Fetch::BLOCKING;
  ClusterSpec c = a100_cluster(1, 8, kA100Profile.string());
  const Seconds launch = runner::load_kernel_table(c)->launch_overhead();
  const double unset = simulate_in_child(c, w).at(0);
  c.gpu.list_collective_per_rank = launch;
  const double one = simulate_in_child(c, w).at(0);
  c.gpu.list_collective_per_rank = launch * 2.0;
  const double two = simulate_in_child(c, w).at(0);
  EXPECT_DOUBLE_EQ(unset, one);
  EXPECT_GT(two, one);
}

// --- stepsim kernels -------------------------------------------------------------------------

// The output parses back as a shape list and holds the suite's shapes plus every shape the
// compute model looks up.
TEST(KernelsCommand, OutputParsesBackAsAShapeList) {
  const fs::path out = temp_file("kernels-out");
  const std::string cmd = std::string(STEPSIM_BINARY) + " kernels --workload " +
                          (kSourceDir / "workloads/gpt3-175b.yaml").string() + " --cluster " +
                          (kSourceDir / "topologies/dgx-a100-superpod.yaml").string() + " > " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(out);
  const std::vector<kernels::KernelShape> shapes = kernels::parse_shape_list(in, out.string());
  fs::remove(out);

  const ClusterSpec c = config::load_cluster(kSourceDir / "topologies/dgx-a100-superpod.yaml");
  WorkloadSpec w = config::load_workload(kSourceDir / "workloads/gpt3-175b.yaml");
  w = config::check_layout(c, w).workload;
  const auto suite = kernels::workload_kernels(w);
  ASSERT_GE(shapes.size(), suite.size());
  EXPECT_EQ(
      std::vector<kernels::KernelShape>(shapes.begin(), shapes.begin() + static_cast<long>(suite.size())),
      suite);
  for (const kernels::KernelShape& s : runner::compute_kernel_shapes(w))
    EXPECT_NE(std::find(shapes.begin(), shapes.end(), s), shapes.end()) << kernels::describe(s);
}

} // namespace
} // namespace stepsim

namespace stepsim {
namespace {

// gpu.profile: relative to the cluster file; `none` = roofline; a missing file is a ConfigError
// naming the key. The bundled topologies name their profiles.
TEST(ProfileConfig, ResolvesRelativeToTheClusterFile) {
  const ClusterSpec a100 = config::load_cluster(kSourceDir / "topologies/dgx-a100-superpod.yaml");
  EXPECT_TRUE(fs::equivalent(a100.gpu.profile, kA100Profile));
  EXPECT_EQ(a100.gpu.overlap_slowdown, 0.0);
  const ClusterSpec h100 = config::load_cluster(kSourceDir / "topologies/dgx-h100.yaml");
  EXPECT_TRUE(fs::equivalent(h100.gpu.profile, kSourceDir / "kernels_profiles/data/H100-SXM5-80GB.csv"));

  const fs::path cluster = kSourceDir / "topologies/dgx-a100-superpod.yaml";
  const ClusterSpec none =
      config::load_cluster(cluster, {config::parse_override("cluster.gpu.profile=none")});
  EXPECT_TRUE(none.gpu.profile.empty());
  try {
    config::load_cluster(cluster, {config::parse_override("cluster.gpu.profile=no-such.csv")});
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gpu.profile"), std::string::npos) << e.what();
  }
  EXPECT_THROW(config::load_cluster(cluster, {config::parse_override("cluster.gpu.overlap_slowdown=0.5")}),
               ConfigError);
}

} // namespace
} // namespace stepsim
