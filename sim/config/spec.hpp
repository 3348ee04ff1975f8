#pragma once
// Plain, validated descriptions of a cluster and a training job. Produced by config/ (the only
// user of yaml-cpp); consumed read-only by everything downstream. All quantities carry units.
// The initialisers below are the defaults of the files' optional keys (docs/schema.md): the
// loader only writes what a file gives, so a spec built in code starts from the same values.

#include "core/units.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stepsim {

/// Training precision. FP8: Transformer Engine style mixed fp8 (docs/model.md, "fp8 training"):
/// the transformer layers' linear GEMMs in fp8, everything else (attention core, logits, norms,
/// communication, master weights) as bf16.
enum class Precision { BF16, FP16, FP8 };
enum class MlpKind { GELU, SWIGLU };
enum class NormKind { LAYERNORM, RMSNORM };
enum class PositionEmbedding { LEARNED, ROTARY };
/// Pipeline schedule (docs/schedules.md). INTERLEAVED needs parallel.vp >= 2; the zero-bubble
/// schedules split backward into input-gradient (B) and weight-gradient (W) passes.
enum class Schedule { GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, ZB_H2, DUALPIPE, DUALPIPE_V };
/// True when `schedule` splits backward into B and W passes (the zero-bubble schedules, DualPipe and
/// DualPipeV).
inline bool splits_backward(Schedule schedule) {
  return schedule == Schedule::ZB_H1 || schedule == Schedule::ZB_H2 || schedule == Schedule::DUALPIPE ||
         schedule == Schedule::DUALPIPE_V;
}
enum class Recompute { NONE, SELECTIVE, FULL };
/// How expert all-to-alls move tokens: every routed copy (NCCL all-to-all), or each token once to
/// every node holding one of its experts, then over NVLink (DeepEP / HybridEP dispatchers).
enum class EpDispatch { ALL_TO_ALL, DEDUPLICATED };
/// How the loss runs over the logits: FP32 = the logits cast to fp32, log-softmax, its backward
/// and the cast back as separate kernels (PyTorch autocast, Megatron's vocab-parallel
/// cross-entropy); FUSED = one 16-bit kernel that writes the gradient in place.
enum class CrossEntropy { FP32, FUSED };
/// How the pointwise operations around the GEMMs run (docs/kernels.md, "Pointwise kernels"):
/// FUSED = one kernel per norm, activation and residual add (Transformer Engine, Apex, Megatron's
/// fused kernels, torch.compile); EAGER = PyTorch eager modules composing them of single
/// operations (a Python RMSNorm in fp32, rotary embeddings in complex fp32 arithmetic, grouped
/// K/V repeated to every query head, SwiGLU as two kernels).
enum class Pointwise { FUSED, EAGER };
/// How fp8 training scales its casts (docs/kernels.md, "fp8 training"): TENSORWISE = one scale per
/// tensor (Transformer Engine's delayed and current scaling, torchao's default recipe); ROWWISE =
/// torchao's axiswise recipe (`recipe_name: rowwise`): one scale per row along each GEMM's
/// contraction axis, so every operand is cast again for each GEMM it feeds.
enum class Fp8Scaling { TENSORWISE, ROWWISE };
/// Which fused attention kernel runs the attention core (docs/kernels.md, "Attention kernels"):
/// CUDNN = cuDNN's fused attention (Transformer Engine's FusedAttention, PyTorch SDPA's cuDNN
/// backend), what the kernel profiles' attention rows stand for; FLASH2 = FlashAttention-2 (the
/// flash backend of PyTorch's SDPA); FLASH3 = FlashAttention-3 (Hopper only).
enum class AttentionKernel { CUDNN, FLASH2, FLASH3 };
enum class FabricKind { FAT_TREE, RAIL_OPTIMIZED, GRAPH };
/// How the GPUs of a node reach each other: an NVSwitch crossbar, or PCIe through a switch/host bridge.
enum class IntraNodeKind { NVSWITCH, PCIE };
/// Collective algorithm (docs/collectives.md); AUTO lets the cost model pick, as NCCL's tuner does.
enum class CollectiveAlgorithm { AUTO, RING, TREE, HIERARCHICAL, NVLS, PAIRWISE };

/// A part that differs from the base part a cluster's `gpu` keys describe (`gpu.variant`,
/// docs/kernels.md "GPU variants"): a power limit, a clock, fewer SMs, a lower tensor-core peak,
/// other HBM. The reader resolves the GpuSpec's peaks, bandwidth and capacity to the variant's;
/// the kernel table derives the variant's profile from the base profile with the two ratios.
struct GpuVariant {
  std::string name;           ///< e.g. "H100-SXM5-80GB-500W"; "" = no variant (the base part)
  double compute_ratio = 1.0; ///< the variant's tensor-core rate / the base's (SMs x sustained clock)
  double clock_ratio = 1.0;   ///< the variant's sustained clock / the base's (part of compute_ratio)
  double memory_ratio = 1.0;  ///< the variant's HBM bandwidth / the base's
  int sm_count = 0;           ///< the variant's SMs; 0 = the base's
  int base_sm_count = 0;      ///< `gpu.sm_count` (checked against the profile); 0 = not given
  [[nodiscard]] bool active() const { return !name.empty(); }
};

