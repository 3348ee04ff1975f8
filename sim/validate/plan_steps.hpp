#pragma once
// Private to validate/: the steps of plan_run (plan.cpp) that map a record to its WorkloadSpec
// (plan_workload.cpp), in the order plan_run takes them. Each reads the record and what the
// steps before it mapped, sets its part of the plan's workload, lists the defaults it takes in
// the plan's `defaults`, and returns a skip reason or "".

#include "validate/plan.hpp"
#include "validate/rules.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace stepsim::validate::detail {

/// The facts the rules match on before anything is mapped.
RecordFacts initial_facts(const config::MeasuredRun& run);

/// What the steps share while a run is mapped.
struct Draft {
  Draft(const config::MeasuredRun& r, RunPlan& p) : run(r), plan(p), facts(initial_facts(r)) {}
  const config::MeasuredRun& run;
  RunPlan& plan;
  RecordFacts facts; ///< what the rules match on (rules.cpp); the ZeRO stage and precision once mapped
  int64_t tp = 1, pp = 1, cp = 1, ep = 1;
  int64_t gpus = 0;
  int64_t dp = 0;             ///< GPUs / (tp*pp*cp), 0 when that does not divide
  int64_t etp = 0;            ///< expert tensor parallelism to write (0: = tp)
  std::string etp_why;        ///< the default etp took, "" for the record's own or none
  bool swiglu = false;        ///< the MLP is gated
  std::optional<Applied> mlp; ///< the MLP's rule
  int64_t ffn = 0;            ///< model.ffn_hidden (the record's, or 4h for a two-GEMM MLP)
  int64_t global_batch = 0;   ///< sequences per step
  int64_t vp = 1;             ///< model chunks per GPU
  bool sp = false;            ///< sequence parallelism
  [[nodiscard]] WorkloadSpec& workload() const { return plan.workload; }
};

/// The degrees, expert tensor parallelism and the plan's layout text ("tp8 pp12 dp4").
void map_layout(Draft& d);
/// The MLP's family, ffn_hidden, the global batch and the required fields; the FLOP shape.
std::string map_model_family(Draft& d);
/// Virtual stages for a schedule named without them, and the layers of each model chunk.
void map_chunks(Draft& d);
/// The model's sizes, attention, dropout, experts and multi-token prediction.
void map_model_shape(Draft& d);
/// The global batch, the micro-batch and the tp, pp defaults.
void map_batch(Draft& d);
/// The pipeline schedule (DualPipe is skipped).
std::string map_schedule(Draft& d);
/// Sequence, expert and pipeline-message mechanisms, the TP gradient overlap and the ZeRO stage.
std::string map_parallel(Draft& d);
/// Precision and recomputation.
std::string map_precision_recompute(Draft& d);
/// The training stack's mechanisms (fused attention, fp8 weights, overlapped gathers, fp32
/// reductions, ZeRO-3 fetch) and the record's memory settings.
void map_training(Draft& d);

} // namespace stepsim::validate::detail
