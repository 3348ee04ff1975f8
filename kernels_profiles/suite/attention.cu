// Attention forward and backward. The cuDNN 9 frontend headers (cudnn_frontend.h) are not
// required by this suite; instead it ships its own NAIVE but correct kernels (one warp per
// query or key row, online softmax, fp32 accumulation), labelled impl "naive_warp" in the
// profile. They are far slower than FlashAttention/cuDNN, and KernelTable ignores such rows
// unless asked (docs/kernels.md). Layout: Q, O, dO [b][s][h][d]; K, V [b][s][h_kv][d];
// log-sum-exp [b][h][s] in fp32.

#include "common.cuh"

#include <cmath>
#include <string>

namespace stepsim::suite {

namespace {

using kernels::Dtype;
constexpr int kMaxPerLane = 8; // head_dim <= 256
constexpr int kWarpsPerBlock = 4;

struct AttnArgs {
  int b = 0;
  int h = 0;
  int hk = 0;
  int s = 0;
  int d = 0;
  bool causal = true;
  float scale = 1;
};

__device__ inline float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ inline size_t q_off(const AttnArgs& a, int b, int i, int h) {
  return ((static_cast<size_t>(b) * a.s + i) * a.h + h) * a.d;
}
__device__ inline size_t kv_off(const AttnArgs& a, int b, int j, int hk) {
  return ((static_cast<size_t>(b) * a.s + j) * a.hk + hk) * a.d;
}
__device__ inline size_t row_of(const AttnArgs& a, int b, int h, int i) {
  return (static_cast<size_t>(b) * a.h + h) * a.s + i;
}

template <class T> __device__ inline float dot_lane(const float* r, const T* p, int lane, int ne) {
  float acc = 0;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e)
    if (e < ne)
      acc += r[e] * to_float(p[lane + 32 * e]);
  return warp_sum(acc);
}

template <class T> __device__ inline void load_lane(float* r, const T* p, int lane, int ne) {
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e)
    r[e] = e < ne ? to_float(p[lane + 32 * e]) : 0.0f;
}

template <class T>
__global__ void attn_fwd(AttnArgs a, const T* q, const T* k, const T* v, T* o, float* lse) {
  const size_t warp = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<size_t>(a.b) * a.h * a.s)
    return;
  const int i = static_cast<int>(warp % a.s);
  const int h = static_cast<int>((warp / a.s) % a.h);
  const int b = static_cast<int>(warp / (static_cast<size_t>(a.s) * a.h));
  const int hk = h / (a.h / a.hk);
  const int ne = a.d / 32;
  float qr[kMaxPerLane];
  float acc[kMaxPerLane] = {};
  load_lane(qr, q + q_off(a, b, i, h), lane, ne);
  float m = -INFINITY;
  float l = 0;
  const int jend = a.causal ? i + 1 : a.s;
  for (int j = 0; j < jend; ++j) {
    const float sc = dot_lane(qr, k + kv_off(a, b, j, hk), lane, ne) * a.scale;
    const float mn = fmaxf(m, sc);
    const float corr = __expf(m - mn);
    const float p = __expf(sc - mn);
    l = l * corr + p;
    const T* vp = v + kv_off(a, b, j, hk);
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e)
      if (e < ne)
        acc[e] = acc[e] * corr + p * to_float(vp[lane + 32 * e]);
    m = mn;
  }
  T* op = o + q_off(a, b, i, h);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e)
    if (e < ne)
      op[lane + 32 * e] = from_float<T>(acc[e] / l);
  if (lane == 0)
    lse[row_of(a, b, h, i)] = m + logf(l);
}

/// D_i = dO_i · O_i per query row.
template <class T> __global__ void attn_bwd_rowdot(AttnArgs a, const T* o, const T* dout, float* dsum) {
  const size_t warp = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<size_t>(a.b) * a.h * a.s)
    return;
  const int i = static_cast<int>(warp % a.s);
  const int h = static_cast<int>((warp / a.s) % a.h);
  const int b = static_cast<int>(warp / (static_cast<size_t>(a.s) * a.h));
  float r[kMaxPerLane];
  load_lane(r, o + q_off(a, b, i, h), lane, a.d / 32);
  const float dsv = dot_lane(r, dout + q_off(a, b, i, h), lane, a.d / 32);
  if (lane == 0)
    dsum[row_of(a, b, h, i)] = dsv;
}