/// One GPU model. Peak figures are dense (no sparsity).
struct GpuSpec {
  std::string kind;              ///< e.g. "A100-SXM4-80GB"
  FlopsPerSec peak_bf16;         ///< dense bf16 tensor-core peak
  FlopsPerSec peak_fp16;         ///< dense fp16 tensor-core peak
  FlopsPerSec peak_fp8;          ///< dense fp8 tensor-core peak; 0 = the GPU has none
  Bytes hbm_capacity;            ///< device memory
  BytesPerSec hbm_bandwidth;     ///< peak HBM bandwidth
  double compute_efficiency = 0; ///< achieved fraction of peak on large GEMMs, (0, 1]
  double memory_efficiency = 0;  ///< achieved fraction of HBM bandwidth, (0, 1]
  /// CUDA context, cuBLAS/NCCL workspaces: not usable by the job.
  Bytes runtime_overhead = Bytes(1024.0 * 1024 * 1024);
  double allocator_fragmentation = 1.10; ///< caching-allocator overhead on dynamic memory, >= 1
  /// Kernel profile (docs/kernels.md) that compute times come from, as a path resolved against
  /// the cluster file's directory; empty = none (compute times are the roofline above).
  std::string profile;
  /// Factor >= 1 on compute progress while the GPU also runs communication; 0 = take the
  /// profile's `overlap_slowdown` (1 without a profile).
  double overlap_slowdown = 0;
  /// Calibration (docs/calibration.md): achieved fraction of the profile's GEMM and attention
  /// rates in a training step (framework epilogues, layouts, sustained clocks); with a profile,
  /// those kernel times are divided by it. (0, 1], default 1.
  double gemm_efficiency = 1.0;
  /// Calibration: achieved fraction of the profile's rates for the memory-bound kernels of a
  /// training step (norms, activations, softmax, residual adds, casts, copies, the optimizer):
  /// strided and small tensors, unfused epilogues. With a profile, those kernel times are divided
  /// by it. (0, 1], default 1.
  double memory_bound_efficiency = 1.0;
  /// Calibration: fixed cost per kernel in a step (launch + framework gap); negative = the
  /// profile's `launch_overhead_s`.
  Seconds launch_overhead = Seconds(-1.0);
  /// Calibration: fixed host-side cost of each pipeline pass (one micro-batch through one model
  /// chunk, forward or backward: the framework's schedule step and its p2p setup), added to the
  /// pass's first compute task. >= 0, default 0.
  Seconds pass_overhead = Seconds(0.0);
  /// Calibration: host time a tensor-list collective spends per participant before its transfer
  /// starts (PyTorch's list all_gather / reduce_scatter: a view of each rank's slice and a copy
  /// launched per rank). Charged to ZeRO-3's collectives under training.zero3_fetch: blocking,
  /// the implementations that gather that way (docs/model.md), at least one kernel launch per
  /// rank (runner::list_collective_per_rank). >= 0, default 0 (the launch floor alone).
  Seconds list_collective_per_rank = Seconds(0.0);
  /// Coefficient of variation of each compute task's time on this GPU kind (docs/variability.md):
  /// every task's duration is multiplied by a lognormal factor of mean 1 and this CV. >= 0,
  /// default 0 (no noise); `training.variability.kernel_cv` overrides it.
  double kernel_cv = 0;
  /// GPU <-> host memory bandwidth per direction and GPU (PCIe, or NVLink-C2C on Grace
  /// superchips): the rate of activation offloading. 0 = not given.
  BytesPerSec host_bandwidth = BytesPerSec(0.0);
  /// Host memory per GPU (the node's RAM over its GPUs): the room for offloaded activations.
  /// 0 = not given (not checked).
  Bytes host_memory = Bytes(0.0);
  /// The part this cluster runs when it is not the base part (`gpu.variant`); inactive = the base.
  GpuVariant variant;
};

/// A class of link: bandwidth per direction, one-way latency, achieved fraction of bandwidth.
struct LinkSpec {
  BytesPerSec bandwidth;   ///< per direction
  Seconds latency;         ///< one-way, end to end through this link class
  double efficiency = 1.0; ///< achieved fraction of `bandwidth`, (0, 1]
};

/// The inter-node network. A fat tree: nodes hang under leaves (`nodes_per_leaf` each); the
/// leaf-to-spine uplinks carry (downlink bandwidth / oversubscription). A non-blocking fat tree
/// has oversubscription 1 and is modelled as a crossbar above the NICs.
struct FabricSpec {
  FabricKind kind = FabricKind::FAT_TREE;
  int nodes_per_leaf = 1;                   ///< nodes under one leaf switch
  double oversubscription = 1.0;            ///< leaf downlink:uplink bandwidth ratio, >= 1
  Seconds switch_latency = Seconds(0.5e-6); ///< added per switch traversed between nodes
  int tiers = 2;                            ///< 2: leaf + spine; 3: leaf + spine (per pod) + core
  int leaves_per_pod = 1;                   ///< three tiers only: leaves under one pod's spine
  double spine_oversubscription = 1.0;      ///< three tiers only: pod spine down:up ratio, >= 1
  /// GRAPH only (docs/schema.md): named switches, full-duplex links between them, and the
  /// switch each NIC hangs off. Routes take the fewest hops.
  struct GraphLink {
    int a = 0, b = 0;      ///< switch indices
    BytesPerSec bandwidth; ///< per direction
    Seconds latency;       ///< of the cable, the traversed switch's latency comes on top
  };
  std::vector<std::string> switches;
  std::vector<GraphLink> links;
  std::vector<std::vector<int>> nic_switch; ///< [node][nic] -> switch index
};

