#include "config/schema.hpp"

#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>

namespace stepsim::config::schema {

namespace {

using enum Kind;
using enum Presence;

// Size limits (docs/schema.md, "Size limits"): far above any real model or cluster, they keep
// every product of sizes the simulator forms inside int64 and a step graph or platform in memory.
constexpr int64_t INT_LIMIT = std::numeric_limits<int>::max();
constexpr int64_t DEGREE_LIMIT = int64_t{1} << 20; // a parallel degree, micro-batch, layer count
constexpr int64_t NODE_LIMIT = int64_t{1} << 20;   // nodes under one leaf, leaves under one pod
constexpr int64_t PER_NODE_LIMIT = 1024;           // GPUs or NICs of one node (NVL576 is the largest domain)
constexpr int64_t LAYER_LIMIT = 100'000;
constexpr int64_t HIDDEN_LIMIT = int64_t{1} << 20;
constexpr int64_t HEAD_LIMIT = int64_t{1} << 16;
constexpr int64_t EXPERT_LIMIT = int64_t{1} << 16;
constexpr int64_t FFN_LIMIT = int64_t{1} << 22;
constexpr int64_t SEQ_LIMIT = int64_t{1} << 27;
// Sanity limits of physical figures: orders of magnitude beyond any hardware, they keep every
// time the engine forms finite and resolvable in double precision.
constexpr Bound RATIO_LIMIT{1e6, true, "1e6"};
constexpr Bound BYTES_PER_PARAM_LIMIT{1024, true, "1024"};

constexpr Bound at(double v, std::string_view text = {}) {
  return {v, true, text};
}
constexpr Bound above(double v, std::string_view text = {}) {
  return {v, false, text};
}

constexpr Value mapping() {
  return {.kind = MAPPING};
}
constexpr Value list(std::string_view type_text) {
  return {.kind = LIST, .type_text = type_text};
}
constexpr Value string() {
  return {.kind = STRING};
}
/// A string naming something the reader resolves (a switch).
constexpr Value name() {
  return {.kind = STRING, .type_text = "name"};
}
constexpr Value path(std::string_view type_text) {
  return {.kind = PATH, .type_text = type_text};
}
constexpr Value boolean() {
  return {.kind = BOOL};
}
constexpr Value enumeration(Choices names) {
  return {.kind = ENUM, .choices = names};
}
/// An integer in [lo, hi].
constexpr Value integer(int64_t lo, int64_t hi) {
  return {.kind = INTEGER, .range = {.min = at(static_cast<double>(lo)), .max = at(static_cast<double>(hi))}};
}
/// An integer >= lo.
constexpr Value integer_from(int64_t lo) {
  return {.kind = INTEGER, .range = {.min = at(static_cast<double>(lo))}};
}
/// A positive integer up to a size limit.
constexpr Value count(int64_t limit) {
  return {.kind = INTEGER, .range = {.min = at(1), .limit_max = at(static_cast<double>(limit))}};
}
/// A number >= lo (or 0 with `or_zero`), up to a sanity limit when given.
constexpr Value number_from(double lo, std::optional<Bound> limit = {}, bool or_zero = false) {
  return {.kind = NUMBER, .range = {.min = at(lo), .limit_max = limit, .or_zero = or_zero}};
}
constexpr Value number_in(double lo, double hi, std::string_view note) {
  return {.kind = NUMBER, .range = {.min = at(lo), .max = at(hi), .note = note}};
}
/// An efficiency: a fraction of a peak, at least 0.001 (below it a time would overflow to
/// infinity or round to nonsense).
constexpr Value fraction() {
  return number_in(0.001, 1, "the sanity limit");
}
/// A share of a whole, in (0, 1].
constexpr Value share() {
  return {.kind = NUMBER, .range = {.min = above(0), .max = at(1)}};
}
/// A rate over a spec's, in (0, 1]; at least 0.001 (the sanity limit, as fraction()).
constexpr Value speed() {
  return {.kind = NUMBER, .range = {.min = above(0), .max = at(1), .limit_min = at(0.001, "0.001")}};
}
constexpr Bound BYTES_LIMIT{1125899906842624.0, true, "1PiB"};
constexpr Value byte_size() {
  return {.kind = BYTES, .range = {.limit_max = BYTES_LIMIT}};
}
constexpr Value positive_byte_size() {
  return {.kind = BYTES, .range = {.min = above(0), .limit_max = BYTES_LIMIT}};
}
/// At least 1 bit/s: a flow over a vanishing rate never ends, which is no simulation at all.
constexpr Value bandwidth() {
  return {.kind = BANDWIDTH, .range = {.min = at(0.125, "1bps"), .limit_max = at(1e15, "1PBps")}};
}
constexpr Value duration() {
  return {.kind = DURATION, .range = {.limit_max = at(10, "10s")}};
}
constexpr Value flop_rate() {
  return {.kind = FLOPS,
          .range = {.min = above(0), .limit_min = at(1e9, "1GFLOPS"), .limit_max = at(1e21, "1e21FLOPS")}};
}
constexpr Value power() {
  return {.kind = POWER, .range = {.min = above(0), .limit_max = at(1e5, "100kW")}};
}
constexpr Value frequency() {
  return {.kind = FREQUENCY, .range = {.min = above(0), .limit_max = at(1e11, "100GHz")}};
}

// The cluster file (ClusterSpec).
constexpr Key CLUSTER_KEYS[] = {
    {"name", string(), REQUIRED, "", "", "", "cluster name (`name`)"},
    {"nodes", count(NODE_LIMIT), REQUIRED, "", "", "", "number of nodes (`nodes`)"},
    {"gpus_per_node", count(PER_NODE_LIMIT), REQUIRED, "", "",
     "`nodes * gpus_per_node` at most 2^20 GPUs (size limit)", "GPUs in one node (`gpus_per_node`)"},
    {"gpu", mapping(), REQUIRED, "", "", "", "the GPU model (`gpu`)"},
    {"gpu.kind", string(), REQUIRED, "", "", "", "GPU name, e.g. `H100-SXM5-80GB` (`gpu.kind`)"},
    {"gpu.peak_flops", mapping(), REQUIRED, "", "", "at least one of `bf16`, `fp16`",
     "dense tensor-core peak per precision"},
    {"gpu.peak_flops.bf16", flop_rate(), OPTIONAL, "", "absent = GPU has no bf16", "",
     "`gpu.peak_bf16` (0 when absent)"},
    {"gpu.peak_flops.fp16", flop_rate(), OPTIONAL, "", "absent = GPU has no fp16", "",
     "`gpu.peak_fp16` (0 when absent)"},
    {"gpu.peak_flops.fp8", flop_rate(), OPTIONAL, "", "absent = GPU has no fp8 tensor cores", "",
     "`gpu.peak_fp8` (0 when absent); the fp8 GEMMs of `precision: fp8` and its MFU denominator"},
    {"gpu.hbm_capacity", positive_byte_size(), REQUIRED, "", "", "", "device memory (`gpu.hbm_capacity`)"},
    {"gpu.hbm_bandwidth", bandwidth(), REQUIRED, "", "", "", "peak HBM bandwidth (`gpu.hbm_bandwidth`)"},
    {"gpu.compute_efficiency", fraction(), REQUIRED, "", "", "",
     "fraction of peak FLOP/s reached by large GEMMs (`gpu.compute_efficiency`)"},
    {"gpu.memory_efficiency", fraction(), REQUIRED, "", "", "",
     "fraction of HBM bandwidth reached (`gpu.memory_efficiency`)"},
    {"gpu.runtime_overhead", byte_size(), OPTIONAL, "1GiB", "", "",
     "device memory the job cannot use: CUDA context, cuBLAS and NCCL workspaces "
     "(`gpu.runtime_overhead`; the memory ledger's `runtime`)"},
    {"gpu.allocator_fragmentation", number_from(1), OPTIONAL, "1.1", "", "",
     "caching-allocator overhead on dynamic memory with PyTorch's default segments: the ledger adds "
     "(this - 1) x the dynamic peak (`gpu.allocator_fragmentation`); not used with "
     "`training.expandable_segments`"},
    {"gpu.profile", path("path or `none`"), OPTIONAL, "none", "", "an existing file",
     "kernel profile compute times come from (docs/kernels.md); relative to the cluster file's "
     "directory (to the working directory when given with `--set`). `none`/absent: the roofline from "
     "the two efficiencies above. Absent is not guessed from `gpu.kind`, so a cluster file means the "
     "same wherever it lies; the bundled topologies name `../kernels_profiles/data/<kind>.csv` "
     "(`gpu.profile`, resolved)"},
    {"gpu.overlap_slowdown", number_in(1, 10, "the sanity limit"), OPTIONAL, "",
     "**the profile's** (1 without one)", "",
     "compute slowdown while the GPU communicates (`gpu.overlap_slowdown`, 0 = unset)"},
    {"gpu.gemm_efficiency", fraction(), OPTIONAL, "1", "", "",
     "calibration ([calibration.md](calibration.md)): with a profile, GEMM and attention kernel times "
     "are divided by it (`gpu.gemm_efficiency`)"},
    {"gpu.memory_bound_efficiency", fraction(), OPTIONAL, "1", "", "",
     "calibration ([calibration.md](calibration.md)): with a profile, the times of every other kernel "
     "(norms, activations, softmax, residual adds, casts, copies, the optimizer) are divided by it"},
    {"gpu.launch_overhead", duration(), OPTIONAL, "", "**the profile's** `launch_overhead_s`", "",
     "calibration: fixed cost added per kernel (`gpu.launch_overhead`, negative = unset)"},
    {"gpu.pass_overhead", duration(), OPTIONAL, "0s", "", "",
     "calibration: fixed host-side cost of each pipeline pass (one micro-batch through one model "
     "chunk, forward or backward: the framework's schedule step and its p2p setup), added to the "
     "pass's first compute task and counted as compute (`gpu.pass_overhead`)"},
    {"gpu.list_collective_per_rank", duration(), OPTIONAL, "0s", "", "",
     "calibration: host time a tensor-list collective spends per participant before its transfer (a "
     "view and a copy launch per rank), at least one kernel launch (`gpu.launch_overhead`, else the "
     "profile's); charged, times the DP group's size, to each ZeRO-3 collective under "
     "`training.zero3_fetch: blocking` and shown as that collective's (exposed DP) time "
     "(docs/calibration.md)"},
    {"gpu.host_bandwidth", bandwidth(), OPTIONAL, "",
     "absent = not given; required by `training.offload_layers`", "",
     "GPU ↔ host memory per direction and GPU (PCIe, NVLink-C2C): the rate of activation offloading "
     "([model.md](model.md))"},
    {"gpu.kernel_cv", number_in(0, 1, "the sanity limit"), OPTIONAL, "0", "", "",
     "coefficient of variation of each compute task's time on this GPU kind: each duration is "
     "multiplied by a seeded lognormal factor of mean 1 ([variability.md](variability.md); "
     "`training.variability.kernel_cv` overrides it)"},
    {"gpu.host_memory", positive_byte_size(), OPTIONAL, "", "absent = not checked", "",
     "host memory per GPU (the node's RAM over its GPUs): the offloaded activations must fit in it "
     "too, or the layout does not fit (`memory.host_offload_bytes`, `memory.oom.host_over_by_bytes`)"},
    {"gpu.power_limit", power(), OPTIONAL, "", "absent = not given; required by `gpu.variant.power_limit`",
     "", "the base part's board power limit (datasheet TDP: H100 SXM 700W), the one its profile runs at"},
    {"gpu.boost_clock", frequency(), OPTIONAL, "",
     "absent = not given; required by `gpu.variant.sustained_clock`", "",
     "the base part's boost clock, at which its `peak_flops` hold (H100 SXM 1830MHz, A100 1410MHz)"},
    {"gpu.sm_count", integer(1, 4096), OPTIONAL, "", "absent = not given; required by `gpu.variant.sm_count`",
     "equal to the profile's `sm_count`", "the base part's streaming multiprocessors"},
    {"gpu.variant", mapping(), OPTIONAL, "", "absent = the base part",
     "at most one of `power_limit`, `sustained_clock`, `peak_flops`",
     "the part differs from the base part the keys above describe (power-capped, PCIe form, other HBM): "
     "its peaks, HBM bandwidth and capacity replace the base's, and its kernel profile is derived from "
     "the base profile (docs/kernels.md, \"GPU variants\"; `gpu.variant`)"},
    {"gpu.variant.name", string(), REQUIRED, "", "", "", "the variant's name, e.g. `H100-SXM5-80GB-500W`"},
    {"gpu.variant.power_limit", power(), OPTIONAL, "", "absent = the base's",
     "in [`gpu.power_limit`/4, `gpu.power_limit`]",
     "a power cap: the sustained clock goes as its cube root over the base's (`(P/P0)^(1/3)`)"},
    {"gpu.variant.sustained_clock", frequency(), OPTIONAL, "", "absent = the base's",
     "at most `gpu.boost_clock`",
     "the clock the variant holds in compute-bound kernels; compute scales with it over `gpu.boost_clock`"},
    {"gpu.variant.peak_flops", flop_rate(), OPTIONAL, "", "absent = the base's",
     "at most the base's 16-bit peak",
     "the variant's dense 16-bit tensor-core peak where it differs by more than a clock (H20: 148TFLOPS); "
     "every precision scales by its ratio to the base's"},
    {"gpu.variant.sm_count", integer(1, 4096), OPTIONAL, "", "absent = the base's; not with `peak_flops`",
     "at most `gpu.sm_count`", "enabled SMs (H100 PCIe: 114 of 132); compute scales with their ratio"},
    {"gpu.variant.hbm_bandwidth", bandwidth(), OPTIONAL, "", "absent = the base's", "",
     "the variant's HBM bandwidth; memory-bound kernels scale with its ratio to `gpu.hbm_bandwidth`"},
    {"gpu.variant.hbm_capacity", positive_byte_size(), OPTIONAL, "", "absent = the base's", "",
     "the variant's device memory (replaces `gpu.hbm_capacity`)"},
    {"nvswitch", mapping(), REQUIRED, "", "", "", "the GPU <-> NVSwitch link of one GPU (`nvswitch`)"},
    {"nvswitch.bandwidth", bandwidth(), REQUIRED, "", "", "", "per GPU, **per direction**"},
    {"nvswitch.latency", duration(), REQUIRED, "", "", "", "one-way latency through the NVSwitch"},
    {"nvswitch.efficiency", fraction(), REQUIRED, "", "", "",
     "achieved fraction of `bandwidth` (NCCL bus bandwidth / link bandwidth)"},
    {"nvswitch.nvls", mapping(), OPTIONAL, "", "absent = no NVLink SHARP", "",
     "NVLink SHARP (in-switch reduction) of the NVSwitch (`nvls`; docs/collectives.md)"},
    {"nvswitch.nvls.efficiency", fraction(), REQUIRED, "", "in `nvls`", "",
     "achieved fraction of `nvswitch.bandwidth` for an NVLS all-reduce (`nvls.efficiency`)"},
    {"nvswitch.nvls.latency", duration(), REQUIRED, "", "in `nvls`", "",
     "fixed cost of one NVLS collective: launch and multimem synchronisation (`nvls.latency`)"},
    {"pcie", mapping(), CONDITIONAL, "", "instead of `nvswitch`", "not with `nvswitch`",
     "the GPUs of a node talk over PCIe through a switch or host bridge (`intra = PCIE`; the link is "
     "stored as `nvswitch`)"},
    {"pcie.bandwidth", bandwidth(), REQUIRED, "", "", "", "per GPU, **per direction**, GPU <-> PCIe switch"},
    {"pcie.latency", duration(), REQUIRED, "", "", "", "one-way latency through the PCIe switch"},
    {"pcie.efficiency", fraction(), REQUIRED, "", "", "", "achieved fraction of `bandwidth`"},
    {"pcie.host_bandwidth", bandwidth(), OPTIONAL, "", "absent = unlimited", "",
     "shared bandwidth of the switch/host bridge per direction (`pcie_host_bandwidth`)"},
    {"nics", mapping(), REQUIRED, "", "", "", "the node's network adapters"},
    {"nics.count", count(PER_NODE_LIMIT), REQUIRED, "", "", "", "NICs per node (`nics_per_node`)"},
    {"nics.bandwidth", bandwidth(), REQUIRED, "", "", "", "**per NIC, per direction** (`nic.bandwidth`)"},
    {"nics.latency", duration(), REQUIRED, "", "", "",
     "one-way latency node to node through the NICs (`nic.latency`)"},
    {"nics.efficiency", fraction(), REQUIRED, "", "", "",
     "achieved fraction of `bandwidth` (`nic.efficiency`)"},
    {"fabric", mapping(), REQUIRED, "", "", "", "the inter-node network (`fabric`)"},
    {"fabric.kind", enumeration({"fat_tree", "rail_optimized", "graph"}), REQUIRED, "", "", "",
     "`fat_tree`: nodes under leaves (all NICs of a node on its leaf); `rail_optimized`: scalable "
     "units of `nodes_per_leaf` nodes, NIC k of every node of a unit on leaf (unit, k), all leaves "
     "under one spine; cross-rail traffic goes through the spine (PXN is applied by the all-to-all "
     "algorithm, docs/collectives.md); `graph`: the switches, links and attachments below "
     "(`fabric.kind`)"},
    {"fabric.nodes_per_leaf", count(NODE_LIMIT), OPTIONAL, "1", "", "",
     "nodes under one leaf switch. It need not divide `nodes`: the last leaf may be partly filled, and"
     " a value larger than `nodes` puts all nodes under one leaf."},
    {"fabric.oversubscription", number_from(1, RATIO_LIMIT), OPTIONAL, "1", "", "",
     "leaf downlink : uplink bandwidth ratio; 1 = non-blocking"},
    {"fabric.switch_latency", duration(), OPTIONAL, "0.5us", "", "",
     "added per switch traversed between nodes"},
    {"fabric.tiers", integer(2, 3), OPTIONAL, "2", "", "`fat_tree` only",
     "3: leaves grouped into pods under a pod spine, pods under a core (`fabric.tiers`)"},
    {"fabric.leaves_per_pod", count(NODE_LIMIT), REQUIRED, "", "with `tiers: 3`", "",
     "leaves under one pod spine (`fabric.leaves_per_pod`)"},
    {"fabric.spine_oversubscription", number_from(1, RATIO_LIMIT), OPTIONAL, "1", "; `tiers: 3` only", "",
     "pod spine down:up ratio: a pod's core uplinks carry its leaves' uplink capacity / this "
     "(`fabric.spine_oversubscription`)"},
    {"fabric.switches", list("list of names"), REQUIRED, "", "for `graph`",
     "unique, non-empty; at most 4096 (size limit)", "the fabric's switches (`fabric.switches`)"},
    {"fabric.links", list("list"), REQUIRED, "", "for `graph`", "",
     "full-duplex cables `{between: [A, B], bandwidth: BW, latency: T}`; bandwidth per direction; "
     "latency optional, default 0, `switch_latency` comes on top per switch entered; several cables "
     "between the same pair add up (`fabric.links`)"},
    {"fabric.links[].between", list("list of two names"), REQUIRED, "", "", "two different `fabric.switches`",
     "the switches the cable joins (`GraphLink::a`, `b`)"},
    {"fabric.links[].bandwidth", bandwidth(), REQUIRED, "", "", "", "per direction (`GraphLink::bandwidth`)"},
    {"fabric.links[].latency", duration(), OPTIONAL, "0s", "", "",
     "of the cable; `switch_latency` comes on top per switch entered (`GraphLink::latency`)"},
    {"fabric.attach", list("list"), REQUIRED, "", "for `graph`", "every node exactly once",
     "`{nodes: [first, last], switch: S}` puts every NIC of those nodes on S; `{nodes: [first, last], "
     "rails: [S0, S1, ...]}` puts NIC k on Sk (one per NIC). Every switch holding a NIC must be "
     "connected to the others. Routes take the fewest links (`fabric.nic_switch`)"},
    {"fabric.attach[].nodes", list("list of two integers"), REQUIRED, "", "", "first <= last < `nodes`",
     "the nodes [first, last] of the entry"},
    {"fabric.attach[].switch", name(), CONDITIONAL, "", "exactly one of `switch`, `rails`",
     "one of `fabric.switches`", "every NIC of the nodes hangs off this switch"},
    {"fabric.attach[].rails", list("list of names"), CONDITIONAL, "", "exactly one of `switch`, `rails`",
     "`nics.count` of `fabric.switches`", "NIC k of each node hangs off the k-th switch"},
    {"degraded", mapping(), OPTIONAL, "", "absent = every part at its spec", "",
     "parts that run below their spec or not at all; also from `--degrade FILE` "
     "([degraded.md](degraded.md); `degraded`)"},
    {"degraded.gpus", list("list"), OPTIONAL, "", "", "each GPU at most once", "slow GPUs"},
    {"degraded.gpus[].node", integer(0, NODE_LIMIT), REQUIRED, "", "", "< `nodes`", "the GPU's node"},
    {"degraded.gpus[].gpu", integer(0, PER_NODE_LIMIT), REQUIRED, "", "", "< `gpus_per_node`",
     "the GPU within its node"},
    {"degraded.gpus[].speed", speed(), REQUIRED, "", "", "",
     "the GPU's compute rate over its spec: its compute tasks take duration / speed"},
    {"degraded.random_gpus", mapping(), OPTIONAL, "", "", "",
     "slow GPUs drawn at random: `share` of the GPUs of the nodes that are up, not listed under "
     "`degraded.gpus`, each at `speed` (the same seed draws the same GPUs)"},
    {"degraded.random_gpus.share", share(), REQUIRED, "", "", "share x GPUs rounds to at least 1",
     "the share of the GPUs drawn"},
    {"degraded.random_gpus.speed", speed(), REQUIRED, "", "", "",
     "each drawn GPU's compute rate over its spec"},
    {"degraded.random_gpus.seed", integer(0, INT_LIMIT), OPTIONAL, "0", "", "",
     "the draw's seed (a Mersenne Twister, std::mt19937_64)"},
    {"degraded.nics", list("list"), OPTIONAL, "", "", "each NIC at most once; not every NIC of a node down",
     "slow or failed NICs"},
    {"degraded.nics[].node", integer(0, NODE_LIMIT), REQUIRED, "", "", "< `nodes`", "the NIC's node"},
    {"degraded.nics[].nic", integer(0, PER_NODE_LIMIT), REQUIRED, "", "", "< `nics.count`",
     "the NIC within its node"},
    {"degraded.nics[].bandwidth", bandwidth(), CONDITIONAL, "", "exactly one of `bandwidth`, `down`",
     "at most `nics.bandwidth`", "the NIC's rate per direction (times `nics.efficiency`)"},
    {"degraded.nics[].down", boolean(), CONDITIONAL, "", "exactly one of `bandwidth`, `down`", "`true`",
     "failed: the traffic of the GPUs that used it moves to the node's other NICs"},
    {"degraded.nodes", list("list"), OPTIONAL, "", "", "each node at most once",
     "nodes refused for placement: ranks go to the first nodes that are up"},
    {"degraded.nodes[].node", integer(0, NODE_LIMIT), REQUIRED, "", "", "< `nodes`", "the node"},
    {"degraded.nodes[].down", boolean(), REQUIRED, "", "", "`true`", "the node is down"},
    {"degraded.links", list("list"), OPTIONAL, "", "", "each leaf or link at most once",
     "`fat_tree`: leaves with fewer uplinks (`leaf`); `graph`: slower or failed links (`between`)"},
    {"degraded.links[].leaf", integer(0, NODE_LIMIT), CONDITIONAL, "",
     "`fat_tree`: with `uplinks_down` or `bandwidth`", "< the fabric's leaves",
     "the leaf switch (nodes `leaf * nodes_per_leaf` ...)"},
    {"degraded.links[].uplinks_down", integer(1, INT_LIMIT), CONDITIONAL, "", "with `leaf`, or `bandwidth`",
     "< the leaf's uplinks",
     "failed uplinks of the leaf: its spine capacity scales by (uplinks - k) / uplinks"},
    {"degraded.links[].between", list("list of two names"), CONDITIONAL, "",
     "`graph`: with `bandwidth` or `down`", "two `fabric.switches` that `fabric.links` joins",
     "the links between these switches"},
    {"degraded.links[].bandwidth", bandwidth(), CONDITIONAL, "", "instead of `uplinks_down` or `down`",
     "below the link's",
     "the leaf's spine capacity per direction, or the graph links' summed rate per direction"},
    {"degraded.links[].down", boolean(), CONDITIONAL, "", "`graph`: instead of `bandwidth`", "`true`",
     "the links between the two switches failed (the switches stay connected otherwise)"},
};

// The workload file (WorkloadSpec).
constexpr Key WORKLOAD_KEYS[] = {
    {"name", string(), REQUIRED, "", "", "", "workload name (`name`)"},
    {"model", mapping(), REQUIRED, "", "", "", "the transformer (`model`)"},
    {"model.name", string(), OPTIONAL, "", "**the top-level `name`**", "", "display name (`model.name`)"},
    {"model.from_hf", path("path"), OPTIONAL, "", "", "an existing file, relative to the workload file",
     "a Hugging Face `config.json` (llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, "
     "deepseek_v2, deepseek_v3, gpt_oss) whose architecture gives the defaults of the model keys "
     "(`head_dim` too; DeepSeek's `mla`; `sliding_window` and `full_attention_every`) (`dropout` from "
     "`attention_dropout` > 0: these families have no hidden dropout); with it `layers`, `hidden`, "
     "`heads`, `ffn_hidden`, `vocab`, `seq_len`, `mlp` become optional and keys given here override it"
     " ([moe.md](moe.md#models-from-hugging-face))"},
    {"model.layers", count(LAYER_LIMIT), REQUIRED, "", "", "", "transformer layers l"},
    {"model.hidden", count(HIDDEN_LIMIT), REQUIRED, "", "", "", "hidden size h"},
    {"model.heads", count(HEAD_LIMIT), REQUIRED, "", "",
     "divides `model.hidden` unless `model.head_dim` is given", "attention heads a"},
    {"model.kv_heads", count(HEAD_LIMIT), OPTIONAL, "", "**= `model.heads`**", "divides `model.heads`",
     "key/value heads (GQA/MQA when < heads)"},
    {"model.head_dim", count(HEAD_LIMIT), OPTIONAL, "", "**= `model.hidden / model.heads`**",
     "`heads × head_dim` at most 2^20 (size limit)",
     "width d of one attention head, where a model sets it apart (Qwen3, Mistral NeMo): Q and the "
     "output projection are h × a·d, K and V h × a_kv·d, and the attention kernels run d "
     "([model.md](model.md))"},
    {"model.mla", mapping(), OPTIONAL, "", "absent = plain attention",
     "needs kv_heads = heads, no `head_dim`, `bias: false`",
     "multi-head latent attention (DeepSeek-V2/V3; [model.md](model.md#multi-head-latent-attention))"},
    {"model.mla.q_lora_rank", integer(0, HIDDEN_LIMIT), OPTIONAL, "0", "", "",
     "rank of the query latent; 0: one full query projection (DeepSeek-V2-Lite)"},
    {"model.mla.kv_lora_rank", count(HIDDEN_LIMIT), REQUIRED, "",
     "in `mla` (optional over a `from_hf` config's MLA: each key overrides its one value)", "",
     "rank of the shared key/value latent"},
    {"model.mla.qk_nope_head_dim", count(HEAD_LIMIT), REQUIRED, "", "in `mla`", "",
     "per-head query/key width without rotary embedding"},
    {"model.mla.qk_rope_head_dim", integer(0, HEAD_LIMIT), OPTIONAL, "0", "", "",
     "rotary query/key width (the key's rotary part is shared by all heads)"},
    {"model.mla.v_head_dim", count(HEAD_LIMIT), REQUIRED, "", "in `mla`", "", "per-head value width"},
    {"model.ffn_hidden", count(FFN_LIMIT), REQUIRED, "", "", "", "MLP inner size f"},
    {"model.vocab", count(SEQ_LIMIT), REQUIRED, "", "", "", "vocabulary size V"},
    {"model.seq_len", count(SEQ_LIMIT), REQUIRED, "", "", "", "tokens per sequence s"},
    {"model.mlp", enumeration({"gelu", "swiglu"}), REQUIRED, "", "", "",
     "MLP kind; also selects the family defaults below"},
    {"model.norm", enumeration({"layernorm", "rmsnorm"}), OPTIONAL, "", "**by family**", "", "normalisation"},
    {"model.position_embedding", enumeration({"learned", "rotary"}), OPTIONAL, "", "**by family**", "",
     "`learned` adds an s·h table"},
    {"model.bias", boolean(), OPTIONAL, "", "**by family**", "", "linear layers carry biases"},
    {"model.tied_embeddings", boolean(), OPTIONAL, "", "**by family**", "",
     "the output layer shares the input embedding"},
    {"model.dropout", boolean(), OPTIONAL, "true", "", "",
     "hidden and attention dropout: the ledger keeps their masks (Korthikanti's 34·sbh + 5·a·s²·b per "
     "layer; without: 32·sbh + 2·a·s²·b) and the unfused attention core runs a dropout pass; most "
     "models trained since 2023 (Llama, Mistral, MPT, Nemotron) use none"},
    {"model.moe", mapping(), OPTIONAL, "", "absent = dense", "", "mixture of experts ([moe.md](moe.md))"},
    {"model.moe.experts", count(EXPERT_LIMIT), REQUIRED, "", "in `moe` (unless from_hf gives it)", "",
     "routed experts E per MoE layer"},
    {"model.moe.top_k", integer_from(1), OPTIONAL, "1", "", "at most `experts`",
     "experts each token is routed to"},
    {"model.moe.expert_ffn_hidden", count(FFN_LIMIT), OPTIONAL, "", "**= `model.ffn_hidden`**", "",
     "inner size f_e of one expert"},
    {"model.moe.shared_experts", integer(0, EXPERT_LIMIT), OPTIONAL, "0", "", "",
     "always-active experts of size f_e"},
    {"model.moe.capacity_factor", number_from(1, {}, true), OPTIONAL, "0", "", "",
     "an expert keeps at most factor x its fair share of tokens, the rest is dropped; 0 = no limit"},
    {"model.moe.moe_layer_freq", count(LAYER_LIMIT), OPTIONAL, "1", "", "",
     "layer l is MoE when l >= first_dense_layers and l % freq == 0"},
    {"model.moe.first_dense_layers", integer_from(0), OPTIONAL, "0", "", "fewer than `model.layers`",
     "leading dense layers (DeepSeek-V3: 3)"},
    {"model.moe.routing", mapping(), OPTIONAL, "", "", "",
     "how tokens spread over the routed experts (`moe.routing`; [moe.md](moe.md))"},
    {"model.moe.routing.distribution", enumeration({"uniform", "zipf"}), OPTIONAL, "uniform", "", "",
     "tokens per expert"},
    {"model.moe.routing.zipf_exponent", number_from(0), OPTIONAL, "1", "", "",
     "share of the expert of popularity rank r ∝ r^-x"},
    {"model.moe.routing.seed", integer_from(0), OPTIONAL, "0", "", "",
     "picks the popular experts of each layer (SplitMix64)"},
    {"model.moe.routing.groups", integer(0, 65536), OPTIONAL, "0", " (DeepSeek's `n_group` when `from_hf`)",
     "> 0 divides experts",
     "group-limited routing: the experts form this many equal groups, a token's experts come from "
     "`group_top_k` of them; it shrinks the deduplicated dispatch's cross-node traffic when the groups"
     " are the EP group's nodes ([moe.md](moe.md#moe-layers)); 0 = no limit"},
    {"model.moe.routing.group_top_k", integer(0, 65536), OPTIONAL, "0",
     " (DeepSeek's `topk_group` when `from_hf`)",
     "with groups: 1 <= group_top_k <= groups and their experts hold top_k",
     "groups a token's experts come from"},
    {"model.sliding_window", integer(0, SEQ_LIMIT), OPTIONAL, "0",
     " (the Hugging Face config's when `from_hf`)", "",
     "sliding-window attention: a query of a windowed layer attends to the last this-many positions; "
     "0: no window ([model.md](model.md#sliding-window-attention))"},
    {"model.full_attention_every", integer(0, LAYER_LIMIT), OPTIONAL, "0", "", "> 0 needs `sliding_window`",
     "layers i with (i + 1) % n == 0 attend to the whole sequence, the others through the window "
     "(gpt-oss, Gemma 2: 2; Gemma 3: 6); 0: every layer windowed. `parallel.cp` > 1 needs a window of "
     "at least seq_len / 2"},
    {"model.mtp_layers", integer(0, 16), OPTIONAL, "0",
     " (the Hugging Face config's `num_nextn_predict_layers` when `from_hf`)", "",
     "multi-token prediction depth (DeepSeek-V3): per depth one more layer, a 2h → h projection and "
     "the logits again on the last pipeline stage ([model.md](model.md#multi-token-prediction))"},
    {"batch", mapping(), REQUIRED, "", "", "", "sequences per step and per micro-batch (`batch`)"},
    {"batch.global_batch", count(INT_LIMIT), REQUIRED, "", "", "",
     "sequences per optimizer step, all DP replicas together"},
    {"batch.micro_batch", count(DEGREE_LIMIT), REQUIRED, "", "", "", "sequences per micro-batch per replica"},
    {"parallel", mapping(), REQUIRED, "", "", "", "the layout (`parallel`)"},
    {"parallel.tp", count(DEGREE_LIMIT), REQUIRED, "", "", "", "tensor-parallel size"},
    {"parallel.pp", count(DEGREE_LIMIT), REQUIRED, "", "", "", "pipeline-parallel size"},
    {"parallel.dp", count(DEGREE_LIMIT), OPTIONAL, "", "**derived**", "",
     "data-parallel size; when omitted it is 0 after loading (the `ParallelSpec` default) and "
     "`check_layout`'s `Layout` holds GPUs / (tp·cp·pp)"},
    {"parallel.schedule",
     enumeration({"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipev"}), REQUIRED, "",
     "",
     "dualpipe: even pp, an even number of micro-batches >= 2·pp; dualpipev: micro-batches >= 2·pp (layout "
     "check)",
     "pipeline schedule (`Schedule::GPIPE`, `ONE_F_ONE_B`, `INTERLEAVED`, `ZB_H1`, `ZB_H2`, `DUALPIPE`, "
     "`DUALPIPE_V`; docs/schedules.md)"},
    {"parallel.vp", count(DEGREE_LIMIT), OPTIONAL, "1", "", ">= 2 exactly with `interleaved` (layout check)",
     "virtual stages (model chunks) per GPU for the interleaved schedule"},
    {"parallel.sp", boolean(), OPTIONAL, "false", "", "needs tp > 1 (layout check)",
     "Megatron sequence parallelism"},
    {"parallel.pp_scatter_gather", boolean(), OPTIONAL, "false", "", "",
     "Megatron-LM's scatter/gather of pipeline messages: without sp, each TP rank sends 1/tp of the "
     "b·s·h activation (or gradient) to the next stage, and the receiving TP group all-gathers it (a "
     "TP all-gather before the next compute). No effect with sp = true (already split) or tp = 1. "
     "Megatron-LM 2021–22 does this by default; DeepSpeed's pipeline engine and Megatron-Core do not"},
    {"parallel.pp_p2p_blocking", boolean(), OPTIONAL, "false", "", "needs schedule `1f1b` (layout check)",
     "pipeline sends and receives in the stage's instruction order (DeepSpeed's PipelineEngine and "
     "its TrainSchedule): each waits for both ranks' earlier work, and both ranks' next work waits "
     "for it; between two passes the gradient is received before the activation is sent after a "
     "forward followed by a backward, else the send comes first. false: a send runs beside the "
     "sender's next compute ([model.md](model.md#blocking-pipeline-sends))"},
    {"parallel.tp_grad_overlap", boolean(), OPTIONAL, "true", "", "",
     "In the backward, the TP collective summing each column-parallel linear's input gradient (QKV, "
     "fc1, the output layer: the all-reduce, or with sp the reduce-scatter) runs beside that linear's "
     "weight-gradient GEMM, and with sp the re-gather of its input beside the data-gradient GEMM "
     "(Megatron-LM's asynchronous TP all-reduce from 2022, Megatron-Core, NeMo, Transformer Engine). "
     "false: after the block's whole backward (Megatron-LM 2021, Megatron-DeepSpeed). No effect with "
     "tp = 1; docs/model.md, \"TP in the backward\""},
    {"parallel.tp_comm_overlap", boolean(), OPTIONAL, "false", "", "",
     "the forward's TP reduce-scatters and all-gathers split into tp chunks and pipelined with the "
     "layer's linear GEMMs, and the backward's gradient all-gather beside the weight-gradient GEMM: one "
     "chunk of each stays exposed (Transformer Engine's userbuffers, Megatron's `--tp-comm-overlap`, "
     "PyTorch's async TP). No effect without `parallel.sp` and tp > 1 "
     "([model.md](model.md#tp-communication-overlap))"},
    {"parallel.zero_stage", integer(0, 3), OPTIONAL, "0", "", "", "ZeRO stage; 3 = FSDP full shard"},
    {"parallel.dp_shard", count(DEGREE_LIMIT), OPTIONAL, "", "**= dp**",
     "divides dp; below dp needs `zero_stage` 3 and a dense model (layout check)",
     "ZeRO-3 hybrid sharding (HSDP: FSDP2's replicate x shard mesh, FSDP1's HYBRID_SHARD): the DP "
     "replicas (consecutive, with their CP ranks) that shard the parameters, gradients and optimizer "
     "states; each layer is gathered and reduce-scattered within its shard group, and each gradient "
     "shard then all-reduced over the dp / dp_shard replicas holding it ([model.md](model.md#zero-3-fetch))"},
    {"parallel.cp", count(DEGREE_LIMIT), OPTIONAL, "1", "", "divides seq_len (layout check)",
     "context parallelism (ring attention); GPUs = tp·cp·pp·dp "
     "([moe.md](moe.md#context-parallelism-ring-attention))"},
    {"parallel.ep", count(DEGREE_LIMIT), OPTIONAL, "1", "",
     "divides dp (tp·cp·dp with `etp: 1` below tp) and `model.moe.experts` (layout check)",
     "expert parallelism; subdivides DP ([moe.md](moe.md#rank-order-and-groups))"},
    {"parallel.etp", count(DEGREE_LIMIT), OPTIONAL, "", "**= tp**",
     "1 or tp; needs `model.moe`; 1 below tp needs `sp: true` (layout check)",
     "expert tensor parallelism: tp splits every expert like the dense MLP; 1 keeps experts whole and "
     "folds the EP groups over the TP ranks (Megatron-Core's MoE parallel folding, "
     "[moe.md](moe.md#rank-order-and-groups))"},
    {"parallel.ep_overlap", boolean(), OPTIONAL, "false", "",
     "needs MoE with ep >= 2, `schedule: interleaved` when pp > 1 (`1f1b` when pp = 1), recompute not `full` "
     "(layout check)",
     "combined 1F1B: each steady-state forward runs with the adjacent backward of another micro-batch,"
     " hiding the expert all-to-alls (Megatron-Core's `--overlap-moe-expert-parallel-comm`; "
     "[moe.md](moe.md#moe-layers))"},
    {"parallel.ep_dispatch", enumeration({"all_to_all", "deduplicated"}), OPTIONAL, "all_to_all", "",
     "deduplicated needs MoE with ep >= 2 (layout check)",
     "how expert all-to-alls move tokens: every routed copy (NCCL), or once per remote node holding "
     "one of the token's experts (DeepEP / HybridEP; [moe.md](moe.md#moe-layers))"},
    {"parallel.chunk_layers", list("list of integers"), OPTIONAL, "", "**even split**",
     "pp·vp counts in 0..100000 in global chunk order, adding up to `model.layers`; only the last may be 0 "
     "(layout check)",
     "layers of each model chunk (chunk c on stage c mod pp): a shorter first and last chunk balance "
     "the embedding and the output layer, as Megatron-Core's pipeline layouts and DeepSpeed's "
     "partitioning do ([schedules.md](schedules.md#interleaved-1f1b))"},
    {"precision", enumeration({"bf16", "fp16", "fp8"}), REQUIRED, "", "", "",
     "training precision; the cluster's GPU must give a peak for it. `fp8`: Transformer Engine-style "
     "fp8 training (docs/model.md, \"fp8 training\"): the layers' linear GEMMs in fp8, the rest bf16, "
     "so the GPU also needs a bf16 peak; MFU is then against the fp8 peak, as NVIDIA reports it"},
    {"training", mapping(), OPTIONAL, "", "", "",
     "memory, recomputation, ZeRO and loss options (`training`)"},
    {"training.dp_bucket", positive_byte_size(), OPTIONAL, "25MiB", "", "", "DP gradient bucket size"},
    {"training.optimizer_bytes_per_param", number_from(0, BYTES_PER_PARAM_LIMIT), OPTIONAL, "12", "", "",
     "optimizer state per parameter: 12 = fp32 master + Adam m + v; 8 = m + v only"},
    {"training.recompute", enumeration({"none", "selective", "full"}), OPTIONAL, "none", "", "",
     "activation recomputation"},
    {"training.recompute_modules", list("list"), OPTIONAL, "[core_attn]", "; needs `recompute: selective`",
     "each of `core_attn`, `layernorm`, `mlp` (dense models), `moe_act` (MoE models), `mla_up_proj` (models "
     "with `mla`), `alternate_linears` (dense models with plain attention; alone) at most once",
     "what selective recomputation repeats (Megatron-LM's `recompute_modules`; `alternate_linears`: a "
     "per-op policy saving every other matmul, as torchtitan's `selective_ac_option: op`; "
     "[model.md](model.md#selective-recomputation))"},
    {"training.flash_attention", boolean(), OPTIONAL, "false", "", "",
     "fused (FlashAttention-style) attention: the s² scores are not stored, and with a kernel profile "
     "the attention core is one fused kernel; `false` charges Megatron's unfused "
     "QKᵀ/softmax/dropout/AV kernels (docs/kernels.md)"},
    {"training.attention_kernel", enumeration({"cudnn", "flash2", "flash3"}), OPTIONAL, "cudnn",
     "; with `flash_attention: true`; `flash3` needs a Hopper profile (compute capability 9.x)", "",
     "which fused attention kernel runs the attention core: `cudnn`, cuDNN's fused attention "
     "(Transformer Engine, PyTorch SDPA's cuDNN backend), what the kernel profiles' attention rows "
     "measure; `flash2`, FlashAttention-2 (PyTorch SDPA's flash backend), on compute capability 9.0 "
     "and later at 333/529 of the profile's forward rate and 318/518 of its backward; `flash3`, "
     "FlashAttention-3, at 602/529 and 559/518 (the FlashAttention-3 paper's H100 figures; "
     "docs/kernels.md, \"Attention kernels\")"},
    {"training.zero3_prefetch", integer(0, 64), OPTIONAL, "1", "", "",
     "ZeRO-3 / FSDP: layers whose parameters are gathered ahead of the one computing; at most this + 1"
     " gathered layers of a pass are resident (the memory ledger's `zero3_gathered`: that window of "
     "the largest layer, plus the embedding or output layer a stage's first or last layer brings with "
     "it; with MoE the dense part plus the local experts, docs/moe.md)"},
    {"training.zero3_fetch", enumeration({"prefetch", "blocking"}), OPTIONAL, "prefetch",
     "; `blocking` needs `parallel.zero_stage` 3", "",
     "how ZeRO-3 gathers parameters (docs/model.md, \"ZeRO-3 fetch\"): `prefetch`, one all-gather per "
     "layer issued `zero3_prefetch` layers ahead beside the compute; `blocking` (DeepSpeed's ZeRO-3 of"
     " 2021), one tensor-list collective per weight tensor, each after the device drained, with "
     "`gpu.list_collective_per_rank` of host time per DP rank, a recomputed layer gathered again for "
     "its backward, one gathered layer resident"},
    {"training.reshard_after_forward", boolean(), OPTIONAL, "true",
     "; `false` needs `parallel.zero_stage` 3, `zero3_fetch: prefetch`, a dense model and, with "
     "`parallel.pp` above 1, a schedule that does not split the backward (not zb-h1/zb-h2)",
     "",
     "ZeRO-3 / FSDP2 (`fully_shard(reshard_after_forward=...)`): `true`, a layer's gathered parameters "
     "are freed after its forward and gathered again for its backward; `false`, they stay gathered "
     "from the forward to the layer's backward, which gathers nothing: one all-gather per layer and "
     "micro-batch instead of two, and every layer of the model gathered at the turn from forward to "
     "backward (the memory ledger's `zero3_gathered`); with a pipeline, as torch.distributed.pipelining "
     "runs FSDP2, each stage's layers are gathered once per step and held, its gradients accumulate "
     "unsharded and are reduce-scattered after its last backward (docs/model.md, \"ZeRO-3 fetch\")"},
    {"training.overlap_param_gather", boolean(), OPTIONAL, "false", "; needs `parallel.zero_stage` 1 or 2",
     "",
     "the distributed optimizer's parameter all-gather runs bucket by bucket under the next step's "
     "forward (Megatron's `overlap_param_gather`) instead of after the optimizer: the step starts with"
     " the gathers, chunk by chunk in forward order, and each chunk's first forward waits layer by "
     "layer for its bucket (docs/model.md)"},
    {"training.grad_reduce_in_fp32", boolean(), OPTIONAL, "false", "", "",
     "gradients held and reduced over DP in fp32 (Megatron's `grad_reduce_in_fp32`, NeMo's "
     "`grad_sync_dtype: fp32`): 4 bytes per gradient in the DP reductions (buckets, experts' groups, "
     "ZeRO-3's reduce-scatters, the end of step's all-reduces) and in the ledger's gradients, instead "
     "of the 16-bit element's 2; parameter gathers keep the weights' bytes"},
    {"training.grad_accumulation", enumeration({"fused", "fp32_pass"}), OPTIONAL, "fused", "", "",
     "where each micro-batch's weight gradients are accumulated: `fused` inside the weight-gradient "
     "GEMMs (Megatron's `gradient_accumulation_fusion`: no extra kernel); `fp32_pass` by a pass after "
     "each backward pass that adds the 16-bit gradients into fp32 ones and clears them (DeepSpeed's "
     "bf16 optimizer): 12 bytes of HBM traffic per gradient the rank holds, on the pass's last "
     "compute task (docs/model.md)"},
    {"training.pointwise", enumeration({"fused", "eager"}), OPTIONAL, "fused", "", "",
     "how the pointwise operations around the GEMMs run: `fused`, one kernel per norm, activation and "
     "residual add (Transformer Engine, Megatron's fused kernels, torch.compile); `eager`, PyTorch eager "
     "modules composing them of single operations: RMSNorm in fp32 (6 kernels), rotary embeddings in "
     "complex fp32 (3 kernels each on Q and K), grouped K and V repeated to every query head, the "
     "attention output made contiguous, SwiGLU as two kernels (docs/kernels.md, \"Pointwise kernels\")"},
    {"training.cross_entropy", enumeration({"fp32", "fused"}), OPTIONAL, "fp32", "", "",
     "the loss's kernels: `fp32` casts the logits to fp32 and runs the log-softmax, its backward and "
     "the cast back as separate kernels (PyTorch autocast, Megatron's vocabulary-parallel "
     "cross-entropy; 36 bytes of traffic per logit, 4-byte logits kept); `fused` is one 16-bit kernel "
     "writing the gradient in place (4 bytes per logit, 2 kept) (docs/kernels.md)"},
    {"training.fp8_params", boolean(), OPTIONAL, "false", "; needs `precision: fp8`", "",
     "fp8 primary weights (Transformer Engine's `fp8_model_init`, Megatron's `fp8_param_gather`): "
     "weights held in fp8 with their transpose (2 bytes per parameter instead of 4) and gathered in "
     "fp8 by the distributed optimizer and ZeRO-3"},
    {"training.fp32_shards", boolean(), OPTIONAL, "false", "; with `parallel.zero_stage` 3", "",
     "ZeRO-3 shards that are the fp32 parameters themselves (PyTorch FSDP's mixed precision): the "
     "memory ledger holds 4 bytes per sharded parameter (the optimizer's fp32 master weight, "
     "counted there instead: `optimizer_bytes_per_param` - 4) and 4 per sharded gradient, whatever "
     "`grad_reduce_in_fp32` says of the reductions; 16-bit weights exist only gathered "
     "([model.md](model.md#fsdps-fp32-shards))"},
    {"training.expandable_segments", boolean(), OPTIONAL, "false", "", "",
     "PyTorch's caching allocator with expandable segments "
     "(`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`):"
     " the memory ledger's allocator reserve is the partly used pages of each stream's segment, "
     "(2 MiB + 20 MiB) per stream, instead of `gpu.allocator_fragmentation`'s share of the dynamic memory "
     "([model.md](model.md#the-caching-allocator))"},
    {"training.fp8_weight_cache", boolean(), OPTIONAL, "true", "", "",
     "fp8 training: each layer's fp8 weight cast and its transpose are kept for the step, as Transformer "
     "Engine caches them from the first micro-batch (`is_first_microbatch`): 2 bytes per layer parameter "
     "in the memory ledger (ZeRO-3: per gathered layer); `false`, cast in every forward and backward and "
     "not kept, as torchao's `Float8Linear` ([model.md](model.md), \"fp8 training\")"},
    {"training.fp8_all_gather", boolean(), OPTIONAL, "false",
     "; needs `precision: fp8`, `parallel.zero_stage: 3` and a dense model with plain attention", "",
     "ZeRO-3 / FSDP gathers each transformer layer's parameters as their fp8 casts, 1 byte per parameter, "
     "the embedding and output layers in 16 bits and the shards kept as they are (torchao's "
     "`enable_fsdp_float8_all_gather`: the shard cast to fp8 before the all-gather); `training.fp8_params` "
     "gathers in fp8 whatever this says ([model.md](model.md), \"fp8 training\")"},
    {"training.fused_projections", boolean(), OPTIONAL, "true",
     "; `false` needs a dense model with plain attention", "",
     "the attention's Q, K and V projections as one GEMM and a gated MLP's gate and up projections as one "
     "(Megatron-Core's `linear_qkv`, `linear_fc1`); `false`, a linear each (torchtitan's and Hugging Face's "
     "Llama: `wq`, `wk`, `wv`; `w1`, `w3`), each reading the shared input, their input gradients summed "
     "([kernels.md](kernels.md), \"Separate projections\")"},
    {"training.fp8_scaling", enumeration({"tensorwise", "rowwise"}), OPTIONAL, "tensorwise",
     "; `rowwise` needs `precision: fp8`, `fp8_weight_cache: false`, `fp8_params: false` and a dense model "
     "with plain attention",
     "",
     "fp8 training: one scale per tensor (`tensorwise`: Transformer Engine, torchao's default recipe), or "
     "torchao's axiswise recipe (`rowwise`, `recipe_name: rowwise`): each operand cast along the contraction "
     "axis of every GEMM it feeds, the weight gradient's operands by a column pass and a cast, and the "
     "backward GEMMs' outputs rescaled by a pass of their own; the linear inputs kept in 16 bits "
     "([kernels.md](kernels.md), \"fp8 training\")"},
    {"training.offload_layers", integer(0, DEGREE_LIMIT), OPTIONAL, "0",
     "; needs `recompute: none` and `gpu.host_bandwidth`", "fewer than a model chunk's layers (layout check)",
     "activation offloading (Megatron's `cpu_offloading_num_layers`): the first N layers of each model"
     " chunk keep their activations in host memory between forward and backward ([model.md](model.md))"},
    {"training.recompute_layers", integer(0, DEGREE_LIMIT), OPTIONAL, "0", "; needs `recompute: full`", "",
     "full recomputation of only the first N layers of every model chunk (Megatron's "
     "`recompute_method: block`, `recompute_num_layers`); 0 = every layer ([model.md](model.md))"},
    {"training.stack", mapping(), OPTIONAL, "", "absent = no stack", "",
     "a training stack preset: the documented defaults of one framework release for the mechanism keys "
     "`training.flash_attention`, `parallel.sp`, `parallel.tp_grad_overlap`, `parallel.pp_scatter_gather`, "
     "`parallel.zero_stage`, `training.overlap_param_gather`, `training.grad_reduce_in_fp32`, "
     "`training.zero3_fetch`, `training.fp8_params`, `parallel.etp`, `training.pointwise`, "
     "`parallel.tp_comm_overlap`, `training.attention_kernel`, `training.fp32_shards`, "
     "`training.grad_accumulation`, `parallel.pp_p2p_blocking`, `training.expandable_segments`; a key the "
     "file writes wins, and a "
     "value whose mechanism needs a layout (sp: tp > 1) applies only where the layout has it "
     "([stacks.md](stacks.md); `stepsim run --explain` lists each value and its origin)"},
    {"training.stack.name", string(), REQUIRED, "", "in `stack`",
     "one of `megatron-lm`, `megatron-core`, `nemo`, `megatron-bridge`, `megatron-deepspeed`, `deepspeed`, "
     "`fsdp`, `torchtitan`, `composer`",
     "the framework ([stacks.md](stacks.md))"},
    {"training.stack.version", string(), OPTIONAL, "", "the preset's newest", "one of the preset's versions",
     "the release, e.g. `\"24.07\"` for NeMo ([stacks.md](stacks.md))"},
    {"training.variability", mapping(), OPTIONAL, "", "absent = the GPU's `gpu.kernel_cv`, seed 0", "",
     "per-kernel time noise ([variability.md](variability.md)); with it and `stepsim run --steps N`, "
     "summary.json's `variability` gives the step-time distribution"},
    {"training.variability.kernel_cv", number_in(0, 1, "the sanity limit"), OPTIONAL, "",
     "**the GPU's** `gpu.kernel_cv`", "",
     "coefficient of variation of each compute task's time: its duration is multiplied by a lognormal "
     "factor of mean 1 drawn for (seed, step, rank, task) (negative in the spec = unset)"},
    {"training.variability.seed", integer(0, INT_LIMIT), OPTIONAL, "0", "", "",
     "the noise's seed: the same seed gives the same draws and byte-identical outputs"},
    {"training.variability.replicas", integer(2, INT_LIMIT), OPTIONAL, "", "absent = every replica",
     "a non-blocking fabric, no `degraded` section",
     "with noise, the data-parallel replicas simulated (each with its CP and EP ranks): the others' "
     "wait is added as the expected maximum of normal replica times by order statistics "
     "([variability.md](variability.md), \"Sampled replicas\"); an approximation that makes 10 k+ "
     "GPUs affordable"},
    {"collectives", mapping(), OPTIONAL, "", "", "",
     "the algorithm forced per communication group (`collectives`; docs/collectives.md)"},
    {"collectives.tp", enumeration({"auto", "ring", "tree", "hierarchical", "nvls", "pairwise"}), OPTIONAL,
     "auto", "", "", "tensor-parallel collectives"},
    {"collectives.pp", enumeration({"auto", "ring", "tree", "hierarchical", "nvls", "pairwise"}), OPTIONAL,
     "auto", "", "", "pipeline sends"},
    {"collectives.dp", enumeration({"auto", "ring", "tree", "hierarchical", "nvls", "pairwise"}), OPTIONAL,
     "auto", "", "", "data-parallel collectives"},
    {"collectives.ep", enumeration({"auto", "ring", "tree", "hierarchical", "nvls", "pairwise"}), OPTIONAL,
     "auto", "", "only `pairwise` applies", "the expert all-to-all"},
    {"collectives.cp", enumeration({"auto", "ring", "tree", "hierarchical", "nvls", "pairwise"}), OPTIONAL,
     "auto", "", "", "the context-parallel ring sends (direct)"},
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

using KeyIndex = std::map<std::string_view, const Key*, std::less<>>;

KeyIndex index_of(std::span<const Key> keys) {
  KeyIndex out;
  for (const Key& k : keys)
    out.emplace(k.path, &k);
  return out;
}

} // namespace

std::string_view file_name(File file) {
  return file == File::CLUSTER ? "cluster" : "workload";
}

std::span<const Key> keys(File file) {
  if (file == File::CLUSTER)
    return CLUSTER_KEYS;
  return WORKLOAD_KEYS;
}

const Key& key(File file, std::string_view path) {
  static const KeyIndex cluster = index_of(CLUSTER_KEYS);
  static const KeyIndex workload = index_of(WORKLOAD_KEYS);
  std::string declared; // list indices as "[]"
  for (std::size_t i = 0; i < path.size(); ++i) {
    declared += path[i];
    if (path[i] == '[')
      while (i + 1 < path.size() && path[i + 1] != ']')
        ++i;
  }
  const KeyIndex& all = file == File::CLUSTER ? cluster : workload;
  const auto it = all.find(declared);
  if (it == all.end())
    throw std::logic_error("schema: the " + std::string(file_name(file)) + " file declares no key '" +
                           std::string(path) + "'");
  return *it->second;
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

} // namespace stepsim::config::schema
