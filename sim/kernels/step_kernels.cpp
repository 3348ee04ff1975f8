#include "kernels/step_kernels.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

namespace stepsim::kernels {

namespace {

/// `value / tp`, checked: positive and divisible.
int64_t per_rank(int64_t value, int64_t tp, const char* what) {
  if (value <= 0)
    throw ModelError(std::string("block kernels: ") + what + " must be > 0");
  if (value % tp != 0)
    throw ModelError(std::string("block kernels: ") + what + " (" + std::to_string(value) +
                     ") is not divisible by tp (" + std::to_string(tp) + ")");
  return value / tp;
}

/// The dimensions of one TP rank's share of a layer.
struct RankDims {
  Dtype dtype = Dtype::BF16;  ///< 16-bit precision of activations, norms, attention, logits
  Dtype linear = Dtype::BF16; ///< the layers' linear GEMMs: fp8 in fp8 training, else `dtype`
  bool rowwise = false;       ///< fp8 training with axiswise scales (training.fp8_scaling: rowwise)
  bool split = false;         ///< Q, K, V (and gate, up) a linear each (training.fused_projections false)
  bool gated = false;         ///< a gated MLP (SwiGLU): fc1 is the gate and up projections
  int64_t tokens = 0;         ///< T = micro_batch · seq_len
  int64_t row_tokens = 0;     ///< tokens a norm or residual add sees (T/tp with sequence parallelism)
  int64_t hidden = 0;
  int64_t qkv_out = 0; ///< (a/t + 2·kv/t)·d
  int64_t attn_in = 0; ///< a/t · d (input of the out-projection)
  int64_t up_out = 0;  ///< f/t, or 2f/t for SwiGLU (gate and up fused)
  int64_t ffn = 0;     ///< f/t
  int64_t vocab = 0;   ///< V/t
  int64_t mtp = 0;     ///< multi-token-prediction depth (more outputs on the LOGITS block)
  int64_t mtp_out = 0; ///< its projection's outputs per TP rank, h/t
  AttentionDims attn;
  double attn_repeat = 1; ///< the fused core's time factor (a windowed core's fractional sequences), else 1
  bool flash = true;      ///< fused attention core, else attention_core_kernels
  bool dropout = true;    ///< the unfused core's attention dropout kernel
  bool fp32_loss = true;  ///< the loss in fp32 kernels (CrossEntropy::FP32), else one fused kernel
  bool eager = false;     ///< training.pointwise: eager (pointwise_kernels below)
  bool rotary = false;    ///< rotary position embeddings on Q and K
  int64_t kv_out = 0;     ///< kv/t · d: one of K and V (plain attention)
  KernelKind norm = KernelKind::LAYERNORM;
  KernelKind activation = KernelKind::GELU;
  int64_t experts = 0; ///< MoE: routed experts E
  int64_t top_k = 0;   ///< MoE: experts per token
  // Multi-head latent attention (model.mla): the down-projections replicated on every TP rank.
  bool mla = false;
  int64_t q_lora = 0;      ///< query latent (0: one full query projection)
  int64_t kv_lora = 0;     ///< key/value latent
  int64_t kv_down_out = 0; ///< kv_lora + qk_rope (the latent and the shared rotary key)
  int64_t q_up_out = 0;    ///< a/t · (qk_nope + qk_rope)
  int64_t kv_up_out = 0;   ///< a/t · (qk_nope + v_head_dim)
};

RankDims rank_dims(const WorkloadSpec& w, bool windowed = false) {
  const ModelSpec& m = w.model;
  const int64_t t = w.parallel.tp;
  if (t <= 0)
    throw ModelError("block kernels: tp must be > 0");
  if (w.batch.micro_batch <= 0 || m.seq_len <= 0 || m.hidden <= 0)
    throw ModelError("block kernels: micro_batch, seq_len and hidden must be > 0");
  if (m.heads <= 0 || m.head_dim() <= 0 || (m.head_dim_set <= 0 && m.hidden % m.heads != 0))
    throw ModelError("block kernels: heads must divide hidden (or model.head_dim be set)");
  RankDims r;
  r.dtype = w.precision == Precision::FP16 ? Dtype::FP16 : Dtype::BF16;
  r.linear = w.precision == Precision::FP8 ? Dtype::FP8_E4M3 : r.dtype;
  r.rowwise = r.linear == Dtype::FP8_E4M3 && w.training.fp8_scaling == Fp8Scaling::ROWWISE;
  r.tokens = w.batch.micro_batch * m.seq_len;
  r.row_tokens = (w.parallel.sp && t > 1 && r.tokens % t == 0) ? r.tokens / t : r.tokens;
  r.hidden = m.hidden;
  const int64_t d = m.head_dim();
  const int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  const int64_t heads = per_rank(m.heads, t, "heads");
  const int64_t kv_rank = kv >= t ? per_rank(kv, t, "kv_heads") : 1; // fewer KV heads than ranks: replicated
  r.qkv_out = (heads + 2 * kv_rank) * d;
  r.attn_in = heads * d;
  if (m.mla.enabled()) {
    const MlaSpec& a = m.mla;
    r.mla = true;
    r.q_lora = a.q_lora_rank;
    r.kv_lora = a.kv_lora_rank;
    r.kv_down_out = a.kv_lora_rank + a.qk_rope_head_dim;
    r.q_up_out = heads * a.qk_head_dim();
    r.kv_up_out = heads * (a.qk_nope_head_dim + a.v_head_dim);
    r.attn_in = heads * a.v_head_dim;
  }
  r.ffn = per_rank(m.ffn_hidden, t, "ffn_hidden");
  const bool swiglu = m.mlp == MlpKind::SWIGLU;
  r.up_out = (swiglu ? 2 : 1) * r.ffn;
  r.gated = swiglu;
  r.split = !w.training.fused_projections && !m.mla.enabled() && !m.moe.enabled();
  r.vocab = per_rank(m.vocab, t, "vocab");
  r.mtp = m.mtp_layers;
  r.mtp_out = r.mtp > 0 ? per_rank(m.hidden, t, "hidden") : 0;
  // MLA: every head its own keys and values; one width of the mean of the query/key and value
  // widths gives the core's FLOPs.
  r.attn = AttentionDims{.batch = w.batch.micro_batch,
                         .heads = heads,
                         .kv_heads = m.mla.enabled() ? heads : kv_rank,
                         .seq = m.seq_len,
                         .head_dim = m.mla.enabled() ? (m.qk_head_dim() + m.v_head_dim()) / 2 : d,
                         .causal = true};
  r.flash = w.training.flash_attention;
  // A windowed layer's fused core: each query's w keys, as the causal kernel over 2w positions
  // on b·s/(2w) sequences (b·s·w products either way, and the whole step's query tiles in one
  // launch, as a window-aware kernel runs them); a fractional count scales the nearest whole one.
  if (windowed && r.flash && m.window_below_sequence()) {
    r.attn.seq = 2 * m.sliding_window;
    const double sequences =
        static_cast<double>(r.attn.batch) * static_cast<double>(m.seq_len) / static_cast<double>(r.attn.seq);
    r.attn.batch = std::max<int64_t>(1, static_cast<int64_t>(sequences));
    r.attn_repeat = sequences / static_cast<double>(r.attn.batch);
  }
  r.dropout = m.dropout;
  r.fp32_loss = w.training.cross_entropy == CrossEntropy::FP32;
  r.eager = w.training.pointwise == Pointwise::EAGER;
  r.rotary = m.position == PositionEmbedding::ROTARY;
  r.kv_out = r.mla ? 0 : (r.qkv_out - r.attn_in) / 2;
  r.norm = m.norm == NormKind::RMSNORM ? KernelKind::RMSNORM : KernelKind::LAYERNORM;
  r.activation = swiglu ? KernelKind::SWIGLU : KernelKind::GELU;
  r.experts = m.moe.experts;
  r.top_k = m.moe.top_k;
  return r;
}

class Calls {
public:
  explicit Calls(const RankDims& r) : r_(r) { calls_.reserve(32); }

