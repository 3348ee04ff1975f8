#pragma once
// The kernel vocabulary: which GPU kernels a training step runs and at what shape. Shared by the
// profile tables, the workload decomposition and the CUDA microbenchmark suite.

#include "core/units.hpp"

#include <compare>
#include <cstdint>
#include <string>

namespace stepsim::kernels {

enum class KernelKind {
  GEMM,          ///< Y[m,n] = X[m,k] · W[n,k]ᵀ (nn.Linear layout)
  ATTENTION_FWD, ///< fused scaled-dot-product attention, forward
  ATTENTION_BWD, ///< fused scaled-dot-product attention, backward (dQ, dK, dV)
  LAYERNORM,     ///< row-wise LayerNorm forward over `cols`
  RMSNORM,       ///< row-wise RMSNorm forward over `cols`
  GELU,          ///< elementwise GELU (tanh form), `elements` outputs
  SWIGLU,        ///< silu(gate) · up, `elements` outputs (2·elements inputs)
  SOFTMAX_XENT,  ///< fused softmax + cross-entropy loss and logit gradient per row
  ADAM,          ///< fused Adam update of `elements` fp32 master parameters (bf16 grads)
  MEMCPY,        ///< device-to-device copy of `elements` values
};

enum class Dtype { FP32, BF16, FP16, FP8_E4M3 };

/// One kernel invocation's shape. Only the fields of `kind`'s family are meaningful; the others
/// stay 0 so that shapes compare and deduplicate by value.
struct KernelShape {
  KernelKind kind = KernelKind::GEMM;
  Dtype dtype = Dtype::BF16;
  // GEMM (`batch` independent products of the same shape, strided: 1 for a plain GEMM)
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  // attention (and the GEMM batch count)
  int64_t batch = 0;
  int64_t heads = 0;    ///< query heads
  int64_t kv_heads = 0; ///< key/value heads (GQA), divides `heads`
  int64_t seq = 0;
  int64_t head_dim = 0;
  bool causal = false;
  // row-wise kernels (norms, softmax_xent)
  int64_t rows = 0;
  int64_t cols = 0;
  // elementwise kernels (gelu, swiglu, adam, memcpy)
  int64_t elements = 0;

  friend auto operator<=>(const KernelShape&, const KernelShape&) = default;
};

enum class KernelFamily { GEMM, ATTENTION, ROWWISE, ELEMENTWISE };
KernelFamily family(KernelKind kind);

/// True for GEMM and attention (bounded by tensor-core FLOP/s); false for the memory-bound rest.
bool is_compute_bound(KernelKind kind);

const char* to_string(KernelKind kind); ///< "gemm", "attention_fwd", ...
const char* to_string(Dtype dtype);     ///< "fp32", "bf16", "fp16", "fp8_e4m3"
/// Inverse of to_string; false when `text` names nothing.
bool parse_kind(const std::string& text, KernelKind& out);
bool parse_dtype(const std::string& text, Dtype& out);

/// Bytes per element of `dtype`.
double dtype_bytes(Dtype dtype);

/// Useful FLOPs of one invocation (multiply-add = 2; a batched GEMM counts every product). Attention counts
/// the causal half only; the backward counts 2.5× the forward (5 matmuls instead of 2).
Flops kernel_flops(const KernelShape& shape);

/// Bytes one invocation must move to and from device memory at least (each operand once).
/// ADAM: 28 bytes per parameter (fp32 param, m, v read and written; bf16 grad read and bf16
/// weight copy written).
Bytes kernel_bytes(const KernelShape& shape);

/// The shape's own fields as "m=..;n=..;k=.." (the `shape` column of the text formats).
std::string shape_fields(const KernelShape& shape);

/// "gemm bf16 m=..;n=..;k=.." for messages.
std::string describe(const KernelShape& shape);

/// Checks that the fields of the kind's family are positive (kv_heads divides heads; a GEMM's
/// batch counts as one of its fields) and the others zero. Returns "" when valid, else the reason.
std::string validate(const KernelShape& shape);

// Convenience constructors.
/// A GEMM Y[m,n] = X[m,k]·W[n,k]ᵀ, or `batch` of them at once (a strided batched GEMM such as
/// the per-head QKᵀ of unfused attention).
KernelShape gemm(Dtype dtype, int64_t m, int64_t n, int64_t k, int64_t batch = 1);
struct AttentionDims {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t seq = 0;
  int64_t head_dim = 0;
  bool causal = true;
};
KernelShape attention(KernelKind kind, Dtype dtype, const AttentionDims& dims);
KernelShape rowwise(KernelKind kind, Dtype dtype, int64_t rows, int64_t cols);
KernelShape elementwise(KernelKind kind, Dtype dtype, int64_t elements);

} // namespace stepsim::kernels