/// NVLink SHARP (in-switch reduction) of the node's NVSwitch; disabled when absent.
struct NvlsSpec {
  bool enabled = false;
  double efficiency = 1.0; ///< achieved fraction of nvswitch.bandwidth for an NVLS all-reduce, (0, 1]
  Seconds latency;         ///< fixed cost of one NVLS collective (launch + multimem sync)
};

/// Parts of a cluster that run below their spec or not at all (`degraded`, docs/degraded.md).
/// Each entry keeps where it was given ("file:line:col" or "--set ..."), for the errors that
/// only the layout can find (a job that needs a down node). Empty = a perfect cluster.
struct DegradedSpec {
  struct Gpu {
    int node = 0, gpu = 0;
    double speed = 1.0; ///< (0, 1]: compute tasks take duration / speed
    std::string where{};
  };
  struct Nic {
    int node = 0, nic = 0;
    BytesPerSec bandwidth{0.0}; ///< the NIC's rate per direction; 0 = unchanged (or down)
    bool down = false;          ///< its GPUs' traffic moves to the node's other NICs
    std::string where{};
  };
  struct Node {
    int node = 0; ///< down: no rank is placed on it
    std::string where{};
  };
  /// Fat tree: a leaf with `uplinks_down` of its uplinks failed, or its spine links at `bandwidth`.
  struct Leaf {
    int leaf = 0;
    int uplinks_down = 0;
    BytesPerSec bandwidth{0.0}; ///< the leaf's total up (and down) capacity; 0 = from uplinks_down
    std::string where{};
  };
  /// Graph fabric: the links between two switches (by name "A-B"), slower or down.
  struct Link {
    int a = 0, b = 0;           ///< switch indices
    BytesPerSec bandwidth{0.0}; ///< 0 = down
    std::string where{};
  };
  /// `random_gpus`: what drew some of `gpus` (they are listed there); absent = none drawn.
  struct RandomGpus {
    double share = 0.0;
    double speed = 1.0;
    uint64_t seed = 0;
  };
  std::vector<Gpu> gpus;
  std::optional<RandomGpus> random_gpus;
  std::vector<Nic> nics;
  std::vector<Node> nodes;
  std::vector<Leaf> leaves;
  std::vector<Link> links;

  /// A fat-tree leaf's uplinks: one per NIC's worth of bandwidth (the leaf's NICs over the
  /// oversubscription), at least one.
  [[nodiscard]] static int uplinks(int nodes_under_leaf, int nics_per_node, double oversubscription) {
    return std::max(1, static_cast<int>(nodes_under_leaf * nics_per_node / oversubscription));
  }
};

struct ClusterSpec {
  std::string name;
  std::string source; ///< file the spec was read from (for messages)
  int nodes = 0;
  int gpus_per_node = 0;
  GpuSpec gpu;
  LinkSpec nvswitch; ///< per GPU, per direction, GPU <-> NVSwitch (or PCIe switch when intra = PCIE)
  IntraNodeKind intra = IntraNodeKind::NVSWITCH;
  BytesPerSec pcie_host_bandwidth; ///< PCIE only: shared bandwidth of the switch/host bridge per direction (0
                                   ///< = unlimited)
  NvlsSpec nvls;
  int nics_per_node = 0;
  LinkSpec nic; ///< per NIC, per direction
  FabricSpec fabric;
  DegradedSpec degraded;

  [[nodiscard]] int num_gpus() const { return nodes * gpus_per_node; }
  /// The nodes ranks may be placed on, ascending: every node but the down ones. Rank r runs on
  /// GPU r % gpus_per_node of up_nodes()[r / gpus_per_node].
  [[nodiscard]] std::vector<int> up_nodes() const {
    std::vector<int> out;
    for (int n = 0; n < nodes; ++n)
      if (std::none_of(degraded.nodes.begin(), degraded.nodes.end(),
                       [n](const DegradedSpec::Node& d) { return d.node == n; }))
        out.push_back(n);
    return out;
  }
  /// Whether node `node` reaches the fabric below its spec (docs/degraded.md): a NIC of it
  /// slower or down, its fat-tree leaf with uplinks down or another capacity, or (graph fabrics)
  /// any link degraded.
  [[nodiscard]] bool network_degraded_at(int node) const {
    for (const DegradedSpec::Nic& n : degraded.nics)
      if (n.node == node && (n.down || (n.bandwidth.value() > 0 && n.bandwidth < nic.bandwidth)))
        return true;
    if (fabric.kind == FabricKind::GRAPH)
      return !degraded.links.empty();
    const int per_leaf = std::max(1, std::min(fabric.nodes_per_leaf, nodes));
    return std::any_of(degraded.leaves.begin(), degraded.leaves.end(), [&](const DegradedSpec::Leaf& l) {
      return l.leaf == node / per_leaf && (l.uplinks_down > 0 || l.bandwidth.value() > 0);
    });
  }
};

/// How tokens are spread over the routed experts (docs/moe.md): UNIFORM gives every expert the
/// same share; ZIPF gives the expert of popularity rank r (1-based) a share proportional to
/// r^-zipf_exponent, the popularity order of each layer being a permutation drawn from `seed`.
enum class RoutingDistribution { UNIFORM, ZIPF };

