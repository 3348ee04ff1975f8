// Pipeline schedules (MODEL.md §3, §5): every micro-batch once per phase, backward after its
// forward, and the in-flight bound: 1F1B holds at most min(pp - stage, m) micro-batches, GPipe m.

#include "graph/schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

using namespace stepsim;
using namespace stepsim::graph;

namespace {

struct Stats {
  int max_in_flight = 0;
};

/// Checks the invariants every schedule must satisfy; returns the peak number of micro-batches
/// whose forward has started and backward not yet finished.
Stats check_order(const std::vector<PassRef>& order, int m) {
  std::vector<int> fwd(static_cast<size_t>(m), 0), bwd(static_cast<size_t>(m), 0);
  Stats s;
  int in_flight = 0;
  EXPECT_EQ(order.size(), static_cast<size_t>(2 * m));
  for (const PassRef& p : order) {
    EXPECT_GE(p.micro_batch, 0);
    EXPECT_LT(p.micro_batch, m);
    if (p.micro_batch < 0 || p.micro_batch >= m)
      continue;
    const size_t i = static_cast<size_t>(p.micro_batch);
    if (p.phase == Phase::FORWARD) {
      ++fwd[i];
      ++in_flight;
    } else {
      EXPECT_EQ(p.phase, Phase::BACKWARD);
      EXPECT_EQ(fwd[i], 1) << "backward of micro-batch " << i << " before its forward";
      ++bwd[i];
      --in_flight;
    }
    s.max_in_flight = std::max(s.max_in_flight, in_flight);
  }
  for (int i = 0; i < m; ++i) {
    EXPECT_EQ(fwd[static_cast<size_t>(i)], 1) << "forward of micro-batch " << i;
    EXPECT_EQ(bwd[static_cast<size_t>(i)], 1) << "backward of micro-batch " << i;
  }
  return s;
}

} // namespace

// GPipe: all forwards in micro-batch order, then all backwards; holds m micro-batches.
TEST(Schedule, GPipe) {
  for (int pp : {1, 2, 4, 8})
    for (int m : {1, 2, 3, 8, 16})
      for (int stage = 0; stage < pp; ++stage) {
        const auto order = gpipe_order(stage, pp, m);
        EXPECT_EQ(check_order(order, m).max_in_flight, m);
        for (int i = 0; i < m; ++i) {
          EXPECT_EQ(order[static_cast<size_t>(i)].phase, Phase::FORWARD);
          EXPECT_EQ(order[static_cast<size_t>(i)].micro_batch, i);
          EXPECT_EQ(order[static_cast<size_t>(m + i)].phase, Phase::BACKWARD);
          EXPECT_EQ(order[static_cast<size_t>(m + i)].micro_batch, i);
        }
        const auto via = stage_order(Schedule::GPIPE, stage, pp, m);
        ASSERT_EQ(via.size(), order.size());
        for (size_t k = 0; k < via.size(); ++k)
          EXPECT_TRUE(via[k].phase == order[k].phase && via[k].micro_batch == order[k].micro_batch);
      }
}

// 1F1B (PipeDream-Flush): min(pp - stage - 1, m) warm-up forwards, then alternating; micro-batch
// order kept in each phase; in flight never exceeds pp - stage and reaches min(pp - stage, m).
TEST(Schedule, OneFOneB) {
  for (int pp : {1, 2, 4, 8})
    for (int m : {1, 2, 3, 8, 16})
      for (int stage = 0; stage < pp; ++stage) {
        const auto order = one_f_one_b_order(stage, pp, m);
        const Stats s = check_order(order, m);
        EXPECT_LE(s.max_in_flight, pp - stage) << "pp=" << pp << " m=" << m << " stage=" << stage;
        EXPECT_EQ(s.max_in_flight, std::min(pp - stage, m)) << "pp=" << pp << " m=" << m << " stage=" << stage;
        const int warmup = std::min(pp - stage - 1, m);
        for (int i = 0; i < warmup; ++i)
          EXPECT_EQ(order[static_cast<size_t>(i)].phase, Phase::FORWARD);
        int next_f = 0, next_b = 0;
        for (const PassRef& p : order)
          EXPECT_EQ(p.micro_batch, p.phase == Phase::FORWARD ? next_f++ : next_b++);
        const auto via = stage_order(Schedule::ONE_F_ONE_B, stage, pp, m);
        ASSERT_EQ(via.size(), order.size());
        for (size_t k = 0; k < via.size(); ++k)
          EXPECT_TRUE(via[k].phase == order[k].phase && via[k].micro_batch == order[k].micro_batch);
      }
}

// The last stage of 1F1B alternates from the start: F0 B0 F1 B1 ...
TEST(Schedule, OneFOneBLastStageAlternates) {
  const auto order = one_f_one_b_order(3, 4, 4);
  for (size_t k = 0; k < order.size(); ++k) {
    EXPECT_EQ(order[k].phase, k % 2 == 0 ? Phase::FORWARD : Phase::BACKWARD);
    EXPECT_EQ(order[k].micro_batch, static_cast<int>(k / 2));
  }
}
