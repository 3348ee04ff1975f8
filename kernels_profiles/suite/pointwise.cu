// Memory-bound kernels: LayerNorm, RMSNorm, GELU, SwiGLU, softmax + cross-entropy, Adam, copy.
// Straightforward one-block-per-row / grid-stride kernels with fp32 arithmetic, written for
// this suite (impl "suite"); the copy is cudaMemcpyAsync (impl "cuda_memcpy").

#include "common.cuh"

#include <cmath>
#include <string>

namespace stepsim::suite {

namespace {

using kernels::Dtype;
using kernels::KernelKind;
using kernels::KernelShape;

constexpr int kThreads = 256;
constexpr float kNormEps = 1e-5f;

struct AdamParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float bias1 = 1.0f - std::pow(0.9f, 10.0f); // step 10
  float bias2 = 1.0f - std::pow(0.95f, 10.0f);
};

__device__ inline float block_sum(float v) {
  __shared__ float partial[32];
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  __syncthreads(); // partial may still be read by a previous call
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0f;
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ inline float block_max(float v) {
  __shared__ float partial[32];
  for (int off = 16; off > 0; off >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : -INFINITY;
  for (int off = 16; off > 0; off >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

template <class T>
__global__ void layernorm_fwd(const T* x, const T* gamma, const T* beta, T* y, int64_t cols) {
  const T* row = x + blockIdx.x * cols;
  float s = 0;
  float s2 = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = to_float(row[j]);
    s += v;
    s2 += v * v;
  }
  s = block_sum(s);
  s2 = block_sum(s2);
  const float mean = s / static_cast<float>(cols);
  const float rstd = rsqrtf(fmaxf(s2 / static_cast<float>(cols) - mean * mean, 0.0f) + kNormEps);
  T* out = y + blockIdx.x * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    out[j] = from_float<T>((to_float(row[j]) - mean) * rstd * to_float(gamma[j]) + to_float(beta[j]));
}

template <class T> __global__ void rmsnorm_fwd(const T* x, const T* gamma, T* y, int64_t cols) {
  const T* row = x + blockIdx.x * cols;
  float s2 = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = to_float(row[j]);
    s2 += v * v;
  }
  s2 = block_sum(s2);
  const float rstd = rsqrtf(s2 / static_cast<float>(cols) + kNormEps);
  T* out = y + blockIdx.x * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    out[j] = from_float<T>(to_float(row[j]) * rstd * to_float(gamma[j]));
}

__device__ __host__ inline float gelu_tanh(float x) {
  const float c = 0.7978845608028654f; // sqrt(2/pi)
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

template <class T> __global__ void gelu_fwd(const T* x, T* y, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = from_float<T>(gelu_tanh(to_float(x[i])));
}

template <class T> __global__ void swiglu_fwd(const T* gate, const T* up, T* y, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = to_float(gate[i]);
    y[i] = from_float<T>(g / (1.0f + __expf(-g)) * to_float(up[i]));
  }
}

/// Per row: loss = logsumexp(x) − x[label]; grad = softmax(x) − onehot(label).
template <class T>
__global__ void softmax_xent(const T* logits, const int* labels, T* grad, float* loss, int64_t cols) {
  const T* row = logits + blockIdx.x * cols;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    mx = fmaxf(mx, to_float(row[j]));
  mx = block_max(mx);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    sum += __expf(to_float(row[j]) - mx);
  sum = block_sum(sum);
  const int label = labels[blockIdx.x];
  if (threadIdx.x == 0)
    loss[blockIdx.x] = logf(sum) + mx - to_float(row[label]);
  const float inv = 1.0f / sum;
  T* g = grad + blockIdx.x * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    g[j] = from_float<T>(__expf(to_float(row[j]) - mx) * inv - (j == label ? 1.0f : 0.0f));
}

/// AdamW on fp32 master weights with bf16 gradients; writes the bf16 weight copy too.
__global__ void adam_update(float* p, float* m, float* v, const bf16* g, bf16* w, size_t n, AdamParams a) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float gi = to_float(g[i]);
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * gi;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * gi * gi;
    const float pi = p[i] - a.lr * ((mi / a.bias1) / (sqrtf(vi / a.bias2) + a.eps) + a.weight_decay * p[i]);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    w[i] = from_float<bf16>(pi);
  }
}

unsigned grid_for(size_t n) {
  static const unsigned cap = [] {
    int sms = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    return static_cast<unsigned>(sms * 16);
  }();
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>((n + kThreads - 1) / kThreads, cap)));
}

