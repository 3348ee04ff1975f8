#pragma once
// The microbenchmark suite's host-side interface: plain C++ (no CUDA types), so that the
// driver program compiles as ordinary C++20 and shares the profile formats with the simulator.

#include "kernels/kernel_shape.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace stepsim::suite {

struct DeviceInfo {
  std::string name; ///< cudaDeviceProp::name
  int sm_count = 0;
  int cc_major = 0;
  int cc_minor = 0;
  double sm_clock_mhz = 0;  ///< peak SM clock
  double mem_clock_mhz = 0; ///< peak memory clock
  int64_t l2_bytes = 0;
  int64_t total_bytes = 0; ///< device memory
  int64_t free_bytes = 0;  ///< at start-up
  std::string driver_api;  ///< cudaDriverGetVersion as "major.minor"
  std::string runtime;     ///< cudaRuntimeGetVersion as "major.minor"
};

/// True when a CUDA device can be used; otherwise `why` says what is missing.
bool device_available(std::string& why);
/// Properties of device 0 (exits non-zero on a CUDA error).
DeviceInfo device_info();

struct TimingOptions {
  double budget_s = 0.2;       ///< target time spent timing one shape (warm-up excluded), seconds
  int warmup = 3;              ///< warm-up launches (fewer when one launch exceeds the budget)
  int min_reps = 3;            ///< timed launches at least
  int max_reps = 100;          ///< timed launches at most
  bool fp8_fast_accum = false; ///< fp8 GEMMs with cuBLASLt's fast accumulation (impl cublaslt_fast_accum)
};

struct Measurement {
  bool ok = false;
  double time_s = 0; ///< median of the timed launches, seconds
  int reps = 0;      ///< timed launches
  std::string impl;  ///< implementation timed ("cublaslt", "naive_warp", "suite", "cuda_memcpy")
  std::string why;   ///< when !ok: why the shape was skipped
};

/// Times one shape: random inputs, warm-up, CUDA events around every launch, median; inputs
/// rotate over enough copies to exceed the L2 cache. Skips (ok = false) shapes that do not fit.
Measurement measure(const kernels::KernelShape& shape, const TimingOptions& options);

/// Median time of an empty kernel launched back to back, seconds (the launch overhead).
double measure_empty_kernel(const TimingOptions& options);

struct CheckResult {
  std::string name; ///< what was checked, e.g. "gemm bf16 256x384x512 vs reference kernel"
  bool passed = false;
  double max_error = 0; ///< largest |got - want| / max |want|
  double tolerance = 0;
};

/// Checks every kernel against a reference (a simple CUDA kernel for GEMMs, the CPU for the
/// rest) on small cases. fp8 only when the device has compute capability >= 8.9.
std::vector<CheckResult> run_correctness_checks();

} // namespace stepsim::suite
