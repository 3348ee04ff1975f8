#pragma once
// The per-GPU memory ledger (MODEL.md §3): persistent state (weights, gradients, optimizer
// states, communication buffers, runtime overhead) and the activations each task stores for
// backward. The same per-task figures drive both the static ledger (`stepsim memory`) and the
// timeline the engine's events produce, so the two agree by construction.

#include "config/spec.hpp"
#include "core/units.hpp"

namespace stepsim::model {

/// Activations one layer stores for backward, per micro-batch, on one TP rank, split by the
/// block that allocates them (Korthikanti et al. 2022, generalised to GQA and SwiGLU: for a GPT
/// layer the total is s*b*h*(34 + 5*a*s/h) without parallelism, s*b*h*(10 + 24/t + 5*a*s/(h*t))
/// with TP, s*b*h*(34 + 5*a*s/h)/t with TP+SP; selective recomputation drops the 5*a*s^2*b term;
/// full recomputation keeps only the layer input 2*s*b*h (/t with SP); flash attention never
/// stores the s^2 term).
struct LayerActivations {
  Bytes attention; ///< allocated by the attention block's forward, freed by its backward
  Bytes mlp;       ///< allocated by the MLP block's forward, freed by its backward
  [[nodiscard]] Bytes total() const { return attention + mlp; }
};

/// What one layer keeps per micro-batch between its forward and its backward.
LayerActivations stored_layer_activations(const WorkloadSpec& w);

/// What one layer holds while it is recomputed before its backward (full recomputation only:
/// the whole layer's activations as without recomputation; zero otherwise).
LayerActivations recompute_working_set(const WorkloadSpec& w);

/// Extra activations of the last stage per micro-batch: the output projection's input 2*s*b*h and
/// the fp32 logits for the loss 4*s*b*V/t.
Bytes logits_activations(const WorkloadSpec& w);

/// Passes of one model chunk (a stage's layers / vp) whose activations stage `stage` holds at its
/// peak, and how many of them carry the logits (last stage). Closed forms of the schedules
/// (docs/schedules.md; graph/schedule tests walk the orders to check them): GPipe m; 1F1B
/// min(pp - stage, m); interleaved min(2*(pp - stage - 1) + (vp - 1)*pp + 1, m*vp) chunk passes,
/// one with logits (all m*vp and m when m == pp); ZB-H1 min(pp, m); ZB-H2 min(2*pp - 1, m) (until W).
struct InFlight {
  int64_t passes = 0;
  int64_t output_passes = 0;
};
InFlight in_flight_passes(const WorkloadSpec& w, int stage);

/// Micro-batches' worth of activations stage `stage` holds at once: in_flight_passes / vp,
/// rounded up (1F1B min(pp - stage, m), GPipe m).
int64_t in_flight_micro_batches(const WorkloadSpec& w, int stage);

/// ZeRO-3 with a pipeline and training.reshard_after_forward false (FSDP2 under
/// torch.distributed.pipelining, docs/model.md "ZeRO-3 fetch"): each model chunk's layers are
/// gathered in its first forward and stay gathered for the whole step; the gradients accumulate
/// unsharded over the micro-batches and are reduce-scattered after the chunk's last backward.
/// Needs data parallelism (dp*cp > 1) to shard over.
bool zero3_held_for_step(const WorkloadSpec& w);

/// ZeRO-3 / FSDP: bytes of one gathered layer (its full parameters on this TP rank, 16-bit, plus
/// their fp8 copies in fp8 training). MoE: the largest layer's dense part plus its local experts
/// when their expert-data-parallel group (dp*cp/ep GPUs) shards them.
Bytes gathered_layer_bytes(const WorkloadSpec& w);

/// Memory of one GPU of a stage. `activations` and `zero3_gathered` are at the peak; `other`
/// is communication buffers plus runtime overhead plus allocator fragmentation.
/// Bytes per layer parameter of the fp8 weight copies beside the stored weights: fp8 training,
/// the fp8 weight and its transpose (2) where they are kept for the step
/// (training.fp8_weight_cache), or with fp8 primary weights (training.fp8_params) the transpose
/// alone (1); otherwise 0.
double fp8_weight_bytes(const WorkloadSpec& w);

/// Bytes of one stored weight, as the distributed optimizer gathers it after its update and
/// ZeRO-3 before use: 1 with fp8 primary weights, else the 16-bit element.
double weight_bytes(const WorkloadSpec& w);

/// Bytes of one parameter as ZeRO-3 gathers it: 1 with training.fp8_all_gather in fp8 training
/// (the shard's fp8 cast), else weight_bytes.
double zero3_gather_bytes(const WorkloadSpec& w);

struct MemoryLedger {
  Bytes
      weights; ///< 2*Psi (ZeRO-3: /dp); fp8 training adds 2 bytes per layer parameter (fp8_params: 1*Psi + 1)
  Bytes gradients;      ///< 2*Psi (ZeRO-2/3: /dp)
  Bytes optimizer;      ///< K*Psi (ZeRO-1/2/3: /dp)
  Bytes activations;    ///< stored activations of the in-flight micro-batches (+ recompute working set)
  Bytes zero3_gathered; ///< ZeRO-3 gathered parameters: (prefetch + 1) layers, all kept
                        ///< (reshard_after_forward false)
  Bytes comm_buffers;   ///< DP bucket, PP send/receive and TP buffers
  Bytes runtime;        ///< CUDA context and library workspaces
  Bytes fragmentation;  ///< the caching allocator's reserve above the live bytes (fragmentation_of)
  Bytes host;           ///< offloaded activations held in host memory (not part of the GPU's peak)
  [[nodiscard]] Bytes other() const { return zero3_gathered + comm_buffers + runtime + fragmentation; }
  [[nodiscard]] Bytes peak() const { return weights + gradients + optimizer + activations + other(); }
};

/// Persistent part of the ledger (weights, gradients, optimizer, buffers, runtime) for `stage`.
MemoryLedger persistent_memory(const WorkloadSpec& w, const GpuSpec& gpu, int stage);

/// The static ledger of one GPU of `stage`: persistent memory plus the peak of dynamic memory
/// (in-flight activations, recompute working set, gathered ZeRO-3 layers) and fragmentation.
/// Activations = n*(layers' stored) + (n-1)*logits + max(logits, recompute working set) with n
/// micro-batches in flight (logits only on the last stage).
MemoryLedger static_memory(const WorkloadSpec& w, const GpuSpec& gpu, int stage);

/// The largest static ledger peak over the pipeline stages (the worst GPU's).
Bytes worst_static_peak(const WorkloadSpec& w, const GpuSpec& gpu);

/// Host memory one GPU of `stage` holds for offloaded activations (training.offload_layers): the
/// offloaded layers of every pass in flight.
Bytes offloaded_activations(const WorkloadSpec& w, int stage);

/// Page sizes of PyTorch's expandable segments (c10/cuda/CUDACachingAllocator.cpp, Note
/// [Expandable Segments]): the small pool (allocations up to 1 MiB) maps 2 MiB pages, the large
/// pool 20 MiB pages.
inline constexpr double SMALL_POOL_PAGE = 2.0 * 1024 * 1024;
inline constexpr double LARGE_POOL_PAGE = 20.0 * 1024 * 1024;

/// Streams that allocate device memory on one GPU: the compute stream and one per communication
/// group the GPU runs (TP with tp > 1, PP with pp > 1, DP with dp*cp > 1, EP with MoE and ep > 1,
/// CP with cp > 1), as the step builder issues them (docs/architecture.md).
int64_t allocating_streams(const WorkloadSpec& w);

/// The caching allocator's reserve above the live bytes at a peak of `dynamic` bytes (docs/model.md,
/// "The caching allocator"): with PyTorch's default segments (allocations cut from segments that
/// are never remapped), (gpu.allocator_fragmentation - 1) x dynamic; with expandable segments
/// (training.expandable_segments: one segment per stream and pool, grown a page at a time), at
/// most the partly used last page of each pool of each allocating stream,
/// allocating_streams x (SMALL_POOL_PAGE + LARGE_POOL_PAGE), whatever `dynamic` is.
Bytes fragmentation_of(const WorkloadSpec& w, const GpuSpec& gpu, Bytes dynamic);

} // namespace stepsim::model
