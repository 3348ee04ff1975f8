#include "graph/compute_cost.hpp"

#include "core/error.hpp"

#include <string>

namespace stepsim::graph {

model::BlockWork block_work(const WorkloadSpec& w, Block block, bool windowed) {
  switch (block) {
  case Block::ATTENTION:
    return model::attention_work(w, windowed);
  case Block::MLP:
    return model::mlp_work(w);
  case Block::LOGITS:
    return model::output_work(w);
  case Block::ROUTER:
    return model::router_work(w);
  case Block::EXPERTS:
    return model::experts_work(w);
  default:
    throw ModelError("internal: no cost for block " + std::string(to_string(block)));
  }
}

ComputeQuery block_query(const WorkloadSpec& w, Block block, Phase phase, int stage, bool windowed) {
  const model::BlockWork work = block_work(w, block, windowed);
  const model::Work& pass = phase == Phase::BACKWARD ? work.backward : work.forward;
  return {.block = block,
          .phase = phase,
          .stage = stage,
          .flops = pass.flops,
          .bytes = pass.bytes,
          .windowed = windowed};
}

ComputeQuery optimizer_query(const WorkloadSpec& w, int stage) {
  const model::Work work = model::optimizer_work(w, stage);
  return {.block = Block::OPTIMIZER,
          .phase = Phase::OPTIMIZER,
          .stage = stage,
          .flops = work.flops,
          .bytes = work.bytes};
}

ComputeQuery grad_accumulation_query(const WorkloadSpec& w, int stage) {
  const model::Work work = model::grad_accumulation_work(w, stage);
  return {.block = Block::OPTIMIZER,
          .phase = Phase::BACKWARD,
          .stage = stage,
          .flops = work.flops,
          .bytes = work.bytes};
}

ComputeCost gpu_compute_cost(const WorkloadSpec& w, const ComputeTimeFn& time, const ComputeQuery& query) {
  ComputeCost c = time(query);
  const int cp = w.parallel.cp;
  if (cp > 1 && c.sources.roofline < 1.0 && query.block != Block::EXPERTS) {
    c.time = c.time / cp;
    c.input_dgrad = c.input_dgrad / cp;
    c.input_wgrad = c.input_wgrad / cp;
    c.gemm = c.gemm / cp;
  }
  return c;
}

std::pair<Seconds, Seconds> input_linear_times(const WorkloadSpec& w, Block block, const ComputeCost& cost,
                                               const ComputeQuery& query) {
  const std::pair<Seconds, Seconds> none{Seconds(0.0), Seconds(0.0)};
  if (cost.input_wgrad.value() > 0)
    return cost.input_dgrad + cost.input_wgrad < cost.time
               ? std::make_pair(cost.input_dgrad, cost.input_wgrad)
               : none;
  if (block != Block::ATTENTION && block != Block::MLP && block != Block::LOGITS)
    return none;
  const Flops gemm = block_work(w, block).input_linear;
  const double share = query.flops.value() > 0 ? gemm / query.flops : 0.0;
  if (share <= 0 || share >= 0.5)
    return none;
  return {cost.time * share, cost.time * share};
}

} // namespace stepsim::graph
