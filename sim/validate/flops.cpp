#include "validate/flops.hpp"

#include <algorithm>
#include <cctype>

namespace stepsim::validate {

Flops megatron_recompute_flops(const FlopsShape& s) {
  const double h = s.hidden;
  return Flops(96.0 * s.global_batch * s.seq_len * s.layers * h * h *
               (1.0 + s.seq_len / (6.0 * h) + s.vocab / (16.0 * s.layers * h)));
}

Flops model_flops(const FlopsShape& s) {
  const double h = s.hidden;
  return Flops(72.0 * s.global_batch * s.seq_len * s.layers * h * h *
               (1.0 + s.seq_len / (6.0 * h) + s.vocab / (12.0 * s.layers * h)));
}

TflopsBasis tflops_basis(const std::string& text) {
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool megatron = t.find("eq.3") != std::string::npos || t.find("eq. 3") != std::string::npos ||
                        t.find("recompute") != std::string::npos || t.find("4*2") != std::string::npos;
  return megatron ? TflopsBasis::MEGATRON_RECOMPUTE : TflopsBasis::MODEL;
}

Flops step_flops(TflopsBasis basis, const FlopsShape& s) {
  return basis == TflopsBasis::MEGATRON_RECOMPUTE ? megatron_recompute_flops(s) : model_flops(s);
}

double tflops_per_gpu(Flops flops, Seconds step_time, int64_t gpus) {
  return flops.value() / (step_time.value() * static_cast<double>(gpus)) / 1e12;
}

} // namespace stepsim::validate