/// Calls f(T{}) with T the storage type of a 16/32-bit dtype.
template <class F> auto with_type(Dtype d, F&& f) {
  switch (d) {
  case Dtype::BF16:
    return f(bf16{});
  case Dtype::FP16:
    return f(fp16{});
  case Dtype::FP32:
    return f(float{});
  case Dtype::FP8_E4M3:
    break;
  }
  return f(bf16{});
}

/// Buffers of one pointwise problem: `sets` rotating input sets plus shared outputs.
struct Problem {
  std::vector<void*> in0, in1, in2; // per rotation
  void* out0 = nullptr;
  void* out1 = nullptr;
  int* labels = nullptr;
};

/// Element counts and sizes of the inputs/outputs of `s` (per rotation: in*, shared: out*).
struct Layout {
  size_t n = 0; ///< elements of the main tensor
  size_t in_bytes[3] = {0, 0, 0};
  size_t out_bytes[2] = {0, 0};
  size_t label_count = 0;
};

Layout layout_of(const KernelShape& s) {
  Layout l;
  const size_t es = static_cast<size_t>(kernels::dtype_bytes(s.dtype));
  switch (s.kind) {
  case KernelKind::LAYERNORM:
  case KernelKind::RMSNORM:
    l.n = static_cast<size_t>(s.rows * s.cols);
    l.in_bytes[0] = l.n * es;                         // x
    l.in_bytes[1] = static_cast<size_t>(s.cols) * es; // gamma
    l.in_bytes[2] = static_cast<size_t>(s.cols) * es; // beta
    l.out_bytes[0] = l.n * es;                        // y
    break;
  case KernelKind::SOFTMAX_XENT:
    l.n = static_cast<size_t>(s.rows * s.cols);
    l.in_bytes[0] = l.n * es;                         // logits
    l.out_bytes[0] = l.n * es;                        // grad
    l.out_bytes[1] = static_cast<size_t>(s.rows) * 4; // loss
    l.label_count = static_cast<size_t>(s.rows);
    break;
  case KernelKind::GELU:
    l.n = static_cast<size_t>(s.elements);
    l.in_bytes[0] = l.n * es;
    l.out_bytes[0] = l.n * es;
    break;
  case KernelKind::SWIGLU:
    l.n = static_cast<size_t>(s.elements);
    l.in_bytes[0] = l.n * es; // gate
    l.in_bytes[1] = l.n * es; // up
    l.out_bytes[0] = l.n * es;
    break;
  case KernelKind::ADAM:
    l.n = static_cast<size_t>(s.elements);
    l.in_bytes[0] = l.n * 12; // p, m, v (fp32), updated in place
    l.in_bytes[1] = l.n * 2;  // grad (bf16)
    l.out_bytes[0] = l.n * 2; // weight copy (bf16)
    break;
  case KernelKind::MEMCPY:
    l.n = static_cast<size_t>(s.elements);
    l.in_bytes[0] = l.n * es;
    l.out_bytes[0] = l.n * es;
    break;
  default:
    break;
  }
  return l;
}

