// GEMMs through cuBLASLt: Y[m,n] = X[m,k] · W[n,k]ᵀ, row-major (nn.Linear). In cuBLAS's
// column-major terms: D(n×m) = op(A)·B with A = W stored k×n (ld k, op T), B = X stored k×m
// (ld k), i.e. the "TN" layout that fp8 requires and 16-bit GEMMs run fastest in.
// A batched shape (batch > 1) runs `batch` such products in one strided-batched call, each
// operand's matrices stored back to back.

#include "common.cuh"

#include <string>
#include <utility>

namespace stepsim::suite {

namespace {

using kernels::Dtype;

constexpr size_t kWorkspaceBytes = size_t{64} << 20;

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x = nullptr;
    CHECK_CUBLAS(cublasLtCreate(&x));
    return x;
  }();
  return h;
}

void* workspace() {
  static void* w = [] {
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, kWorkspaceBytes));
    return p;
  }();
  return w;
}

cudaDataType_t input_type(Dtype d) {
  switch (d) {
  case Dtype::BF16:
    return CUDA_R_16BF;
  case Dtype::FP16:
    return CUDA_R_16F;
  case Dtype::FP8_E4M3:
    return CUDA_R_8F_E4M3;
  case Dtype::FP32:
    break;
  }
  return CUDA_R_32F;
}

cudaDataType_t output_type(Dtype d) {
  return d == Dtype::FP8_E4M3 ? CUDA_R_16BF : input_type(d);
}
size_t output_size(Dtype) {
  return 2;
}

/// One planned cuBLASLt matmul (descriptors and the heuristic's first algorithm). fp8 with
/// `fast_accum` accumulates in the tensor cores' reduced-precision mode, as Transformer Engine's
/// forward fp8 GEMMs do (its dgrad/wgrad GEMMs keep the split, full-precision accumulation).
class LtGemm {
public:
  LtGemm(Dtype dtype, int64_t m, int64_t n, int64_t k, int64_t batch = 1, bool fast_accum = false) {
    CHECK_CUBLAS(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    if (dtype == Dtype::FP8_E4M3 && fast_accum) {
      const int8_t on = 1;
      CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof on));
    }
    const cublasOperation_t ta = CUBLAS_OP_T;
    const cublasOperation_t tb = CUBLAS_OP_N;
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&a_, input_type(dtype), k, n, k));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&b_, input_type(dtype), k, m, k));
    CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&c_, output_type(dtype), n, m, n));
    if (batch > 1) {
      const int32_t count = static_cast<int32_t>(batch);
      const std::pair<cublasLtMatrixLayout_t, int64_t> strided[] = {{a_, n * k}, {b_, m * k}, {c_, m * n}};
      for (const auto& [layout, stride] : strided) {
        CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                      sizeof count));
        CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                      &stride, sizeof stride));
      }
    }
    cublasLtMatmulPreference_t pref = nullptr;
    CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    CHECK_CUBLAS(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    int returned = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt_handle(), op_, a_, b_, c_, c_, pref, 1, &heuristic_, &returned);
    CHECK_CUBLAS(cublasLtMatmulPreferenceDestroy(pref));
    ok_ = st == CUBLAS_STATUS_SUCCESS && returned > 0;
  }
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm() {
    cublasLtMatrixLayoutDestroy(c_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatmulDescDestroy(op_);
  }
  [[nodiscard]] bool ok() const { return ok_; }
  void run(const void* w, const void* x, void* y) const {
    const float alpha = 1.0f;
    const float beta = 0.0f;
    CHECK_CUBLAS(cublasLtMatmul(lt_handle(), op_, &alpha, w, a_, x, b_, &beta, y, c_, y, c_, &heuristic_.algo,
                                workspace(), kWorkspaceBytes, nullptr));
  }

private:
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr;
  cublasLtMatrixLayout_t b_ = nullptr;
  cublasLtMatrixLayout_t c_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
  bool ok_ = false;
};

/// Reference: one thread per output, fp32 accumulation; blockIdx.z is the batch index.
template <class T>
__global__ void reference_gemm(const T* w, const T* x, float* y, int64_t m, int64_t n, int64_t k) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t i = blockIdx.y;
  if (j >= n || i >= m)
    return;
  w += blockIdx.z * n * k;
  x += blockIdx.z * m * k;
  y += blockIdx.z * m * n;
  float acc = 0;
  for (int64_t p = 0; p < k; ++p)
    acc += to_float(x[i * k + p]) * to_float(w[j * k + p]);
  y[i * n + j] = acc;
}

