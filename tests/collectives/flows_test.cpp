// Ring expansion of collectives (MODEL.md §4): flow counts, per-rank volumes, dependency shape,
// degenerate cases, and the analytic ring_time twin.

#include "collectives/flows.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

using namespace stepsim;
using namespace stepsim::collectives;

namespace {

/// Latency that depends on the pair, so the coarse form's max is observable: 1 us + 1 ns * |a-b|.
Seconds pair_latency(int32_t a, int32_t b) {
  return Seconds(1e-6 + 1e-9 * std::abs(a - b));
}

/// Non-contiguous GPU ids, so ring order must come from the span and not from 0..n-1.
std::vector<int32_t> ring_of(int n) {
  std::vector<int32_t> g;
  for (int i = 0; i < n; ++i)
    g.push_back(static_cast<int32_t>((i * 5 + 3) % 97));
  return g;
}

std::map<int32_t, double> bytes_sent(const FlowProgram& p) {
  std::map<int32_t, double> out;
  for (const Flow& f : p.flows)
    out[f.src] += f.bytes;
  return out;
}

} // namespace

// ring_steps: 2(n-1) for all-reduce, n-1 for all-gather / reduce-scatter, 1 for a send.
// ring_bytes_per_rank: 2(n-1)/n S, (n-1)/n S, S.
TEST(Ring, StepsAndBytesPerRank) {
  for (int n : {2, 3, 8, 64}) {
    EXPECT_EQ(ring_steps(CollectiveOp::ALL_REDUCE, n), 2 * (n - 1));
    EXPECT_EQ(ring_steps(CollectiveOp::ALL_GATHER, n), n - 1);
    EXPECT_EQ(ring_steps(CollectiveOp::REDUCE_SCATTER, n), n - 1);
    EXPECT_EQ(ring_steps(CollectiveOp::SEND, n), 1);
    const double S = 3e8;
    EXPECT_DOUBLE_EQ(ring_bytes_per_rank(CollectiveOp::ALL_REDUCE, Bytes(S), n).value(),
                     2.0 * (n - 1) / n * S);
    EXPECT_DOUBLE_EQ(ring_bytes_per_rank(CollectiveOp::ALL_GATHER, Bytes(S), n).value(),
                     1.0 * (n - 1) / n * S);
    EXPECT_DOUBLE_EQ(ring_bytes_per_rank(CollectiveOp::REDUCE_SCATTER, Bytes(S), n).value(),
                     1.0 * (n - 1) / n * S);
    EXPECT_DOUBLE_EQ(ring_bytes_per_rank(CollectiveOp::SEND, Bytes(S), n).value(), S);
  }
}

// ring_time = steps * alpha + bytes_per_rank / beta; all-reduce: 2(n-1) a + 2(n-1)/n S / b.
TEST(Ring, ClosedFormTime) {
  const Seconds a(3e-6);
  const BytesPerSec b(240e9);
  for (int n : {2, 4, 8, 16}) {
    const double S = 1 << 30;
    EXPECT_NEAR(ring_time(CollectiveOp::ALL_REDUCE, Bytes(S), n, a, b).value(),
                2 * (n - 1) * 3e-6 + 2.0 * (n - 1) / n * S / 240e9, 1e-15);
    EXPECT_NEAR(ring_time(CollectiveOp::ALL_GATHER, Bytes(S), n, a, b).value(),
                (n - 1) * 3e-6 + 1.0 * (n - 1) / n * S / 240e9, 1e-15);
  }
  EXPECT_EQ(ring_time(CollectiveOp::ALL_REDUCE, Bytes(1e9), 1, a, b).value(), 0.0);
}

