#include "kernels/variant.hpp"

#include "core/error.hpp"
#include "kernels/kernel_shape.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

namespace stepsim::kernels {

KernelProfile derive_variant(const KernelProfile& base, const GpuVariant& variant) {
  const std::string where = base.origin.empty() ? "kernel profile" : base.origin;
  if (!(variant.compute_ratio > 0) || !(variant.memory_ratio > 0))
    throw ConfigError(where + ": variant '" + variant.name + "' needs compute and memory ratios > 0");
  if (variant.base_sm_count > 0 && variant.base_sm_count != base.header.sm_count)
    throw ConfigError(where + ": gpu.sm_count is " + std::to_string(variant.base_sm_count) +
                      ", the profile's sm_count " + std::to_string(base.header.sm_count) +
                      " (the variant's SMs are counted against the profile's)");
  KernelProfile out = base;
  const double floor = base.header.launch_overhead.value();
  for (ProfileRow& r : out.rows) {
    const double ratio = is_compute_bound(r.shape.kind) ? variant.compute_ratio : variant.memory_ratio;
    r.time = Seconds(std::max(floor, r.time.value() / ratio));
  }
  if (variant.sm_count > 0)
    out.header.sm_count = variant.sm_count;
  out.header.sm_clock_mhz *= variant.clock_ratio;
  char note[160];
  std::snprintf(note, sizeof note,
                "variant %s: compute rows / %.6g, memory-bound rows / %.6g (docs/kernels.md)",
                variant.name.c_str(), variant.compute_ratio, variant.memory_ratio);
  out.header.notes.emplace_back(note);
  out.header.gpu += " (variant " + variant.name + ")";
  return out;
}

} // namespace stepsim::kernels