struct RoutingSpec {
  RoutingDistribution distribution = RoutingDistribution::UNIFORM;
  double zipf_exponent = 1.0; ///< ZIPF only, >= 0
  uint64_t seed = 0;          ///< picks which experts are popular in each layer
  /// Group-limited routing (DeepSeek-V3: 8 groups, 4 per token): the experts form `groups`
  /// equal groups and a token picks its top_k among `group_top_k` of them. 0 = no limit. It only
  /// changes the deduplicated dispatch's traffic (parallel.ep_dispatch, docs/moe.md).
  int64_t groups = 0;
  int64_t group_top_k = 0;
  bool operator==(const RoutingSpec&) const = default;
};

/// Mixture-of-experts MLP (docs/moe.md). `experts == 0`: a dense model.
struct MoeSpec {
  int64_t experts = 0;            ///< routed experts E per MoE layer
  int64_t top_k = 1;              ///< experts each token is routed to
  int64_t expert_ffn_hidden = 0;  ///< inner size of one expert's MLP
  int64_t shared_experts = 0;     ///< always-active experts of the same size
  double capacity_factor = 0;     ///< tokens an expert takes: factor x fair share; 0 = unlimited
  int64_t layer_freq = 1;         ///< layer l is MoE when l >= first_dense_layers and l % layer_freq == 0
  int64_t first_dense_layers = 0; ///< leading layers that keep the dense MLP (DeepSeek-V3: 3)
  RoutingSpec routing;
  [[nodiscard]] bool enabled() const { return experts > 0; }
  bool operator==(const MoeSpec&) const = default;
};

/// Multi-head latent attention (DeepSeek-V2/V3; docs/model.md): queries through a low-rank
/// down-projection of `q_lora_rank` (0: one full projection), keys and values from a shared latent
/// of `kv_lora_rank` plus a rotary key part of `qk_rope_head_dim` shared by all heads; per head
/// qk_nope + qk_rope query/key dims and v_head_dim value dims. `kv_lora_rank == 0`: plain attention.
struct MlaSpec {
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  [[nodiscard]] bool enabled() const { return kv_lora_rank > 0; }
  [[nodiscard]] int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool operator==(const MlaSpec&) const = default;
};

struct ModelSpec {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int64_t seq_len = 0;
  MlpKind mlp = MlpKind::GELU;
  NormKind norm = NormKind::LAYERNORM; ///< default: layernorm for gelu, rmsnorm for swiglu
  PositionEmbedding position = PositionEmbedding::LEARNED; ///< default: learned for gelu, rotary for swiglu
  bool bias = true;                                        ///< linear-layer biases; default: true for gelu
  bool tied_embeddings = true; ///< output layer shares the input embedding; default: true for gelu
  /// Hidden and attention dropout: their masks are kept for the backward (Korthikanti's 34·sbh +
  /// 5·a·s²·b count them) and the unfused attention core runs a dropout kernel. Default true.
  bool dropout = true;
  MoeSpec moe; ///< mixture of experts; disabled by default
  /// Width of one attention head; 0: hidden / heads. Models such as Qwen3 and Mistral NeMo set it
  /// apart from the hidden size (Qwen3-32B: 64 heads of 128 on a hidden size of 5120).
  int64_t head_dim_set = 0;
  MlaSpec mla; ///< multi-head latent attention; disabled by default
  /// Sliding-window attention (Mistral, Gemma 2 and 3, gpt-oss): a query of a windowed layer
  /// attends to the last `sliding_window` positions (itself included); 0: no window.
  int64_t sliding_window = 0;
  /// With a window: layers i with (i + 1) % full_attention_every == 0 attend to the whole prefix
  /// (Gemma 2 and gpt-oss: 2, Gemma 3: 6); 0: every layer is windowed.
  int64_t full_attention_every = 0;
  /// Multi-token prediction depth (DeepSeek-V3; Megatron's mtp_num_layers): per depth, on the last
  /// pipeline stage, a projection of the hidden state and the next token's embedding (2h -> h), one
  /// more transformer layer (global index layers + depth) and the shared output layer's logits and
  /// loss again. 0: none.
  int64_t mtp_layers = 0;

  [[nodiscard]] int64_t head_dim() const { return head_dim_set > 0 ? head_dim_set : hidden / heads; }
  /// Width of the query (and attention output) projection: heads x head_dim, = hidden by default.
  [[nodiscard]] int64_t q_dim() const { return heads * head_dim(); }
  /// Per-head query/key and value widths of the attention core (MLA: qk_nope + qk_rope and
  /// v_head_dim; otherwise head_dim both).
  [[nodiscard]] int64_t qk_head_dim() const { return mla.enabled() ? mla.qk_head_dim() : head_dim(); }
  [[nodiscard]] int64_t v_head_dim() const { return mla.enabled() ? mla.v_head_dim : head_dim(); }
  /// True when global layer `layer` (0-based) attends through the sliding window.
  [[nodiscard]] bool windowed_layer(int64_t layer) const {
    return sliding_window > 0 && !(full_attention_every > 0 && (layer + 1) % full_attention_every == 0);
  }
  /// Keys per query the attention core is charged for in the model-FLOPs convention, which counts
  /// a causal layer's whole s x s score matrix (twice the work of its lower triangle): seq_len for
  /// full attention, min(seq_len, 2 x sliding_window) for a windowed layer (a query sees w keys,
  /// the first w of the sequence fewer).
  [[nodiscard]] int64_t attention_span(bool windowed) const {
    return windowed && sliding_window > 0 ? std::min(seq_len, 2 * sliding_window) : seq_len;
  }
  /// True when the window saves work: shorter than half the sequence (attention_span < seq_len).
  [[nodiscard]] bool window_below_sequence() const { return attention_span(true) < seq_len; }
  bool operator==(const ModelSpec&) const = default;
};

