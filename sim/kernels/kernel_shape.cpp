#include "kernels/kernel_shape.hpp"

#include <array>
#include <sstream>
#include <utility>

namespace stepsim::kernels {

namespace {

constexpr std::array<std::pair<KernelKind, const char*>, 10> kKindNames{{
    {KernelKind::GEMM, "gemm"},
    {KernelKind::ATTENTION_FWD, "attention_fwd"},
    {KernelKind::ATTENTION_BWD, "attention_bwd"},
    {KernelKind::LAYERNORM, "layernorm"},
    {KernelKind::RMSNORM, "rmsnorm"},
    {KernelKind::GELU, "gelu"},
    {KernelKind::SWIGLU, "swiglu"},
    {KernelKind::SOFTMAX_XENT, "softmax_xent"},
    {KernelKind::ADAM, "adam"},
    {KernelKind::MEMCPY, "memcpy"},
}};

constexpr std::array<std::pair<Dtype, const char*>, 4> kDtypeNames{{
    {Dtype::FP32, "fp32"},
    {Dtype::BF16, "bf16"},
    {Dtype::FP16, "fp16"},
    {Dtype::FP8_E4M3, "fp8_e4m3"},
}};

double d(int64_t v) {
  return static_cast<double>(v);
}

} // namespace

KernelFamily family(KernelKind kind) {
  switch (kind) {
  case KernelKind::GEMM:
    return KernelFamily::GEMM;
  case KernelKind::ATTENTION_FWD:
  case KernelKind::ATTENTION_BWD:
    return KernelFamily::ATTENTION;
  case KernelKind::LAYERNORM:
  case KernelKind::RMSNORM:
  case KernelKind::SOFTMAX_XENT:
    return KernelFamily::ROWWISE;
  case KernelKind::GELU:
  case KernelKind::SWIGLU:
  case KernelKind::ADAM:
  case KernelKind::MEMCPY:
    return KernelFamily::ELEMENTWISE;
  }
  return KernelFamily::ELEMENTWISE;
}

bool is_compute_bound(KernelKind kind) {
  const KernelFamily f = family(kind);
  return f == KernelFamily::GEMM || f == KernelFamily::ATTENTION;
}

const char* to_string(KernelKind kind) {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind)
      return name;
  }
  return "?";
}

const char* to_string(Dtype dtype) {
  for (const auto& [t, name] : kDtypeNames) {
    if (t == dtype)
      return name;
  }
  return "?";
}

bool parse_kind(const std::string& text, KernelKind& out) {
  for (const auto& [k, name] : kKindNames) {
    if (text == name) {
      out = k;
      return true;
    }
  }
  return false;
}

bool parse_dtype(const std::string& text, Dtype& out) {
  for (const auto& [t, name] : kDtypeNames) {
    if (text == name) {
      out = t;
      return true;
    }
  }
  return false;
}

double dtype_bytes(Dtype dtype) {
  switch (dtype) {
  case Dtype::FP32:
    return 4;
  case Dtype::BF16:
  case Dtype::FP16:
    return 2;
  case Dtype::FP8_E4M3:
    return 1;
  }
  return 2;
}

Flops kernel_flops(const KernelShape& s) {
  switch (s.kind) {
  case KernelKind::GEMM:
    return Flops(2.0 * d(s.batch) * d(s.m) * d(s.n) * d(s.k));
  case KernelKind::ATTENTION_FWD:
  case KernelKind::ATTENTION_BWD: {
    // QKᵀ and P·V: 2 matmuls of 2·s·s·d each per (batch, head).
    double f = 4.0 * d(s.batch) * d(s.heads) * d(s.seq) * d(s.seq) * d(s.head_dim);
    if (s.causal)
      f *= 0.5;
    if (s.kind == KernelKind::ATTENTION_BWD)
      f *= 2.5;
    return Flops(f);
  }
  case KernelKind::LAYERNORM:
    return Flops(8.0 * d(s.rows) * d(s.cols));
  case KernelKind::RMSNORM:
    return Flops(4.0 * d(s.rows) * d(s.cols));
  case KernelKind::SOFTMAX_XENT:
    return Flops(5.0 * d(s.rows) * d(s.cols));
  case KernelKind::GELU:
    return Flops(10.0 * d(s.elements));
  case KernelKind::SWIGLU:
    return Flops(6.0 * d(s.elements));
  case KernelKind::ADAM:
    return Flops(12.0 * d(s.elements));
  case KernelKind::MEMCPY:
    return Flops(0.0);
  }
  return Flops(0.0);
}