  void norm(double factor, const char* role) {
    if (r_.eager && r_.norm == KernelKind::RMSNORM) {
      eager_rms_norm(factor);
      return;
    }
    add(rowwise(r_.norm, r_.dtype, r_.row_tokens, r_.hidden), factor, role);
  }
  /// The MLP's activation over T·f/t outputs; eager SwiGLU is silu(gate) (2 + 2 bytes per
  /// output) and its product with up (4 + 2) as two kernels. `factor` 2 in the backward.
  void activation(double factor, const char* role) {
    const int64_t n = r_.tokens * r_.ffn;
    if (r_.eager && r_.activation == KernelKind::SWIGLU) {
      add(elementwise(KernelKind::MEMCPY, r_.dtype, n), factor, "silu (eager)");
      add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * n + 1) / 2), factor, "silu * up (eager)");
      return;
    }
    add(elementwise(r_.activation, r_.dtype, n), factor, role);
  }
  /// Eager only, between the QKV projection and the attention core (the backward's mirror after
  /// the core): the rotary embedding of Q and K in complex fp32 (cast up 2 + 4, complex product
  /// 4 + 4, cast down 4 + 2 bytes per value: three kernels) and grouped K and V repeated to every
  /// query head (kv/t·d read, a/t·d written, 2 bytes each).
  void eager_rotary_and_repeat() {
    if (!r_.eager || r_.mla)
      return;
    const int64_t t = r_.tokens;
    if (r_.rotary) {
      const int64_t n = t * (r_.attn_in + r_.kv_out);
      add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * n + 1) / 2), 1.0, "rotary cast to fp32 (eager)");
      add(elementwise(KernelKind::MEMCPY, r_.dtype, 2 * n), 1.0, "rotary complex product (eager)");
      add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * n + 1) / 2), 1.0, "rotary cast back (eager)");
    }
    if (r_.kv_out < r_.attn_in) // repeat_kv of K and V: read kv, write a·d per token
      add(elementwise(KernelKind::MEMCPY, r_.dtype, t * (r_.kv_out + r_.attn_in)), 1.0,
          "repeat K and V to every head (eager)");
  }
  /// Eager only, beside the attention core's output (forward after the core, backward before it):
  /// the output made contiguous for the out-projection (a copy of a/t·d per token).
  void eager_output_copy() {
    if (r_.eager && !r_.mla)
      add(elementwise(KernelKind::MEMCPY, r_.dtype, r_.tokens * r_.attn_in), 1.0,
          "attention output contiguous (eager)");
  }
  /// PyTorch eager RMSNorm over N = row_tokens·h values, per value: x.float() (2 read, 4
  /// written), pow (4, 4), mean (4 read), the product with the reciprocal root (4, 4), the cast
  /// back (4, 2), the weight's product (2, 2): 36 bytes in six kernels against a fused norm's 4;
  /// each as a 16-bit copy of the same traffic. `factor` 2 in the backward.
  void eager_rms_norm(double factor) {
    const int64_t n = r_.row_tokens * r_.hidden;
    add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * n + 1) / 2), factor, "rmsnorm cast to fp32 (eager)");
    add(elementwise(KernelKind::MEMCPY, r_.dtype, 2 * n), factor, "rmsnorm pow (eager)");
    add(elementwise(KernelKind::MEMCPY, r_.dtype, n), factor, "rmsnorm mean (eager)");
    add(elementwise(KernelKind::MEMCPY, r_.dtype, 2 * n), factor, "rmsnorm scale (eager)");
    add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * n + 1) / 2), factor, "rmsnorm cast back (eager)");
    add(elementwise(KernelKind::MEMCPY, r_.dtype, n), factor, "rmsnorm weight (eager)");
  }
  /// An MLA latent's norm over all T tokens (the latents are computed whole on every TP rank).
  void latent_norm(int64_t width, double factor, const char* role) {
    add(rowwise(r_.norm, r_.dtype, r_.tokens, width), factor, role);
  }
  /// Bias-dropout-residual add: reads 2·T·h values and writes T·h (3·T·h·e bytes, which a copy of
  /// 1.5·T·h elements moves, rounded up).
  void residual(const char* role) {
    add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * r_.row_tokens * r_.hidden + 1) / 2), 1.0, role);
  }
  /// Forward GEMM of a transformer layer's linear Y[T,n] = X[T,k]·Wᵀ. In fp8 training X is cast
  /// to fp8 with the transposed copy the weight gradient needs: by its own kernel when
  /// `separate_cast`, else inside the norm or activation that produced X (Transformer Engine's
  /// LayerNormLinear / LayerNormMLP write fp8 and its transpose, the same bytes as a 16-bit
  /// output, so no extra pass). Rowwise (axiswise) scaling casts X along k only, where the
  /// tensorwise cast would run, and W along k by a kernel of its own in every use.
  /// `shared_input`: a separate projection reading the input of the one before it, whose cast
  /// serves both (the same tensor, cast the same way).
  void linear_fwd(int64_t n, int64_t k, const char* role, bool separate_cast, bool shared_input = false) {
    const bool cast_input = (separate_cast || r_.eager) && !shared_input;
    if (r_.rowwise) {
      if (cast_input)
        row_cast(r_.tokens * k, "fp8 row cast (input)");
      row_cast(n * k, "fp8 row cast (weight)");
    } else if (cast_input) {
      cast_transpose(r_.tokens * k, "fp8 cast-transpose (input)");
    }
    add(gemm(r_.linear, r_.tokens, n, k), 1.0, role);
  }
  /// Its backward: data gradient dX[T,k] = dY·W, then weight gradient dW[n,k] = dYᵀ·X. In fp8
  /// training dY is cast first, by its own kernel when `separate_cast` (else fused into the
  /// activation's backward that produced it). Rowwise scaling casts each operand along the
  /// contraction axis of this GEMM: dY along n (where the tensorwise cast would run) and W along n
  /// for the data gradient, dY and X along the tokens for the weight gradient (column passes), and
  /// rescales both outputs (torchao runs these split-accumulation GEMMs as tensorwise cuBLAS
  /// kernels at unit scales, then multiplies the output by the scales' outer product).
  /// `input`: the block's input linear (CallPart). `shared_input`: a separate projection whose
  /// input the one before it already cast for its weight gradient.
  void linear_bwd(int64_t n, int64_t k, const char* dgrad_role, const char* wgrad_role, bool separate_cast,
                  bool input = false, bool shared_input = false) {
    if (r_.rowwise) {
      if (separate_cast || r_.eager)
        row_cast(r_.tokens * n, "fp8 row cast (output gradient)");
      column_cast(n * k, "fp8 column cast (weight)");
    } else if (separate_cast || r_.eager) {
      cast_transpose(r_.tokens * n, "fp8 cast-transpose (output gradient)");
    }
    add(gemm(r_.linear, r_.tokens, k, n), 1.0, dgrad_role, input ? CallPart::INPUT_DGRAD : CallPart::OTHER);
    if (r_.rowwise) {
      rescale(r_.tokens * k, "fp8 rescale (data gradient)");
      column_cast(r_.tokens * n, "fp8 column cast (output gradient)");
      if (!shared_input)
        column_cast(r_.tokens * k, "fp8 column cast (input)");
    }
    add(gemm(r_.linear, n, k, r_.tokens), 1.0, wgrad_role, input ? CallPart::INPUT_WGRAD : CallPart::OTHER);
    if (r_.rowwise)
      rescale(n * k, "fp8 rescale (weight gradient)");
  }
  /// The output layer stays 16-bit in fp8 training (Transformer Engine recipes keep it so).
  void logits_fwd() { add(gemm(r_.dtype, r_.tokens, r_.vocab, r_.hidden), 1.0, "logits fwd"); }
  /// The loss over the T x V/t logits. FP32: the cast to fp32 (2 bytes read, 4 written per
  /// logit: a 16-bit copy of 1.5 logits), then the log-softmax over rows (4 read, 4 written).
  /// Fused: one 16-bit pass that reads the logits and writes their gradient in place.
  void loss_fwd() {
    const int64_t logits = r_.tokens * r_.vocab;
    if (!r_.fp32_loss) {
      add(rowwise(KernelKind::SOFTMAX_XENT, r_.dtype, r_.tokens, r_.vocab), 1.0, "softmax-xent (fused)");
      return;
    }
    add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * logits + 1) / 2), 1.0, "logits cast to fp32");
    add(rowwise(KernelKind::SOFTMAX_XENT, Dtype::FP32, r_.tokens, r_.vocab), 1.0, "log-softmax fwd (fp32)");
  }
  /// FP32 only: the loss gradient (a zeroed fp32 gradient with the targets scattered in, 4 bytes
  /// written, then the log-softmax backward, 12: two row passes) and its cast back to 16 bits (4
  /// read, 2 written). 36 bytes per logit in all, against 4 fused.
  void loss_bwd() {
    if (!r_.fp32_loss)
      return;
    const int64_t logits = r_.tokens * r_.vocab;
    add(rowwise(KernelKind::SOFTMAX_XENT, Dtype::FP32, r_.tokens, r_.vocab), 2.0, "log-softmax bwd (fp32)");
    add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * logits + 1) / 2), 1.0, "loss gradient cast to 16-bit");
  }
  /// `input`: the main output's (CallPart), not a multi-token-prediction depth's.
  void logits_bwd(bool input) {
    add(gemm(r_.dtype, r_.tokens, r_.hidden, r_.vocab), 1.0, "logits dgrad",
        input ? CallPart::INPUT_DGRAD : CallPart::OTHER);
    add(gemm(r_.dtype, r_.vocab, r_.hidden, r_.tokens), 1.0, "logits wgrad",
        input ? CallPart::INPUT_WGRAD : CallPart::OTHER);
  }
  /// fp8 training only: a 16-bit tensor of `elements` read once, written as fp8 and as its fp8
  /// transpose (4 bytes per element: the traffic of a 16-bit copy of the same elements).
  /// With eager pointwise kernels (torchao's dynamic float8 linears) every cast is its own kernel,
  /// after an amax pass over the same tensor (2 bytes read per value: a copy of half as many).
  void cast_transpose(int64_t elements, const char* role) {
    if (r_.linear != Dtype::FP8_E4M3)
      return;
    if (r_.eager)
      add(elementwise(KernelKind::MEMCPY, r_.dtype, (elements + 1) / 2), 1.0, "fp8 amax (eager)");
    add(elementwise(KernelKind::MEMCPY, r_.dtype, elements), 1.0, role);
  }
  /// Rowwise fp8: a 16-bit tensor of `elements` cast along its rows, the amax of each row taken in
  /// the same pass (2 bytes read, 1 written per value: a copy of 3/4 as many); with eager
  /// pointwise kernels the amax is its own pass first, as the tensorwise cast's.
  void row_cast(int64_t elements, const char* role) {
    if (r_.eager)
      add(elementwise(KernelKind::MEMCPY, r_.dtype, (elements + 1) / 2), 1.0, "fp8 amax (eager)");
    add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * elements + 3) / 4), 1.0, role);
  }
  /// Rowwise fp8: a cast along the columns (the scale of each column spans every row): a pass
  /// for the amaxes (2 bytes read per value), then the cast (3).
  void column_cast(int64_t elements, const char* role) {
    add(elementwise(KernelKind::MEMCPY, r_.dtype, (elements + 1) / 2), 1.0, "fp8 column amax");
    add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * elements + 3) / 4), 1.0, role);
  }
  /// Separate projections: the input gradients of the `parts` linears that read one T x h input
  /// summed. Eager, autograd adds each further part by a kernel (2 values read, 1 written, as the
  /// residual add); fused, the consumer (the norm's backward) reads the further parts, 2 bytes per
  /// value each.
  void input_grad_sum(int64_t parts, const char* role) {
    const int64_t values = r_.tokens * r_.hidden;
    if (r_.eager) {
      for (int64_t i = 1; i < parts; ++i)
        add(elementwise(KernelKind::MEMCPY, r_.dtype, (3 * values + 1) / 2), 1.0, role);
      return;
    }
    add(elementwise(KernelKind::MEMCPY, r_.dtype, ((parts - 1) * values + 1) / 2), 1.0, role);
  }
  /// Rowwise fp8: the 16-bit output of a GEMM run at unit scales multiplied in place by its
  /// operands' scales (2 bytes read, 2 written per value).
  void rescale(int64_t elements, const char* role) {
    add(elementwise(KernelKind::MEMCPY, r_.dtype, elements), 1.0, role);
  }
  /// The attention core: the fused kernel, or the unfused kernels (attention_core_kernels).
  void attention_core(Phase pass, const char* fused_role) {
    if (r_.flash) {
      const KernelKind kind = pass == Phase::BACKWARD ? KernelKind::ATTENTION_BWD : KernelKind::ATTENTION_FWD;
      add(attention(kind, r_.dtype, r_.attn), r_.attn_repeat, fused_role);
      return;
    }
    const RankDims& r = r_;
    const int64_t b = r.attn.batch * r.attn.heads; // score matrices
    const int64_t s = r.attn.seq;
    const int64_t d = r.attn.head_dim;
    const KernelShape scores_by_keys = gemm(r.dtype, s, s, d, b); // S = Q·Kᵀ, dP = dO·Vᵀ
    const KernelShape rows_by_head = gemm(r.dtype, s, d, s, b);   // O = P·V, dV, dQ, dK
    const KernelShape softmax = rowwise(KernelKind::SOFTMAX_XENT, r.dtype, b * s, s);
    // Dropout: 16-bit scores read and written plus a 1-byte mask, as a copy of that traffic.
    const int64_t e = static_cast<int64_t>(dtype_bytes(r.dtype));
    const int64_t copy_elements = ((2 * e + 1) * b * s * s + 2 * e - 1) / (2 * e);
    const KernelShape dropout = elementwise(KernelKind::MEMCPY, r.dtype, copy_elements);
    if (pass == Phase::BACKWARD) {
      add(scores_by_keys, 1.0, "attention-v dgrad (dP)");
      add(rows_by_head, 1.0, "attention-v wgrad (dV)");
      if (r.dropout)
        add(dropout, 1.0, "attention dropout bwd");
      add(softmax, 1.5, "softmax bwd");
      add(rows_by_head, 1.0, "qk dgrad (dQ)");
      add(rows_by_head, 1.0, "qk dgrad (dK)");
      return;
    }
    const bool again = pass == Phase::RECOMPUTE;
    add(scores_by_keys, 1.0, again ? "qk^T (recompute)" : "qk^T fwd");
    add(softmax, 1.0, again ? "scale-mask-softmax (recompute)" : "scale-mask-softmax fwd");
    if (r.dropout)
      add(dropout, 1.0, again ? "attention dropout (recompute)" : "attention dropout fwd");
    add(rows_by_head, 1.0, again ? "attention-v (recompute)" : "attention-v fwd");
  }
  void add(const KernelShape& s, double factor, const char* role, CallPart part = CallPart::OTHER) {
    calls_.push_back(KernelCall{.shape = s, .time_factor = factor, .role = role, .part = part});
  }
  std::vector<KernelCall> take() { return std::move(calls_); }