struct BatchSpec {
  int64_t global_batch = 0; ///< sequences per optimizer step, all DP replicas together
  int64_t micro_batch = 0;  ///< sequences per micro-batch per replica
  bool operator==(const BatchSpec&) const = default;
};

struct ParallelSpec {
  int tp = 1;
  int pp = 1;
  int dp = 0; ///< 0 = derived from the cluster's GPUs (config::check_layout)
  Schedule schedule = Schedule::ONE_F_ONE_B;
  int vp = 1;      ///< virtual stages (model chunks) per GPU; > 1 only with INTERLEAVED
  bool sp = false; ///< Megatron sequence parallelism (needs tp > 1 to matter)
  /// Megatron-LM's scatter/gather of pipeline messages: without sp, each TP rank sends 1/tp of
  /// the boundary activation and the receiving TP group all-gathers it. No effect with sp (the
  /// message is already split) or tp = 1.
  bool pp_scatter_gather = false;
  /// Pipeline sends and receives in the stage's instruction order, each a rendezvous that blocks
  /// both ranks (DeepSpeed's PipelineEngine: dist.send / dist.recv between its compute
  /// instructions). false: a send runs on its own stream beside the next compute. docs/model.md.
  bool pp_p2p_blocking = false;
  /// In the backward, the TP collective that sums a column-parallel linear's input gradient (the
  /// all-reduce, or with sp the reduce-scatter) runs beside that linear's weight-gradient GEMM,
  /// and with sp the re-gather of its input beside the data-gradient GEMM (Megatron-LM's
  /// asynchronous TP all-reduce from 2022, Megatron-Core, Transformer Engine). false: after the
  /// block's whole backward (Megatron-LM 2021, Megatron-DeepSpeed). docs/model.md.
  bool tp_grad_overlap = true;
  /// With sp: the forward's TP reduce-scatters and all-gathers split into tp chunks and pipelined
  /// with the layer's linear GEMMs (Transformer Engine's userbuffers, Megatron's
  /// --tp-comm-overlap; PyTorch's async TP), and the backward's gradient all-gather beside the
  /// weight-gradient GEMM: one chunk of each collective stays exposed (docs/model.md, "TP
  /// communication overlap").
  bool tp_comm_overlap = false;
  int zero_stage = 0; ///< 0, 1, 2 or 3 (3 = FSDP full shard)
  /// ZeRO-3 hybrid sharding (HSDP; FSDP2's 2-D mesh of replicate x shard, FSDP1's HYBRID_SHARD):
  /// the DP replicas whose GPUs shard the parameters, gradients and optimizer states, consecutive
  /// DP indices (with their CP ranks); the dp / dp_shard shard groups replicate each other and
  /// all-reduce each reduce-scattered gradient shard. 0 = dp (every replica in one shard group).
  int dp_shard = 0;
  /// DP replicas per shard group: dp_shard, or dp when 0.
  [[nodiscard]] int shard_group() const { return dp_shard > 0 ? dp_shard : dp; }
  int cp = 1; ///< context parallelism (ring attention): the sequence split over cp GPUs
  int ep = 1; ///< expert parallelism: experts / ep experts per GPU
  /// Expert tensor parallelism: the GPUs that split each expert's MLP. 0 = tp (every expert split
  /// like the dense MLP; EP subdivides DP). 1 with tp > 1 keeps every expert whole and folds the
  /// expert groups over the TP x CP x DP GPUs of a stage (Megatron-Core's MoE parallel folding with
  /// expert_tensor_parallel_size = 1, docs/moe.md). Other values are refused.
  int etp = 0;
  /// Layers of each model chunk, pp*vp of them in global chunk order (chunk c runs on stage
  /// c % pp as its local chunk c / pp); empty = model.layers split evenly. The first chunk also
  /// holds the embedding, the last the output layer (and the multi-token-prediction layers), so a
  /// shorter first and last chunk balance them (Megatron-Core's pipeline layouts).
  std::vector<int64_t> chunk_layers;
  /// Combined 1F1B (Megatron-Core's --overlap-moe-expert-parallel-comm): each steady-state forward
  /// pass runs together with the adjacent backward pass of another micro-batch, so the expert
  /// all-to-alls of one hide behind the other's compute (docs/moe.md). Needs MoE with ep > 1,
  /// the interleaved schedule with pp > 1 (1f1b with pp = 1) and no full recomputation.
  bool ep_overlap = false;
  /// Expert all-to-all dispatcher (docs/moe.md): ALL_TO_ALL sends every routed copy; DEDUPLICATED
  /// sends a token once to each node holding one of its experts (cross-node bytes shrink).
  EpDispatch ep_dispatch = EpDispatch::ALL_TO_ALL;
  [[nodiscard]] int expert_tp() const { return etp > 0 ? etp : tp; }
  /// True when the expert groups fold over the TP ranks (etp < tp).
  [[nodiscard]] bool folds_experts() const { return expert_tp() < tp; }
  /// DualPipe or DualPipeV: micro-batches fed from both ends, two model chunks per GPU.
  [[nodiscard]] bool bidirectional() const {
    return schedule == Schedule::DUALPIPE || schedule == Schedule::DUALPIPE_V;
  }
  /// Model chunks each GPU runs: vp (interleaved), 2 (DualPipe, DualPipeV), else 1.
  [[nodiscard]] int chunks_per_stage() const { return bidirectional() ? 2 : vp > 1 ? vp : 1; }
  /// Distinct model chunks the layers are split into: pp*vp; 2*pp for DualPipeV (the V: one copy
  /// of the model in twice as many chunks); pp for DualPipe (each chunk held twice, once per
  /// direction).
  [[nodiscard]] int model_chunks() const {
    return schedule == Schedule::DUALPIPE ? pp : pp * chunks_per_stage();
  }
  /// The model chunk (0..model_chunks()-1) that local chunk `local` of `stage` holds. Interleaved:
  /// local*pp + stage. DualPipe: chunk 0 is the stage of the direction fed at stage 0, chunk 1 the
  /// stage pp-1-stage of the direction fed at stage pp-1 (the same parameters as stage pp-1-stage's
  /// chunk 0). DualPipeV: stage and 2*pp-1-stage (stage 0 holds the first and the last).
  [[nodiscard]] int global_chunk(int stage, int local) const {
    if (schedule == Schedule::DUALPIPE)
      return local == 0 ? stage : pp - 1 - stage;
    if (schedule == Schedule::DUALPIPE_V)
      return local == 0 ? stage : 2 * pp - 1 - stage;
    return local * pp + stage;
  }
  bool operator==(const ParallelSpec&) const = default;
};

