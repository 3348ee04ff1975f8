#pragma once
// Simulates one collective per size, sizes chained in one simulation (as `stepsim collective`
// does); returns nccl-tests bus bandwidth in GB/s per size. Once per process (SimGrid).

#include "collectives/collective.hpp"
#include "engine/replay.hpp"

#include <vector>

namespace stepsim::test {

inline std::vector<double> busbw_sweep(const ClusterSpec& cluster, CollectiveOp op,
                                       std::vector<graph::Rank> ranks, const std::vector<double>& sizes,
                                       collectives::Algorithm algorithm,
                                       CollectiveForm form = CollectiveForm::AUTO) {
  graph::StepProgram prog;
  for (size_t i = 0; i < sizes.size(); ++i) {
    graph::Task t;
    t.group = graph::CommGroup::DP;
    t.op = op;
    t.stream = graph::Stream::DP_COMM;
    t.rank = ranks.front();
    t.bytes = Bytes(sizes[i]);
    const graph::TaskId id = prog.graph.add_collective(t, ranks);
    if (i > 0)
      prog.graph.add_edge(id - 1, id);
  }
  prog.graph.finalize();
  prog.simulated_ranks = ranks;
  prog.grid = graph::RankGrid{static_cast<int>(ranks.size()), 1, 1};
  prog.micro_batches = 1;
  engine::ReplayOptions o;
  o.collective_form = form;
  o.algorithms.dp = algorithm;
  engine::Replay replay(prog, cluster, o);
  const engine::ReplayResult r = replay.run();
  std::vector<double> out;
  const int n = static_cast<int>(ranks.size());
  for (size_t i = 0; i < sizes.size(); ++i)
    out.push_back(sizes[i] / (r.end[i] - r.start[i]).value() * collectives::bus_factor(op, n) / 1e9);
  return out;
}

} // namespace stepsim::test