template <class T>
void check_one(std::vector<CheckResult>& out, Dtype dtype, int64_t m, int64_t n, int64_t k, int64_t batch = 1,
               bool fast_accum = false) {
  CheckResult r;
  r.name = std::string("gemm ") + kernels::to_string(dtype) + " " +
           (batch > 1 ? std::to_string(batch) + "x(" : "") + std::to_string(m) + "x" + std::to_string(n) +
           "x" + std::to_string(k) + (batch > 1 ? ")" : "") +
           (fast_accum ? " (cuBLASLt, fast accumulation)" : " (cuBLASLt)") + " vs reference kernel";
  r.tolerance = 1e-2;
  const size_t wn = static_cast<size_t>(batch * n * k);
  const size_t xn = static_cast<size_t>(batch * m * k);
  const size_t yn = static_cast<size_t>(batch * m * n);
  const size_t wb = wn * sizeof(T);
  const size_t xb = xn * sizeof(T);
  const size_t yb = yn * output_size(dtype);
  const size_t refb = yn * sizeof(float);
  if (!arena().reserve(Arena::padded(wb) + Arena::padded(xb) + Arena::padded(yb) + Arena::padded(refb))) {
    std::fprintf(stderr, "%s:%d: no memory for the gemm check\n", __FILE__, __LINE__);
    std::exit(1);
  }
  T* w = static_cast<T*>(arena().carve(wb));
  T* x = static_cast<T*>(arena().carve(xb));
  bf16* y16 = static_cast<bf16*>(arena().carve(yb)); // bf16 or fp16 storage, 2 bytes each
  float* ref = arena().carve_n<float>(yn);
  fill_uniform(w, wn, 11, -1.0f, 1.0f);
  fill_uniform(x, xn, 12, -1.0f, 1.0f);
  const LtGemm g(dtype, m, n, k, batch, fast_accum);
  if (!g.ok()) {
    r.name += ": no cuBLASLt algorithm";
    out.push_back(r);
    return;
  }
  g.run(w, x, y16);
  reference_gemm<T>
      <<<dim3(static_cast<unsigned>((n + 127) / 128), static_cast<unsigned>(m), static_cast<unsigned>(batch)),
         128>>>(w, x, ref, m, n, k);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got =
      dtype == Dtype::FP16 ? download(reinterpret_cast<fp16*>(y16), yn) : download(y16, yn);
  const std::vector<float> want_f = download(ref, yn);
  const std::vector<double> want(want_f.begin(), want_f.end());
  r.max_error = relative_max_error(got, want);
  r.passed = r.max_error <= r.tolerance;
  out.push_back(r);
}

template <class T> Measurement time_gemm(const kernels::KernelShape& s, const TimingOptions& o) {
  Measurement meas;
  const bool fast_accum = s.dtype == Dtype::FP8_E4M3 && o.fp8_fast_accum;
  meas.impl = fast_accum ? "cublaslt_fast_accum" : "cublaslt";
  const LtGemm g(s.dtype, s.m, s.n, s.k, s.batch, fast_accum);
  if (!g.ok()) {
    meas.why = "no cuBLASLt algorithm for this shape";
    return meas;
  }
  const int64_t batch = s.batch > 1 ? s.batch : 1;
  const size_t wn = static_cast<size_t>(batch * s.n * s.k);
  const size_t xn = static_cast<size_t>(batch * s.m * s.k);
  const size_t set = Arena::padded(wn * sizeof(T)) + Arena::padded(xn * sizeof(T));
  const size_t yb = Arena::padded(static_cast<size_t>(batch * s.m * s.n) * output_size(s.dtype));
  const int rot = rotations_for(set);
  if (!arena().reserve(set * static_cast<size_t>(rot) + yb)) {
    meas.why = "does not fit in device memory";
    return meas;
  }
  std::vector<T*> w(static_cast<size_t>(rot));
  std::vector<T*> x(static_cast<size_t>(rot));
  for (int r = 0; r < rot; ++r) {
    w[r] = arena().carve_n<T>(wn);
    x[r] = arena().carve_n<T>(xn);
    fill_uniform(w[r], wn, 100 + static_cast<uint64_t>(r), -1.0f, 1.0f);
    fill_uniform(x[r], xn, 200 + static_cast<uint64_t>(r), -1.0f, 1.0f);
  }
  void* y = arena().carve(yb);
  CHECK_CUDA(cudaDeviceSynchronize());
  meas.time_s = time_median([&](int r) { g.run(w[r], x[r], y); }, rot, o, meas.reps);
  meas.ok = true;
  return meas;
}

} // namespace

void check_gemm(std::vector<CheckResult>& out, bool fp8_supported) {
  check_one<bf16>(out, Dtype::BF16, 256, 384, 512);
  check_one<bf16>(out, Dtype::BF16, 200, 328, 136);
  check_one<bf16>(out, Dtype::BF16, 96, 64, 96, 3); // strided batched, as unfused attention's QKᵀ
  check_one<fp16>(out, Dtype::FP16, 256, 384, 512);
  if (fp8_supported) {
    check_one<fp8>(out, Dtype::FP8_E4M3, 272, 384, 512);
    check_one<fp8>(out, Dtype::FP8_E4M3, 272, 384, 512, 1, true);
  }
}

Measurement measure_gemm(const kernels::KernelShape& s, const TimingOptions& o) {
  switch (s.dtype) {
  case Dtype::BF16:
    return time_gemm<bf16>(s, o);
  case Dtype::FP16:
    return time_gemm<fp16>(s, o);
  case Dtype::FP8_E4M3: {
    int major = 0;
    int minor = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CHECK_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    if (major * 10 + minor < 89)
      return {false, 0, 0, "cublaslt", "fp8 needs compute capability >= 8.9"};
    return time_gemm<fp8>(s, o);
  }
  case Dtype::FP32:
    break;
  }
  return {false, 0, 0, "cublaslt", "gemm dtype not supported"};
}

} // namespace stepsim::suite
