#include "collectives/flows.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <string>

namespace stepsim::collectives {

CollectiveForm resolve_form(CollectiveForm form, size_t ranks, const FormThresholds& thresholds) {
  if (form != CollectiveForm::AUTO)
    return form;
  return ranks <= static_cast<size_t>(thresholds.fine_max_ranks) ? CollectiveForm::FINE
                                                                 : CollectiveForm::COARSE;
}

int ring_steps(CollectiveOp op, int n) {
  switch (op) {
  case CollectiveOp::ALL_REDUCE:
    return 2 * (n - 1);
  case CollectiveOp::ALL_GATHER:
  case CollectiveOp::REDUCE_SCATTER:
    return n - 1;
  case CollectiveOp::SEND:
    return 1;
  case CollectiveOp::BROADCAST:
  case CollectiveOp::REDUCE:
    return n - 1;
  case CollectiveOp::ALL_TO_ALL:
    return n - 1;
  }
  return 0;
}

Bytes ring_bytes_per_rank(CollectiveOp op, Bytes size, int n) {
  if (op == CollectiveOp::SEND || op == CollectiveOp::BROADCAST || op == CollectiveOp::REDUCE)
    return size;
  return size * (static_cast<double>(ring_steps(op, n)) / n);
}

FlowProgram expand_ring(CollectiveOp op, std::span<const int32_t> gpus, Bytes size, CollectiveForm form,
                        const LatencyFn& latency) {
  FlowProgram prog;
  prog.dep_begin.push_back(0);
  const int n = static_cast<int>(gpus.size());
  if (op == CollectiveOp::BROADCAST || op == CollectiveOp::REDUCE || op == CollectiveOp::ALL_TO_ALL)
    throw SimulationError(
        "collectives: expand_ring handles all-reduce, all-gather, reduce-scatter and send; use expand()");
  if (op == CollectiveOp::SEND && n != 2)
    throw SimulationError("collectives: a send needs exactly 2 GPUs, got " + std::to_string(n));
  if (n < 2 || size.value() <= 0)
    return prog;

  if (op == CollectiveOp::SEND) {
    prog.flows.push_back({gpus[0], gpus[1], size.value()});
    prog.dep_begin.push_back(0);
    return prog;
  }

  const int steps = ring_steps(op, n);
  const double chunk = size.value() / n;
  if (resolve_form(form, gpus.size()) == CollectiveForm::COARSE) {
    Seconds alpha(0.0);
    for (int i = 0; i < n; ++i) {
      const int32_t src = gpus[static_cast<size_t>(i)];
      const int32_t dst = gpus[static_cast<size_t>((i + 1) % n)];
      prog.flows.push_back({src, dst, chunk * steps});
      prog.dep_begin.push_back(0);
      alpha = std::max(alpha, latency(src, dst));
    }
    prog.tail_delay = alpha * static_cast<double>(steps - 1);
    return prog;
  }

  // FINE: flow (k, i) = step k, rank i -> i+1. It waits for rank i's previous send (k-1, i) and
  // for the chunk it forwards, received at step k-1 from rank i-1: flow (k-1, i-1).
  prog.flows.reserve(static_cast<size_t>(steps * n));
  for (int k = 0; k < steps; ++k) {
    for (int i = 0; i < n; ++i) {
      prog.flows.push_back({gpus[static_cast<size_t>(i)], gpus[static_cast<size_t>((i + 1) % n)], chunk});
      if (k > 0) {
        const uint32_t prev = static_cast<uint32_t>((k - 1) * n);
        prog.deps.push_back(prev + static_cast<uint32_t>(i));
        prog.deps.push_back(prev + static_cast<uint32_t>((i + n - 1) % n));
      }
      prog.dep_begin.push_back(static_cast<uint32_t>(prog.deps.size()));
    }
  }
  return prog;
}

Seconds ring_time(CollectiveOp op, Bytes size, int n, Seconds alpha, BytesPerSec beta) {
  if (n < 2)
    return Seconds(0.0);
  return alpha * static_cast<double>(ring_steps(op, n)) + ring_bytes_per_rank(op, size, n) / beta;
}

} // namespace stepsim::collectives
