#include "kernels/attention_kernel.hpp"

#include "core/error.hpp"

#include <cstdlib>

namespace stepsim::kernels {

namespace {

// TFLOP/s on an H100 SXM5, BF16, head dim 128, 8K tokens (16K tokens per batch, 16 heads):
// FlashAttention-3 paper (Shah et al. 2024), Figure 5 (forward, causal) and Figure 6 (backward).
constexpr double CUDNN_FWD = 529, CUDNN_BWD = 518;
constexpr double FLASH2_FWD = 333, FLASH2_BWD = 318;
constexpr double FLASH3_FWD = 602, FLASH3_BWD = 559;
constexpr int HOPPER = 90;
constexpr int BLACKWELL = 100;

} // namespace

double attention_kernel_rate(AttentionKernel kernel, KernelKind kind, int cc_tenths) {
  if (kernel == AttentionKernel::FLASH3 && (cc_tenths < HOPPER || cc_tenths >= BLACKWELL))
    throw ConfigError("key 'training.attention_kernel': flash3 (FlashAttention-3) runs on Hopper (compute "
                      "capability 9.x); this GPU's kernel profile states " +
                      (cc_tenths > 0 ? std::to_string(cc_tenths / 10) + "." + std::to_string(cc_tenths % 10)
                                     : std::string("none")) +
                      " (expected cudnn or flash2)");
  const bool forward = kind == KernelKind::ATTENTION_FWD;
  if ((!forward && kind != KernelKind::ATTENTION_BWD) || kernel == AttentionKernel::CUDNN ||
      cc_tenths < HOPPER)
    return 1.0;
  if (kernel == AttentionKernel::FLASH2)
    return forward ? FLASH2_FWD / CUDNN_FWD : FLASH2_BWD / CUDNN_BWD;
  return forward ? FLASH3_FWD / CUDNN_FWD : FLASH3_BWD / CUDNN_BWD;
}

int compute_capability_tenths(const std::string& cc) {
  const auto dot = cc.find('.');
  if (dot == std::string::npos)
    return 0;
  return std::atoi(cc.substr(0, dot).c_str()) * 10 + std::atoi(cc.substr(dot + 1).c_str());
}

} // namespace stepsim::kernels