// FINE all-reduce: 2(n-1) steps x n flows, each a chunk S/n from gpus[i] to gpus[i+1 mod n];
// every rank sends 2(n-1)/n S in total; no tail delay.
TEST(ExpandRing, FineAllReduceCountsAndVolumes) {
  for (int n : {2, 3, 4, 8, 16}) {
    const auto gpus = ring_of(n);
    const double S = 1 << 20;
    const FlowProgram p =
        expand_ring(CollectiveOp::ALL_REDUCE, gpus, Bytes(S), CollectiveForm::FINE, pair_latency);
    ASSERT_EQ(p.flows.size(), static_cast<size_t>(2 * (n - 1) * n)) << n;
    ASSERT_EQ(p.dep_begin.size(), p.flows.size() + 1);
    EXPECT_EQ(p.tail_delay.value(), 0.0);
    for (size_t f = 0; f < p.flows.size(); ++f) {
      const size_t i = f % static_cast<size_t>(n);
      EXPECT_EQ(p.flows[f].src, gpus[i]);
      EXPECT_EQ(p.flows[f].dst, gpus[(i + 1) % static_cast<size_t>(n)]);
      EXPECT_DOUBLE_EQ(p.flows[f].bytes, S / n);
    }
    const auto sent = bytes_sent(p);
    ASSERT_EQ(sent.size(), static_cast<size_t>(n));
    for (const auto& [gpu, bytes] : sent)
      EXPECT_NEAR(bytes, 2.0 * (n - 1) / n * S, 1e-6 * S) << "gpu " << gpu;
  }
}

// FINE dependency shape (NCCL ring): flow (k, i) waits for exactly rank i's previous send
// (k-1, i) and the chunk it forwards, received at step k-1 from rank i-1: (k-1, i-1).
// Step-0 flows wait for nothing. The dependency graph is therefore acyclic and ordered.
TEST(ExpandRing, FineDependencies) {
  const int n = 5;
  const auto gpus = ring_of(n);
  const FlowProgram p =
      expand_ring(CollectiveOp::ALL_REDUCE, gpus, Bytes(1e6), CollectiveForm::FINE, pair_latency);
  for (int k = 0; k < 2 * (n - 1); ++k) {
    for (int i = 0; i < n; ++i) {
      const size_t f = static_cast<size_t>(k * n + i);
      const auto deps = p.deps_of(f);
      std::set<uint32_t> got(deps.begin(), deps.end());
      if (k == 0) {
        EXPECT_TRUE(got.empty()) << "flow " << f;
      } else {
        const std::set<uint32_t> want{static_cast<uint32_t>((k - 1) * n + i),
                                      static_cast<uint32_t>((k - 1) * n + (i + n - 1) % n)};
        EXPECT_EQ(got, want) << "flow " << f;
      }
      for (uint32_t d : deps)
        EXPECT_LT(d, f); // dependencies point backwards: acyclic
    }
  }
}

// All-gather and reduce-scatter: (n-1) steps x n flows, (n-1)/n S per rank.
TEST(ExpandRing, FineAllGatherReduceScatter) {
  for (CollectiveOp op : {CollectiveOp::ALL_GATHER, CollectiveOp::REDUCE_SCATTER}) {
    const int n = 8;
    const double S = 8e6;
    const FlowProgram p = expand_ring(op, ring_of(n), Bytes(S), CollectiveForm::FINE, pair_latency);
    EXPECT_EQ(p.flows.size(), static_cast<size_t>((n - 1) * n));
    for (const auto& [gpu, bytes] : bytes_sent(p))
      EXPECT_NEAR(bytes, 1.0 * (n - 1) / n * S, 1e-6) << gpu;
  }
}

// COARSE: n flows (one per ring edge) each carrying the rank's whole volume, no dependencies;
// the remaining steps-1 latencies are added as a tail delay of (steps-1) * max edge latency.
TEST(ExpandRing, CoarseForm) {
  for (CollectiveOp op : {CollectiveOp::ALL_REDUCE, CollectiveOp::ALL_GATHER, CollectiveOp::REDUCE_SCATTER}) {
    for (int n : {2, 4, 8, 16}) {
      const auto gpus = ring_of(n);
      const double S = 1 << 30;
      const FlowProgram p = expand_ring(op, gpus, Bytes(S), CollectiveForm::COARSE, pair_latency);
      ASSERT_EQ(p.flows.size(), static_cast<size_t>(n));
      ASSERT_EQ(p.dep_begin.size(), p.flows.size() + 1);
      EXPECT_TRUE(p.deps.empty());
      double max_lat = 0;
      for (int i = 0; i < n; ++i) {
        const Flow& f = p.flows[static_cast<size_t>(i)];
        EXPECT_EQ(f.src, gpus[static_cast<size_t>(i)]);
        EXPECT_EQ(f.dst, gpus[static_cast<size_t>((i + 1) % n)]);
        EXPECT_NEAR(f.bytes, ring_bytes_per_rank(op, Bytes(S), n).value(), 1e-3);
        EXPECT_EQ(p.deps_of(static_cast<size_t>(i)).size(), 0u);
        max_lat = std::max(max_lat, pair_latency(f.src, f.dst).value());
      }
      EXPECT_NEAR(p.tail_delay.value(), (ring_steps(op, n) - 1) * max_lat, 1e-18);
    }
  }
}

