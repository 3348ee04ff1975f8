#include "kernels/workload_kernels.hpp"

#include "core/error.hpp"
#include "kernels/step_kernels.hpp"

#include <algorithm>
#include <set>
#include <string>

namespace stepsim::kernels {

namespace {

/// Appends shapes not yet present, keeping first-occurrence order.
class ShapeSet {
public:
  void add(const KernelShape& s) {
    if (seen_.insert(s).second)
      order_.push_back(s);
  }
  void add_all(const std::vector<KernelShape>& v) {
    for (const auto& s : v)
      add(s);
  }
  std::vector<KernelShape> take() { return std::move(order_); }

private:
  std::set<KernelShape> seen_;
  std::vector<KernelShape> order_;
};

void linear(ShapeSet& out, Dtype dt, int64_t tokens, int64_t n, int64_t k) {
  out.add(gemm(dt, tokens, n, k)); // forward:  Y[T,n] = X[T,k] · W[n,k]ᵀ
  out.add(gemm(dt, tokens, k, n)); // dgrad:   dX[T,k] = dY[T,n] · W[n,k]
  out.add(gemm(dt, n, k, tokens)); // wgrad:   dW[n,k] = dY[T,n]ᵀ · X[T,k]
}

int64_t divide(int64_t value, int64_t by, const char* what) {
  if (value <= 0)
    throw ModelError(std::string("kernel shapes: ") + what + " must be > 0");
  if (value % by != 0)
    throw ModelError(std::string("kernel shapes: ") + what + " (" + std::to_string(value) +
                     ") is not divisible by tp (" + std::to_string(by) + ")");
  return value / by;
}

} // namespace

int64_t model_parameters(const ModelSpec& m) {
  const int64_t h = m.hidden;
  const int64_t d = m.head_dim();
  const int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  const int64_t q = m.heads * d; // = h unless model.head_dim is set
  const int64_t qkv_out = q + 2 * kv * d;
  const bool swiglu = m.mlp == MlpKind::SWIGLU;
  int64_t layer = qkv_out * h + q * h;          // QKV and attention-out
  layer += (swiglu ? 3 : 2) * h * m.ffn_hidden; // MLP
  if (m.bias)
    layer += qkv_out + h + (swiglu ? 2 : 1) * m.ffn_hidden + h;
  const int64_t norm = m.norm == NormKind::LAYERNORM ? 2 * h : h;
  layer += 2 * norm;
  int64_t total = m.layers * layer + m.vocab * h + norm; // + embedding and final norm
  if (m.position == PositionEmbedding::LEARNED)
    total += m.seq_len * h;
  if (!m.tied_embeddings)
    total += m.vocab * h;
  return total;
}

std::vector<KernelShape> workload_kernels(const WorkloadSpec& w) {
  const ModelSpec& m = w.model;
  const int64_t t = w.parallel.tp;
  if (t <= 0 || w.parallel.pp <= 0)
    throw ModelError("kernel shapes: tp and pp must be > 0");
  if (w.batch.micro_batch <= 0 || m.seq_len <= 0)
    throw ModelError("kernel shapes: micro_batch and seq_len must be > 0");
  if (m.heads <= 0 || m.head_dim() <= 0 || (m.head_dim_set <= 0 && m.hidden % m.heads != 0))
    throw ModelError("kernel shapes: heads must divide hidden (or model.head_dim be set)");
  const Dtype dt = w.precision == Precision::FP16 ? Dtype::FP16 : Dtype::BF16;
  const int64_t tokens = w.batch.micro_batch * m.seq_len;
  const int64_t h = m.hidden;
  const int64_t d = m.head_dim();
  const int64_t kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  const int64_t heads_rank = divide(m.heads, t, "heads");
  const int64_t kv_rank = kv >= t ? divide(kv, t, "kv_heads") : 1; // fewer KV heads than ranks: replicated
  const int64_t ffn_rank = divide(m.ffn_hidden, t, "ffn_hidden");
  const int64_t vocab_rank = divide(m.vocab, t, "vocab");
  const bool swiglu = m.mlp == MlpKind::SWIGLU;
  const KernelKind norm = m.norm == NormKind::RMSNORM ? KernelKind::RMSNORM : KernelKind::LAYERNORM;

  ShapeSet out;
  out.add(rowwise(norm, dt, tokens, h));
  // Multi-head latent attention: its projections and core come from the step's block kernels
  // (stepsim kernels adds those); only the dense-layer shapes that do not depend on it here.
  const bool mla = m.mla.enabled();
  if (!mla)
    linear(out, dt, tokens, (heads_rank + 2 * kv_rank) * d, h); // QKV (column parallel)
  const AttentionDims attn{.batch = w.batch.micro_batch,
                           .heads = heads_rank,
                           .kv_heads = kv_rank,
                           .seq = m.seq_len,
                           .head_dim = d,
                           .causal = true};
  if (!mla && w.training.flash_attention) {
    out.add(attention(KernelKind::ATTENTION_FWD, dt, attn));
    out.add(attention(KernelKind::ATTENTION_BWD, dt, attn));
    // Sliding-window layers run the causal kernel over 2w positions (block_kernels).
    if (m.window_below_sequence()) {
      for (Phase pass : {Phase::FORWARD, Phase::BACKWARD})
        for (const KernelCall& call : block_kernels(w, Block::ATTENTION, pass, true))
          if (call.shape.kind == KernelKind::ATTENTION_FWD || call.shape.kind == KernelKind::ATTENTION_BWD)
            out.add(call.shape);
    }
  } else if (!mla) {
    for (Phase pass : {Phase::FORWARD, Phase::BACKWARD})
      for (const KernelCall& call : attention_core_kernels(w, pass))
        out.add(call.shape);
  }
  if (!mla)
    linear(out, dt, tokens, h, heads_rank * d);            // attention-out (row parallel)
  linear(out, dt, tokens, (swiglu ? 2 : 1) * ffn_rank, h); // MLP up (gate+up fused for swiglu)
  out.add(elementwise(swiglu ? KernelKind::SWIGLU : KernelKind::GELU, dt, tokens * ffn_rank));
  linear(out, dt, tokens, h, ffn_rank);   // MLP down (row parallel)
  linear(out, dt, tokens, vocab_rank, h); // logits (vocab parallel)
  for (const KernelCall& call : loss_kernels(w, Phase::FORWARD))
    out.add(call.shape);
  int64_t params = model_parameters(m) / (t * w.parallel.pp);
  if (w.parallel.zero_stage >= 1 && w.parallel.dp > 1)
    params /= w.parallel.dp;
  out.add(elementwise(KernelKind::ADAM, Dtype::FP32, std::max<int64_t>(params, 1)));
  return out.take();
}

ModelSpec gpt3_175b() {
  ModelSpec m;
  m.name = "gpt3-175b";
  m.layers = 96;
  m.hidden = 12288;
  m.heads = 96;
  m.kv_heads = 96;
  m.ffn_hidden = 4 * 12288;
  m.vocab = 51200;
  m.seq_len = 2048;
  m.mlp = MlpKind::GELU;
  m.norm = NormKind::LAYERNORM;
  m.position = PositionEmbedding::LEARNED;
  m.bias = true;
  m.tied_embeddings = true;
  return m;
}

ModelSpec llama2_70b() {
  ModelSpec m;
  m.name = "llama2-70b";
  m.layers = 80;
  m.hidden = 8192;
  m.heads = 64;
  m.kv_heads = 8;
  m.ffn_hidden = 28672;
  m.vocab = 32000;
  m.seq_len = 4096;
  m.mlp = MlpKind::SWIGLU;
  m.norm = NormKind::RMSNORM;
  m.position = PositionEmbedding::ROTARY;
  m.bias = false;
  m.tied_embeddings = false;
  return m;
}

std::vector<KernelShape> reference_profile_shapes() {
  ShapeSet out;
  // Published best-case shapes (measured_runs.yaml gemm_measurements), m x n x k.
  out.add(gemm(Dtype::BF16, 6912, 16384, 2048));
  out.add(gemm(Dtype::BF16, 6144, 17920, 2816));
  std::vector<KernelShape> bf16_gemms;
  for (const ModelSpec& m : {gpt3_175b(), llama2_70b()}) {
    for (int tp : {1, 2, 4, 8}) {
      for (int64_t tokens : {2048, 4096, 8192}) {
        if (tokens % m.seq_len != 0)
          continue;
        for (bool flash : {true, false}) { // fused attention, and Megatron's unfused kernels
          WorkloadSpec w;
          w.name = m.name;
          w.model = m;
          w.batch.micro_batch = tokens / m.seq_len;
          w.batch.global_batch = w.batch.micro_batch;
          w.parallel.tp = tp;
          w.training.flash_attention = flash;
          for (const KernelShape& s : workload_kernels(w)) {
            if (s.kind == KernelKind::ADAM)
              continue; // whole-model sizes: covered by the sweep below
            out.add(s);
            if (s.kind == KernelKind::GEMM && s.batch == 1)
              bf16_gemms.push_back(s);
          }
        }
      }
    }
  }
  // The same GEMMs at fp8 (measured only on GPUs with fp8 tensor cores).
  for (KernelShape s : bf16_gemms) {
    s.dtype = Dtype::FP8_E4M3;
    out.add(s);
  }
  // Adam over 1 Mi .. 1 Gi parameters (28 bytes each), interpolated in between.
  for (int64_t params = int64_t{1} << 20; params <= int64_t{1} << 30; params *= 4) {
    out.add(elementwise(KernelKind::ADAM, Dtype::FP32, params));
  }
  // Copy bandwidth from 1 MiB to 4 GiB (bf16 elements).
  for (int64_t bytes = int64_t{1} << 20; bytes <= int64_t{4} << 30; bytes *= 4) {
    out.add(elementwise(KernelKind::MEMCPY, Dtype::BF16, bytes / 2));
  }
  return out.take();
}

} // namespace stepsim::kernels
