// `gpu.variant`: a part that differs from the base part the other `gpu` keys describe
// (docs/kernels.md, "GPU variants"; docs/schema.md).

#include "config/config.hpp"
#include "config/fields.hpp"

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

namespace stepsim::config::detail {

namespace {

/// The lowest power limit accepted, as a fraction of the base's: about what NVIDIA's parts
/// accept as their minimum (H100 SXM 200 of 700 W, A100 SXM 100 of 400 W).
constexpr double MIN_POWER_FRACTION = 0.25;

std::string watts(double w) {
  char text[32];
  std::snprintf(text, sizeof text, "%gW", w);
  return text;
}

std::string megahertz(double hz) {
  char text[32];
  std::snprintf(text, sizeof text, "%gMHz", hz / 1e6);
  return text;
}

/// The base part's figures a variant is stated against (optional keys of `gpu`).
struct BaseFigures {
  std::optional<double> power_limit; ///< watts
  std::optional<double> boost_clock; ///< hertz
  std::optional<int> sm_count;
};

BaseFigures read_base(const MapReader& gpu) {
  BaseFigures b;
  optional_key(gpu, "power_limit", [&](const Field& f) { b.power_limit = read_power(f); });
  optional_key(gpu, "boost_clock", [&](const Field& f) { b.boost_clock = read_frequency(f); });
  optional_key(gpu, "sm_count", [&](const Field& f) { b.sm_count = read_int(f); });
  return b;
}

/// The variant's sustained clock over the base's, from `power_limit` or `sustained_clock`.
/// Power: dynamic power ~ C·V²·f with the voltage rising with the clock over the DVFS range,
/// so a power-bound part's clock goes as the cube root of its power limit.
std::optional<double> clock_ratio(const MapReader& v, const BaseFigures& base) {
  std::optional<double> ratio;
  optional_key(v, "power_limit", [&](const Field& f) {
    const double w = read_power(f);
    if (!base.power_limit)
      f.fail("needs gpu.power_limit, the base part's power limit it is relative to");
    const std::string text = f.scalar("a power");
    const double lo = MIN_POWER_FRACTION * *base.power_limit;
    if (!(w >= lo && w <= *base.power_limit))
      f.fail("expected a power limit in [" + watts(lo) + ", " + watts(*base.power_limit) +
             "] (a quarter of gpu.power_limit up to it), found '" + text + "'");
    ratio = std::cbrt(w / *base.power_limit);
  });
  optional_key(v, "sustained_clock", [&](const Field& f) {
    const double hz = read_frequency(f);
    if (!base.boost_clock)
      f.fail("needs gpu.boost_clock, the base part's boost clock it is relative to");
    const std::string text = f.scalar("a frequency");
    if (!(hz > 0 && hz <= *base.boost_clock))
      f.fail("expected a clock in (0, " + megahertz(*base.boost_clock) +
             "] (at most gpu.boost_clock, the base part's), found '" + text + "'");
    ratio = hz / *base.boost_clock;
  });
  return ratio;
}

} // namespace

void read_gpu_variant(const Document& doc, const MapReader& gpu, GpuSpec& g) {
  const BaseFigures base = read_base(gpu);
  auto v = section(gpu, "variant", File::CLUSTER, false);
  if (!v)
    return;
  const double base16 = g.peak_bf16.value() > 0 ? g.peak_bf16.value() : g.peak_fp16.value();
  if (!(base16 > 0) || !(g.hbm_bandwidth.value() > 0))
    return; // the base's own keys already failed
  GpuVariant out;
  required_key(*v, "name", [&](const Field& f) { out.name = read_string(f); });
  doc.attempt([&] {
    int stated = 0;
    for (const char* key : {"power_limit", "sustained_clock", "peak_flops"})
      stated += v->has(key) ? 1 : 0;
    if (stated > 1)
      v->fail("expected at most one of power_limit, sustained_clock, peak_flops (each sets the "
              "variant's compute rate)");
    if (v->has("peak_flops") && v->has("sm_count"))
      v->require("sm_count").fail("not with peak_flops (the peak already counts the SMs)");
  });
  out.clock_ratio = clock_ratio(*v, base).value_or(1.0);
  double ratio = out.clock_ratio;
  optional_key(*v, "peak_flops", [&](const Field& f) {
    const FlopsPerSec peak = read_flops(f);
    if (peak.value() > base16)
      f.fail("expected at most the base part's 16-bit peak (gpu.peak_flops, " +
             std::to_string(static_cast<int64_t>(base16 / 1e12)) + "TFLOPS), found '" +
             f.scalar("a FLOP rate") + "'");
    ratio = peak.value() / base16;
  });
  optional_key(*v, "sm_count", [&](const Field& f) {
    out.sm_count = read_int(f);
    if (!base.sm_count)
      f.fail("needs gpu.sm_count, the base part's SM count it is relative to");
    if (out.sm_count > *base.sm_count)
      f.fail("expected an SM count in [1, " + std::to_string(*base.sm_count) +
             "] (at most gpu.sm_count), found " + std::to_string(out.sm_count));
    out.base_sm_count = *base.sm_count;
    ratio *= static_cast<double>(out.sm_count) / *base.sm_count;
  });
  BytesPerSec hbm = g.hbm_bandwidth;
  optional_key(*v, "hbm_bandwidth", [&](const Field& f) {
    hbm = read_bandwidth(f);
    out.memory_ratio = hbm.value() / g.hbm_bandwidth.value();
  });
  optional_key(*v, "hbm_capacity", [&](const Field& f) { g.hbm_capacity = read_bytes(f); });
  out.compute_ratio = ratio;
  g.peak_bf16 = g.peak_bf16 * ratio;
  g.peak_fp16 = g.peak_fp16 * ratio;
  g.peak_fp8 = g.peak_fp8 * ratio;
  g.hbm_bandwidth = hbm;
  g.variant = out;
}

} // namespace stepsim::config::detail
