// Device setup, random fill, the arena, the empty-kernel timer and the dispatch by kind.

#include "common.cuh"

#include <cmath>
#include <string>

namespace stepsim::suite {

namespace {

template <class T> __global__ void fill_uniform_kernel(T* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = from_float<T>(hash_uniform(seed, i, lo, hi));
  }
}

__global__ void fill_labels_kernel(int* p, size_t n, uint64_t seed, int bound) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    p[i] = min(bound - 1, static_cast<int>(hash_uniform(seed, i, 0.0f, 1.0f) * bound));
  }
}

__global__ void empty_kernel() {}

std::string version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

} // namespace

template <class T> void fill_uniform(T* p, size_t n, uint64_t seed, float lo, float hi) {
  if (n == 0)
    return;
  const int blocks = static_cast<int>(std::min<size_t>((n + 255) / 256, 65536));
  fill_uniform_kernel<T><<<blocks, 256>>>(p, n, seed, lo, hi);
  CHECK_LAUNCH();
}
template void fill_uniform<float>(float*, size_t, uint64_t, float, float);
template void fill_uniform<bf16>(bf16*, size_t, uint64_t, float, float);
template void fill_uniform<fp16>(fp16*, size_t, uint64_t, float, float);
template void fill_uniform<fp8>(fp8*, size_t, uint64_t, float, float);

void fill_labels(int* p, size_t n, uint64_t seed, int bound) {
  const int blocks = static_cast<int>(std::min<size_t>((n + 255) / 256, 65536));
  fill_labels_kernel<<<blocks, 256>>>(p, n, seed, bound);
  CHECK_LAUNCH();
}

Arena::~Arena() {
  if (base_)
    cudaFree(base_); // best effort at exit
}

bool Arena::reserve(size_t bytes) {
  used_ = 0;
  if (bytes <= size_)
    return true;
  if (base_)
    CHECK_CUDA(cudaFree(base_));
  base_ = nullptr;
  size_ = 0;
  size_t free_b = 0;
  size_t total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  // Leave room for cuBLASLt's workspace and the CUDA context.
  if (bytes + (size_t{512} << 20) > free_b)
    return false;
  CHECK_CUDA(cudaMalloc(&base_, bytes));
  size_ = bytes;
  return true;
}

void* Arena::carve(size_t bytes) {
  const size_t need = padded(bytes);
  if (used_ + need > size_) {
    std::fprintf(stderr, "%s:%d: arena overflow (%zu + %zu > %zu)\n", __FILE__, __LINE__, used_, need, size_);
    std::exit(1);
  }
  void* p = base_ + used_;
  used_ += need;
  return p;
}

Arena& arena() {
  static Arena a;
  return a;
}

size_t l2_bytes() {
  static size_t l2 = [] {
    int v = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, 0));
    return static_cast<size_t>(v);
  }();
  return l2;
}

int rotations_for(size_t set_bytes) {
  if (set_bytes == 0)
    return 1;
  const size_t want = (3 * l2_bytes() + set_bytes - 1) / set_bytes;
  return static_cast<int>(std::clamp<size_t>(want, 1, 16));
}

double relative_max_error(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0;
  for (double w : want)
    scale = std::max(scale, std::fabs(w));
  double err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!std::isfinite(static_cast<double>(got[i])))
      return INFINITY;
    err = std::max(err, e);
  }
  return scale > 0 ? err / scale : err;
}

bool device_available(std::string& why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return false;
  }
  if (n == 0) {
    why = "no CUDA device";
    return false;
  }
  return true;
}

DeviceInfo device_info() {
  DeviceInfo d;
  cudaDeviceProp p{};
  CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.l2_bytes = p.l2CacheSize;
  d.total_bytes = static_cast<int64_t>(p.totalGlobalMem);
  int khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  d.sm_clock_mhz = khz / 1000.0;
  CHECK_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0));
  d.mem_clock_mhz = khz / 1000.0;
  size_t free_b = 0;
  size_t total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  d.free_bytes = static_cast<int64_t>(free_b);
  int v = 0;
  CHECK_CUDA(cudaDriverGetVersion(&v));
  d.driver_api = version_string(v);
  CHECK_CUDA(cudaRuntimeGetVersion(&v));
  d.runtime = version_string(v);
  return d;
}

double measure_empty_kernel(const TimingOptions& options) {
  int reps = 0;
  return time_median([](int) { empty_kernel<<<1, 32>>>(); }, 1, options, reps);
}

Measurement measure(const kernels::KernelShape& shape, const TimingOptions& options) {
  switch (kernels::family(shape.kind)) {
  case kernels::KernelFamily::GEMM:
    return measure_gemm(shape, options);
  case kernels::KernelFamily::ATTENTION:
    return measure_attention(shape, options);
  case kernels::KernelFamily::ROWWISE:
  case kernels::KernelFamily::ELEMENTWISE:
    return measure_pointwise(shape, options);
  }
  return {};
}

std::vector<CheckResult> run_correctness_checks() {
  std::vector<CheckResult> out;
  int major = 0;
  int minor = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  check_gemm(out, major * 10 + minor >= 89);
  check_attention(out);
  check_pointwise(out);
  return out;
}

} // namespace stepsim::suite
