#pragma once
// The kernels one compute task of a training step runs: a transformer block (attention or MLP),
// the logits, in forward, backward or recomputation, decomposed into kernel invocations on one
// tensor-parallel rank. The runner sums their table times into the task's duration
// (docs/kernels.md, "From kernels to compute tasks").

#include "config/spec.hpp"
#include "core/vocabulary.hpp"
#include "kernels/kernel_shape.hpp"

#include <cstdint>
#include <vector>

namespace stepsim::kernels {

/// One kernel invocation of a block: its shape, a factor on the shape's table time (2 for the
/// backward of a norm or activation, which is not a kind of its own: about twice the forward's
/// traffic) and what it computes ("qkv fwd", "attention bwd", ...). Each call is one launch.
/// In a block's backward, the GEMMs of its input linear: the column-parallel linear (QKV, fc1,
/// the logits) whose input gradient the block's trailing TP collective sums. Frameworks run that
/// collective beside the weight-gradient GEMM (graph builder, `parallel.tp_grad_overlap`).
enum class CallPart { OTHER, INPUT_DGRAD, INPUT_WGRAD };

struct KernelCall {
  KernelShape shape;
  double time_factor = 1.0;
  double launches = 1.0; ///< kernel launches the call stands for (the routed experts' GEMMs: E/ep)
  const char* role = "";
  CallPart part = CallPart::OTHER;
};

/// The kernels of `block` in `pass` for one micro-batch on one TP rank of `w`, in issue order.
/// With T = micro_batch·seq_len tokens (T/tp for norms and residual adds under sequence
/// parallelism), h hidden, d head_dim, t = tp:
///  - ATTENTION forward: norm (T, h); QKV GEMM (T, (a + 2·a_kv)·d/t, h); attention forward
///    (a/t heads, max(1, a_kv/t) kv heads, causal); out-projection GEMM (T, h, a·d/t); the
///    bias-dropout-residual add, read 2·T·h and write T·h values (a MEMCPY of 1.5·T·h elements).
///  - MLP forward: norm; fc1 (gate+up fused for SwiGLU) GEMM (T, n_up·f/t, h); GELU or SwiGLU
///    (T·f/t outputs); fc2 GEMM (T, h, f/t); the residual add.
///  - LOGITS forward: final norm; logits GEMM (T, V/t, h); fused softmax + cross-entropy
///    (T, V/t), which also writes the logit gradient.
///  - BACKWARD: in reverse order, per linear layer the data-gradient GEMM (T, k, n) and the
///    weight-gradient GEMM (n, k, T); attention backward; norm and activation backward at
///    2× their forward; the residual add's gradient (same shape). The logits backward has no
///    loss kernel (its gradient came with the forward).
///    With selective recomputation the attention backward starts with the recomputed
///    attention core (the graph builder folds it into that task).
///  - ROUTER (an MoE layer's routing, T_r = the tokens the rank routes: T/tp under sequence
///    parallelism, E experts, k = top_k): forward the router GEMM (T_r, E, h), softmax and
///    top-k over the E scores (a row-wise kernel of T_r rows), and the token permutation and
///    unpermutation around the experts, each reading and writing the k·T_r routed copies (a
///    MEMCPY of k·T_r·h elements each); backward the router's dgrad and wgrad GEMMs, the
///    row-wise kernel at 2× and the two permutations of the gradients. Needs experts.
///  - EXPERTS (an MoE layer's routed experts on one EP rank under balanced routing, docs/moe.md):
///    each of its E/ep local experts runs fc1 GEMM (M, n_up·f_e/etp, h) and fc2 GEMM
///    (M, h, f_e/etp), M = WorkloadSpec::tokens_per_local_expert (the GPU's own tokens, after
///    context parallelism's split), in fp8 each with its input's cast-transpose; one call per
///    kernel with time factor E/ep and, for the GEMMs, E/ep launches. Over all E/ep·M routed tokens:
///    the activation, and with ep > 1 and several local experts a copy sorting them by expert
///    before fc1 and one back after fc2. Backward: the sorts of the gradients, fc2 and fc1 dgrad
///    and wgrad (fp8: each output gradient's cast-transpose), the activation at 2× (and again
///    first under recompute_modules moe_act). No norm or residual add. Needs experts.
///  - RECOMPUTE (full recomputation): the forward's kernels.
/// The attention core is the fused (FlashAttention-style) kernel when training.flash_attention
/// is true, else the unfused kernels of attention_core_kernels.
/// Throws ModelError when a dimension is not positive or does not divide by tp (as
/// workload_kernels), for a block without kernels of its own (NONE, OPTIMIZER: optimizer_kernels)
/// and for a phase other than FORWARD, BACKWARD and RECOMPUTE.
/// `windowed`: an ATTENTION block of a layer with a sliding window w shorter than half the
/// sequence (ModelSpec::windowed_layer): the fused core runs as the causal kernel over 2w
/// positions on b·s/(2w) sequences (the same b·s·w score products, all query tiles in one launch;
/// a fractional count is the nearest whole one with a time factor); the unfused core computes the
/// whole masked s × s matrix, as without a window.
std::vector<KernelCall> block_kernels(const WorkloadSpec& w, Block block, Phase pass, bool windowed = false);

/// The attention core of one micro-batch on one TP rank without FlashAttention, as Megatron-LM
/// (2021-22) runs it: with B = micro_batch · a/t score matrices of s × s and d = head_dim,
///  - FORWARD (also what recomputation repeats): the batched QKᵀ GEMM (B × (s, s, d); the 1/√d
///    scale is its alpha), the fused scale-mask-softmax (rows B·s of s columns, 16-bit scores
///    read, probabilities written; causal masking does not skip work), the dropout of the
///    probabilities (read 2, write 2 bytes per score plus a 1-byte mask: a MEMCPY of the same
///    traffic) and the batched attention·V GEMM (B × (s, d, s)).
///  - BACKWARD: dP = dO·Vᵀ (B × (s, s, d)), dV = Pᵀ·dO (B × (s, d, s)), the dropout backward
///    (read gradient and mask, write gradient: the dropout's traffic), the softmax backward (read
///    probabilities and gradient, write gradient: 1.5× the forward's traffic), dQ = dS·K and
///    dK = dSᵀ·Q (B × (s, d, s) each).
/// With fewer KV heads than query heads (GQA) K and V are broadcast: still B products.
/// Throws ModelError as block_kernels; RECOMPUTE equals FORWARD.
std::vector<KernelCall> attention_core_kernels(const WorkloadSpec& w, Phase pass);

/// The loss's kernels over the logits of one TP rank, per `training.cross_entropy` (the ones the
/// logits block runs after its GEMM in the forward, before its GEMMs in the backward).
std::vector<KernelCall> loss_kernels(const WorkloadSpec& w, Phase pass);

/// The fused Adam kernel of a rank that updates `params` fp32 parameters.
/// Precondition: params > 0.
KernelCall optimizer_kernel(int64_t params);

/// The optimizer step of a rank that updates `updated` parameters and holds the gradients of
/// `held` (model::optimizer_step_bytes): in fp16 training the unscaling and inf/NaN check of the
/// fp32 main gradients (read and written: a copy of `updated` fp32 values), the global gradient
/// norm's read of them (a copy's traffic of updated/2), the fused Adam kernel, and the zeroing
/// of the fp32 gradient buffer (a copy's traffic of held/2), in that order.
/// Precondition: updated > 0, held > 0.
std::vector<KernelCall> optimizer_kernels(const WorkloadSpec& w, int64_t updated, int64_t held);

/// training.grad_accumulation: fp32_pass after one micro-batch's backward, over the `held`
/// gradients of a rank: one streaming kernel of model::FP32_PASS_BYTES_PER_GRADIENT bytes per
/// gradient (as fp32 copy elements of 8 bytes each: 1.5 per gradient).
std::vector<KernelCall> grad_accumulation_kernels(int64_t held);

/// Every distinct shape block_kernels yields for `w` (all blocks and passes), first-occurrence
/// order; the Adam kernel is not included (its size depends on the stage).
std::vector<KernelShape> block_kernel_shapes(const WorkloadSpec& w);

} // namespace stepsim::kernels
