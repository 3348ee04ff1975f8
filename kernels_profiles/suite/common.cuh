#pragma once
// Shared by the suite's CUDA sources: error checks, dtype helpers, random fill, device arena
// and the event-based timer.

#include "suite.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

/// Every CUDA runtime call goes through this: on failure, print file:line and exit non-zero.
#define CHECK_CUDA(call)                                                                                     \
  do {                                                                                                       \
    const cudaError_t err_ = (call);                                                                         \
    if (err_ != cudaSuccess) {                                                                               \
      std::fprintf(stderr, "%s:%d: CUDA error %s (%s) in %s\n", __FILE__, __LINE__, cudaGetErrorName(err_),  \
                   cudaGetErrorString(err_), #call);                                                         \
      std::exit(1);                                                                                          \
    }                                                                                                        \
  } while (0)

/// Every cuBLAS(Lt) call goes through this.
#define CHECK_CUBLAS(call)                                                                                   \
  do {                                                                                                       \
    const cublasStatus_t st_ = (call);                                                                       \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                                      \
      std::fprintf(stderr, "%s:%d: cuBLAS error %d in %s\n", __FILE__, __LINE__, static_cast<int>(st_),      \
                   #call);                                                                                   \
      std::exit(1);                                                                                          \
    }                                                                                                        \
  } while (0)

/// After a kernel launch: launch errors now, execution errors at the next synchronisation.
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

namespace stepsim::suite {

using bf16 = __nv_bfloat16;
using fp16 = __half;
using fp8 = __nv_fp8_e4m3;

__device__ __host__ inline float to_float(float x) {
  return x;
}
__device__ __host__ inline float to_float(bf16 x) {
  return __bfloat162float(x);
}
__device__ __host__ inline float to_float(fp16 x) {
  return __half2float(x);
}
__device__ __host__ inline float to_float(fp8 x) {
  return static_cast<float>(x);
}

template <class T> __device__ __host__ inline T from_float(float x);
template <> __device__ __host__ inline float from_float<float>(float x) {
  return x;
}
template <> __device__ __host__ inline bf16 from_float<bf16>(float x) {
  return __float2bfloat16(x);
}
template <> __device__ __host__ inline fp16 from_float<fp16>(float x) {
  return __float2half(x);
}
template <> __device__ __host__ inline fp8 from_float<fp8>(float x) {
  return fp8(x);
}

/// Deterministic uniform value in [lo, hi) for element `i` of stream `seed` (splitmix64).
__device__ __host__ inline float hash_uniform(uint64_t seed, uint64_t i, float lo, float hi) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  return lo + (hi - lo) * u;
}

/// Fills `n` elements of `p` with hash_uniform values (on the device).
template <class T> void fill_uniform(T* p, size_t n, uint64_t seed, float lo, float hi);
/// Fills `n` ints with values in [0, bound).
void fill_labels(int* p, size_t n, uint64_t seed, int bound);

/// One growing device allocation reused by every shape; carve() hands out aligned pieces.
class Arena {
public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();
  /// Makes room for `bytes` (all earlier pieces become invalid). False when it does not fit.
  bool reserve(size_t bytes);
  /// Next piece of `bytes`, 256-byte aligned, after reserve().
  void* carve(size_t bytes);
  template <class T> T* carve_n(size_t n) { return static_cast<T*>(carve(n * sizeof(T))); }
  /// Bytes a set of pieces needs, alignment included.
  static size_t padded(size_t bytes) { return (bytes + 255) / 256 * 256; }

private:
  char* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
};

/// The process-wide arena and L2 size.
Arena& arena();
size_t l2_bytes();

/// How many copies of an input set of `set_bytes` to rotate through so that they exceed the
/// L2 cache three times over (at most 16, at least 1).
int rotations_for(size_t set_bytes);

/// Times `launch(r)` (r = rotation index) with CUDA events around every launch and returns
/// the median in seconds; `reps` gets the number of timed launches.
template <class Launch>
double time_median(Launch&& launch, int rotations, const TimingOptions& o, int& reps) {
  cudaEvent_t a;
  cudaEvent_t b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  // One launch to estimate, then warm-up proportional to the budget.
  launch(0);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaEventRecord(a));
  launch(1 % rotations);
  CHECK_CUDA(cudaEventRecord(b));
  CHECK_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  const double one = std::max(1e-7, ms * 1e-3);
  const int warm = std::min(o.warmup, static_cast<int>(0.2 * o.budget_s / one));
  for (int i = 0; i < warm; ++i)
    launch((i + 2) % rotations);
  CHECK_LAUNCH();
  reps = std::clamp(static_cast<int>(o.budget_s / one), o.min_reps, o.max_reps);
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(reps));
  for (auto& e : ev)
    CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(ev[2 * i]));
    launch(i % rotations);
    CHECK_CUDA(cudaEventRecord(ev[2 * i + 1]));
  }
  CHECK_LAUNCH();
  CHECK_CUDA(cudaEventSynchronize(ev.back()));
  std::vector<double> t(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    t[i] = ms * 1e-3;
  }
  for (auto& e : ev)
    CHECK_CUDA(cudaEventDestroy(e));
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[reps / 2];
}

/// Largest |got - want| over max |want| (0 when want is all zeros and got equals it).
double relative_max_error(const std::vector<float>& got, const std::vector<double>& want);

/// Copies `n` device elements of T to the host as floats.
template <class T> std::vector<float> download(const T* p, size_t n) {
  std::vector<T> tmp(n);
  CHECK_CUDA(cudaMemcpy(tmp.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = to_float(tmp[i]);
  return out;
}

// Per-family entry points (gemm.cu, attention.cu, pointwise.cu).
Measurement measure_gemm(const kernels::KernelShape& s, const TimingOptions& o);
Measurement measure_attention(const kernels::KernelShape& s, const TimingOptions& o);
Measurement measure_pointwise(const kernels::KernelShape& s, const TimingOptions& o);
void check_gemm(std::vector<CheckResult>& out, bool fp8);
void check_attention(std::vector<CheckResult>& out);
void check_pointwise(std::vector<CheckResult>& out);

} // namespace stepsim::suite