/// Reserves and fills the buffers; false when they do not fit.
bool allocate(const KernelShape& s, const Layout& l, int rotations, Problem& p) {
  size_t set = 0;
  for (size_t b : l.in_bytes)
    set += Arena::padded(b);
  size_t total = set * static_cast<size_t>(rotations);
  for (size_t b : l.out_bytes)
    total += Arena::padded(b);
  total += Arena::padded(l.label_count * sizeof(int));
  if (!arena().reserve(total))
    return false;
  const Dtype dt = s.dtype;
  for (int r = 0; r < rotations; ++r) {
    void* bufs[3];
    for (int i = 0; i < 3; ++i)
      bufs[i] = l.in_bytes[i] ? arena().carve(l.in_bytes[i]) : nullptr;
    const uint64_t seed = 1000 + 10 * static_cast<uint64_t>(r);
    if (s.kind == KernelKind::ADAM) {
      float* f = static_cast<float*>(bufs[0]);
      fill_uniform(f, l.n, seed, -1.0f, 1.0f);                // p
      fill_uniform(f + l.n, l.n, seed + 1, -1e-3f, 1e-3f);    // m
      fill_uniform(f + 2 * l.n, l.n, seed + 2, 1e-6f, 1e-5f); // v
      fill_uniform(static_cast<bf16*>(bufs[1]), l.n, seed + 3, -1e-2f, 1e-2f);
    } else {
      with_type(dt, [&](auto tag) {
        using T = decltype(tag);
        const size_t es = sizeof(T);
        fill_uniform(static_cast<T*>(bufs[0]), l.in_bytes[0] / es, seed, -3.0f, 3.0f);
        if (bufs[1])
          fill_uniform(static_cast<T*>(bufs[1]), l.in_bytes[1] / es, seed + 1, 0.5f, 1.5f);
        if (bufs[2])
          fill_uniform(static_cast<T*>(bufs[2]), l.in_bytes[2] / es, seed + 2, -0.1f, 0.1f);
        return 0;
      });
    }
    p.in0.push_back(bufs[0]);
    p.in1.push_back(bufs[1]);
    p.in2.push_back(bufs[2]);
  }
  p.out0 = l.out_bytes[0] ? arena().carve(l.out_bytes[0]) : nullptr;
  p.out1 = l.out_bytes[1] ? arena().carve(l.out_bytes[1]) : nullptr;
  if (l.label_count) {
    p.labels = arena().carve_n<int>(l.label_count);
    fill_labels(p.labels, l.label_count, 77, static_cast<int>(s.cols));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  return true;
}

/// Launches the kernel of `s` on rotation `r`.
void launch(const KernelShape& s, const Layout& l, const Problem& p, int r) {
  if (s.kind == KernelKind::ADAM) {
    float* f = static_cast<float*>(p.in0[r]);
    adam_update<<<grid_for(l.n), kThreads>>>(f, f + l.n, f + 2 * l.n, static_cast<const bf16*>(p.in1[r]),
                                             static_cast<bf16*>(p.out0), l.n, AdamParams{});
    return;
  }
  if (s.kind == KernelKind::MEMCPY) {
    CHECK_CUDA(cudaMemcpyAsync(p.out0, p.in0[r], l.in_bytes[0], cudaMemcpyDeviceToDevice, nullptr));
    return;
  }
  with_type(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(p.in0[r]);
    T* y = static_cast<T*>(p.out0);
    switch (s.kind) {
    case KernelKind::LAYERNORM:
      layernorm_fwd<T><<<static_cast<unsigned>(s.rows), kThreads>>>(
          x, static_cast<const T*>(p.in1[r]), static_cast<const T*>(p.in2[r]), y, s.cols);
      break;
    case KernelKind::RMSNORM:
      rmsnorm_fwd<T>
          <<<static_cast<unsigned>(s.rows), kThreads>>>(x, static_cast<const T*>(p.in1[r]), y, s.cols);
      break;
    case KernelKind::GELU:
      gelu_fwd<T><<<grid_for(l.n), kThreads>>>(x, y, l.n);
      break;
    case KernelKind::SWIGLU:
      swiglu_fwd<T><<<grid_for(l.n), kThreads>>>(x, static_cast<const T*>(p.in1[r]), y, l.n);
      break;
    case KernelKind::SOFTMAX_XENT:
      softmax_xent<T>
          <<<static_cast<unsigned>(s.rows), kThreads>>>(x, p.labels, y, static_cast<float*>(p.out1), s.cols);
      break;
    default:
      break;
    }
    return 0;
  });
}

// --- CPU references ---------------------------------------------------------------------------