private:
  const RankDims& r_;
  std::vector<KernelCall> calls_;
};

/// MLA's query and key/value projections, forward: down-projections of the normed input (the fp8
/// casts in the norms), the latents' norms, the per-head up-projections (casts in those norms).
void mla_projections_fwd(Calls& c, const RankDims& r) {
  if (r.q_lora > 0) {
    c.linear_fwd(r.q_lora, r.hidden, "q down-proj fwd", false);
    c.latent_norm(r.q_lora, 1.0, "q latent norm fwd");
    c.linear_fwd(r.q_up_out, r.q_lora, "q up-proj fwd", false);
  } else {
    c.linear_fwd(r.q_up_out, r.hidden, "q proj fwd", false);
  }
  c.linear_fwd(r.kv_down_out, r.hidden, "kv down-proj fwd", false);
  c.latent_norm(r.kv_lora, 1.0, "kv latent norm fwd");
  c.linear_fwd(r.kv_up_out, r.kv_lora, "kv up-proj fwd", false);
}

/// Their backward, in reverse; every output gradient cast by its own kernel in fp8 training.
void mla_projections_bwd(Calls& c, const RankDims& r) {
  c.linear_bwd(r.kv_up_out, r.kv_lora, "kv up-proj dgrad", "kv up-proj wgrad", true);
  c.latent_norm(r.kv_lora, 2.0, "kv latent norm bwd");
  c.linear_bwd(r.kv_down_out, r.hidden, "kv down-proj dgrad", "kv down-proj wgrad", true);
  if (r.q_lora > 0) {
    c.linear_bwd(r.q_up_out, r.q_lora, "q up-proj dgrad", "q up-proj wgrad", true);
    c.latent_norm(r.q_lora, 2.0, "q latent norm bwd");
    c.linear_bwd(r.q_lora, r.hidden, "q down-proj dgrad", "q down-proj wgrad", true);
  } else {
    c.linear_bwd(r.q_up_out, r.hidden, "q proj dgrad", "q proj wgrad", true);
  }
}