// Degenerate cases: one rank or zero bytes -> no flows, no delay (dep_begin still well formed).
TEST(ExpandRing, EmptyWhenSingleRankOrZeroBytes) {
  for (CollectiveForm form : {CollectiveForm::FINE, CollectiveForm::COARSE}) {
    const std::vector<int32_t> one{4};
    FlowProgram p = expand_ring(CollectiveOp::ALL_REDUCE, one, Bytes(1e6), form, pair_latency);
    EXPECT_TRUE(p.flows.empty());
    EXPECT_EQ(p.dep_begin.size(), 1u);
    EXPECT_EQ(p.tail_delay.value(), 0.0);
    p = expand_ring(CollectiveOp::ALL_REDUCE, ring_of(8), Bytes(0), form, pair_latency);
    EXPECT_TRUE(p.flows.empty());
    EXPECT_EQ(p.dep_begin.size(), 1u);
    EXPECT_EQ(p.tail_delay.value(), 0.0);
    const std::vector<int32_t> none;
    EXPECT_TRUE(expand_ring(CollectiveOp::ALL_GATHER, none, Bytes(1e6), form, pair_latency).flows.empty());
  }
}

// A send is one flow src -> dst of S bytes, in either form; it needs exactly two GPUs.
TEST(ExpandRing, SendNeedsTwoGpus) {
  for (CollectiveForm form : {CollectiveForm::FINE, CollectiveForm::COARSE}) {
    const std::vector<int32_t> pair{7, 2};
    const FlowProgram p = expand_ring(CollectiveOp::SEND, pair, Bytes(12345), form, pair_latency);
    ASSERT_EQ(p.flows.size(), 1u);
    EXPECT_EQ(p.flows[0].src, 7);
    EXPECT_EQ(p.flows[0].dst, 2);
    EXPECT_EQ(p.flows[0].bytes, 12345.0);
    EXPECT_EQ(p.tail_delay.value(), 0.0);
    const std::vector<int32_t> three{1, 2, 3}, one{1};
    EXPECT_THROW(expand_ring(CollectiveOp::SEND, three, Bytes(1), form, pair_latency), SimulationError);
    EXPECT_THROW(expand_ring(CollectiveOp::SEND, one, Bytes(1), form, pair_latency), SimulationError);
  }
}

// AUTO is fine for groups of at most fine_max_ranks ranks (2 by default), coarse above; FINE and
// COARSE stand for themselves whatever the group.
TEST(ResolveForm, AutoIsFineUpToTheThreshold) {
  EXPECT_EQ(resolve_form(CollectiveForm::AUTO, 1), CollectiveForm::FINE);
  EXPECT_EQ(resolve_form(CollectiveForm::AUTO, 2), CollectiveForm::FINE);
  EXPECT_EQ(resolve_form(CollectiveForm::AUTO, 3), CollectiveForm::COARSE);
  EXPECT_EQ(resolve_form(CollectiveForm::AUTO, 4, {.fine_max_ranks = 4}), CollectiveForm::FINE);
  EXPECT_EQ(resolve_form(CollectiveForm::AUTO, 5, {.fine_max_ranks = 4}), CollectiveForm::COARSE);
  EXPECT_EQ(resolve_form(CollectiveForm::FINE, 64), CollectiveForm::FINE);
  EXPECT_EQ(resolve_form(CollectiveForm::COARSE, 2), CollectiveForm::COARSE);
}

// expand_ring with AUTO: a ring of 2 expands as the fine form (2(n-1)·n = 4 flows for an
// all-reduce), a ring of 8 as the coarse one (n = 8 flows).
TEST(ExpandRing, AutoFormFollowsTheGroupSize) {
  EXPECT_EQ(expand_ring(CollectiveOp::ALL_REDUCE, ring_of(2), Bytes(1e6), CollectiveForm::AUTO, pair_latency)
                .flows.size(),
            4u);
  EXPECT_EQ(expand_ring(CollectiveOp::ALL_REDUCE, ring_of(8), Bytes(1e6), CollectiveForm::AUTO, pair_latency)
                .flows.size(),
            8u);
}
