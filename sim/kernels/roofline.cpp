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

constexpr double kKHalf = 32; // k at which the k-loop runs at half efficiency
// fp8: 256. On an H200 fp8 GEMMs lost against bf16 as k shrank (at equal m, n: 0.78x the bf16
// model ratio at k = 1024, 0.90x at 2048, 0.97x at 4096, none from 8192): the per-tile prologue,
// epilogue and accumulator promotions weigh more against a main loop twice as fast.
constexpr double kKHalfFp8 = 256;
constexpr double kSplitKMinDepth = 512;    // each split-k slice keeps at least this much k
constexpr double kAttnBlockRows = 128;     // query rows per attention CTA
constexpr double kAttnHalfRateBlocks = 54; // score blocks per SM at which attention runs at half rate
constexpr double kCausalFactor = 0.9;
constexpr double kHalfBandwidthBytesPerSm = 32.0 * 1024;

double ceil_div(double a, double b) {
  return std::ceil(a / b);
}

double gemm_factor(const KernelShape& s, double sms) {
  const double m = static_cast<double>(s.m);
  const double n = static_cast<double>(s.n);
  const double k = static_cast<double>(s.k);
  const double batch = static_cast<double>(std::max<int64_t>(1, s.batch));
  double best = 0;
  for (const GemmTile& t : kGemmTiles) {
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
  return best * k / (k + (s.dtype == Dtype::FP8_E4M3 ? kKHalfFp8 : kKHalf));
}

double attention_factor(const KernelShape& s, double sms) {
  // Fitted to fused attention (cuDNN, FlashAttention) timed on an H200 at 2048-8192 tokens and
  // 8-384 sequence-heads (docs/kernels.md, "Measured on an H200"): the rate follows the work per
  // SM in 128 x 128 score blocks, reaching half its peak at kAttnHalfRateBlocks per SM, times a
  // per-row-block prologue and epilogue cost, twice as large in the backward (fitted: 128 and 256
  // rows' worth).
  const double seq = static_cast<double>(s.seq);
  const double rows = ceil_div(seq, kAttnBlockRows);
  const double per_sm = static_cast<double>(s.batch * s.heads) * rows * rows / sms;
  double f = per_sm / (per_sm + kAttnHalfRateBlocks);
  const double row_cost = s.kind == KernelKind::ATTENTION_BWD ? 2 * kAttnBlockRows : kAttnBlockRows;
  f *= seq / (seq + row_cost);
  // Smaller heads do less matrix work per score element, whose softmax costs the same: a 56-wide
  // head ran at 0.64x the rate of a 128-wide one on the H200.
  f *= std::pow(std::min(1.0, static_cast<double>(s.head_dim) / 128.0), 0.5);
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

double shape_factor(const KernelShape& shape, int sm_count) {
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
