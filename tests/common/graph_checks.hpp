#pragma once
// Checks on built step graphs shared by tests.

#include "graph/step_builder.hpp"

#include <algorithm>
#include <utility>

namespace stepsim::test {

/// ZeRO-3 parameter bytes rank r gathers (collectives it takes part in) and frees (its compute
/// tasks) over the step.
inline std::pair<double, double> gathered_and_freed(const graph::StepProgram& prog, graph::Rank r) {
  double alloc = 0, freed = 0;
  for (const graph::Task& t : prog.graph.tasks()) {
    if (t.kind == graph::TaskKind::COMPUTE) {
      if (t.rank == r)
        freed += t.param_free.value();
      continue;
    }
    const auto parts = prog.graph.participants(t);
    if (std::find(parts.begin(), parts.end(), r) != parts.end())
      alloc += t.param_alloc.value();
  }
  return {alloc, freed};
}

} // namespace stepsim::test
