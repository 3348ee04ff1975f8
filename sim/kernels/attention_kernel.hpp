#pragma once
// The fused attention kernel a workload names (training.attention_kernel) against the kernel
// profile's fused attention rows (docs/kernels.md, "Attention kernels"). The Hopper and Blackwell
// profiles' attention rows are cuDNN's fused attention timed through PyTorch's SDPA; the other
// implementations run at a published fraction of it, per pass.

#include "config/spec.hpp"
#include "kernels/kernel_shape.hpp"

#include <string>

namespace stepsim::kernels {

/// The rate of `kernel` running the attention pass `kind` (ATTENTION_FWD or ATTENTION_BWD) on a GPU
/// of compute capability `cc_tenths` (90 = 9.0), relative to the profile's fused attention rows:
/// the table time is divided by it. On compute capability 9.0 and later (profiles anchored on the
/// cuDNN measurement): CUDNN 1; FLASH2 333/529 forward and 318/518 backward; FLASH3 602/529 and
/// 559/518: FlashAttention-2, cuDNN and FlashAttention-3 in BF16 at 8K tokens and head dim 128 on
/// an H100 SXM5 (Shah et al. 2024, FlashAttention-3, Figure 5 causal forward and Figure 6
/// backward, TFLOP/s). Below 9.0 the profile's attention is FlashAttention-2's level (the GEMM
/// ceiling's borrowed fraction, docs/kernels.md): CUDNN and FLASH2 1. 1 for every other kind.
/// Throws ConfigError for FLASH3 off compute capability 9.x (FlashAttention-3 is a Hopper kernel).
double attention_kernel_rate(AttentionKernel kernel, KernelKind kind, int cc_tenths);

/// "9.0" -> 90, "8.9" -> 89; "" (a profile without one) -> 0.
int compute_capability_tenths(const std::string& cc);

} // namespace stepsim::kernels
