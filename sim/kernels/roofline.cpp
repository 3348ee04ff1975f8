#include "kernels/roofline.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace stepsim::kernels {

namespace {

// Tile shapes of the CUTLASS/cuBLAS kernels used for large bf16 GEMMs on Ampere/Hopper;
// the rates are a modelling assumption (docs/kernels.md).
constexpr std::array<GemmTile, 6> kGemmTiles{{
    {256, 128, 1.00},
    {128, 256, 1.00},
    {128, 128, 0.92},
    {128, 64, 0.80},
    {64, 128, 0.80},
    {64, 64, 0.62},
}};

constexpr double kKHalf = 32;           // k at which the k-loop runs at half efficiency
constexpr double kSplitKMinDepth = 512; // each split-k slice keeps at least this much k
constexpr double kAttnBlockRows = 128;  // query rows per attention CTA
constexpr double kCausalFactor = 0.9;
constexpr double kHalfBandwidthBytesPerSm = 32.0 * 1024;

double ceil_div(double a, double b) {
  return std::ceil(a / b);
}

double gemm_factor(const KernelShape &s, double sms) {
  const double m = static_cast<double>(s.m);
  const double n = static_cast<double>(s.n);
  const double k = static_cast<double>(s.k);
  const double batch = static_cast<double>(std::max<int64_t>(1, s.batch));
  double best = 0;
  for (const GemmTile &t : kGemmTiles) {
    const double tm = ceil_div(m, t.rows);
    const double tn = ceil_div(n, t.cols);
    double tiles = tm * tn * batch; // a batched GEMM runs every product's tiles in one grid
    if (tiles < sms) {
      // Split-k: spread k over idle SMs, keeping slices deep enough to stay efficient.
      const double split = std::max(1.0, std::min(std::floor(sms / tiles), std::floor(k / kSplitKMinDepth)));
      tiles *= split;
    }
    const double edge = (m * n) / (tm * t.rows * tn * t.cols);
    best = std::max(best, t.rate * wave_efficiency(tiles, sms) * edge);
  }
  return best * k / (k + kKHalf);
}

double attention_factor(const KernelShape &s, double sms) {
  const double seq = static_cast<double>(s.seq);
  const double blocks = static_cast<double>(s.batch * s.heads) * ceil_div(seq, kAttnBlockRows);
  double f = wave_efficiency(blocks, sms);
  f *= seq / (seq + kAttnBlockRows);
  f *= std::pow(std::min(1.0, static_cast<double>(s.head_dim) / 128.0), 0.25);
  if (s.causal)
    f *= kCausalFactor;
  return f;
}

} // namespace

double wave_efficiency(double tiles, double slots) {
  if (tiles <= 0 || slots <= 0)
    return 0;
  const double waves = std::ceil(tiles / slots);
  return tiles / (waves * slots);
}

double shape_factor(const KernelShape &shape, int sm_count) {
  const double sms = static_cast<double>(sm_count);
  switch (family(shape.kind)) {
  case KernelFamily::GEMM:
    return gemm_factor(shape, sms);
  case KernelFamily::ATTENTION:
    return attention_factor(shape, sms);
  case KernelFamily::ROWWISE:
  case KernelFamily::ELEMENTWISE: {
    const double bytes = kernel_bytes(shape).value();
    return bytes / (bytes + sms * kHalfBandwidthBytesPerSm);
  }
  }
  return 1.0;
}

} // namespace stepsim::kernels
