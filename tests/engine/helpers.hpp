#pragma once
// Hand-built step programs for engine tests.

#include "engine/replay.hpp"
#include "graph/step_builder.hpp"

#include <algorithm>
#include <vector>

namespace stepsim::test {

/// A program of independent collectives (no edges), each over `groups[i]` in ring order.
inline graph::StepProgram collectives_program(const std::vector<std::vector<graph::Rank>>& groups, Bytes size,
                                              graph::CollectiveOp op = graph::CollectiveOp::ALL_REDUCE) {
  graph::StepProgram prog;
  std::vector<graph::Rank> all;
  for (const auto& ranks : groups) {
    graph::Task t;
    t.group = graph::CommGroup::DP;
    t.op = op;
    t.stream = graph::Stream::DP_COMM;
    t.rank = ranks.front();
    t.bytes = size;
    prog.graph.add_collective(t, ranks);
    all.insert(all.end(), ranks.begin(), ranks.end());
  }
  prog.graph.finalize();
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  prog.simulated_ranks = all;
  prog.grid = graph::RankGrid{static_cast<int>(all.size()), 1, 1};
  prog.micro_batches = 1;
  return prog;
}

inline std::vector<graph::Rank> iota_ranks(int first, int n) {
  std::vector<graph::Rank> r;
  for (int i = 0; i < n; ++i)
    r.push_back(first + i);
  return r;
}

/// A whole step of `w`, unfolded, replayed on `c`: 1 ms per compute block, 0.2 ms optimizer.
struct Replayed {
  graph::StepProgram program;
  engine::ReplayResult result;
};

inline Replayed replay_step(const WorkloadSpec& w, const ClusterSpec& c) {
  graph::BuildOptions o;
  o.fold_dp = false;
  o.compute_time = [](const graph::ComputeQuery& q) {
    return q.block == graph::Block::OPTIMIZER ? Seconds(2e-4) : Seconds(1e-3);
  };
  Replayed r{graph::build_step(w, o), {}};
  engine::Replay replay(r.program, c);
  r.result = replay.run();
  return r;
}

/// Step time of `prog` on `cluster` (call once per process).
inline double step_time(const graph::StepProgram& prog, const ClusterSpec& cluster, CollectiveForm form) {
  engine::ReplayOptions o;
  o.collective_form = form;
  // These tests check the ring's closed forms: force it (AUTO may pick tree, NVLS, ...).
  o.algorithms = {CollectiveAlgorithm::RING, CollectiveAlgorithm::RING, CollectiveAlgorithm::RING};
  engine::Replay replay(prog, cluster, o);
  return replay.run().step_time.value();
}

} // namespace stepsim::test
