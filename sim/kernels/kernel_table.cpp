#include "kernels/kernel_table.hpp"

#include "core/error.hpp"
#include "kernels/attention_kernel.hpp"
#include "kernels/roofline.hpp"
#include "kernels/variant.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

namespace stepsim::kernels {

namespace {

// Defaults used only when a profile has no row of a kind (docs/kernels.md).
constexpr double kDefaultComputeEfficiency = 0.80;
constexpr double kDefaultMemoryEfficiency = 0.90;
constexpr double kFp8RelativeToBf16 = 0.80;

/// Ceiling of a kind relative to the GEMM ceiling (compute kinds) or the copy bandwidth
/// (memory kinds) when the profile has no row of that kind.
double relative_ceiling(KernelKind kind) {
  switch (kind) {
  case KernelKind::GEMM:
    return 1.0;
  case KernelKind::ATTENTION_FWD:
    return 0.85; // FlashAttention-2: ~73% of A100 peak fwd
  case KernelKind::ATTENTION_BWD:
    return 0.70; // backward reaches less (more softmax work)
  case KernelKind::LAYERNORM:
    return 0.85;
  case KernelKind::RMSNORM:
    return 0.88;
  case KernelKind::GELU:
    return 0.95;
  case KernelKind::SWIGLU:
    return 0.95;
  case KernelKind::SOFTMAX_XENT:
    return 0.80;
  case KernelKind::ADAM:
    return 0.90;
  case KernelKind::MEMCPY:
    return 1.0;
  }
  return 1.0;
}

std::size_t index(KernelKind k) {
  return static_cast<std::size_t>(k);
}
std::size_t index(Dtype d) {
  return static_cast<std::size_t>(d);
}

/// The sizes of a shape, per family, and the ones interpolation may walk along.
struct Dims {
  std::array<int64_t, 5> v{};
  std::size_t count = 0;
};

Dims dims_of(const KernelShape& s) {
  switch (family(s.kind)) {
  case KernelFamily::GEMM:
    return {{s.m, s.n, s.k, s.batch, 0}, 4};
  case KernelFamily::ATTENTION:
    return {{s.batch, s.seq, s.heads, s.kv_heads, s.head_dim}, 5};
  case KernelFamily::ROWWISE:
    return {{s.rows, s.cols, 0, 0, 0}, 2};
  case KernelFamily::ELEMENTWISE:
    return {{s.elements, 0, 0, 0, 0}, 1};
  }
  return {};
}

/// Interpolation axes: GEMM m, n, k; attention batch, seq; row-wise rows, cols; elements.
std::size_t axis_count(KernelFamily f) {
  switch (f) {
  case KernelFamily::GEMM:
    return 3;
  case KernelFamily::ATTENTION:
    return 2;
  case KernelFamily::ROWWISE:
    return 2;
  case KernelFamily::ELEMENTWISE:
    return 1;
  }
  return 0;
}

} // namespace

const char* to_string(Source s) {
  switch (s) {
  case Source::MEASURED:
    return "measured";
  case Source::INTERPOLATED:
    return "interpolated";
  case Source::MODELLED:
    return "modelled";
  }
  return "?";
}

KernelTable::KernelTable(KernelProfile profile, const GpuSpec& gpu, KernelTableOptions options)
    : profile_(std::move(profile)), options_(options), hbm_bandwidth_(gpu.hbm_bandwidth) {
  const std::string where = profile_.origin.empty() ? "kernel profile" : profile_.origin;
  const ProfileHeader& h = profile_.header;
  if (!gpu.kind.empty() && gpu.kind != h.gpu_kind)
    throw ConfigError(where + ": profile is for gpu_kind '" + h.gpu_kind + "', the cluster's GPU is '" +
                      gpu.kind + "'");
  if (h.sm_count <= 0)
    throw ConfigError(where + ": sm_count must be > 0");
  if (h.launch_overhead.value() <= 0)
    throw ConfigError(where + ": launch_overhead_s must be > 0");
  // A GPU may lack one 16-bit format (a V100 has fp16 tensor cores and no bf16): its kernels of
  // that format are rejected at lookup, as fp8 ones are below compute capability 8.9.
  if (gpu.peak_bf16.value() <= 0 && gpu.peak_fp16.value() <= 0)
    throw ConfigError(where + ": GPU '" + gpu.kind + "' needs a peak bf16 or fp16 FLOP/s > 0");
  if (gpu.hbm_bandwidth.value() <= 0)
    throw ConfigError(where + ": GPU '" + gpu.kind + "' needs an HBM bandwidth > 0");
  peaks_[index(Dtype::BF16)] = gpu.peak_bf16;
  peaks_[index(Dtype::FP16)] = gpu.peak_fp16;
  // Hopper and Ada have fp8 tensor cores: the cluster's fp8 peak, else twice the 16-bit rate.
  if (compute_capability_tenths(h.compute_capability) >= 89)
    peaks_[index(Dtype::FP8_E4M3)] = gpu.peak_fp8.value() > 0 ? gpu.peak_fp8 : gpu.peak_bf16 * 2.0;

  for (std::size_t i = 0; i < profile_.rows.size(); ++i) {
    const ProfileRow& r = profile_.rows[i];
    if (!options_.use_naive_rows && r.impl.rfind("naive", 0) == 0)
      continue;
    if (is_compute_bound(r.shape.kind) && peak(r.shape.dtype).value() <= 0)
      continue;
    rows_.push_back(i);
  }
  calibrate(gpu);
}

KernelTable KernelTable::load(const std::filesystem::path& file, const GpuSpec& gpu,
                              KernelTableOptions options) {
  KernelProfile profile = read_profile(file);
  if (gpu.variant.active())
    profile = derive_variant(profile, gpu.variant);
  return KernelTable(std::move(profile), gpu, options);
}

FlopsPerSec KernelTable::peak(Dtype dtype) const {
  return peaks_[index(dtype)];
}

double KernelTable::achieved_efficiency(const ProfileRow& row) const {
  const double t = row.time.value();
  if (is_compute_bound(row.shape.kind))
    return kernel_flops(row.shape).value() / (t * peak(row.shape.dtype).value());
  return kernel_bytes(row.shape).value() / (t * hbm_bandwidth_.value());
}

void KernelTable::calibrate(const GpuSpec& gpu) {
  const int sms = profile_.header.sm_count;
  // Best row of a kind (and dtype, for compute kinds); nullptr when none.
  auto best_row = [&](KernelKind kind, const Dtype* dtype) -> const ProfileRow* {
    const ProfileRow* best = nullptr;
    double best_eff = -1;
    for (std::size_t i : rows_) {
      const ProfileRow& r = profile_.rows[i];
      if (r.shape.kind != kind || (dtype && r.shape.dtype != *dtype))
        continue;
      const double e = achieved_efficiency(r);
      if (e > best_eff) {
        best_eff = e;
        best = &r;
      }
    }
    return best;
  };
  auto from_row = [&](const ProfileRow& r) {
    const double c = achieved_efficiency(r);
    return Calibration{c, c / shape_factor(r.shape, sms)};
  };

  // Memory kinds: from their own rows, else relative to the copy bandwidth.
  const ProfileRow* copy = best_row(KernelKind::MEMCPY, nullptr);
  const double copy_eff =
      copy ? achieved_efficiency(*copy)
           : (gpu.memory_efficiency > 0 ? gpu.memory_efficiency : kDefaultMemoryEfficiency);
  // Compute kinds: GEMM ceiling per dtype, fp8 falling back to the 16-bit ceiling.
  std::array<double, kDtypes> gemm_eff{};
  for (Dtype d : {Dtype::BF16, Dtype::FP16, Dtype::FP8_E4M3}) {
    const ProfileRow* r = best_row(KernelKind::GEMM, &d);
    gemm_eff[index(d)] = r ? achieved_efficiency(*r) : 0;
  }
  const double gemm16 = std::max(gemm_eff[index(Dtype::BF16)], gemm_eff[index(Dtype::FP16)]);
  const double fallback16 =
      gemm16 > 0 ? gemm16 : (gpu.compute_efficiency > 0 ? gpu.compute_efficiency : kDefaultComputeEfficiency);
  for (Dtype d : {Dtype::BF16, Dtype::FP16}) {
    if (gemm_eff[index(d)] <= 0)
      gemm_eff[index(d)] = fallback16;
  }
  if (gemm_eff[index(Dtype::FP8_E4M3)] <= 0)
    gemm_eff[index(Dtype::FP8_E4M3)] = fallback16 * kFp8RelativeToBf16;

  for (std::size_t ki = 0; ki < kKinds; ++ki) {
    const auto kind = static_cast<KernelKind>(ki);
    for (std::size_t di = 0; di < kDtypes; ++di) {
      const auto dtype = static_cast<Dtype>(di);
      Calibration c;
      if (is_compute_bound(kind)) {
        if (peaks_[di].value() <= 0)
          continue;
        // fp16 and bf16 run the same tensor cores at the same peak (Ampere on): a 16-bit dtype
        // without rows of its own takes the other's calibration whole, ceiling and shape scale.
        const Dtype other = dtype == Dtype::BF16 ? Dtype::FP16 : Dtype::BF16;
        const bool sibling = (dtype == Dtype::BF16 || dtype == Dtype::FP16) &&
                             peaks_[index(other)].value() == peaks_[di].value();
        const ProfileRow* own = best_row(kind, &dtype);
        if (const ProfileRow* r = own ? own : sibling ? best_row(kind, &other) : nullptr) {
          c = from_row(*r);
        } else {
          c.ceiling = gemm_eff[di] * relative_ceiling(kind);
          c.scale = c.ceiling;
        }
      } else if (const ProfileRow* r = best_row(kind, nullptr)) {
        c = from_row(*r);
      } else {
        c.ceiling = copy_eff * relative_ceiling(kind);
        c.scale = c.ceiling;
      }
      calibration_[ki][di] = c;
    }
  }
}

Calibration KernelTable::calibration(KernelKind kind, Dtype dtype) const {
  return calibration_[index(kind)][index(dtype)];
}

void KernelTable::check_lookup(const KernelShape& shape) const {
  const std::string why = validate(shape);
  if (!why.empty())
    throw ModelError("kernel " + describe(shape) + ": " + why);
  if (is_compute_bound(shape.kind) && peak(shape.dtype).value() <= 0)
    throw ModelError("kernel " + describe(shape) + ": GPU '" + profile_.header.gpu_kind +
                     "' (compute capability " + profile_.header.compute_capability + ") has no " +
                     to_string(shape.dtype) + " tensor-core peak");
}

Seconds KernelTable::model_time(const KernelShape& shape) const {
  check_lookup(shape);
  const Calibration c = calibration(shape.kind, shape.dtype);
  const double factor = shape_factor(shape, profile_.header.sm_count);
  const double eff = std::min(c.ceiling, c.scale * factor);
  const double bytes = kernel_bytes(shape).value();
  double t = profile_.header.launch_overhead.value();
  if (is_compute_bound(shape.kind)) {
    const double copy_eff = calibration(KernelKind::MEMCPY, Dtype::BF16).ceiling;
    t = std::max(t, kernel_flops(shape).value() / (peak(shape.dtype).value() * eff));
    t = std::max(t, bytes / (hbm_bandwidth_.value() * copy_eff));
  } else {
    t = std::max(t, bytes / (hbm_bandwidth_.value() * eff));
  }
  return Seconds(t);
}

const ProfileRow* KernelTable::exact(const KernelShape& shape) const {
  for (std::size_t i : rows_) {
    if (profile_.rows[i].shape == shape)
      return &profile_.rows[i];
  }
  return nullptr;
}

bool KernelTable::interpolate(const KernelShape& shape, Seconds& out) const {
  const KernelFamily fam = family(shape.kind);
  const std::size_t axes = axis_count(fam);
  const Dims q = dims_of(shape);
  // For each axis, the nearest rows below and above the query that differ only on that axis.
  struct Bracket {
    const ProfileRow* lo = nullptr;
    const ProfileRow* hi = nullptr;
    int64_t lo_v = 0;
    int64_t hi_v = 0;
  };
  std::array<Bracket, 5> br{};
  for (std::size_t i : rows_) {
    const ProfileRow& r = profile_.rows[i];
    if (r.shape.kind != shape.kind || r.shape.dtype != shape.dtype || r.shape.causal != shape.causal)
      continue;
    const Dims d = dims_of(r.shape);
    std::size_t differing = 0;
    std::size_t axis = 0;
    for (std::size_t j = 0; j < q.count; ++j) {
      if (d.v[j] != q.v[j]) {
        ++differing;
        axis = j;
      }
    }
    if (differing != 1 || axis >= axes)
      continue;
    Bracket& b = br[axis];
    const int64_t v = d.v[axis];
    if (v < q.v[axis] && (!b.lo || v > b.lo_v)) {
      b.lo = &r;
      b.lo_v = v;
    } else if (v > q.v[axis] && (!b.hi || v < b.hi_v)) {
      b.hi = &r;
      b.hi_v = v;
    }
  }
  // The tightest bracket (smallest ratio hi/lo) wins; ties go to the first axis.
  const Bracket* best = nullptr;
  std::size_t best_axis = 0;
  double best_span = 0;
  for (std::size_t a = 0; a < axes; ++a) {
    const Bracket& b = br[a];
    if (!b.lo || !b.hi)
      continue;
    const double span = std::log(static_cast<double>(b.hi_v) / static_cast<double>(b.lo_v));
    if (!best || span < best_span) {
      best = &b;
      best_axis = a;
      best_span = span;
    }
  }
  if (!best)
    return false;
  const double x = std::log(static_cast<double>(q.v[best_axis]));
  const double x0 = std::log(static_cast<double>(best->lo_v));
  const double x1 = std::log(static_cast<double>(best->hi_v));
  const double y0 = std::log(best->lo->time.value());
  const double y1 = std::log(best->hi->time.value());
  out = Seconds(std::exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0)));
  return true;
}

KernelTime KernelTable::lookup(const KernelShape& shape) const {
  check_lookup(shape);
  const bool measured = profile_.header.obtained == Provenance::MEASURED;
  if (const ProfileRow* r = exact(shape))
    return {r->time, measured ? Source::MEASURED : Source::MODELLED};
  Seconds t;
  if (interpolate(shape, t))
    return {t, measured ? Source::INTERPOLATED : Source::MODELLED};
  return {model_time(shape), Source::MODELLED};
}

} // namespace stepsim::kernels
