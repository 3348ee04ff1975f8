#pragma once
// The geometry half of the efficiency model (docs/kernels.md, "Efficiency model"): how well a
// kernel of a given shape can fill a GPU with `sm_count` SMs, as a factor in (0, 1]. The
// calibration half (ceilings from measured rows) lives in KernelTable.

#include "core/units.hpp"
#include "kernels/kernel_shape.hpp"

namespace stepsim::kernels {

/// One output tile shape a GEMM library may pick, with its relative per-SM throughput
/// (smaller tiles re-read operands more often and reach a lower fraction of peak).
struct GemmTile {
  int rows = 0;      ///< tile extent along m
  int cols = 0;      ///< tile extent along n
  double rate = 1.0; ///< relative throughput of a full tile, (0, 1]
};

/// GEMM: max over the candidate tiles of rate · wave efficiency · edge efficiency, times the
/// k-loop efficiency k / (k + 32) (fp8: k / (k + 256), fitted on an H200). Wave efficiency = tiles / (waves ·
/// sm_count) with one CTA per SM and split-k when there are fewer tiles than SMs (a batched GEMM has batch ×
/// the tiles of one product); edge efficiency = m·n over the padded tile area. Attention (fitted to fused
/// kernels timed on an H200): w / (w + 54) with w the 128 × 128 score blocks per SM (batch · heads ·
/// ceil(seq/128)² / sm_count), times seq / (seq + 128) forward or seq / (seq + 256) backward (per-row-block
/// prologue and epilogue), times min(1, head_dim/128)^0.5, times 0.9 when causal (the diagonal blocks are
/// half empty). Memory-bound kinds: bytes / (bytes + sm_count · 32 KiB), i.e. half the bandwidth is reached
/// once every SM has 32 KiB in flight.
/// Precondition: validate(shape) is "" and sm_count > 0.
double shape_factor(const KernelShape& shape, int sm_count);

/// The wave efficiency alone: tiles / (ceil(tiles / slots) · slots).
double wave_efficiency(double tiles, double slots);

} // namespace stepsim::kernels