/// How ZeRO-3 fetches parameters (TrainingSpec::zero3_fetch).
enum class Zero3Fetch { PREFETCH, BLOCKING };

/// Where a micro-batch's weight gradients are accumulated (TrainingSpec::grad_accumulation).
enum class GradAccumulation {
  FUSED,     ///< inside the weight-gradient GEMMs (they add into the gradient buffer): no extra pass
  FP32_PASS, ///< after each backward pass, a pass adding the 16-bit gradients into fp32 ones
};

/// What selective recomputation repeats before each layer's backward (Megatron-LM's
/// recompute_modules; docs/model.md, "Selective recomputation"). The default is the attention core.
struct RecomputeModules {
  bool core_attn = true;    ///< the attention core (QKᵀ, softmax, attention·V)
  bool layernorm = false;   ///< the norms: their outputs (the QKV and fc1 inputs) are not kept
  bool mlp = false;         ///< the dense MLP block: only its input is kept (dense models)
  bool moe_act = false;     ///< the experts' activation: its output (the fc2 input) is not kept
  bool mla_up_proj = false; ///< MLA's per-head up-projections: their outputs (Q, K, V) are not kept
  /// Per-op selective checkpointing that saves every other matmul (PyTorch's SAC with a policy
  /// keeping the odd-numbered linears of a layer and the attention core's output): the layer keeps
  /// its input, the outputs of Q, V, the gate (fc1 of a GELU MLP) and the down projection, and the
  /// attention output; K, the out-projection and the up projection (fc2 of a GELU MLP), the norms
  /// and the activation are recomputed before the backward (dense models without MLA).
  bool alternate_linears = false;
  bool operator==(const RecomputeModules&) const = default;
};

/// Step-time variability (training.variability, docs/variability.md).
struct VariabilitySpec {
  /// Coefficient of variation of each compute task's time; negative = the GPU's `gpu.kernel_cv`.
  double kernel_cv = -1;
  int64_t seed = 0; ///< the noise's seed: same seed, same draws
  /// With noise: the data-parallel replicas simulated (each with its CP and EP ranks); the others'
  /// wait is the expected maximum by order statistics (docs/variability.md, "Sampled replicas").
  /// 0 = every replica.
  int replicas = 0;
  /// The CV in effect: this one when set, else the GPU kind's.
  [[nodiscard]] double cv_or(double gpu_kernel_cv) const {
    return kernel_cv >= 0 ? kernel_cv : gpu_kernel_cv;
  }
  bool operator==(const VariabilitySpec&) const = default;
};