void forward(Calls& c, const RankDims& r, Block block) {
  switch (block) {
  case Block::ATTENTION:
    c.norm(1.0, "input norm fwd");
    if (r.mla) {
      mla_projections_fwd(c, r);
    } else if (r.split) { // the norm's output cast once, read by all three
      c.linear_fwd(r.attn_in, r.hidden, "q proj fwd", false);
      c.linear_fwd(r.kv_out, r.hidden, "k proj fwd", false, true);
      c.linear_fwd(r.kv_out, r.hidden, "v proj fwd", false, true);
    } else {
      c.linear_fwd(r.qkv_out, r.hidden, "qkv fwd", false); // cast in the norm
    }
    c.eager_rotary_and_repeat();
    c.attention_core(Phase::FORWARD, "attention fwd");
    c.eager_output_copy();
    c.linear_fwd(r.hidden, r.attn_in, "out-proj fwd", true); // the attention output
    c.residual("bias-dropout-add fwd");
    return;
  case Block::MLP:
    c.norm(1.0, "post-attention norm fwd");
    if (r.split && r.gated) {
      c.linear_fwd(r.ffn, r.hidden, "gate proj fwd", false);
      c.linear_fwd(r.ffn, r.hidden, "up proj fwd", false, true);
    } else {
      c.linear_fwd(r.up_out, r.hidden, "fc1 fwd", false); // cast in the norm
    }
    c.activation(1.0, "activation fwd");
    c.linear_fwd(r.hidden, r.ffn, "fc2 fwd", false); // cast in the activation
    c.residual("bias-dropout-add fwd");
    return;
  case Block::LOGITS:
    c.norm(1.0, "final norm fwd");
    c.logits_fwd();
    c.loss_fwd();
    // Multi-token prediction, per depth: the norms of the hidden state and of the next token's
    // embedding, their projection (T, h, 2h; its layer is a task of its own), the output again.
    for (int64_t d = 0; d < r.mtp; ++d) {
      c.norm(2.0, "mtp input norms fwd");
      c.linear_fwd(r.mtp_out, 2 * r.hidden, "mtp projection fwd", true);
      c.norm(1.0, "mtp final norm fwd");
      c.logits_fwd();
      c.loss_fwd();
    }
    return;
  case Block::ROUTER:
    c.add(gemm(r.dtype, r.row_tokens, r.experts, r.hidden), 1.0, "router fwd");
    c.add(rowwise(KernelKind::SOFTMAX_XENT, r.dtype, r.row_tokens, r.experts), 1.0, "router softmax/top-k");
    c.add(elementwise(KernelKind::MEMCPY, r.dtype, r.top_k * r.row_tokens * r.hidden), 1.0, "token permute");
    c.add(elementwise(KernelKind::MEMCPY, r.dtype, r.top_k * r.row_tokens * r.hidden), 1.0,
          "token unpermute");
    return;
  case Block::NONE:
  case Block::OPTIMIZER:
  case Block::EXPERTS:
    return; // rejected by block_kernels; the experts' own: expert_kernels
  }
}

