#include "config/schema.hpp"

#include <initializer_list>
#include <map>
#include <stdexcept>

namespace stepsim::config::schema {

namespace {

// The cluster file (ClusterSpec).
constexpr Key CLUSTER_KEYS[] = {
    {"name", "string", "required", "non-empty", "cluster name (`name`)"},
    {"nodes", "integer", "required", ">= 1", "number of nodes (`nodes`)"},
    {"gpus_per_node", "integer", "required", ">= 1; `nodes * gpus_per_node` <= 2^31-1",
     "GPUs in one node (`gpus_per_node`)"},
    {"gpu", "mapping", "required", "", "the GPU model (`gpu`)"},
    {"gpu.kind", "string", "required", "non-empty", "GPU name, e.g. `H100-SXM5-80GB` (`gpu.kind`)"},
    {"gpu.peak_flops", "mapping", "required", "at least one of `bf16`, `fp16`",
     "dense tensor-core peak per precision"},
    {"gpu.peak_flops.bf16", "FLOP rate", "optional, absent = GPU has no bf16", "> 0",
     "`gpu.peak_bf16` (0 when absent)"},
    {"gpu.peak_flops.fp16", "FLOP rate", "optional, absent = GPU has no fp16", "> 0",
     "`gpu.peak_fp16` (0 when absent)"},
    {"gpu.peak_flops.fp8", "FLOP rate", "optional, absent = GPU has no fp8 tensor cores", "> 0",
     "`gpu.peak_fp8` (0 when absent); the fp8 GEMMs of `precision: fp8` and its MFU denominator"},
    {"gpu.hbm_capacity", "byte size", "required", "> 0", "device memory (`gpu.hbm_capacity`)"},
    {"gpu.hbm_bandwidth", "bandwidth", "required", "> 0", "peak HBM bandwidth (`gpu.hbm_bandwidth`)"},
    {"gpu.compute_efficiency", "number", "required", "in [0.001, 1]",
     "fraction of peak FLOP/s reached by large GEMMs (`gpu.compute_efficiency`)"},
    {"gpu.memory_efficiency", "number", "required", "in [0.001, 1]",
     "fraction of HBM bandwidth reached (`gpu.memory_efficiency`)"},
    {"gpu.runtime_overhead", "byte size", "optional, **1GiB**", ">= 0",
     "device memory the job cannot use: CUDA context, cuBLAS and NCCL workspaces "
     "(`gpu.runtime_overhead`; the memory ledger's `runtime`)"},
    {"gpu.allocator_fragmentation", "number", "optional, **1.1**", ">= 1",
     "caching-allocator overhead on dynamic memory: the ledger adds (this - 1) x the dynamic peak "
     "(`gpu.allocator_fragmentation`)"},
    {"gpu.profile", "path or `none`", "optional, **none**", "an existing file",
     "kernel profile compute times come from (docs/kernels.md); relative to the cluster file's "
     "directory (to the working directory when given with `--set`). `none`/absent: the roofline from "
     "the two efficiencies above. Absent is not guessed from `gpu.kind`, so a cluster file means the "
     "same wherever it lies; the bundled topologies name `../kernels_profiles/data/<kind>.csv` "
     "(`gpu.profile`, resolved)"},
    {"gpu.overlap_slowdown", "number", "optional, **the profile's** (1 without one)", "1 .. 10",
     "compute slowdown while the GPU communicates (`gpu.overlap_slowdown`, 0 = unset)"},
    {"gpu.gemm_efficiency", "number", "optional, **1**", "(0, 1]",
     "calibration ([calibration.md](calibration.md)): with a profile, GEMM and attention kernel times "
     "are divided by it (`gpu.gemm_efficiency`)"},
    {"gpu.memory_bound_efficiency", "number", "optional, **1**", "(0, 1]",
     "calibration ([calibration.md](calibration.md)): with a profile, the times of every other kernel "
     "(norms, activations, softmax, residual adds, casts, copies, the optimizer) are divided by it"},
    {"gpu.launch_overhead", "time", "optional, **the profile's** `launch_overhead_s`", ">= 0",
     "calibration: fixed cost added per kernel (`gpu.launch_overhead`, negative = unset)"},
    {"gpu.pass_overhead", "time", "optional, **0**", ">= 0",
     "calibration: fixed host-side cost of each pipeline pass (one micro-batch through one model "
     "chunk, forward or backward: the framework's schedule step and its p2p setup), added to the "
     "pass's first compute task and counted as compute (`gpu.pass_overhead`)"},
    {"gpu.list_collective_per_rank", "time", "optional, **0**", ">= 0",
     "calibration: host time a tensor-list collective spends per participant before its transfer (a "
     "view and a copy launch per rank); charged, times the DP group's size, to each ZeRO-3 collective "
     "under `training.zero3_fetch: blocking` and shown as that collective's (exposed DP) time "
     "(docs/calibration.md)"},
    {"gpu.host_bandwidth", "bandwidth", "optional, absent = not given; required by `training.offload_layers`",
     "> 0",
     "GPU ↔ host memory per direction and GPU (PCIe, NVLink-C2C): the rate of activation offloading "
     "([model.md](model.md))"},
    {"gpu.host_memory", "byte size", "optional, absent = not checked", "> 0",
     "host memory per GPU (the node's RAM over its GPUs): the offloaded activations must fit in it "
     "too, or the layout does not fit (`memory.host_offload_bytes`, `memory.oom.host_over_by_bytes`)"},
    {"nvswitch", "mapping", "required", "", "the GPU <-> NVSwitch link of one GPU (`nvswitch`)"},
    {"nvswitch.bandwidth", "bandwidth", "required", "> 0", "per GPU, **per direction**"},
    {"nvswitch.latency", "time", "required", ">= 0", "one-way latency through the NVSwitch"},
    {"nvswitch.efficiency", "number", "required", "in [0.001, 1]",
     "achieved fraction of `bandwidth` (NCCL bus bandwidth / link bandwidth)"},
    {"nvswitch.nvls", "mapping", "optional, absent = no NVLink SHARP", "",
     "NVLink SHARP (in-switch reduction) of the NVSwitch (`nvls`; docs/collectives.md)"},
    {"nvswitch.nvls.efficiency", "number", "required in `nvls`", "in [0.001, 1]",
     "achieved fraction of `nvswitch.bandwidth` for an NVLS all-reduce (`nvls.efficiency`)"},
    {"nvswitch.nvls.latency", "time", "required in `nvls`", ">= 0",
     "fixed cost of one NVLS collective: launch and multimem synchronisation (`nvls.latency`)"},
    {"pcie", "mapping", "instead of `nvswitch`", "not with `nvswitch`",
     "the GPUs of a node talk over PCIe through a switch or host bridge (`intra = PCIE`; the link is "
     "stored as `nvswitch`)"},
    {"pcie.bandwidth", "bandwidth", "required", "> 0", "per GPU, **per direction**, GPU <-> PCIe switch"},
    {"pcie.latency", "time", "required", ">= 0", "one-way latency through the PCIe switch"},
    {"pcie.efficiency", "number", "required", "in [0.001, 1]", "achieved fraction of `bandwidth`"},
    {"pcie.host_bandwidth", "bandwidth", "optional, absent = unlimited", "> 0",
     "shared bandwidth of the switch/host bridge per direction (`pcie_host_bandwidth`)"},
    {"nics", "mapping", "required", "", "the node's network adapters"},
    {"nics.count", "integer", "required", ">= 1", "NICs per node (`nics_per_node`)"},
    {"nics.bandwidth", "bandwidth", "required", "> 0", "**per NIC, per direction** (`nic.bandwidth`)"},
    {"nics.latency", "time", "required", ">= 0",
     "one-way latency node to node through the NICs (`nic.latency`)"},
    {"nics.efficiency", "number", "required", "in [0.001, 1]",
     "achieved fraction of `bandwidth` (`nic.efficiency`)"},
    {"fabric", "mapping", "required", "", "the inter-node network (`fabric`)"},
    {"fabric.kind", "enum", "required", "`fat_tree`, `rail_optimized`, `graph`",
     "`fat_tree`: nodes under leaves (all NICs of a node on its leaf); `rail_optimized`: scalable "
     "units of `nodes_per_leaf` nodes, NIC k of every node of a unit on leaf (unit, k), all leaves "
     "under one spine; cross-rail traffic goes through the spine (PXN is applied by the all-to-all "
     "algorithm, docs/collectives.md); `graph`: the switches, links and attachments below "
     "(`fabric.kind`)"},
    {"fabric.nodes_per_leaf", "integer", "optional, **1**", ">= 1",
     "nodes under one leaf switch. It need not divide `nodes`: the last leaf may be partly filled, and"
     " a value larger than `nodes` puts all nodes under one leaf."},
    {"fabric.oversubscription", "number", "optional, **1**", ">= 1",
     "leaf downlink : uplink bandwidth ratio; 1 = non-blocking"},
    {"fabric.switch_latency", "time", "optional, **0.5us**", ">= 0",
     "added per switch traversed between nodes"},
    {"fabric.tiers", "integer", "optional, **2**", "2 or 3; `fat_tree` only",
     "3: leaves grouped into pods under a pod spine, pods under a core (`fabric.tiers`)"},
    {"fabric.leaves_per_pod", "integer", "required with `tiers: 3`", ">= 1",
     "leaves under one pod spine (`fabric.leaves_per_pod`)"},
    {"fabric.spine_oversubscription", "number", "optional, **1**; `tiers: 3` only", ">= 1",
     "pod spine down:up ratio: a pod's core uplinks carry its leaves' uplink capacity / this "
     "(`fabric.spine_oversubscription`)"},
    {"fabric.switches", "list of names", "required for `graph`", "unique, non-empty",
     "the fabric's switches (`fabric.switches`)"},
    {"fabric.links", "list", "required for `graph`", "",
     "full-duplex cables `{between: [A, B], bandwidth: BW, latency: T}`; bandwidth per direction; "
     "latency optional, default 0, `switch_latency` comes on top per switch entered; several cables "
     "between the same pair add up (`fabric.links`)"},
    {"fabric.links[].between", "list of two names", "required", "two different `fabric.switches`",
     "the switches the cable joins (`GraphLink::a`, `b`)"},
    {"fabric.links[].bandwidth", "bandwidth", "required", "> 0", "per direction (`GraphLink::bandwidth`)"},
    {"fabric.links[].latency", "time", "optional, **0**", ">= 0",
     "of the cable; `switch_latency` comes on top per switch entered (`GraphLink::latency`)"},
    {"fabric.attach", "list", "required for `graph`", "every node exactly once",
     "`{nodes: [first, last], switch: S}` puts every NIC of those nodes on S; `{nodes: [first, last], "
     "rails: [S0, S1, ...]}` puts NIC k on Sk (one per NIC). Every switch holding a NIC must be "
     "connected to the others. Routes take the fewest links (`fabric.nic_switch`)"},
    {"fabric.attach[].nodes", "list of two integers", "required", "first <= last < `nodes`",
     "the nodes [first, last] of the entry"},
    {"fabric.attach[].switch", "name", "exactly one of `switch`, `rails`", "one of `fabric.switches`",
     "every NIC of the nodes hangs off this switch"},
    {"fabric.attach[].rails", "list of names", "exactly one of `switch`, `rails`",
     "`nics.count` of `fabric.switches`", "NIC k of each node hangs off the k-th switch"},
};

// The workload file (WorkloadSpec).
constexpr Key WORKLOAD_KEYS[] = {
    {"name", "string", "required", "non-empty", "workload name (`name`)"},
    {"model", "mapping", "required", "", "the transformer (`model`)"},
    {"model.name", "string", "optional, **the top-level `name`**", "non-empty",
     "display name (`model.name`)"},
    {"model.from_hf", "string", "optional", "an existing file, relative to the workload file",
     "a Hugging Face `config.json` (llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, "
     "deepseek_v2, deepseek_v3, gpt_oss) whose architecture gives the defaults of the model keys "
     "(`head_dim` too; DeepSeek's `mla`; `sliding_window` and `full_attention_every`) (`dropout` from "
     "`attention_dropout` > 0: these families have no hidden dropout); with it `layers`, `hidden`, "
     "`heads`, `ffn_hidden`, `vocab`, `seq_len`, `mlp` become optional and keys given here override it"
     " ([moe.md](moe.md#models-from-hugging-face))"},
    {"model.layers", "integer", "required", ">= 1", "transformer layers l"},
    {"model.hidden", "integer", "required", ">= 1", "hidden size h"},
    {"model.heads", "integer", "required", ">= 1, divides `model.hidden` unless `model.head_dim` is given",
     "attention heads a"},
    {"model.kv_heads", "integer", "optional, **= `model.heads`**", ">= 1, divides `model.heads`",
     "key/value heads (GQA/MQA when < heads)"},
    {"model.head_dim", "integer", "optional, **= `model.hidden / model.heads`**", "1 .. 65 536",
     "width d of one attention head, where a model sets it apart (Qwen3, Mistral NeMo): Q and the "
     "output projection are h × a·d, K and V h × a_kv·d, and the attention kernels run d "
     "([model.md](model.md))"},
    {"model.mla", "mapping", "optional, absent = plain attention",
     "needs kv_heads = heads, no `head_dim`, `bias: false`",
     "multi-head latent attention (DeepSeek-V2/V3; [model.md](model.md#multi-head-latent-attention))"},
    {"model.mla.q_lora_rank", "integer", "optional, **0**", "0..2^20",
     "rank of the query latent; 0: one full query projection (DeepSeek-V2-Lite)"},
    {"model.mla.kv_lora_rank", "integer",
     "required in `mla` (optional over a `from_hf` config's MLA: each key overrides its one value)",
     "1..2^20", "rank of the shared key/value latent"},
    {"model.mla.qk_nope_head_dim", "integer", "required in `mla`", ">= 1",
     "per-head query/key width without rotary embedding"},
    {"model.mla.qk_rope_head_dim", "integer", "optional, **0**", ">= 0",
     "rotary query/key width (the key's rotary part is shared by all heads)"},
    {"model.mla.v_head_dim", "integer", "required in `mla`", ">= 1", "per-head value width"},
    {"model.ffn_hidden", "integer", "required", ">= 1", "MLP inner size f"},
    {"model.vocab", "integer", "required", ">= 1", "vocabulary size V"},
    {"model.seq_len", "integer", "required", ">= 1", "tokens per sequence s"},
    {"model.mlp", "enum", "required", "`gelu`, `swiglu`", "MLP kind; also selects the family defaults below"},
    {"model.norm", "enum", "optional, **by family**", "`layernorm`, `rmsnorm`", "normalisation"},
    {"model.position_embedding", "enum", "optional, **by family**", "`learned`, `rotary`",
     "`learned` adds an s·h table"},
    {"model.bias", "boolean", "optional, **by family**", "", "linear layers carry biases"},
    {"model.tied_embeddings", "boolean", "optional, **by family**", "",
     "the output layer shares the input embedding"},
    {"model.dropout", "boolean", "optional, **true**", "",
     "hidden and attention dropout: the ledger keeps their masks (Korthikanti's 34·sbh + 5·a·s²·b per "
     "layer; without: 32·sbh + 2·a·s²·b) and the unfused attention core runs a dropout pass; most "
     "models trained since 2023 (Llama, Mistral, MPT, Nemotron) use none"},
    {"model.moe", "mapping", "optional, absent = dense", "", "mixture of experts ([moe.md](moe.md))"},
    {"model.moe.experts", "integer", "required in `moe` (unless from_hf gives it)", ">= 1",
     "routed experts E per MoE layer"},
    {"model.moe.top_k", "integer", "optional, **1**", "1..experts", "experts each token is routed to"},
    {"model.moe.expert_ffn_hidden", "integer", "optional, **= `model.ffn_hidden`**", ">= 1",
     "inner size f_e of one expert"},
    {"model.moe.shared_experts", "integer", "optional, **0**", ">= 0", "always-active experts of size f_e"},
    {"model.moe.capacity_factor", "number", "optional, **0**", "0 or >= 1",
     "an expert keeps at most factor x its fair share of tokens, the rest is dropped; 0 = no limit"},
    {"model.moe.moe_layer_freq", "integer", "optional, **1**", ">= 1",
     "layer l is MoE when l >= first_dense_layers and l % freq == 0"},
    {"model.moe.first_dense_layers", "integer", "optional, **0**", "< layers",
     "leading dense layers (DeepSeek-V3: 3)"},
    {"model.moe.routing", "mapping", "optional", "",
     "how tokens spread over the routed experts (`moe.routing`; [moe.md](moe.md))"},
    {"model.moe.routing.distribution", "enum", "optional, **uniform**", "`uniform`, `zipf`",
     "tokens per expert"},
    {"model.moe.routing.zipf_exponent", "number", "optional, **1**", ">= 0",
     "share of the expert of popularity rank r ∝ r^-x"},
    {"model.moe.routing.seed", "integer", "optional, **0**", ">= 0",
     "picks the popular experts of each layer (SplitMix64)"},
    {"model.moe.routing.groups", "integer", "optional, **0** (DeepSeek's `n_group` when `from_hf`)",
     "0..65536; > 0 divides experts",
     "group-limited routing: the experts form this many equal groups, a token's experts come from "
     "`group_top_k` of them; it shrinks the deduplicated dispatch's cross-node traffic when the groups"
     " are the EP group's nodes ([moe.md](moe.md#moe-layers)); 0 = no limit"},
    {"model.moe.routing.group_top_k", "integer", "optional, **0** (DeepSeek's `topk_group` when `from_hf`)",
     "0..65536; with groups: 1 <= group_top_k <= groups and their experts hold top_k",
     "groups a token's experts come from"},
    {"model.sliding_window", "integer", "optional, **0** (the Hugging Face config's when `from_hf`)",
     "0..2^27",
     "sliding-window attention: a query of a windowed layer attends to the last this-many positions; "
     "0: no window ([model.md](model.md#sliding-window-attention))"},
    {"model.full_attention_every", "integer", "optional, **0**", "0..100000; > 0 needs `sliding_window`",
     "layers i with (i + 1) % n == 0 attend to the whole sequence, the others through the window "
     "(gpt-oss, Gemma 2: 2; Gemma 3: 6); 0: every layer windowed. `parallel.cp` > 1 needs a window of "
     "at least seq_len / 2"},
    {"model.mtp_layers", "integer",
     "optional, **0** (the Hugging Face config's `num_nextn_predict_layers` when `from_hf`)", "0..16",
     "multi-token prediction depth (DeepSeek-V3): per depth one more layer, a 2h → h projection and "
     "the logits again on the last pipeline stage ([model.md](model.md#multi-token-prediction))"},
    {"batch", "mapping", "required", "", "sequences per step and per micro-batch (`batch`)"},
    {"batch.global_batch", "integer", "required", ">= 1",
     "sequences per optimizer step, all DP replicas together"},
    {"batch.micro_batch", "integer", "required", ">= 1", "sequences per micro-batch per replica"},
    {"parallel", "mapping", "required", "", "the layout (`parallel`)"},
    {"parallel.tp", "integer", "required", ">= 1", "tensor-parallel size"},
    {"parallel.pp", "integer", "required", ">= 1", "pipeline-parallel size"},
    {"parallel.dp", "integer", "optional, **derived**", ">= 1",
     "data-parallel size; when omitted it is 0 after loading (the `ParallelSpec` default) and "
     "`check_layout`'s `Layout` holds GPUs / (tp·cp·pp)"},
    {"parallel.schedule", "enum", "required", "`gpipe`, `1f1b`, `interleaved`, `zb-h1`, `zb-h2`",
     "pipeline schedule (`Schedule::GPIPE`, `ONE_F_ONE_B`, `INTERLEAVED`, `ZB_H1`, `ZB_H2`; "
     "docs/schedules.md)"},
    {"parallel.vp", "integer", "optional, **1**", ">= 1; >= 2 exactly with `interleaved` (layout check)",
     "virtual stages (model chunks) per GPU for the interleaved schedule"},
    {"parallel.sp", "boolean", "optional, **false**", "needs tp > 1 (layout check)",
     "Megatron sequence parallelism"},
    {"parallel.pp_scatter_gather", "boolean", "optional, **false**", "—",
     "Megatron-LM's scatter/gather of pipeline messages: without sp, each TP rank sends 1/tp of the "
     "b·s·h activation (or gradient) to the next stage, and the receiving TP group all-gathers it (a "
     "TP all-gather before the next compute). No effect with sp = true (already split) or tp = 1. "
     "Megatron-LM 2021–22 does this by default; DeepSpeed's pipeline engine and Megatron-Core do not"},
    {"parallel.tp_grad_overlap", "boolean", "optional, **true**", "—",
     "In the backward, the TP collective summing each column-parallel linear's input gradient (QKV, "
     "fc1, the output layer: the all-reduce, or with sp the reduce-scatter) runs beside that linear's "
     "weight-gradient GEMM, and with sp the re-gather of its input beside the data-gradient GEMM "
     "(Megatron-LM's asynchronous TP all-reduce from 2022, Megatron-Core, NeMo, Transformer Engine). "
     "false: after the block's whole backward (Megatron-LM 2021, Megatron-DeepSpeed). No effect with "
     "tp = 1; docs/model.md, \"TP in the backward\""},
    {"parallel.zero_stage", "integer", "optional, **0**", "0..3", "ZeRO stage; 3 = FSDP full shard"},
    {"parallel.cp", "integer", "optional, **1**", ">= 1, divides seq_len (layout check)",
     "context parallelism (ring attention); GPUs = tp·cp·pp·dp "
     "([moe.md](moe.md#context-parallelism-ring-attention))"},
    {"parallel.ep", "integer", "optional, **1**",
     ">= 1, divides dp (tp·cp·dp with `etp: 1` below tp) and `model.moe.experts` (layout check)",
     "expert parallelism; subdivides DP ([moe.md](moe.md#rank-order-and-groups))"},
    {"parallel.etp", "integer", "optional, **= tp**",
     "1 or tp; needs `model.moe`; 1 below tp needs `sp: true` (layout check)",
     "expert tensor parallelism: tp splits every expert like the dense MLP; 1 keeps experts whole and "
     "folds the EP groups over the TP ranks (Megatron-Core's MoE parallel folding, "
     "[moe.md](moe.md#rank-order-and-groups))"},
    {"parallel.ep_overlap", "boolean", "optional, **false**",
     "needs MoE with ep >= 2, `schedule: interleaved` when pp > 1 (`1f1b` when pp = 1), recompute not "
     "`full` (layout check)",
     "combined 1F1B: each steady-state forward runs with the adjacent backward of another micro-batch,"
     " hiding the expert all-to-alls (Megatron-Core's `--overlap-moe-expert-parallel-comm`; "
     "[moe.md](moe.md#moe-layers))"},
    {"parallel.ep_dispatch", "enum", "optional, **all_to_all**",
     "`all_to_all`, `deduplicated`; deduplicated needs MoE with ep >= 2 (layout check)",
     "how expert all-to-alls move tokens: every routed copy (NCCL), or once per remote node holding "
     "one of the token's experts (DeepEP / HybridEP; [moe.md](moe.md#moe-layers))"},
    {"parallel.chunk_layers", "list of integers", "optional, **even split**",
     "pp·vp counts in global chunk order, adding up to `model.layers`; only the last may be 0 (layout "
     "check)",
     "layers of each model chunk (chunk c on stage c mod pp): a shorter first and last chunk balance "
     "the embedding and the output layer, as Megatron-Core's pipeline layouts and DeepSpeed's "
     "partitioning do ([schedules.md](schedules.md#interleaved-1f1b))"},
    {"precision", "enum", "required", "`bf16`, `fp16`, `fp8`",
     "training precision; the cluster's GPU must give a peak for it. `fp8`: Transformer Engine-style "
     "fp8 training (docs/model.md, \"fp8 training\"): the layers' linear GEMMs in fp8, the rest bf16, "
     "so the GPU also needs a bf16 peak; MFU is then against the fp8 peak, as NVIDIA reports it"},
    {"training", "mapping", "optional", "", "memory, recomputation, ZeRO and loss options (`training`)"},
    {"training.dp_bucket", "byte size", "optional, **25MiB**", "> 0", "DP gradient bucket size"},
    {"training.optimizer_bytes_per_param", "number", "optional, **12**", ">= 0",
     "optimizer state per parameter: 12 = fp32 master + Adam m + v; 8 = m + v only"},
    {"training.recompute", "enum", "optional, **none**", "`none`, `selective`, `full`",
     "activation recomputation"},
    {"training.recompute_modules", "list", "optional, **[core_attn]**; needs `recompute: selective`",
     "each of `core_attn`, `layernorm`, `mlp` (dense models), `moe_act` (MoE models), `mla_up_proj` "
     "(models with `mla`) at most once",
     "what selective recomputation repeats (Megatron-LM's `recompute_modules`; "
     "[model.md](model.md#selective-recomputation))"},
    {"training.flash_attention", "bool", "optional, **false**", "",
     "fused (FlashAttention-style) attention: the s² scores are not stored, and with a kernel profile "
     "the attention core is one fused kernel; `false` charges Megatron's unfused "
     "QKᵀ/softmax/dropout/AV kernels (docs/kernels.md)"},
    {"training.zero3_prefetch", "integer", "optional, **1**", "0..64",
     "ZeRO-3 / FSDP: layers whose parameters are gathered ahead of the one computing; at most this + 1"
     " gathered layers of a pass are resident (the memory ledger's `zero3_gathered`: that window of "
     "the largest layer, plus the embedding or output layer a stage's first or last layer brings with "
     "it; with MoE the dense part plus the local experts, docs/moe.md)"},
    {"training.zero3_fetch", "`prefetch` \\| `blocking`",
     "optional, **prefetch**; `blocking` needs `parallel.zero_stage` 3", "",
     "how ZeRO-3 gathers parameters (docs/model.md, \"ZeRO-3 fetch\"): `prefetch`, one all-gather per "
     "layer issued `zero3_prefetch` layers ahead beside the compute; `blocking` (DeepSpeed's ZeRO-3 of"
     " 2021), one tensor-list collective per weight tensor, each after the device drained, with "
     "`gpu.list_collective_per_rank` of host time per DP rank, a recomputed layer gathered again for "
     "its backward, one gathered layer resident"},
    {"training.overlap_param_gather", "bool", "optional, **false**; needs `parallel.zero_stage` 1 or 2", "",
     "the distributed optimizer's parameter all-gather runs bucket by bucket under the next step's "
     "forward (Megatron's `overlap_param_gather`) instead of after the optimizer: the step starts with"
     " the gathers, chunk by chunk in forward order, and each chunk's first forward waits layer by "
     "layer for its bucket (docs/model.md)"},
    {"training.grad_reduce_in_fp32", "bool", "optional, **false**", "",
     "gradients held and reduced over DP in fp32 (Megatron's `grad_reduce_in_fp32`, NeMo's "
     "`grad_sync_dtype: fp32`): 4 bytes per gradient in the DP reductions (buckets, experts' groups, "
     "ZeRO-3's reduce-scatters, the end of step's all-reduces) and in the ledger's gradients, instead "
     "of the 16-bit element's 2; parameter gathers keep the weights' bytes"},
    {"training.cross_entropy", "`fp32` \\| `fused`", "optional, **fp32**", "",
     "the loss's kernels: `fp32` casts the logits to fp32 and runs the log-softmax, its backward and "
     "the cast back as separate kernels (PyTorch autocast, Megatron's vocabulary-parallel "
     "cross-entropy; 36 bytes of traffic per logit, 4-byte logits kept); `fused` is one 16-bit kernel "
     "writing the gradient in place (4 bytes per logit, 2 kept) (docs/kernels.md)"},
    {"training.fp8_params", "bool", "optional, **false**; needs `precision: fp8`", "",
     "fp8 primary weights (Transformer Engine's `fp8_model_init`, Megatron's `fp8_param_gather`): "
     "weights held in fp8 with their transpose (2 bytes per parameter instead of 4) and gathered in "
     "fp8 by the distributed optimizer and ZeRO-3"},
    {"training.offload_layers", "integer",
     "optional, **0**; needs `recompute: none` and `gpu.host_bandwidth`",
     "0 .. fewer than a model chunk's layers",
     "activation offloading (Megatron's `cpu_offloading_num_layers`): the first N layers of each model"
     " chunk keep their activations in host memory between forward and backward ([model.md](model.md))"},
    {"training.recompute_layers", "integer", "optional, **0**; needs `recompute: full`", ">= 0",
     "full recomputation of only the first N layers of every model chunk (Megatron's "
     "`recompute_method: block`, `recompute_num_layers`); 0 = every layer ([model.md](model.md))"},
    {"training.stack", "mapping", "optional, absent = no stack", "",
     "a training stack preset: the documented defaults of one framework release for the mechanism keys "
     "`training.flash_attention`, `parallel.sp`, `parallel.tp_grad_overlap`, `parallel.pp_scatter_gather`, "
     "`parallel.zero_stage`, `training.overlap_param_gather`, `training.grad_reduce_in_fp32`, "
     "`training.zero3_fetch`, `training.fp8_params`, `parallel.etp`; a key the file writes wins, and a "
     "value whose mechanism needs a layout (sp: tp > 1) applies only where the layout has it "
     "([stacks.md](stacks.md); `stepsim run --explain` lists each value and its origin)"},
    {"training.stack.name", "enum", "required in `stack`",
     "`megatron-lm`, `megatron-core`, `nemo`, `megatron-bridge`, `megatron-deepspeed`, `deepspeed`, `fsdp`, "
     "`torchtitan`, `composer`",
     "the framework ([stacks.md](stacks.md))"},
    {"training.stack.version", "string", "optional, **the preset's newest**", "one of the preset's versions",
     "the release, e.g. `\"24.07\"` for NeMo ([stacks.md](stacks.md))"},
    {"collectives", "mapping", "optional", "",
     "the algorithm forced per communication group (`collectives`; docs/collectives.md)"},
    {"collectives.tp", "enum", "optional, **auto**",
     "`auto`, `ring`, `tree`, `hierarchical`, `nvls`, `pairwise`", "tensor-parallel collectives"},
    {"collectives.pp", "enum", "optional, **auto**", "as `collectives.tp`", "pipeline sends"},
    {"collectives.dp", "enum", "optional, **auto**", "as `collectives.tp`", "data-parallel collectives"},
    {"collectives.ep", "enum", "optional, **auto**", "as `collectives.tp`; only `pairwise` applies",
     "the expert all-to-all"},
    {"collectives.cp", "enum", "optional, **auto**", "as `collectives.tp`",
     "the context-parallel ring sends (direct)"},
};

/// The mapping a key lies in ("" for the root) and its own name.
std::pair<std::string_view, std::string_view> split(std::string_view path) {
  const auto dot = path.rfind('.');
  if (dot == std::string_view::npos)
    return {std::string_view(), path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

using Children = std::map<std::string_view, std::vector<std::string_view>, std::less<>>;

Children children_of(std::span<const Key> keys) {
  Children out;
  for (const Key& k : keys) {
    const auto [mapping, name] = split(k.path);
    out[mapping].push_back(name);
  }
  return out;
}

std::string_view file_name(File file) {
  return file == File::CLUSTER ? "cluster" : "workload";
}

/// One Markdown table row; an empty cell is written "| |".
std::string row(std::initializer_list<std::string_view> cells) {
  std::string out = "|";
  for (std::string_view c : cells)
    out += c.empty() ? std::string(" |") : " " + std::string(c) + " |";
  return out + "\n";
}

} // namespace

std::span<const Key> keys(File file) {
  if (file == File::CLUSTER)
    return CLUSTER_KEYS;
  return WORKLOAD_KEYS;
}

const std::vector<std::string_view>& children(File file, std::string_view mapping) {
  static const Children cluster = children_of(CLUSTER_KEYS);
  static const Children workload = children_of(WORKLOAD_KEYS);
  const Children& all = file == File::CLUSTER ? cluster : workload;
  const auto it = all.find(mapping);
  if (it == all.end())
    throw std::logic_error("schema: the " + std::string(file_name(file)) + " file declares no mapping '" +
                           std::string(mapping) + "'");
  return it->second;
}

std::string markdown_table(File file) {
  std::string out = std::string("| Key | Type | Required / default | Constraint | Meaning (field in `") +
                    (file == File::CLUSTER ? "ClusterSpec" : "WorkloadSpec") +
                    "`) |\n|---|---|---|---|---|\n";
  for (const Key& k : keys(file))
    out += row({"`" + std::string(k.path) + "`", k.type, k.presence, k.constraint, k.meaning});
  return out;
}

std::string with_table(const std::string& document, File file) {
  const std::string begin =
      "<!-- " + std::string(file_name(file)) + " keys: generated from sim/config/schema.cpp -->\n";
  const std::string end = "<!-- end of " + std::string(file_name(file)) + " keys -->";
  const auto from = document.find(begin);
  const auto to = from == std::string::npos ? from : document.find(end, from);
  if (to == std::string::npos)
    throw std::runtime_error("docs/schema.md has no '" + begin.substr(0, begin.size() - 1) + "' ... '" + end +
                             "' markers");
  return document.substr(0, from + begin.size()) + markdown_table(file) + document.substr(to);
}

} // namespace stepsim::config::schema