struct TrainingSpec {
  Bytes dp_bucket = Bytes(25.0 * 1024 * 1024); ///< DP gradient bucket size
  double optimizer_bytes_per_param = 12;       ///< fp32 master + Adam m + v
  Recompute recompute = Recompute::NONE;
  RecomputeModules recompute_modules; ///< with recompute: selective
  /// True when selective recomputation repeats `module` (a member of RecomputeModules).
  [[nodiscard]] bool recomputes(bool RecomputeModules::*module) const {
    return recompute == Recompute::SELECTIVE && recompute_modules.*module;
  }
  /// With recompute: full, Megatron's recompute_method block with recompute_num_layers = N: only
  /// the first N layers of every model chunk are recomputed, the others keep their activations.
  /// 0 = every layer.
  int64_t recompute_layers = 0;
  /// Whether full recomputation repeats the layer at index `l` within its model chunk.
  [[nodiscard]] bool recomputes_layer(int64_t l) const {
    return recompute == Recompute::FULL && (recompute_layers == 0 || l < recompute_layers);
  }
  bool flash_attention = false; ///< fused attention: the s^2 attention scores are not stored
  /// With flash_attention: the fused kernel's implementation, whose rate relative to the profile's
  /// fused attention rows kernels::attention_kernel_rate gives.
  AttentionKernel attention_kernel = AttentionKernel::CUDNN;
  /// ZeRO-3 shards that are the fp32 parameters themselves (PyTorch FSDP's mixed precision): the
  /// optimizer's fp32 master weight is the shard, the shard's gradient is fp32, and 16-bit
  /// weights exist only gathered (docs/model.md, "FSDP's fp32 shards").
  bool fp32_shards = false;
  /// PyTorch's caching allocator with expandable segments (PYTORCH_CUDA_ALLOC_CONF=
  /// expandable_segments:True): one segment per stream that maps pages as it grows, so the memory
  /// it holds above the live bytes is the partly used pages, not a share of the dynamic memory
  /// (model::allocator_reserve; docs/model.md, "The caching allocator").
  bool expandable_segments = false;
  /// fp8 training: each layer's fp8 weight cast and its transpose are kept for the step (Transformer
  /// Engine casts them in the first micro-batch, `is_first_microbatch`, and reuses them): 2 bytes per
  /// layer parameter in the memory ledger. false: cast in every forward and backward and not kept
  /// (torchao's Float8Linear). fp8_params holds the weights in fp8 whatever this says.
  bool fp8_weight_cache = true;
  /// fp8 training: the casts' scaling granularity (Fp8Scaling); ROWWISE needs fp8_weight_cache
  /// false (the axiswise casts of a weight differ per GEMM, none is kept) and a dense model.
  Fp8Scaling fp8_scaling = Fp8Scaling::TENSORWISE;
  /// fp8 training under ZeRO-3: each layer's parameters gathered as their fp8 casts, 1 byte each
  /// (torchao's enable_fsdp_float8_all_gather: the shard cast to fp8 before the all-gather), the
  /// shards themselves kept as they are; fp8_params gathers in fp8 whatever this says.
  bool fp8_all_gather = false;
  /// One GEMM for the attention's Q, K and V projections and one for a gated MLP's gate and up
  /// projections (Megatron-Core's linear_qkv and linear_fc1); false, a linear each (torchtitan's and
  /// Hugging Face's Llama: wq, wk, wv; w1, w3), each reading the shared input, their input
  /// gradients summed. Dense models with plain attention only.
  bool fused_projections = true;
  int zero3_prefetch = 1; ///< ZeRO-3/FSDP: layers whose parameters are gathered ahead
  /// ZeRO-3: how parameters are fetched (docs/model.md, "ZeRO-3 fetch"). PREFETCH: one all-gather
  /// per layer, issued zero3_prefetch layers ahead, beside the compute. BLOCKING: one all-gather
  /// per weight tensor, each after the device has drained (a synchronize before every gather),
  /// tensor-list collectives, and a recomputed layer gathered again for its backward.
  Zero3Fetch zero3_fetch = Zero3Fetch::PREFETCH;
  /// ZeRO-3 / FSDP2 (`fully_shard(reshard_after_forward=...)`): true, a layer's gathered
  /// parameters are freed after its forward and gathered again for its backward; false, they stay
  /// gathered from the forward to the layer's backward, which gathers nothing (one all-gather per
  /// layer and micro-batch instead of two, every layer of the stage resident at the turn; docs/model.md,
  /// "ZeRO-3 fetch").
  bool reshard_after_forward = true;
  /// ZeRO-1/2 (Megatron's distributed optimizer, overlap_param_gather): the updated parameters are
  /// all-gathered bucket by bucket under the next step's forward instead of after the optimizer;
  /// each layer's first forward waits for its bucket (docs/model.md).
  bool overlap_param_gather = false;
  /// Gradients accumulated and reduced over DP in fp32 (Megatron's grad_reduce_in_fp32 /
  /// accumulate_allreduce_grads_in_fp32, NeMo's grad_sync_dtype: fp32): 4 bytes per gradient in
  /// the DP reductions and in the gradient buffer instead of the 16-bit element's 2.
  bool grad_reduce_in_fp32 = false;
  /// FP32_PASS: after each micro-batch's backward pass, its 16-bit weight gradients are added
  /// into an fp32 accumulator and cleared (DeepSpeed's bf16 optimizer, update_hp_grads): 12 bytes
  /// of HBM traffic per gradient the rank holds, charged to the pass's last compute task
  /// (docs/model.md, "Gradient accumulation").
  GradAccumulation grad_accumulation = GradAccumulation::FUSED;
  CrossEntropy cross_entropy = CrossEntropy::FP32; ///< the loss's kernels (and logits memory)
  Pointwise pointwise = Pointwise::FUSED;          ///< the kernels of norms, rotary, activations
  /// fp8 primary weights (Transformer Engine's fp8_model_init, Megatron's fp8_param_gather): the
  /// model holds its weights in fp8 (1 byte and the fp8 transpose) instead of 16-bit weights plus
  /// fp8 copies, and the distributed optimizer gathers the updated weights in fp8. fp8 only.
  bool fp8_params = false;
  /// Activation offloading (Megatron's cpu_offloading_num_layers): the first N layers of every
  /// model chunk move their stored activations to host memory during the forward and bring them
  /// back before their backward (docs/model.md). 0 = none; no recomputation with it.
  int64_t offload_layers = 0;
  VariabilitySpec variability; ///< per-kernel time noise (docs/variability.md)
  bool operator==(const TrainingSpec&) const = default;
};

/// Algorithm forced per communication group (AUTO: chosen by the cost model).
struct CollectivesSpec {
  CollectiveAlgorithm tp = CollectiveAlgorithm::AUTO;
  CollectiveAlgorithm pp = CollectiveAlgorithm::AUTO;
  CollectiveAlgorithm dp = CollectiveAlgorithm::AUTO;
  CollectiveAlgorithm ep = CollectiveAlgorithm::AUTO; ///< expert all-to-all (pairwise)
  CollectiveAlgorithm cp = CollectiveAlgorithm::AUTO; ///< context-parallel ring sends
  bool operator==(const CollectivesSpec&) const = default;
};

