#pragma once
// The step's vocabulary, named once: what a task is (TaskKind, Block, Phase), which group and
// stream it uses (CommGroup, Stream), which collective it runs (CollectiveOp, CollectiveForm),
// why (CommRole), and how a run ended (RunStatus). Each enum has one to_string, the spelling that
// traces, CSVs, summary.json and status words print; `X_by_name` parses that spelling back and
// throws ConfigError, `X_by_name_or_null` returns nullopt instead.

#include <cstdint>
#include <optional>
#include <string_view>

namespace stepsim {

/// A compute task or a collective (a point-to-point send counts as a collective).
enum class TaskKind { COMPUTE, COLLECTIVE };
/// "compute", "collective".
std::string_view to_string(TaskKind k);
TaskKind task_kind_by_name(std::string_view name);
std::optional<TaskKind> task_kind_by_name_or_null(std::string_view name);

/// BROADCAST and REDUCE are rooted at the first participant; ALL_TO_ALL sends size/n to every
/// peer; SEND is a point-to-point message between two GPUs.
enum class CollectiveOp { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, SEND, BROADCAST, REDUCE, ALL_TO_ALL };
/// "all_reduce", "all_gather", "reduce_scatter", "send", "broadcast", "reduce", "all_to_all".
std::string_view to_string(CollectiveOp op);
CollectiveOp collective_op_by_name(std::string_view name);
std::optional<CollectiveOp> collective_op_by_name_or_null(std::string_view name);

/// How a collective becomes flows (docs/collectives.md). FINE: one flow per ring step per rank
/// (2(n-1) steps for all-reduce), each rank's sends ordered and each forwarded chunk waiting
/// for its arrival, as NCCL's ring does. COARSE: one flow per ring edge carrying the rank's
/// whole volume, the remaining per-step latencies added analytically; n flows instead of
/// 2n(n-1). AUTO: fine for small groups, else coarse (collectives::resolve_form).
enum class CollectiveForm { AUTO, FINE, COARSE };
/// "auto", "fine", "coarse".
std::string_view to_string(CollectiveForm f);
CollectiveForm collective_form_by_name(std::string_view name);
std::optional<CollectiveForm> collective_form_by_name_or_null(std::string_view name);

/// Communication group of a collective (NONE for compute).
/// EP: expert-parallel all-to-all; CP: context-parallel ring-attention sends (docs/moe.md).
enum class CommGroup { NONE, TP, PP, DP, EP, CP };
/// "none", "tp", "pp", "dp", "ep", "cp".
std::string_view to_string(CommGroup g);
CommGroup comm_group_by_name(std::string_view name);
std::optional<CommGroup> comm_group_by_name_or_null(std::string_view name);

/// BACKWARD is the whole backward pass, or with the zero-bubble schedules only its input-gradient
/// part (B); WEIGHT_GRAD is their deferred weight-gradient part (W). docs/schedules.md.
enum class Phase { FORWARD, BACKWARD, RECOMPUTE, OPTIMIZER, WEIGHT_GRAD };
/// "forward", "backward", "recompute", "optimizer", "weight_grad".
std::string_view to_string(Phase p);
Phase phase_by_name(std::string_view name);
std::optional<Phase> phase_by_name_or_null(std::string_view name);

/// What a compute task computes.
/// MoE layers (docs/moe.md) replace MLP with ROUTER (router and shared experts) and EXPERTS (the
/// routed experts' grouped GEMM).
enum class Block { NONE, ATTENTION, MLP, LOGITS, OPTIMIZER, ROUTER, EXPERTS };
/// "none", "attention", "mlp", "logits", "optimizer", "router", "experts".
std::string_view to_string(Block b);
Block block_by_name(std::string_view name);
std::optional<Block> block_by_name_or_null(std::string_view name);

/// What a collective outside the per-layer pattern is for (traces name it; NONE for the others):
/// the vocabulary-parallel embedding's and output layer's TP collectives, the cross-entropy's
/// all-reduces, and the end of step's gradient synchronization (docs/model.md, "Communication").
enum class CommRole : uint8_t { NONE, EMBEDDING, LOGITS, LOSS, NORM_GRADS, TIED_EMBEDDING, GRAD_NORM };
/// "" (NONE), "embedding", "logits", "loss", "norm grads", "embedding grads", "grad norm".
std::string_view to_string(CommRole r);
CommRole comm_role_by_name(std::string_view name);
std::optional<CommRole> comm_role_by_name_or_null(std::string_view name);

/// The stream a task occupies on each participating GPU.
enum class Stream { COMPUTE, TP_COMM, PP_COMM, DP_COMM, EP_COMM, CP_COMM };
inline constexpr int STREAM_COUNT = 6;
/// "compute", "tp comm", "pp comm", "dp comm", "ep comm", "cp comm".
std::string_view to_string(Stream s);
Stream stream_by_name(std::string_view name);
std::optional<Stream> stream_by_name_or_null(std::string_view name);

/// How one configuration of a sweep or one measured run of a validation ended: simulated (OK),
/// not simulable as given (SKIPPED: a configuration or model error), failed, or simulated but a
/// GPU's memory (or the host memory of offloaded activations) does not hold it (OOM: a sweep row
/// keeps its summary; the layout would not run).
enum class RunStatus { OK, SKIPPED, FAILED, OOM };
/// "ok", "skipped", "failed", "oom".
std::string_view to_string(RunStatus s);
RunStatus run_status_by_name(std::string_view name);
std::optional<RunStatus> run_status_by_name_or_null(std::string_view name);

} // namespace stepsim