Bytes kernel_bytes(const KernelShape& s) {
  const double e = dtype_bytes(s.dtype);
  switch (s.kind) {
  case KernelKind::GEMM: {
    // fp8 GEMMs write a bf16 result.
    const double out = s.dtype == Dtype::FP8_E4M3 ? 2.0 : e;
    return Bytes(d(s.batch) * (e * (d(s.m) * d(s.k) + d(s.n) * d(s.k)) + out * d(s.m) * d(s.n)));
  }
  case KernelKind::ATTENTION_FWD: {
    const double q = d(s.batch) * d(s.heads) * d(s.seq) * d(s.head_dim);
    const double kv = d(s.batch) * d(s.kv_heads) * d(s.seq) * d(s.head_dim);
    // Q, K, V read; O written; fp32 log-sum-exp per row written.
    return Bytes(e * (2.0 * q + 2.0 * kv) + 4.0 * d(s.batch) * d(s.heads) * d(s.seq));
  }
  case KernelKind::ATTENTION_BWD: {
    const double q = d(s.batch) * d(s.heads) * d(s.seq) * d(s.head_dim);
    const double kv = d(s.batch) * d(s.kv_heads) * d(s.seq) * d(s.head_dim);
    // Q, K, V, O, dO read; dQ, dK, dV written.
    return Bytes(e * (4.0 * q + 2.0 * kv) + e * (q + 2.0 * kv));
  }
  case KernelKind::LAYERNORM:
  case KernelKind::RMSNORM:
    return Bytes(2.0 * e * d(s.rows) * d(s.cols));
  case KernelKind::SOFTMAX_XENT:
    return Bytes(2.0 * e * d(s.rows) * d(s.cols));
  case KernelKind::GELU:
    return Bytes(2.0 * e * d(s.elements));
  case KernelKind::SWIGLU:
    return Bytes(3.0 * e * d(s.elements));
  case KernelKind::ADAM:
    return Bytes(28.0 * d(s.elements));
  case KernelKind::MEMCPY:
    return Bytes(2.0 * e * d(s.elements));
  }
  return Bytes(0.0);
}

std::string shape_fields(const KernelShape& s) {
  std::ostringstream os;
  switch (family(s.kind)) {
  case KernelFamily::GEMM:
    if (s.batch != 1)
      os << "batch=" << s.batch << ';';
    os << "m=" << s.m << ";n=" << s.n << ";k=" << s.k;
    break;
  case KernelFamily::ATTENTION:
    os << "batch=" << s.batch << ";heads=" << s.heads << ";kv_heads=" << s.kv_heads << ";seq=" << s.seq
       << ";head_dim=" << s.head_dim << ";causal=" << (s.causal ? 1 : 0);
    break;
  case KernelFamily::ROWWISE:
    os << "rows=" << s.rows << ";cols=" << s.cols;
    break;
  case KernelFamily::ELEMENTWISE:
    os << "elements=" << s.elements;
    break;
  }
  return os.str();
}

std::string describe(const KernelShape& s) {
  return std::string(to_string(s.kind)) + " " + to_string(s.dtype) + " " + shape_fields(s);
}

std::string validate(const KernelShape& s) {
  const bool gemm_f = family(s.kind) == KernelFamily::GEMM;
  const bool attn_f = family(s.kind) == KernelFamily::ATTENTION;
  const bool row_f = family(s.kind) == KernelFamily::ROWWISE;
  const bool elem_f = family(s.kind) == KernelFamily::ELEMENTWISE;
  auto check = [](bool used, int64_t v, const char* name) -> std::string {
    if (used && v <= 0)
      return std::string(name) + " must be > 0";
    if (!used && v != 0)
      return std::string(name) + " does not apply to this kernel";
    return "";
  };
  const std::pair<bool, std::pair<int64_t, const char*>> fields[] = {
      {gemm_f, {s.m, "m"}},
      {gemm_f, {s.n, "n"}},
      {gemm_f, {s.k, "k"}},
      {attn_f || gemm_f, {s.batch, "batch"}},
      {attn_f, {s.heads, "heads"}},
      {attn_f, {s.kv_heads, "kv_heads"}},
      {attn_f, {s.seq, "seq"}},
      {attn_f, {s.head_dim, "head_dim"}},
      {row_f, {s.rows, "rows"}},
      {row_f, {s.cols, "cols"}},
      {elem_f, {s.elements, "elements"}},
  };
  for (const auto& [used, f] : fields) {
    std::string why = check(used, f.first, f.second);
    if (!why.empty())
      return why;
  }
  if (!attn_f && s.causal)
    return "causal does not apply to this kernel";
  if (attn_f && s.heads % s.kv_heads != 0)
    return "kv_heads must divide heads";
  if (s.dtype == Dtype::FP32 && is_compute_bound(s.kind))
    return "fp32 is not a tensor-core dtype for gemm/attention";
  return "";
}

KernelShape gemm(Dtype dtype, int64_t m, int64_t n, int64_t k, int64_t batch) {
  KernelShape s;
  s.kind = KernelKind::GEMM;
  s.dtype = dtype;
  s.batch = batch;
  s.m = m;
  s.n = n;
  s.k = k;
  return s;
}

KernelShape attention(KernelKind kind, Dtype dtype, const AttentionDims& dims) {
  KernelShape s;
  s.kind = kind;
  s.dtype = dtype;
  s.batch = dims.batch;
  s.heads = dims.heads;
  s.kv_heads = dims.kv_heads;
  s.seq = dims.seq;
  s.head_dim = dims.head_dim;
  s.causal = dims.causal;
  return s;
}

KernelShape rowwise(KernelKind kind, Dtype dtype, int64_t rows, int64_t cols) {
  KernelShape s;
  s.kind = kind;
  s.dtype = dtype;
  s.rows = rows;
  s.cols = cols;
  return s;
}

KernelShape elementwise(KernelKind kind, Dtype dtype, int64_t elements) {
  KernelShape s;
  s.kind = kind;
  s.dtype = dtype;
  s.elements = elements;
  return s;
}

} // namespace stepsim::kernels