/// The framework mechanisms a training stack preset gives defaults for (training.stack,
/// docs/stacks.md), each one workload key.
enum class StackKey {
  FLASH_ATTENTION,       ///< training.flash_attention
  SP,                    ///< parallel.sp
  TP_GRAD_OVERLAP,       ///< parallel.tp_grad_overlap
  PP_SCATTER_GATHER,     ///< parallel.pp_scatter_gather
  ZERO_STAGE,            ///< parallel.zero_stage
  OVERLAP_PARAM_GATHER,  ///< training.overlap_param_gather
  GRAD_REDUCE_IN_FP32,   ///< training.grad_reduce_in_fp32
  ZERO3_FETCH,           ///< training.zero3_fetch
  FP8_PARAMS,            ///< training.fp8_params
  ETP,                   ///< parallel.etp
  POINTWISE,             ///< training.pointwise
  TP_COMM_OVERLAP,       ///< parallel.tp_comm_overlap
  ATTENTION_KERNEL,      ///< training.attention_kernel
  FP32_SHARDS,           ///< training.fp32_shards
  GRAD_ACCUMULATION,     ///< training.grad_accumulation
  PP_P2P_BLOCKING,       ///< parallel.pp_p2p_blocking
  EXPANDABLE_SEGMENTS,   ///< training.expandable_segments
  RESHARD_AFTER_FORWARD, ///< training.reshard_after_forward
  FP8_WEIGHT_CACHE,      ///< training.fp8_weight_cache
  FUSED_PROJECTIONS,     ///< training.fused_projections
};
inline constexpr std::size_t STACK_KEYS = 20;

/// Where a stack mechanism's value came from.
enum class StackOrigin {
  BUILT_IN,      ///< the key's default (docs/schema.md)
  WORKLOAD_FILE, ///< written in the workload file or given with --set
  STACK,         ///< the preset of training.stack
};

/// training.stack: the preset named (config/stacks.hpp) and, per mechanism, whether the file gave
/// the key itself and, once expanded (config::check_layout), where its value came from.
struct StackSpec {
  std::string name;    ///< training.stack.name; "" = no stack
  std::string version; ///< training.stack.version (the newest of the preset when not written)
  std::array<bool, STACK_KEYS> written{};
  std::array<StackOrigin, STACK_KEYS> origin{};
  [[nodiscard]] bool wrote(StackKey k) const { return written[static_cast<std::size_t>(k)]; }
  /// Marks `k` as set by the caller (a planner's candidate), so expansion leaves it.
  void set_by_caller(StackKey k) { written[static_cast<std::size_t>(k)] = true; }
  /// The same stack: name and version (which keys a file wrote, and where values came from, are
  /// bookkeeping of its reading, not of the workload).
  bool operator==(const StackSpec& o) const { return name == o.name && version == o.version; }
};

struct WorkloadSpec {
  std::string name;
  std::string source; ///< file the spec was read from
  ModelSpec model;
  BatchSpec batch;
  ParallelSpec parallel;
  Precision precision = Precision::BF16;
  TrainingSpec training;
  CollectivesSpec collectives;
  StackSpec stack; ///< training.stack and the origin of each mechanism it covers

  /// Micro-batches each pipeline processes per step: global_batch / (micro_batch * dp).
  [[nodiscard]] int64_t micro_batches() const {
    return batch.global_batch / (batch.micro_batch * parallel.dp);
  }
  [[nodiscard]] int num_gpus() const { return parallel.tp * parallel.cp * parallel.pp * parallel.dp; }
  /// Tokens one EP rank routes per micro-batch: those of its etp GPUs, each holding 1/tp of the
  /// TP group's b*s/cp (b*s/cp itself when etp = tp; docs/moe.md).
  [[nodiscard]] double ep_rank_tokens() const {
    const double local = static_cast<double>(batch.micro_batch) * static_cast<double>(model.seq_len) /
                         std::max(1, parallel.cp);
    return local * parallel.expert_tp() / std::max(1, parallel.tp);
  }
  /// Under balanced routing (uniform, no capacity limit) each of an EP rank's E/ep experts
  /// receives ep_rank_tokens*top_k*ep/E tokens per micro-batch: the M of its GEMMs (0 without
  /// experts).
  [[nodiscard]] double tokens_per_local_expert() const {
    if (model.moe.experts <= 0)
      return 0.0;
    return ep_rank_tokens() * static_cast<double>(model.moe.top_k) * std::max(1, parallel.ep) /
           static_cast<double>(model.moe.experts);
  }
  bool operator==(const WorkloadSpec&) const = default;
};

/// Peak dense FLOP/s of `gpu` at `p`.
/// "bf16", "fp16" or "fp8", as the workload file writes it.
inline const char* precision_name(Precision p) {
  switch (p) {
  case Precision::BF16:
    return "bf16";
  case Precision::FP16:
    return "fp16";
  case Precision::FP8:
    return "fp8";
  }
  return "bf16";
}

inline FlopsPerSec peak_flops(const GpuSpec& gpu, Precision p) {
  switch (p) {
  case Precision::BF16:
    return gpu.peak_bf16;
  case Precision::FP16:
    return gpu.peak_fp16;
  case Precision::FP8:
    return gpu.peak_fp8;
  }
  return gpu.peak_bf16;
}

} // namespace stepsim