std::vector<double> cpu_reference(const KernelShape& s, const std::vector<float>& x,
                                  const std::vector<float>& a, const std::vector<float>& b,
                                  const std::vector<int>& labels, std::vector<double>& loss) {
  std::vector<double> y;
  switch (s.kind) {
  case KernelKind::LAYERNORM:
  case KernelKind::RMSNORM:
    for (int64_t r = 0; r < s.rows; ++r) {
      double sum = 0;
      double sum2 = 0;
      for (int64_t j = 0; j < s.cols; ++j) {
        sum += x[r * s.cols + j];
        sum2 += static_cast<double>(x[r * s.cols + j]) * x[r * s.cols + j];
      }
      const double mean = s.kind == KernelKind::LAYERNORM ? sum / s.cols : 0.0;
      const double var = sum2 / s.cols - mean * mean;
      const double rstd = 1.0 / std::sqrt(var + kNormEps);
      for (int64_t j = 0; j < s.cols; ++j)
        y.push_back((x[r * s.cols + j] - mean) * rstd * a[j] +
                    (s.kind == KernelKind::LAYERNORM ? b[j] : 0.0));
    }
    break;
  case KernelKind::GELU:
    for (float v : x)
      y.push_back(0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
    break;
  case KernelKind::SWIGLU:
    for (size_t i = 0; i < x.size(); ++i)
      y.push_back(x[i] / (1.0 + std::exp(-static_cast<double>(x[i]))) * a[i]);
    break;
  case KernelKind::SOFTMAX_XENT:
    for (int64_t r = 0; r < s.rows; ++r) {
      double mx = -1e300;
      for (int64_t j = 0; j < s.cols; ++j)
        mx = std::max<double>(mx, x[r * s.cols + j]);
      double sum = 0;
      for (int64_t j = 0; j < s.cols; ++j)
        sum += std::exp(x[r * s.cols + j] - mx);
      loss.push_back(std::log(sum) + mx - x[r * s.cols + labels[r]]);
      for (int64_t j = 0; j < s.cols; ++j)
        y.push_back(std::exp(x[r * s.cols + j] - mx) / sum - (j == labels[r] ? 1.0 : 0.0));
    }
    break;
  default:
    break;
  }
  return y;
}

template <class T> void check_kind(std::vector<CheckResult>& out, const KernelShape& s) {
  const Layout l = layout_of(s);
  Problem p;
  if (!allocate(s, l, 1, p))
    std::exit(1);
  launch(s, l, p, 0);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaDeviceSynchronize());
  const size_t es = sizeof(T);
  const std::vector<float> x = download(static_cast<T*>(p.in0[0]), l.in_bytes[0] / es);
  const std::vector<float> a =
      p.in1[0] ? download(static_cast<T*>(p.in1[0]), l.in_bytes[1] / es) : std::vector<float>{};
  const std::vector<float> b =
      p.in2[0] ? download(static_cast<T*>(p.in2[0]), l.in_bytes[2] / es) : std::vector<float>{};
  std::vector<int> labels(l.label_count);
  if (l.label_count)
    CHECK_CUDA(cudaMemcpy(labels.data(), p.labels, l.label_count * sizeof(int), cudaMemcpyDeviceToHost));
  std::vector<double> loss;
  const std::vector<double> want = cpu_reference(s, x, a, b, labels, loss);
  CheckResult r;
  r.name = kernels::describe(s) + " vs CPU";
  r.tolerance = 1e-2;
  r.max_error = relative_max_error(download(static_cast<T*>(p.out0), l.n), want);
  if (!loss.empty())
    r.max_error =
        std::max(r.max_error, relative_max_error(download(static_cast<float*>(p.out1), loss.size()), loss));
  r.passed = r.max_error <= r.tolerance;
  out.push_back(r);
}

