#pragma once
// FLOP conventions of published training runs (docs/validation.md). A published "TFLOP/s per
// GPU" or MFU is only comparable with a prediction computed the same way: these closed forms
// turn a step time into each source's figure (reference/MODEL.md section 2).

#include "core/units.hpp"

#include <cstdint>
#include <string>

namespace stepsim::validate {

/// The dense-transformer shape the conventions need.
struct FlopsShape {
  double global_batch = 0; ///< B, sequences per step
  double seq_len = 0;      ///< s
  double layers = 0;       ///< l
  double hidden = 0;       ///< h
  double vocab = 0;        ///< V
};

/// Megatron-LM 2021 (Narayanan et al., eq. 3), with the full-recompute forward counted:
/// 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)). Used by Megatron, MT-NLG and BLOOM for "TFLOP/s".
Flops megatron_recompute_flops(const FlopsShape& s);

/// Model FLOPs (Korthikanti et al. 2022, MFU): 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).
Flops model_flops(const FlopsShape& s);

/// Which formula a source's TFLOP/s figure uses, from its `tflops_basis` text.
enum class TflopsBasis {
  MEGATRON_RECOMPUTE, ///< eq. 3, counts the recompute forward (96 coefficient)
  MODEL,              ///< model FLOPs (72 coefficient)
};

/// MEGATRON_RECOMPUTE when the text names eq. 3, the recompute pass or the "4*2" coefficient
/// (Megatron, MT-NLG, BLOOM); MODEL otherwise.
TflopsBasis tflops_basis(const std::string& text);

/// FLOPs per step under `basis`.
Flops step_flops(TflopsBasis basis, const FlopsShape& s);

/// TFLOP/s per GPU for `flops` per step done in `step_time` on `gpus` GPUs.
double tflops_per_gpu(Flops flops, Seconds step_time, int64_t gpus);

} // namespace stepsim::validate
