#pragma once
// Kernel times for one GPU kind, from a profile: exact rows, then interpolation between rows,
// then a calibrated roofline model (docs/kernels.md, "Lookup order").

#include "config/spec.hpp"
#include "core/units.hpp"
#include "kernels/kernel_shape.hpp"
#include "kernels/profile.hpp"

#include <array>
#include <cstddef>
#include <filesystem>
#include <vector>

namespace stepsim::kernels {

/// Where a looked-up time came from. A profile obtained by modelling yields MODELLED only.
enum class Source {
  MEASURED,     ///< a row of a measured profile with exactly this shape
  INTERPOLATED, ///< log-log interpolation between two measured rows along one dimension
  MODELLED,     ///< the roofline model (or a row of a modelled profile)
};

const char* to_string(Source s); ///< "measured", "interpolated", "modelled"

struct KernelTime {
  Seconds time; ///< one invocation, without overlap slowdown
  Source source = Source::MODELLED;
};

struct KernelTableOptions {
  /// Use rows whose impl starts with "naive" (the suite's fallback attention kernels). They
  /// are correct but far slower than production kernels, so by default they are ignored.
  bool use_naive_rows = false;
};

/// Efficiency ceiling of one (kind, dtype) and the scale that maps the shape factor onto it:
/// efficiency(shape) = min(ceiling, scale · shape_factor(shape)).
struct Calibration {
  double ceiling = 0; ///< fraction of peak FLOP/s (GEMM, attention) or of HBM bandwidth
  double scale = 0;   ///< ceiling / shape_factor(best row), or ceiling when no row was measured
};

class KernelTable {
public:
  /// Builds the table for `gpu` (roofline bounds: peak_bf16, peak_fp16, hbm_bandwidth; and
  /// compute_/memory_efficiency as fallbacks when the profile has no rows of a kind).
  /// Throws ConfigError naming the profile when gpu.kind is set and differs from the profile's
  /// gpu_kind, when the profile lacks sm_count, or when a peak or the bandwidth is not > 0.
  KernelTable(KernelProfile profile, const GpuSpec& gpu, KernelTableOptions options = {});

  /// read_profile(file), derive_variant when gpu.variant is active (kernels/variant.hpp), then
  /// the constructor. Throws ConfigError.
  static KernelTable load(const std::filesystem::path& file, const GpuSpec& gpu,
                          KernelTableOptions options = {});

  /// Time of one invocation of `shape`. Throws ModelError when the shape is invalid or the
  /// GPU has no peak for its dtype (fp8 below compute capability 8.9).
  [[nodiscard]] KernelTime lookup(const KernelShape& shape) const;

  /// The calibrated roofline model alone (step 3 of the lookup). Throws as lookup.
  [[nodiscard]] Seconds model_time(const KernelShape& shape) const;

  /// Calibration of `kind` at `dtype` (memory-bound kinds ignore the dtype).
  [[nodiscard]] Calibration calibration(KernelKind kind, Dtype dtype) const;

  /// Dense tensor-core peak at `dtype`; 0 when the GPU has none (fp32, fp8 before sm_89).
  [[nodiscard]] FlopsPerSec peak(Dtype dtype) const;
  [[nodiscard]] BytesPerSec hbm_bandwidth() const { return hbm_bandwidth_; }
  /// Smallest time of any kernel (the latency floor of the model), seconds.
  [[nodiscard]] Seconds launch_overhead() const { return profile_.header.launch_overhead; }
  /// Factor >= 1 to apply to compute that overlaps NCCL kernels.
  [[nodiscard]] double overlap_slowdown() const { return profile_.header.overlap_slowdown; }
  [[nodiscard]] const KernelProfile& profile() const { return profile_; }

private:
  [[nodiscard]] double achieved_efficiency(const ProfileRow& row) const;
  void calibrate(const GpuSpec& gpu);
  [[nodiscard]] const ProfileRow* exact(const KernelShape& shape) const;
  [[nodiscard]] bool interpolate(const KernelShape& shape, Seconds& out) const;
  void check_lookup(const KernelShape& shape) const;

  static constexpr std::size_t kKinds = 10;
  static constexpr std::size_t kDtypes = 4;

  KernelProfile profile_;
  KernelTableOptions options_;
  std::vector<std::size_t> rows_; ///< indices of usable rows (naive ones dropped unless asked)
  std::array<FlopsPerSec, kDtypes> peaks_{};
  BytesPerSec hbm_bandwidth_;
  std::array<std::array<Calibration, kDtypes>, kKinds> calibration_{};
};

} // namespace stepsim::kernels