/// What selective recomputation repeats before `block`'s backward (recompute_modules): the
/// attention core, the block's norm, the dense MLP's forward, the routed experts' activation.
void selective_recompute(Calls& c, const RankDims& r, const TrainingSpec& t, Block block) {
  if (t.recompute != Recompute::SELECTIVE)
    return;
  const RecomputeModules& m = t.recompute_modules;
  if (m.alternate_linears) {
    // Every second linear of the layer (Q, K, V, out, [gate], up, down: K, out and up; a GELU
    // MLP's fc2) with the norm ahead of it and, in the MLP, the activation its input needs.
    if (block == Block::ATTENTION) {
      c.norm(1.0, "input norm (recompute)");
      c.linear_fwd((r.qkv_out - r.attn_in) / 2, r.hidden, "k proj (recompute)", false);
      c.linear_fwd(r.hidden, r.attn_in, "out-proj (recompute)", true);
    } else if (block == Block::MLP) {
      c.norm(1.0, "post-attention norm (recompute)");
      c.linear_fwd(r.ffn, r.hidden, "up proj (recompute)", false);
      c.activation(1.0, "activation (recompute)");
    }
    return;
  }
  if (block == Block::ATTENTION) {
    if (m.layernorm)
      c.norm(1.0, "input norm (recompute)");
    if (m.mla_up_proj && r.mla) {
      if (r.q_lora > 0)
        c.linear_fwd(r.q_up_out, r.q_lora, "q up-proj (recompute)", false);
      c.linear_fwd(r.kv_up_out, r.kv_lora, "kv up-proj (recompute)", false);
    }
    if (m.core_attn)
      c.attention_core(Phase::RECOMPUTE, "attention fwd (recompute)");
  } else if (block == Block::MLP) {
    if (m.mlp) {
      forward(c, r, block); // norm, fc1, activation, fc2, residual: the block's input is kept
      return;
    }
    if (m.layernorm)
      c.norm(1.0, "post-attention norm (recompute)");
  }
}

