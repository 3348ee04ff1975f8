#pragma once
// A training step decomposed into the kernel shapes one tensor-parallel rank runs.

#include "config/spec.hpp"
#include "kernels/kernel_shape.hpp"

#include <cstdint>
#include <vector>

namespace stepsim::kernels {

/// The distinct kernel shapes a training step of `w` runs on one TP rank, deduplicated, in a
/// stable order (first occurrence, layer order: norm, QKV, attention, attention-out, norm,
/// MLP, then logits, loss, optimizer). With T = micro_batch·seq_len tokens, h hidden, f ffn,
/// a heads, a_kv kv heads, d = h/a, V vocab, t = tp, every linear layer Y[T,n] = X[T,k]·Wᵀ
/// contributes three GEMMs (m,n,k): forward (T, n, k), data gradient (T, k, n) and weight
/// gradient (n, k, T). The layers are QKV (n = (a + 2·a_kv)·d/t, k = h), attention-out
/// (n = h, k = h/t), MLP up (gelu: n = f/t; swiglu, gate and up fused: n = 2f/t; k = h), MLP
/// down (n = h, k = f/t) and logits (n = V/t, k = h). Attention forward and backward run on
/// micro_batch sequences of a/t heads and max(1, a_kv/t) kv heads, causal, when
/// training.flash_attention is set; otherwise the unfused core of attention_core_kernels
/// (step_kernels.hpp) takes their place: batched QKᵀ and attention·V GEMMs, scale-mask-softmax,
/// dropout, and their backward shapes. Norms are
/// (T rows, h cols); the activation has T·f/t outputs; softmax+cross-entropy is (T, V/t); Adam
/// updates parameters/(t·p) fp32 values (further /dp with ZeRO stage >= 1). With multi-head
/// latent attention (model.mla) the attention's shapes are left to the step's block kernels
/// (step_kernels.hpp), which `stepsim kernels` lists too.
/// Throws ModelError when a dimension does not divide by tp or is not positive.
std::vector<KernelShape> workload_kernels(const WorkloadSpec& w);

/// Parameters of the whole model (embeddings included; the output layer counted only when
/// untied). A dense GPT layer with biases gives 12h² + 13h (docs/kernels.md).
int64_t model_parameters(const ModelSpec& m);

/// The shapes the bundled profiles cover: workload_kernels of GPT-3 175B (h 12288) and a
/// Llama-2-70B-style model (h 8192, GQA, SwiGLU) at tp 1, 2, 4, 8 and 2048..8192 tokens per
/// micro-batch at bf16, each with fused and with unfused attention (Adam replaced by a sweep of 2^20..2^30
/// parameters, since whole-model sizes do not fit one GPU), plus the same GEMMs at fp8, the published
/// best-case GEMM shapes and a copy-bandwidth sweep of 1 MiB..4 GiB. Deduplicated, stable order.
std::vector<KernelShape> reference_profile_shapes();

/// The two reference models used by reference_profile_shapes (layers as published).
ModelSpec gpt3_175b();
ModelSpec llama2_70b();

} // namespace stepsim::kernels