/// dQ_i = scale · Σ_j P_ij (dP_ij − D_i) K_j, one warp per query row.
template <class T>
__global__ void attn_bwd_dq(AttnArgs a, const T* q, const T* k, const T* v, const T* dout, const float* lse,
                            const float* dsum, T* dq) {
  const size_t warp = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<size_t>(a.b) * a.h * a.s)
    return;
  const int i = static_cast<int>(warp % a.s);
  const int h = static_cast<int>((warp / a.s) % a.h);
  const int b = static_cast<int>(warp / (static_cast<size_t>(a.s) * a.h));
  const int hk = h / (a.h / a.hk);
  const int ne = a.d / 32;
  float qr[kMaxPerLane];
  float dor[kMaxPerLane];
  float acc[kMaxPerLane] = {};
  load_lane(qr, q + q_off(a, b, i, h), lane, ne);
  load_lane(dor, dout + q_off(a, b, i, h), lane, ne);
  const float li = lse[row_of(a, b, h, i)];
  const float di = dsum[row_of(a, b, h, i)];
  const int jend = a.causal ? i + 1 : a.s;
  for (int j = 0; j < jend; ++j) {
    const T* kp = k + kv_off(a, b, j, hk);
    const float p = __expf(dot_lane(qr, kp, lane, ne) * a.scale - li);
    const float dp = dot_lane(dor, v + kv_off(a, b, j, hk), lane, ne);
    const float ds = p * (dp - di) * a.scale;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e)
      if (e < ne)
        acc[e] += ds * to_float(kp[lane + 32 * e]);
  }
  T* out = dq + q_off(a, b, i, h);
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e)
    if (e < ne)
      out[lane + 32 * e] = from_float<T>(acc[e]);
}