void backward(Calls& c, const RankDims& r, Block block) {
  switch (block) {
  case Block::ATTENTION:
    c.residual("bias-dropout-add bwd");
    c.linear_bwd(r.hidden, r.attn_in, "out-proj dgrad", "out-proj wgrad", true);
    c.eager_output_copy();
    c.attention_core(Phase::BACKWARD, "attention bwd");
    c.eager_rotary_and_repeat();
    if (r.mla) {
      mla_projections_bwd(c, r);
    } else if (r.split) { // dQ, dK, dV each cast; the input cast once; three input gradients summed
      c.linear_bwd(r.attn_in, r.hidden, "q proj dgrad", "q proj wgrad", true, true);
      c.linear_bwd(r.kv_out, r.hidden, "k proj dgrad", "k proj wgrad", true, true, true);
      c.linear_bwd(r.kv_out, r.hidden, "v proj dgrad", "v proj wgrad", true, true, true);
      c.input_grad_sum(3, "q, k, v input gradients summed");
    } else {
      c.linear_bwd(r.qkv_out, r.hidden, "qkv dgrad", "qkv wgrad", true, true); // attention bwd output
    }
    c.norm(2.0, "input norm bwd");
    return;
  case Block::MLP:
    c.residual("bias-dropout-add bwd");
    c.linear_bwd(r.hidden, r.ffn, "fc2 dgrad", "fc2 wgrad", true);
    c.activation(2.0, "activation bwd");
    if (r.split && r.gated) {
      c.linear_bwd(r.ffn, r.hidden, "gate proj dgrad", "gate proj wgrad", false, true);
      c.linear_bwd(r.ffn, r.hidden, "up proj dgrad", "up proj wgrad", false, true, true);
      c.input_grad_sum(2, "gate, up input gradients summed");
    } else {
      c.linear_bwd(r.up_out, r.hidden, "fc1 dgrad", "fc1 wgrad", false, true); // in the activation bwd
    }
    c.norm(2.0, "post-attention norm bwd");
    return;
  case Block::LOGITS:
    for (int64_t d = 0; d < r.mtp; ++d) {
      c.loss_bwd();
      c.logits_bwd(false);
      c.norm(2.0, "mtp final norm bwd");
      c.linear_bwd(r.mtp_out, 2 * r.hidden, "mtp projection dgrad", "mtp projection wgrad", true);
      c.norm(4.0, "mtp input norms bwd");
    }
    c.loss_bwd();
    c.logits_bwd(true);
    c.norm(2.0, "final norm bwd");
    return;
  case Block::ROUTER:
    c.add(elementwise(KernelKind::MEMCPY, r.dtype, r.top_k * r.row_tokens * r.hidden), 1.0,
          "gradient unpermute");
    c.add(elementwise(KernelKind::MEMCPY, r.dtype, r.top_k * r.row_tokens * r.hidden), 1.0,
          "gradient permute");
    c.add(rowwise(KernelKind::SOFTMAX_XENT, r.dtype, r.row_tokens, r.experts), 2.0,
          "router softmax/top-k bwd");
    c.add(gemm(r.dtype, r.row_tokens, r.hidden, r.experts), 1.0, "router dgrad");
    c.add(gemm(r.dtype, r.experts, r.hidden, r.row_tokens), 1.0, "router wgrad");
    return;
  case Block::NONE:
  case Block::OPTIMIZER:
  case Block::EXPERTS:
    return; // rejected by block_kernels; the experts' own: expert_kernels
  }
}

} // namespace

