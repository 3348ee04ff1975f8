// The training stack presets (docs/stacks.md) and their expansion into workload keys.

#include "config/stacks.hpp"

#include "config/workload_names.hpp"

#include <array>

namespace stepsim::config {

namespace {

using enum StackKey;
using enum StackWhen;

// Each value cites the framework's flag or configuration key and its default, and where that is
// written. A mechanism a release leaves out keeps the simulator's built-in default.

// Megatron-LM v2.x (tags v2.5, v2.6 of 2021): the code of Narayanan et al. 2021.
constexpr StackDefault MEGATRON_LM_2021[] = {
    {FLASH_ATTENTION, false, ALWAYS,
     "megatron/model/transformer.py ParallelAttention: QK^T, FusedScaleMaskSoftmax, dropout and AV as "
     "separate kernels"},
    {SP, false, ALWAYS, "no sequence parallelism before 2022 (Korthikanti et al. 2022)"},
    {TP_GRAD_OVERLAP, false, TP,
     "megatron/mpu/layers.py: the input gradient's TP all-reduce after the backward; "
     "--async-tensor-model-parallel-allreduce (store_true, off) came after v2.6"},
    {PP_SCATTER_GATHER, true, TP_PP_NO_SP,
     "megatron/arguments.py --no-scatter-gather-tensors-in-pipeline (store_false: on); Narayanan et al. "
     "2021, sec. 4.1"},
    {ZERO_STAGE, 0, ALWAYS, "no distributed optimizer (--use-distributed-optimizer came in 2022)"},
    {GRAD_REDUCE_IN_FP32, true, SIXTEEN_BIT_BF16,
     "megatron/arguments.py: --bf16 forces accumulate_allreduce_grads_in_fp32"},
};

// Megatron-LM's main branch of 2022 (no release tag): sequence parallelism and selective
// recomputation (Korthikanti et al. 2022), the distributed optimizer.
constexpr StackDefault MEGATRON_LM_2022[] = {
    {FLASH_ATTENTION, false, ALWAYS,
     "megatron/model/transformer.py CoreAttention: unfused (--use-flash-attn came in 2023)"},
    {SP, false, ALWAYS, "megatron/arguments.py --sequence-parallel (store_true: off unless given)"},
    {TP_GRAD_OVERLAP, true, TP,
     "megatron/arguments.py --no-async-tensor-model-parallel-allreduce (store_false: the asynchronous "
     "TP all-reduce is on)"},
    {PP_SCATTER_GATHER, true, TP_PP_NO_SP,
     "megatron/arguments.py --no-scatter-gather-tensors-in-pipeline (store_false: on)"},
    {ZERO_STAGE, 0, ALWAYS, "megatron/arguments.py --use-distributed-optimizer (store_true: off)"},
    {GRAD_REDUCE_IN_FP32, true, SIXTEEN_BIT_BF16,
     "megatron/arguments.py: --bf16 forces accumulate_allreduce_grads_in_fp32"},
};

// The stacks on Transformer Engine (Megatron-Core, NeMo, Megatron Bridge) run its fused attention.
constexpr StackDefault TE_FUSED_ATTENTION = {
    ATTENTION_KERNEL, AttentionKernel::CUDNN, FUSED_ATTENTION,
    "Transformer Engine's get_attention_backend prefers FusedAttention (cuDNN) over FlashAttention on "
    "compute capability 9.0 and later"};

// Megatron-Core and the Megatron-LM built on it (core_v0.15, 2025; Megatron-LM from 2023 on).
constexpr StackDefault MEGATRON_CORE_0_15[] = {
    {FLASH_ATTENTION, true, ALWAYS,
     "megatron/training/arguments.py --transformer-impl transformer_engine and --attention-backend auto "
     "(defaults): Transformer Engine's fused attention"},
    {SP, false, ALWAYS, "megatron/training/arguments.py --sequence-parallel (store_true: off unless given)"},
    {TP_GRAD_OVERLAP, true, TP,
     "megatron/core/tensor_parallel/layers.py and Transformer Engine's linears: the TP collective beside "
     "the weight-gradient GEMM"},
    {PP_SCATTER_GATHER, false, TP_PP_NO_SP,
     "megatron/core/pipeline_parallel/p2p_communication.py sends whole tensors (the "
     "--no-scatter-gather-tensors-in-pipeline flag is read by no core code)"},
    {ZERO_STAGE, 0, ALWAYS, "megatron/training/arguments.py --use-distributed-optimizer (store_true: off)"},
    {OVERLAP_PARAM_GATHER, false, ALWAYS,
     "megatron/training/arguments.py --overlap-param-gather (default False)"},
    {GRAD_REDUCE_IN_FP32, true, SIXTEEN_BIT_BF16,
     "megatron/training/arguments.py: with --bf16, accumulate_allreduce_grads_in_fp32 unless "
     "--grad-reduce-in-bf16"},
    {POINTWISE, Pointwise::FUSED, ALWAYS,
     "Transformer Engine's LayerNormLinear / LayerNormMLP and Megatron's fused kernels (bias-GeLU, "
     "bias-dropout-add, fused RoPE)"},
    {TP_COMM_OVERLAP, false, TP_SP, "megatron/training/arguments.py --tp-comm-overlap (store_true: off)"},
    TE_FUSED_ATTENTION,
};

// NeMo 1.x (the 23.x framework containers, the NeMo-Framework-Launcher's YAML recipes).
constexpr StackDefault NEMO_23[] = {
    {FLASH_ATTENTION, true, ALWAYS,
     "GPT configs model.transformer_engine: True: Transformer Engine's fused attention"},
    {SP, true, TP_SPLITS_SEQUENCE,
     "launcher recipes model.sequence_parallel: True with tensor_model_parallel_size > 1 (e.g. "
     "conf/training/gpt3/175b.yaml)"},
    {TP_GRAD_OVERLAP, true, TP, "Megatron-Core / Transformer Engine linears"},
    {PP_SCATTER_GATHER, false, TP_PP_NO_SP, "Megatron-Core pipeline sends (whole tensors)"},
    {ZERO_STAGE, 1, ALWAYS, "model.optim.name: distributed_fused_adam (the distributed optimizer over DP)"},
    {OVERLAP_PARAM_GATHER, true, SHARDED_OPTIMIZER_DP, "model.optim.overlap_param_sync: True"},
    TE_FUSED_ATTENTION,
};

// NeMo 2.0 (24.07 container on): nemo/collections/llm/recipes/*.py.
constexpr StackDefault NEMO_24[] = {
    {FLASH_ATTENTION, true, ALWAYS,
     "Megatron-Core GPT models on Transformer Engine: fused attention (TE's backend selection)"},
    {SP, true, TP_SPLITS_SEQUENCE,
     "recipes' trainer(sequence_parallelism=True) -> MegatronStrategy sequence_parallel (e.g. "
     "recipes/llama3_70b.py)"},
    {TP_GRAD_OVERLAP, true, TP, "Megatron-Core / Transformer Engine linears"},
    {PP_SCATTER_GATHER, false, TP_PP_NO_SP, "Megatron-Core pipeline sends (whole tensors)"},
    {ZERO_STAGE, 1, ALWAYS,
     "recipes' optim=distributed_fused_adam_with_cosine_annealing (recipes/optim/adam.py: "
     "use_distributed_optimizer=True)"},
    {OVERLAP_PARAM_GATHER, true, SHARDED_OPTIMIZER_DP,
     "recipes' DistributedDataParallelConfig(overlap_param_gather=True)"},
    TE_FUSED_ATTENTION,
};

// Megatron-Bridge (the NeMo 25.09 container on): NeMo 2.0's recipe values plus its MoE and fp8.
constexpr StackDefault MEGATRON_BRIDGE_25[] = {
    {FLASH_ATTENTION, true, ALWAYS, "Megatron-Core models on Transformer Engine: fused attention"},
    {SP, true, TP_SPLITS_SEQUENCE, "recipes' sequence_parallel=True with tensor_model_parallel_size > 1"},
    {TP_GRAD_OVERLAP, true, TP, "Megatron-Core / Transformer Engine linears"},
    {PP_SCATTER_GATHER, false, TP_PP_NO_SP, "Megatron-Core pipeline sends (whole tensors)"},
    {ZERO_STAGE, 1, ALWAYS, "recipes' optimizer config use_distributed_optimizer=True"},
    {OVERLAP_PARAM_GATHER, true, SHARDED_OPTIMIZER_DP, "recipes' DDP config overlap_param_gather=True"},
    {FP8_PARAMS, true, FP8,
     "fp8 mixed-precision recipes (training/mixed_precision.py, e.g. bf16_with_fp8_current_scaling_mixed): "
     "fp8_param_gather=True"},
    {ETP, 1, MOE_TP, "MoE recipes: expert_tensor_parallel_size=1 (Megatron-Core MoE parallel folding)"},
    TE_FUSED_ATTENTION,
};

// DeepSpeed's PipelineEngine, in every DeepSpeed stack: its p2p in the instruction order.
constexpr StackDefault DEEPSPEED_BLOCKING_P2P = {
    PP_P2P_BLOCKING, true, PP_1F1B,
    "deepspeed/runtime/pipe/engine.py runs TrainSchedule's instructions in order (schedule.py: SendGrad "
    "then RecvActivation before a forward, RecvGrad then SendActivation before a backward); p2p.send / "
    "p2p.recv are dist.send / dist.recv, synchronous"};

// Megatron-DeepSpeed (bigscience-workshop/Megatron-DeepSpeed, BLOOM, 2022): Megatron-LM's layers
// of 2021 under DeepSpeed's engine.
constexpr StackDefault MEGATRON_DEEPSPEED_2022[] = {
    {FLASH_ATTENTION, false, ALWAYS,
     "megatron/model/transformer.py: unfused attention with FusedScaleMaskSoftmax"},
    {SP, false, ALWAYS, "no Megatron sequence parallelism (DeepSpeed's is Ulysses, another scheme)"},
    {TP_GRAD_OVERLAP, false, TP,
     "megatron/mpu/layers.py forked before Megatron-LM's asynchronous TP all-reduce"},
    {PP_SCATTER_GATHER, false, TP_PP_NO_SP,
     "DeepSpeed's PipelineEngine (deepspeed/runtime/pipe/engine.py) sends whole activations"},
    {ZERO_STAGE, 0, ALWAYS, "DeepSpeed config zero_optimization.stage (default 0)"},
    {GRAD_REDUCE_IN_FP32, true, SIXTEEN_BIT_BF16,
     "deepspeed/runtime/pipe/engine.py _exec_reduce_grads: under bf16, _bf16_reduce_grads all-reduces the "
     "BF16_Optimizer's fp32 gradients "
     "(buffered_allreduce_fallback(grads=optimizer.get_grads_for_reduction()))"},
    {GRAD_ACCUMULATION, GradAccumulation::FP32_PASS, SIXTEEN_BIT_BF16,
     "deepspeed/runtime/pipe/engine.py _exec_backward_pass: under bf16, optimizer.update_hp_grads() adds the "
     "bf16 gradients into the BF16_Optimizer's fp32 ones after every backward pass "
     "(deepspeed/runtime/bf16_optimizer.py)"},
    DEEPSPEED_BLOCKING_P2P,
};

// DeepSpeed ZeRO 0.3 (2021: ZeRO-3 as released with ZeRO-Infinity).
constexpr StackDefault DEEPSPEED_0_3[] = {
    {FLASH_ATTENTION, false, ALWAYS, "the model's own attention: unfused in 2021"},
    {TP_GRAD_OVERLAP, false, TP, "Megatron-style TP layers of the time: the all-reduce after the backward"},
    {PP_SCATTER_GATHER, false, TP_PP_NO_SP, "deepspeed/runtime/pipe/engine.py sends whole activations"},
    {ZERO_STAGE, 0, ALWAYS, "zero_optimization.stage (default 0)"},
    DEEPSPEED_BLOCKING_P2P,
    {ZERO3_FETCH, Zero3Fetch::BLOCKING, ZERO3,
     "deepspeed/runtime/zero/stage3.py of 0.3: a synchronize and a tensor-list all_gather per parameter "
     "tensor"},
};

// DeepSpeed ZeRO 0.6 (2022): flat-buffer prefetch of ZeRO-3 parameters.
constexpr StackDefault DEEPSPEED_0_6[] = {
    {FLASH_ATTENTION, false, ALWAYS, "the model's own attention (DeepSpeed does not replace it)"},
    {TP_GRAD_OVERLAP, false, TP,
     "Megatron-style TP layers under DeepSpeed: the all-reduce after the backward"},
    {PP_SCATTER_GATHER, false, TP_PP_NO_SP, "deepspeed/runtime/pipe/engine.py sends whole activations"},
    {ZERO_STAGE, 0, ALWAYS, "zero_optimization.stage (default 0)"},
    DEEPSPEED_BLOCKING_P2P,
    {ZERO3_FETCH, Zero3Fetch::PREFETCH, ZERO3,
     "zero_optimization.stage3_prefetch_bucket_size (default 5e7): parameters fetched ahead in flat buckets"},
};

// PyTorch FSDP1: torch.distributed.fsdp.FullyShardedDataParallel (PyTorch 2.0, 2023).
constexpr StackDefault FSDP_1[] = {
    {FLASH_ATTENTION, true, ALWAYS,
     "torch.nn.functional.scaled_dot_product_attention (PyTorch 2.0) runs the FlashAttention kernel on "
     "16-bit inputs"},
    {ZERO_STAGE, 3, ALWAYS,
     "FullyShardedDataParallel(sharding_strategy=ShardingStrategy.FULL_SHARD) (default)"},
    {GRAD_REDUCE_IN_FP32, false, ALWAYS,
     "MixedPrecision(reduce_dtype=None): gradients reduced in param_dtype"},
    {ATTENTION_KERNEL, AttentionKernel::FLASH2, FUSED_ATTENTION,
     "scaled_dot_product_attention's flash backend, first in its backend order (FlashAttention-2 kernels "
     "from PyTorch 2.2; 2.0 and 2.1 ran FlashAttention-1's, which no rate here models)"},
    {FP32_SHARDS, true, ZERO3,
     "MixedPrecision(param_dtype=bfloat16): the FlatParameter shard keeps the fp32 parameters the optimizer "
     "updates; the 16-bit copy exists only unsharded"},
};

// PyTorch FSDP2: torch.distributed.fsdp.fully_shard (PyTorch 2.4 on, 2024).
constexpr StackDefault FSDP_2[] = {
    {FLASH_ATTENTION, true, ALWAYS,
     "torch.nn.functional.scaled_dot_product_attention: FlashAttention kernel"},
    {SP, true, TP_SPLITS_SEQUENCE,
     "torch.distributed.tensor.parallel, the TP that composes with fully_shard: the 2-D (FSDP + TP) "
     "plans of PyTorch's tensor-parallel tutorial and examples shard the norms with SequenceParallel()"},
    {TP_GRAD_OVERLAP, false, TP,
     "torch.distributed.tensor.parallel (ColwiseParallel, RowwiseParallel): the input gradient's "
     "collective is the backward of a DTensor redistribute, which autograd runs after the linear's whole "
     "backward node (input and weight gradient matmuls)"},
    {ZERO_STAGE, 3, ALWAYS,
     "fully_shard(reshard_after_forward=True) (default): parameters, gradients, states sharded"},
    {GRAD_REDUCE_IN_FP32, false, ALWAYS,
     "MixedPrecisionPolicy(reduce_dtype=None): gradients reduced in param_dtype"},
    {ATTENTION_KERNEL, AttentionKernel::FLASH2, FUSED_ATTENTION,
     "scaled_dot_product_attention's default backend order tries FLASH_ATTENTION (FlashAttention-2) first; "
     "cuDNN attention led it on H100 in PyTorch 2.5.0 only and is last from 2.5.1 on "
     "(pytorch/pytorch#138522)"},
    {FP32_SHARDS, true, ZERO3,
     "MixedPrecisionPolicy(param_dtype=bfloat16): sharded parameters and gradients stay fp32 (the "
     "optimizer's), all-gathers cast to param_dtype"},
};

// torchtitan v0.1 (2025): FSDP2 with TP and its mixed-precision policy.
constexpr StackDefault TORCHTITAN_0_1[] = {
    {FLASH_ATTENTION, true, ALWAYS, "models use scaled_dot_product_attention (FlashAttention kernel)"},
    {SP, true, TP_SPLITS_SEQUENCE,
     "models/llama3/infra/parallelize.py: the TP plan shards the norms with SequenceParallel()"},
    {TP_GRAD_OVERLAP, false, TP,
     "torch.distributed.tensor.parallel (ColwiseParallel, PrepareModuleInput): the input gradient's "
     "reduce-scatter is the backward of a DTensor redistribute, which autograd runs after the linear's "
     "whole backward node (input and weight gradient matmuls)"},
    {ZERO_STAGE, 3, ALWAYS,
     "config_manager.py parallelism.data_parallel_shard_degree = -1: fully_shard over DP"},
    {GRAD_REDUCE_IN_FP32, true, ZERO3_BF16,
     "config_manager.py training.mixed_precision_param = bfloat16, mixed_precision_reduce = float32"},
    {POINTWISE, Pointwise::EAGER, ALWAYS,
     "config_manager.py: compile off by default (training.compile, later compile.enable): the "
     "llama3 model's RMSNorm, apply_rotary_emb (complex fp32) and repeat_kv run eagerly"},
    {TP_COMM_OVERLAP, false, TP_SP,
     "config_manager.py parallelism.enable_async_tensor_parallel = False (default; async TP needs "
     "compile)"},
    {ATTENTION_KERNEL, AttentionKernel::FLASH2, FUSED_ATTENTION,
     "scaled_dot_product_attention under PyTorch's backend order, FLASH_ATTENTION (FlashAttention-2) first "
     "(pytorch/pytorch#138522); torchtitan/models/attention.py of 2025 sets sdpa_kernel([FLASH_ATTENTION, "
     "EFFICIENT_ATTENTION, MATH], set_priority=True), cuDNN first only on compute capability 10.0"},
    {FP32_SHARDS, true, ZERO3,
     "fully_shard with MixedPrecisionPolicy(param_dtype=bfloat16) on an fp32 model: fp32 shards and "
     "gradients, bf16 only gathered"},
    {EXPANDABLE_SEGMENTS, true, ALWAYS,
     "run_train.sh (v0.1.0) launches torchrun with PYTORCH_CUDA_ALLOC_CONF=\"expandable_segments:True\" "
     "(PYTORCH_ALLOC_CONF in later releases)"},
    {FP8_WEIGHT_CACHE, false, FP8,
     "torchao.float8 Float8Linear (the float8 recipe of torchtitan's converters): the weight is cast to "
     "float8 in each forward and again in the backward, no fp8 copy kept between micro-batches"},
    {RESHARD_AFTER_FORWARD, false, ZERO3_PIPELINE,
     "models/llama3/infra/parallelize.py apply_fsdp: reshard_after_forward_policy \"default\" gives "
     "reshard_after_forward = not pp_enabled, to avoid per-micro-batch all-gathers; "
     "torch.distributed.pipelining then syncs and reshards the gradients after a stage's last backward only"},
    {FUSED_PROJECTIONS, false, DENSE_PLAIN_ATTENTION,
     "models/llama3/model.py: Attention holds wq, wk and wv and FeedForward w1, w2 and w3, each its own "
     "nn.Linear (the TP plan shards them one by one)"},
};

// MosaicML Composer with llm-foundry (v0.3, 2023).
constexpr StackDefault COMPOSER_0_3[] = {
    {FLASH_ATTENTION, true, ALWAYS,
     "scripts/train/yamls/pretrain/mpt-*.yaml attn_config.attn_impl: triton (FlashAttention in Triton; "
     "flash in later releases)"},
    {ZERO_STAGE, 3, ALWAYS, "the same yamls' fsdp_config.sharding_strategy: FULL_SHARD"},
    {GRAD_REDUCE_IN_FP32, false, ALWAYS,
     "fsdp_config.mixed_precision: PURE: parameters, gradient reductions and buffers in bf16"},
    {ATTENTION_KERNEL, AttentionKernel::FLASH2, FUSED_ATTENTION,
     "attn_impl: triton, the FlashAttention-2 algorithm in Triton (no cuDNN, no Hopper-specific kernel), "
     "costed as FlashAttention-2"},
    {FP32_SHARDS, true, ZERO3,
     "FSDP on a model built in fp32 (precision amp_bf16): the FlatParameter shard stays fp32"},
};

constexpr StackVersion MEGATRON_LM[] = {
    {"2021", 2021, MEGATRON_LM_2021, "v2.x (tags v2.5, v2.6, 2021)"},
    {"2022", 2022, MEGATRON_LM_2022, "main branch of 2022 (no release tag)"},
};
constexpr StackVersion MEGATRON_CORE[] = {
    {"0.15", 2025, MEGATRON_CORE_0_15, "core_v0.15 (2025-12); Megatron-LM from 2023 on"},
};
constexpr StackVersion NEMO[] = {
    {"23.11", 2023, NEMO_23, "NeMo 1.x framework containers (2023)"},
    {"24.07", 2024, NEMO_24, "NeMo 2.0 recipes (24.07 container on)"},
};
constexpr StackVersion MEGATRON_BRIDGE[] = {
    {"25.09", 2025, MEGATRON_BRIDGE_25, "the NeMo 25.09 container on (25.11 and 26.02 keep these values)"},
};
constexpr StackVersion MEGATRON_DEEPSPEED[] = {
    {"2022", 2022, MEGATRON_DEEPSPEED_2022, "bigscience-workshop/Megatron-DeepSpeed of 2022"},
};
constexpr StackVersion DEEPSPEED[] = {
    {"0.3", 2021, DEEPSPEED_0_3, "v0.3.x (2021)"},
    {"0.6", 2022, DEEPSPEED_0_6, "v0.6.x (2022)"},
};
constexpr StackVersion FSDP[] = {
    {"1", 2023, FSDP_1, "FullyShardedDataParallel, PyTorch 2.0 (2023)"},
    {"2", 2024, FSDP_2, "fully_shard, PyTorch 2.4 on (2024)"},
};
constexpr StackVersion TORCHTITAN[] = {
    {"0.1", 2025, TORCHTITAN_0_1, "v0.1.0 (2025-06)"},
};
constexpr StackVersion COMPOSER[] = {
    {"0.3", 2023, COMPOSER_0_3, "llm-foundry v0.3.0 (2023-09)"},
};

constexpr StackPreset PRESETS[] = {
    {"megatron-lm", "Megatron-LM before Megatron-Core", MEGATRON_LM},
    {"megatron-core", "Megatron-Core / Megatron-LM current", MEGATRON_CORE},
    {"nemo", "NVIDIA NeMo", NEMO},
    {"megatron-bridge", "NVIDIA Megatron-Bridge", MEGATRON_BRIDGE},
    {"megatron-deepspeed", "Megatron-DeepSpeed", MEGATRON_DEEPSPEED},
    {"deepspeed", "DeepSpeed (ZeRO)", DEEPSPEED},
    {"fsdp", "PyTorch FSDP", FSDP},
    {"torchtitan", "torchtitan (FSDP2)", TORCHTITAN},
    {"composer", "MosaicML Composer / llm-foundry", COMPOSER},
};

constexpr std::array<std::string_view, STACK_KEYS> KEY_PATHS = {
    "training.flash_attention",     "parallel.sp",
    "parallel.tp_grad_overlap",     "parallel.pp_scatter_gather",
    "parallel.zero_stage",          "training.overlap_param_gather",
    "training.grad_reduce_in_fp32", "training.zero3_fetch",
    "training.fp8_params",          "parallel.etp",
    "training.pointwise",           "parallel.tp_comm_overlap",
    "training.attention_kernel",    "training.fp32_shards",
    "training.grad_accumulation",   "parallel.pp_p2p_blocking",
    "training.expandable_segments", "training.reshard_after_forward",
    "training.fp8_weight_cache",    "training.fused_projections",
};

std::size_t index(StackKey k) {
  return static_cast<std::size_t>(k);
}

StackValue value_of(const WorkloadSpec& w, StackKey k) {
  switch (k) {
  case FLASH_ATTENTION:
    return w.training.flash_attention;
  case SP:
    return w.parallel.sp;
  case TP_GRAD_OVERLAP:
    return w.parallel.tp_grad_overlap;
  case PP_SCATTER_GATHER:
    return w.parallel.pp_scatter_gather;
  case ZERO_STAGE:
    return w.parallel.zero_stage;
  case OVERLAP_PARAM_GATHER:
    return w.training.overlap_param_gather;
  case GRAD_REDUCE_IN_FP32:
    return w.training.grad_reduce_in_fp32;
  case ZERO3_FETCH:
    return w.training.zero3_fetch;
  case FP8_PARAMS:
    return w.training.fp8_params;
  case ETP:
    return w.parallel.etp;
  case POINTWISE:
    return w.training.pointwise;
  case TP_COMM_OVERLAP:
    return w.parallel.tp_comm_overlap;
  case ATTENTION_KERNEL:
    return w.training.attention_kernel;
  case FP32_SHARDS:
    return w.training.fp32_shards;
  case GRAD_ACCUMULATION:
    return w.training.grad_accumulation;
  case PP_P2P_BLOCKING:
    return w.parallel.pp_p2p_blocking;
  case EXPANDABLE_SEGMENTS:
    return w.training.expandable_segments;
  case RESHARD_AFTER_FORWARD:
    return w.training.reshard_after_forward;
  case FP8_WEIGHT_CACHE:
    return w.training.fp8_weight_cache;
  case FUSED_PROJECTIONS:
    return w.training.fused_projections;
  }
  return false;
}

void set_value(WorkloadSpec& w, StackKey k, const StackValue& v) {
  switch (k) {
  case FLASH_ATTENTION:
    w.training.flash_attention = std::get<bool>(v);
    break;
  case SP:
    w.parallel.sp = std::get<bool>(v);
    break;
  case TP_GRAD_OVERLAP:
    w.parallel.tp_grad_overlap = std::get<bool>(v);
    break;
  case PP_SCATTER_GATHER:
    w.parallel.pp_scatter_gather = std::get<bool>(v);
    break;
  case ZERO_STAGE:
    w.parallel.zero_stage = std::get<int>(v);
    break;
  case OVERLAP_PARAM_GATHER:
    w.training.overlap_param_gather = std::get<bool>(v);
    break;
  case GRAD_REDUCE_IN_FP32:
    w.training.grad_reduce_in_fp32 = std::get<bool>(v);
    break;
  case ZERO3_FETCH:
    w.training.zero3_fetch = std::get<Zero3Fetch>(v);
    break;
  case FP8_PARAMS:
    w.training.fp8_params = std::get<bool>(v);
    break;
  case ETP:
    w.parallel.etp = std::get<int>(v);
    break;
  case POINTWISE:
    w.training.pointwise = std::get<Pointwise>(v);
    break;
  case TP_COMM_OVERLAP:
    w.parallel.tp_comm_overlap = std::get<bool>(v);
    break;
  case ATTENTION_KERNEL:
    w.training.attention_kernel = std::get<AttentionKernel>(v);
    break;
  case FP32_SHARDS:
    w.training.fp32_shards = std::get<bool>(v);
    break;
  case GRAD_ACCUMULATION:
    w.training.grad_accumulation = std::get<GradAccumulation>(v);
    break;
  case PP_P2P_BLOCKING:
    w.parallel.pp_p2p_blocking = std::get<bool>(v);
    break;
  case RESHARD_AFTER_FORWARD:
    w.training.reshard_after_forward = std::get<bool>(v);
    break;
  case FP8_WEIGHT_CACHE:
    w.training.fp8_weight_cache = std::get<bool>(v);
    break;
  case FUSED_PROJECTIONS:
    w.training.fused_projections = std::get<bool>(v);
    break;
  case EXPANDABLE_SEGMENTS:
    w.training.expandable_segments = std::get<bool>(v);
    break;
  }
}

/// The spec's defaults (spec.hpp, docs/schema.md).
const WorkloadSpec& built_in() {
  static const WorkloadSpec defaults;
  return defaults;
}

} // namespace

std::span<const StackPreset> stack_presets() {
  return PRESETS;
}

const StackPreset* find_stack(std::string_view name) {
  for (const StackPreset& p : PRESETS)
    if (p.name == name)
      return &p;
  return nullptr;
}

const StackVersion* find_version(const StackPreset& preset, std::string_view version) {
  if (version.empty())
    return &preset.versions.back();
  for (const StackVersion& v : preset.versions)
    if (v.version == version)
      return &v;
  return nullptr;
}

const StackVersion& version_of_year(const StackPreset& preset, int year) {
  const StackVersion* best = &preset.versions.front();
  for (const StackVersion& v : preset.versions)
    if (v.released <= year)
      best = &v;
  return *best;
}

const StackDefault* stack_default(const StackVersion& version, StackKey key) {
  for (const StackDefault& d : version.defaults)
    if (d.key == key)
      return &d;
  return nullptr;
}

std::string known_stacks() {
  std::string out;
  for (const StackPreset& p : PRESETS) {
    out += (out.empty() ? "" : ", ") + std::string(p.name) + " (";
    for (const StackVersion& v : p.versions)
      out += std::string(&v == &p.versions.front() ? "" : ", ") + std::string(v.version);
    out += ")";
  }
  return out;
}

std::string_view stack_key_path(StackKey key) {
  return KEY_PATHS[index(key)];
}

std::string to_string(const StackValue& value) {
  if (const bool* b = std::get_if<bool>(&value))
    return *b ? "true" : "false";
  if (const int* i = std::get_if<int>(&value))
    return std::to_string(*i);
  if (const Pointwise* p = std::get_if<Pointwise>(&value))
    return *p == Pointwise::EAGER ? "eager" : "fused";
  if (const AttentionKernel* a = std::get_if<AttentionKernel>(&value))
    return std::string(detail::name_of(detail::ATTENTION_KERNEL_NAMES, *a));
  if (const GradAccumulation* g = std::get_if<GradAccumulation>(&value))
    return std::string(detail::name_of(detail::GRAD_ACCUMULATION_NAMES, *g));
  return std::get<Zero3Fetch>(value) == Zero3Fetch::BLOCKING ? "blocking" : "prefetch";
}

std::string_view to_string(StackWhen when) {
  switch (when) {
  case ALWAYS:
    return "";
  case TP:
    return "tp > 1";
  case TP_PP_NO_SP:
    return "tp > 1, pp > 1 and no sp";
  case TP_SPLITS_SEQUENCE:
    return "tp > 1 and seq_len % tp == 0";
  case SHARDED_OPTIMIZER_DP:
    return "zero_stage 1 or 2 and dp > 1";
  case SIXTEEN_BIT_BF16:
    return "precision bf16 or fp8";
  case FP8:
    return "precision fp8";
  case ZERO3:
    return "zero_stage 3";
  case ZERO3_BF16:
    return "zero_stage 3 and precision bf16 or fp8";
  case MOE_TP:
    return "a mixture-of-experts model and tp > 1";
  case TP_SP:
    return "tp > 1 and sp";
  case FUSED_ATTENTION:
    return "flash_attention";
  case PP_1F1B:
    return "pp > 1 and schedule 1f1b";
  case ZERO3_PIPELINE:
    return "zero_stage 3, pp > 1, dp > 1, a dense model, zero3_fetch prefetch and a schedule that does not "
           "split the backward";
  case DENSE_PLAIN_ATTENTION:
    return "a dense model with plain attention";
  }
  return "";
}

bool stack_applies(StackWhen when, const WorkloadSpec& w, int64_t dp) {
  const ParallelSpec& p = w.parallel;
  switch (when) {
  case ALWAYS:
    return true;
  case TP:
    return p.tp > 1;
  case TP_PP_NO_SP:
    return p.tp > 1 && p.pp > 1 && !p.sp;
  case TP_SPLITS_SEQUENCE:
    return p.tp > 1 && w.model.seq_len % p.tp == 0;
  case SHARDED_OPTIMIZER_DP:
    return (p.zero_stage == 1 || p.zero_stage == 2) && dp > 1;
  case SIXTEEN_BIT_BF16:
    return w.precision != Precision::FP16;
  case FP8:
    return w.precision == Precision::FP8;
  case ZERO3:
    return p.zero_stage == 3;
  case ZERO3_BF16:
    return p.zero_stage == 3 && w.precision != Precision::FP16;
  case MOE_TP:
    return w.model.moe.enabled() && p.tp > 1;
  case TP_SP:
    return p.tp > 1 && p.sp;
  case FUSED_ATTENTION:
    return w.training.flash_attention;
  case PP_1F1B:
    return p.pp > 1 && p.schedule == Schedule::ONE_F_ONE_B;
  case ZERO3_PIPELINE:
    return p.zero_stage == 3 && p.pp > 1 && dp * std::max(1, p.cp) > 1 && !w.model.moe.enabled() &&
           w.training.zero3_fetch == Zero3Fetch::PREFETCH && !splits_backward(p.schedule);
  case DENSE_PLAIN_ATTENTION:
    return !w.model.moe.enabled() && !w.model.mla.enabled();
  }
  return false;
}

void expand_stack(WorkloadSpec& w, int64_t dp) {
  const StackPreset* preset = w.stack.name.empty() ? nullptr : find_stack(w.stack.name);
  const StackVersion* version = preset != nullptr ? find_version(*preset, w.stack.version) : nullptr;
  // zero_stage first: the conditions of the others read it.
  // tp_comm_overlap after sp, attention_kernel after flash_attention: their conditions read them.
  constexpr std::array ORDER = {ZERO_STAGE,
                                FLASH_ATTENTION,
                                SP,
                                TP_GRAD_OVERLAP,
                                PP_SCATTER_GATHER,
                                OVERLAP_PARAM_GATHER,
                                GRAD_REDUCE_IN_FP32,
                                ZERO3_FETCH,
                                FP8_PARAMS,
                                ETP,
                                POINTWISE,
                                TP_COMM_OVERLAP,
                                ATTENTION_KERNEL,
                                FP32_SHARDS,
                                GRAD_ACCUMULATION,
                                PP_P2P_BLOCKING,
                                EXPANDABLE_SEGMENTS,
                                RESHARD_AFTER_FORWARD,
                                FP8_WEIGHT_CACHE,
                                FUSED_PROJECTIONS};
  static_assert(ORDER.size() == STACK_KEYS);
  for (const StackKey k : ORDER) {
    StackOrigin& origin = w.stack.origin[index(k)];
    const StackDefault* d = version != nullptr ? stack_default(*version, k) : nullptr;
    if (w.stack.wrote(k)) {
      origin = StackOrigin::WORKLOAD_FILE;
    } else if (d == nullptr) {
      origin = StackOrigin::BUILT_IN;
    } else if (stack_applies(d->when, w, dp)) {
      set_value(w, k, d->value);
      origin = StackOrigin::STACK;
    } else {
      set_value(w, k, value_of(built_in(), k));
      origin = StackOrigin::BUILT_IN;
    }
  }
}

std::vector<std::string> explain_stack(const WorkloadSpec& w) {
  const StackPreset* preset = w.stack.name.empty() ? nullptr : find_stack(w.stack.name);
  const StackVersion* version = preset != nullptr ? find_version(*preset, w.stack.version) : nullptr;
  const std::string stack =
      version != nullptr ? std::string(preset->name) + "@" + std::string(version->version) : "";
  std::vector<std::string> lines;
  lines.push_back("training.stack = " + (stack.empty() ? std::string("none") : stack));
  for (std::size_t i = 0; i < STACK_KEYS; ++i) {
    const auto k = static_cast<StackKey>(i);
    const StackDefault* d = version != nullptr ? stack_default(*version, k) : nullptr;
    std::string line = std::string(stack_key_path(k)) + " = " + to_string(value_of(w, k)) + "  (";
    switch (w.stack.origin[i]) {
    case StackOrigin::WORKLOAD_FILE:
      line += "workload file";
      if (d != nullptr)
        line += "; " + stack + " gives " + to_string(d->value);
      break;
    case StackOrigin::STACK:
      line += "stack " + stack + ": " + std::string(d->source);
      break;
    case StackOrigin::BUILT_IN:
      line += "built-in default";
      if (d != nullptr)
        line += "; " + stack + "'s " + to_string(d->value) + " needs " + std::string(to_string(d->when));
      break;
    }
    lines.push_back(line + ")");
  }
  return lines;
}

} // namespace stepsim::config