/// dK_j, dV_j summed over the query heads sharing KV head hk, one warp per key row.
template <class T>
__global__ void attn_bwd_dkdv(AttnArgs a, const T* q, const T* k, const T* v, const T* dout, const float* lse,
                              const float* dsum, T* dk, T* dv) {
  const size_t warp = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= static_cast<size_t>(a.b) * a.hk * a.s)
    return;
  const int j = static_cast<int>(warp % a.s);
  const int hk = static_cast<int>((warp / a.s) % a.hk);
  const int b = static_cast<int>(warp / (static_cast<size_t>(a.s) * a.hk));
  const int group = a.h / a.hk;
  const int ne = a.d / 32;
  float kr[kMaxPerLane];
  float vr[kMaxPerLane];
  float dka[kMaxPerLane] = {};
  float dva[kMaxPerLane] = {};
  load_lane(kr, k + kv_off(a, b, j, hk), lane, ne);
  load_lane(vr, v + kv_off(a, b, j, hk), lane, ne);
  for (int g = 0; g < group; ++g) {
    const int h = hk * group + g;
    for (int i = a.causal ? j : 0; i < a.s; ++i) {
      const T* qp = q + q_off(a, b, i, h);
      const T* dop = dout + q_off(a, b, i, h);
      const float p = __expf(dot_lane(kr, qp, lane, ne) * a.scale - lse[row_of(a, b, h, i)]);
      const float dp = dot_lane(vr, dop, lane, ne);
      const float ds = p * (dp - dsum[row_of(a, b, h, i)]) * a.scale;
#pragma unroll
      for (int e = 0; e < kMaxPerLane; ++e) {
        if (e < ne) {
          dva[e] += p * to_float(dop[lane + 32 * e]);
          dka[e] += ds * to_float(qp[lane + 32 * e]);
        }
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    if (e < ne) {
      dk[kv_off(a, b, j, hk) + lane + 32 * e] = from_float<T>(dka[e]);
      dv[kv_off(a, b, j, hk) + lane + 32 * e] = from_float<T>(dva[e]);
    }
  }
}

unsigned blocks_for(size_t warps) {
  return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

/// Device buffers of one attention problem.
template <class T> struct AttnBuffers {
  T* q = nullptr;
  T* k = nullptr;
  T* v = nullptr;
  T* o = nullptr;
  T* dout = nullptr;
  T* dq = nullptr;
  T* dk = nullptr;
  T* dv = nullptr;
  float* lse = nullptr;
  float* dsum = nullptr;

  static size_t bytes(const AttnArgs& a) {
    const size_t qn = static_cast<size_t>(a.b) * a.s * a.h * a.d;
    const size_t kn = static_cast<size_t>(a.b) * a.s * a.hk * a.d;
    const size_t rn = static_cast<size_t>(a.b) * a.h * a.s;
    return 4 * Arena::padded(qn * sizeof(T)) + 4 * Arena::padded(kn * sizeof(T)) +
           2 * Arena::padded(rn * sizeof(float));
  }
  void carve(const AttnArgs& a) {
    const size_t qn = static_cast<size_t>(a.b) * a.s * a.h * a.d;
    const size_t kn = static_cast<size_t>(a.b) * a.s * a.hk * a.d;
    const size_t rn = static_cast<size_t>(a.b) * a.h * a.s;
    q = arena().carve_n<T>(qn);
    o = arena().carve_n<T>(qn);
    dout = arena().carve_n<T>(qn);
    dq = arena().carve_n<T>(qn);
    k = arena().carve_n<T>(kn);
    v = arena().carve_n<T>(kn);
    dk = arena().carve_n<T>(kn);
    dv = arena().carve_n<T>(kn);
    lse = arena().carve_n<float>(rn);
    dsum = arena().carve_n<float>(rn);
    fill_uniform(q, qn, 31, -1.0f, 1.0f);
    fill_uniform(k, kn, 32, -1.0f, 1.0f);
    fill_uniform(v, kn, 33, -1.0f, 1.0f);
    fill_uniform(dout, qn, 34, -1.0f, 1.0f);
  }
};

template <class T> void run_fwd(const AttnArgs& a, const AttnBuffers<T>& x) {
  attn_fwd<T><<<blocks_for(static_cast<size_t>(a.b) * a.h * a.s), 32 * kWarpsPerBlock>>>(a, x.q, x.k, x.v,
                                                                                         x.o, x.lse);
}

template <class T> void run_bwd(const AttnArgs& a, const AttnBuffers<T>& x) {
  const size_t qrows = static_cast<size_t>(a.b) * a.h * a.s;
  const size_t krows = static_cast<size_t>(a.b) * a.hk * a.s;
  attn_bwd_rowdot<T><<<blocks_for(qrows), 32 * kWarpsPerBlock>>>(a, x.o, x.dout, x.dsum);
  attn_bwd_dq<T><<<blocks_for(qrows), 32 * kWarpsPerBlock>>>(a, x.q, x.k, x.v, x.dout, x.lse, x.dsum, x.dq);
  attn_bwd_dkdv<T>
      <<<blocks_for(krows), 32 * kWarpsPerBlock>>>(a, x.q, x.k, x.v, x.dout, x.lse, x.dsum, x.dk, x.dv);
}

AttnArgs args_of(const kernels::KernelShape& s) {
  AttnArgs a;
  a.b = static_cast<int>(s.batch);
  a.h = static_cast<int>(s.heads);
  a.hk = static_cast<int>(s.kv_heads);
  a.s = static_cast<int>(s.seq);
  a.d = static_cast<int>(s.head_dim);
  a.causal = s.causal;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return a;
}

/// CPU reference in double: O, dQ, dK, dV.
struct AttnReference {
  std::vector<double> o, dq, dk, dv;
};

AttnReference reference(const AttnArgs& a, const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v, const std::vector<float>& dout) {
  AttnReference r;
  const size_t qn = static_cast<size_t>(a.b) * a.s * a.h * a.d;
  const size_t kn = static_cast<size_t>(a.b) * a.s * a.hk * a.d;
  r.o.assign(qn, 0);
  r.dq.assign(qn, 0);
  r.dk.assign(kn, 0);
  r.dv.assign(kn, 0);
  auto qo = [&](int b, int i, int h) { return ((static_cast<size_t>(b) * a.s + i) * a.h + h) * a.d; };
  auto ko = [&](int b, int j, int hk) { return ((static_cast<size_t>(b) * a.s + j) * a.hk + hk) * a.d; };
  std::vector<double> p(static_cast<size_t>(a.s));
  std::vector<double> dp(static_cast<size_t>(a.s));
  for (int b = 0; b < a.b; ++b) {
    for (int h = 0; h < a.h; ++h) {
      const int hk = h / (a.h / a.hk);
      for (int i = 0; i < a.s; ++i) {
        const int jend = a.causal ? i + 1 : a.s;
        double mx = -1e300;
        for (int j = 0; j < jend; ++j) {
          double sdot = 0;
          for (int e = 0; e < a.d; ++e)
            sdot += static_cast<double>(q[qo(b, i, h) + e]) * k[ko(b, j, hk) + e];
          p[j] = sdot * a.scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int j = 0; j < jend; ++j)
          sum += (p[j] = std::exp(p[j] - mx));
        for (int j = 0; j < jend; ++j)
          p[j] /= sum;
        for (int j = 0; j < jend; ++j)
          for (int e = 0; e < a.d; ++e)
            r.o[qo(b, i, h) + e] += p[j] * v[ko(b, j, hk) + e];
        double dsum = 0;
        for (int j = 0; j < jend; ++j) {
          dp[j] = 0;
          for (int e = 0; e < a.d; ++e)
            dp[j] += static_cast<double>(dout[qo(b, i, h) + e]) * v[ko(b, j, hk) + e];
          dsum += p[j] * dp[j];
        }
        for (int j = 0; j < jend; ++j) {
          const double ds = p[j] * (dp[j] - dsum) * a.scale;
          for (int e = 0; e < a.d; ++e) {
            r.dq[qo(b, i, h) + e] += ds * k[ko(b, j, hk) + e];
            r.dk[ko(b, j, hk) + e] += ds * q[qo(b, i, h) + e];
            r.dv[ko(b, j, hk) + e] += p[j] * dout[qo(b, i, h) + e];
          }
        }
      }
    }
  }
  return r;
}

template <class T>
void check_case(std::vector<CheckResult>& out, Dtype dtype, const kernels::AttentionDims& dims) {
  const kernels::KernelShape s = kernels::attention(kernels::KernelKind::ATTENTION_FWD, dtype, dims);
  const AttnArgs a = args_of(s);
  if (!arena().reserve(AttnBuffers<T>::bytes(a))) {
    std::fprintf(stderr, "%s:%d: no memory for the attention check\n", __FILE__, __LINE__);
    std::exit(1);
  }
  AttnBuffers<T> x;
  x.carve(a);
  run_fwd(a, x);
  CHECK_LAUNCH();
  run_bwd(a, x);
  CHECK_LAUNCH();
  CHECK_CUDA(cudaDeviceSynchronize());
  const size_t qn = static_cast<size_t>(a.b) * a.s * a.h * a.d;
  const size_t kn = static_cast<size_t>(a.b) * a.s * a.hk * a.d;
  const AttnReference ref =
      reference(a, download(x.q, qn), download(x.k, kn), download(x.v, kn), download(x.dout, qn));
  const std::string base =
      std::string("attention (naive_warp) ") + kernels::to_string(dtype) + " " + kernels::shape_fields(s);
  const std::pair<const char*, std::pair<std::vector<float>, const std::vector<double>*>> parts[] = {
      {" O", {download(x.o, qn), &ref.o}},
      {" dQ", {download(x.dq, qn), &ref.dq}},
      {" dK", {download(x.dk, kn), &ref.dk}},
      {" dV", {download(x.dv, kn), &ref.dv}},
  };
  for (const auto& [name, pair] : parts) {
    CheckResult r;
    r.name = base + name + " vs CPU";
    r.tolerance = 2e-2;
    r.max_error = relative_max_error(pair.first, *pair.second);
    r.passed = r.max_error <= r.tolerance;
    out.push_back(r);
  }
}

template <class T> Measurement time_attention(const kernels::KernelShape& s, const TimingOptions& o) {
  Measurement meas;
  meas.impl = "naive_warp";
  const AttnArgs a = args_of(s);
  if (a.d % 32 != 0 || a.d > 32 * kMaxPerLane) {
    meas.why = "the naive kernels need head_dim a multiple of 32, at most 256";
    return meas;
  }
  // No input rotation: every K/V row is re-read seq times by design, so L2 residency of one
  // copy is part of the kernel, not an artefact of repetition.
  if (!arena().reserve(AttnBuffers<T>::bytes(a))) {
    meas.why = "does not fit in device memory";
    return meas;
  }
  AttnBuffers<T> x;
  x.carve(a);
  if (s.kind == kernels::KernelKind::ATTENTION_FWD) {
    meas.time_s = time_median([&](int) { run_fwd(a, x); }, 1, o, meas.reps);
  } else {
    run_fwd(a, x);
    CHECK_LAUNCH();
    meas.time_s = time_median([&](int) { run_bwd(a, x); }, 1, o, meas.reps);
  }
  meas.ok = true;
  return meas;
}

} // namespace

void check_attention(std::vector<CheckResult>& out) {
  check_case<bf16>(out, Dtype::BF16,
                   {.batch = 2, .heads = 4, .kv_heads = 2, .seq = 67, .head_dim = 64, .causal = true});
  check_case<bf16>(out, Dtype::BF16,
                   {.batch = 1, .heads = 2, .kv_heads = 2, .seq = 48, .head_dim = 128, .causal = false});
  check_case<fp16>(out, Dtype::FP16,
                   {.batch = 1, .heads = 4, .kv_heads = 1, .seq = 40, .head_dim = 96, .causal = true});
}

Measurement measure_attention(const kernels::KernelShape& s, const TimingOptions& o) {
  switch (s.dtype) {
  case Dtype::BF16:
    return time_attention<bf16>(s, o);
  case Dtype::FP16:
    return time_attention<fp16>(s, o);
  default:
    break;
  }
  return {false, 0, 0, "naive_warp", "attention dtype not supported by the naive kernels"};
}

} // namespace stepsim::suite