namespace {

/// The routed experts of one EP rank under balanced routing (docs/moe.md, "Routed experts"): E/ep
/// local experts, each on M = WorkloadSpec::tokens_per_local_expert tokens (at least 1) with its
/// width per expert-TP rank. Per expert (one call with time factor E/ep, E/ep launches): the fc1
/// and fc2 GEMMs, with fp8 their inputs' (and in the backward their output gradients') casts, which
/// no norm or activation kernel fuses here (a grouped linear quantizes its own inputs). Over all
/// E/ep·M tokens at once: the activation, and with ep > 1 and more than one local expert the
/// received tokens sorted by local expert after the dispatch and back before the combine (a
/// permutation of the routed copies each way, Megatron-Core's sort_chunks_by_idxs), their
/// gradients likewise in the backward.
std::vector<KernelCall> expert_kernels(const WorkloadSpec& w, RankDims r, Phase pass) {
  const ModelSpec& m = w.model;
  const int64_t ep = std::max(1, w.parallel.ep);
  if (m.moe.experts % ep != 0)
    throw ModelError("block kernels: moe.experts (" + std::to_string(m.moe.experts) +
                     ") is not divisible by ep (" + std::to_string(ep) + ")");
  const int64_t local = m.moe.experts / ep;
  const int64_t tokens = std::max<int64_t>(1, std::llround(w.tokens_per_local_expert()));
  r.ffn = per_rank(m.moe.expert_ffn_hidden > 0 ? m.moe.expert_ffn_hidden : m.ffn_hidden,
                   w.parallel.expert_tp(), "moe.expert_ffn_hidden");
  r.up_out = (r.gated ? 2 : 1) * r.ffn;
  r.split = false;
  RankDims all = r; // every local expert's tokens together
  all.tokens = all.row_tokens = tokens * local;
  r.tokens = r.row_tokens = tokens;
  Calls each(r), whole(all);
  const bool sort = ep > 1 && local > 1;
  const auto sort_tokens = [&](const char* role) {
    if (sort)
      whole.add(elementwise(KernelKind::MEMCPY, all.dtype, all.tokens * all.hidden), 1.0, role);
  };
  std::vector<KernelCall> out;
  const auto take = [&](Calls& c, double factor) {
    for (KernelCall& k : c.take()) {
      k.time_factor *= factor;
      if (k.shape.kind == KernelKind::GEMM)
        k.launches = factor;
      out.push_back(k);
    }
  };
  if (pass == Phase::BACKWARD) {
    sort_tokens("experts gradients sorted by expert");
    take(whole, 1.0);
    each.linear_bwd(r.hidden, r.ffn, "experts fc2 dgrad", "experts fc2 wgrad", true);
    take(each, static_cast<double>(local));
    if (w.training.recompute == Recompute::SELECTIVE && w.training.recompute_modules.moe_act)
      whole.activation(1.0, "experts activation (recompute)");
    whole.activation(2.0, "experts activation bwd");
    take(whole, 1.0);
    each.linear_bwd(r.up_out, r.hidden, "experts fc1 dgrad", "experts fc1 wgrad", true);
    take(each, static_cast<double>(local));
    sort_tokens("experts gradients sorted back");
    take(whole, 1.0);
    return out;
  }
  sort_tokens("dispatched tokens sorted by expert");
  take(whole, 1.0);
  each.linear_fwd(r.up_out, r.hidden, "experts fc1 fwd", true);
  take(each, static_cast<double>(local));
  whole.activation(1.0, "experts activation fwd");
  take(whole, 1.0);
  each.linear_fwd(r.hidden, r.ffn, "experts fc2 fwd", true);
  take(each, static_cast<double>(local));
  sort_tokens("experts outputs sorted back");
  take(whole, 1.0);
  return out;
}

} // namespace

