#pragma once
// A GPU variant's kernel profile, derived from its base part's (docs/kernels.md, "GPU variants").

#include "config/spec.hpp"
#include "kernels/profile.hpp"

namespace stepsim::kernels {

/// `base` as the part `variant` describes: every compute-bound row (GEMM, attention) divided by
/// variant.compute_ratio, every memory-bound row by variant.memory_ratio, no row below the
/// launch overhead, which stays the base's; sm_count the variant's when it states one, and
/// sm_clock_mhz x variant.clock_ratio. The
/// header keeps the base's gpu_kind (the cluster's gpu.kind) and notes the derivation.
/// Throws ConfigError when the base's `gpu.sm_count` differs from the profile's, or a ratio is
/// not > 0.
KernelProfile derive_variant(const KernelProfile& base, const GpuVariant& variant);

} // namespace stepsim::kernels