void check_adam(std::vector<CheckResult>& out) {
  const KernelShape s = kernels::elementwise(KernelKind::ADAM, Dtype::FP32, 10001);
  const Layout l = layout_of(s);
  Problem p;
  if (!allocate(s, l, 1, p))
    std::exit(1);
  const float* f = static_cast<const float*>(p.in0[0]);
  const std::vector<float> p0 = download(f, l.n);
  const std::vector<float> m0 = download(f + l.n, l.n);
  const std::vector<float> v0 = download(f + 2 * l.n, l.n);
  const std::vector<float> g = download(static_cast<const bf16*>(p.in1[0]), l.n);
  launch(s, l, p, 0);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaDeviceSynchronize());
  const AdamParams a;
  std::vector<double> want_p;
  std::vector<double> want_m;
  std::vector<double> want_v;
  for (size_t i = 0; i < l.n; ++i) {
    const double mi = a.beta1 * static_cast<double>(m0[i]) + (1.0 - a.beta1) * g[i];
    const double vi =
        a.beta2 * static_cast<double>(v0[i]) + (1.0 - a.beta2) * static_cast<double>(g[i]) * g[i];
    want_m.push_back(mi);
    want_v.push_back(vi);
    want_p.push_back(p0[i] -
                     a.lr * ((mi / a.bias1) / (std::sqrt(vi / a.bias2) + a.eps) + a.weight_decay * p0[i]));
  }
  CheckResult r;
  r.name = kernels::describe(s) + " (p, m, v, bf16 copy) vs CPU";
  r.tolerance = 1e-3;
  r.max_error = std::max({relative_max_error(download(f, l.n), want_p),
                          relative_max_error(download(f + l.n, l.n), want_m),
                          relative_max_error(download(f + 2 * l.n, l.n), want_v)});
  // The bf16 copy only has 8 bits of mantissa.
  r.max_error = std::max(r.max_error,
                         0.1 * relative_max_error(download(static_cast<const bf16*>(p.out0), l.n), want_p));
  r.passed = r.max_error <= r.tolerance;
  out.push_back(r);
}

void check_copy(std::vector<CheckResult>& out) {
  const KernelShape s = kernels::elementwise(KernelKind::MEMCPY, Dtype::BF16, 100003);
  const Layout l = layout_of(s);
  Problem p;
  if (!allocate(s, l, 1, p))
    std::exit(1);
  launch(s, l, p, 0);
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<float> src = download(static_cast<const bf16*>(p.in0[0]), l.n);
  const std::vector<double> want(src.begin(), src.end());
  CheckResult r;
  r.name = kernels::describe(s) + " (cudaMemcpyAsync) exact";
  r.tolerance = 0;
  r.max_error = relative_max_error(download(static_cast<const bf16*>(p.out0), l.n), want);
  r.passed = r.max_error == 0;
  out.push_back(r);
}

} // namespace

void check_pointwise(std::vector<CheckResult>& out) {
  check_kind<bf16>(out, kernels::rowwise(KernelKind::LAYERNORM, Dtype::BF16, 7, 1000));
  check_kind<fp16>(out, kernels::rowwise(KernelKind::LAYERNORM, Dtype::FP16, 3, 4099));
  check_kind<bf16>(out, kernels::rowwise(KernelKind::RMSNORM, Dtype::BF16, 7, 1000));
  check_kind<bf16>(out, kernels::elementwise(KernelKind::GELU, Dtype::BF16, 10001));
  check_kind<bf16>(out, kernels::elementwise(KernelKind::SWIGLU, Dtype::BF16, 10001));
  check_kind<bf16>(out, kernels::rowwise(KernelKind::SOFTMAX_XENT, Dtype::BF16, 5, 3001));
  check_kind<float>(out, kernels::rowwise(KernelKind::SOFTMAX_XENT, Dtype::FP32, 3, 777));
  check_adam(out);
  check_copy(out);
}

Measurement measure_pointwise(const KernelShape& s, const TimingOptions& o) {
  Measurement meas;
  meas.impl = s.kind == KernelKind::MEMCPY ? "cuda_memcpy" : "suite";
  if (s.dtype == Dtype::FP8_E4M3 && s.kind != KernelKind::MEMCPY) {
    meas.why = "fp8 is only timed for gemm and memcpy";
    return meas;
  }
  if (s.kind == KernelKind::ADAM && s.dtype != Dtype::FP32) {
    meas.why = "adam updates fp32 master weights (dtype fp32)";
    return meas;
  }
  const Layout l = layout_of(s);
  size_t set = 0;
  for (size_t b : l.in_bytes)
    set += Arena::padded(b);
  const int rot = rotations_for(set);
  Problem p;
  if (!allocate(s, l, rot, p)) {
    meas.why = "does not fit in device memory";
    return meas;
  }
  meas.time_s = time_median([&](int r) { launch(s, l, p, r); }, rot, o, meas.reps);
  meas.ok = true;
  return meas;
}

} // namespace stepsim::suite