std::vector<KernelCall> block_kernels(const WorkloadSpec& w, Block block, Phase pass, bool windowed) {
  if (block != Block::ATTENTION && block != Block::MLP && block != Block::LOGITS && block != Block::ROUTER &&
      block != Block::EXPERTS)
    throw ModelError("compute model: no kernels for block " + std::string(to_string(block)));
  if (pass != Phase::FORWARD && pass != Phase::BACKWARD && pass != Phase::RECOMPUTE)
    throw ModelError("compute model: the " + std::string(to_string(pass)) + " phase has no block kernels");
  const RankDims r = rank_dims(w, windowed && block == Block::ATTENTION);
  if ((block == Block::ROUTER || block == Block::EXPERTS) && (r.experts <= 0 || r.top_k <= 0))
    throw ModelError("block kernels: the router and the experts need model.moe.experts and top_k > 0");
  if (block == Block::EXPERTS)
    return expert_kernels(w, r, pass == Phase::RECOMPUTE ? Phase::FORWARD : pass);
  Calls c(r);
  switch (pass) {
  case Phase::FORWARD:
    forward(c, r, block);
    break;
  case Phase::BACKWARD:
    // Selective recomputation repeats its modules just before the block's backward.
    selective_recompute(c, r, w.training, block);
    backward(c, r, block);
    break;
  case Phase::RECOMPUTE:
    forward(c, r, block);
    break;
  case Phase::OPTIMIZER:
  case Phase::WEIGHT_GRAD:
    break; // rejected above
  }
  return c.take();
}

std::vector<KernelCall> loss_kernels(const WorkloadSpec& w, Phase pass) {
  const RankDims r = rank_dims(w);
  Calls c(r);
  if (pass == Phase::BACKWARD)
    c.loss_bwd();
  else
    c.loss_fwd();
  return c.take();
}

std::vector<KernelCall> attention_core_kernels(const WorkloadSpec& w, Phase pass) {
  RankDims r = rank_dims(w);
  r.flash = false;
  Calls c(r);
  c.attention_core(pass, "");
  return c.take();
}

KernelCall optimizer_kernel(int64_t params) {
  return KernelCall{
      .shape = elementwise(KernelKind::ADAM, Dtype::FP32, params), .time_factor = 1.0, .role = "adam"};
}

std::vector<KernelCall> optimizer_kernels(const WorkloadSpec& w, int64_t updated, int64_t held) {
  std::vector<KernelCall> calls;
  const auto copy = [&](int64_t elements, const char* role) {
    calls.push_back(
        KernelCall{.shape = elementwise(KernelKind::MEMCPY, Dtype::FP32, std::max<int64_t>(1, elements)),
                   .time_factor = 1.0,
                   .role = role});
  };
  if (w.precision == Precision::FP16)
    copy(updated, "gradient unscale + inf check (fp16)");
  copy((updated + 1) / 2, "gradient norm");
  calls.push_back(optimizer_kernel(updated));
  copy((held + 1) / 2, "gradient buffer zeroing");
  return calls;
}

std::vector<KernelCall> grad_accumulation_kernels(int64_t held) {
  const int64_t elements = std::max<int64_t>(1, (3 * held + 1) / 2); // 12 bytes a gradient, 8 an element
  return {KernelCall{.shape = elementwise(KernelKind::MEMCPY, Dtype::FP32, elements),
                     .time_factor = 1.0,
                     .role = "gradient accumulation into fp32"}};
}

std::vector<KernelShape> block_kernel_shapes(const WorkloadSpec& w) {
  std::set<KernelShape> seen;
  std::vector<KernelShape> out;
  std::vector<Block> blocks{Block::ATTENTION, Block::MLP, Block::LOGITS};
  if (w.model.moe.enabled()) {
    blocks.push_back(Block::ROUTER);
    blocks.push_back(Block::EXPERTS);
  }
  const bool windows = w.model.window_below_sequence();
  for (Block b : blocks)
    for (Phase p : {Phase::FORWARD, Phase::BACKWARD, Phase::RECOMPUTE})
      for (bool windowed : {false, true}) {
        if (windowed && (b != Block::ATTENTION || !windows))
          continue;
        for (const KernelCall& call : block_kernels(w, b, p, windowed))
          if (seen.insert(call.shape).second)
            out.push_back(call.shape);
      }
  return out;
}

} // namespace stepsim::kernels
