#include "core/vocabulary.hpp"

#include "core/error.hpp"

#include <array>
#include <cstddef>
#include <string>

namespace stepsim {

namespace {

/// The names of an enum's values, in declaration order (value i is spelled names[i]).
template <class E, std::size_t N>
struct Names {
  std::string_view kind; ///< what the enum names, for error messages
  std::array<std::string_view, N> names;

  [[nodiscard]] std::string_view of(E e) const {
    const auto i = static_cast<std::size_t>(e);
    return i < N ? names[i] : std::string_view("?");
  }
  [[nodiscard]] std::optional<E> find(std::string_view name) const {
    for (std::size_t i = 0; i < N; ++i)
      if (names[i] == name)
        return static_cast<E>(i);
    return std::nullopt;
  }
  /// Throws ConfigError listing the accepted names.
  [[nodiscard]] E get(std::string_view name) const {
    if (const auto e = find(name))
      return *e;
    std::string accepted;
    for (std::string_view n : names)
      accepted += (accepted.empty() ? "" : ", ") + ('\'' + std::string(n) + '\'');
    throw ConfigError("expected " + std::string(kind) + " (" + accepted + "), found '" + std::string(name) + "'");
  }
};

template <class E, class... S>
constexpr Names<E, sizeof...(S)> names(std::string_view kind, S... s) {
  return {kind, {std::string_view(s)...}};
}

constexpr auto TASK_KINDS = names<TaskKind>("a task kind", "compute", "collective");
constexpr auto COLLECTIVE_OPS = names<CollectiveOp>("a collective", "all_reduce", "all_gather", "reduce_scatter",
                                                    "send", "broadcast", "reduce", "all_to_all");
constexpr auto COLLECTIVE_FORMS = names<CollectiveForm>("a collective form", "auto", "fine", "coarse");
constexpr auto COMM_GROUPS = names<CommGroup>("a communication group", "none", "tp", "pp", "dp", "ep", "cp");
constexpr auto PHASES = names<Phase>("a phase", "forward", "backward", "recompute", "optimizer", "weight_grad");
constexpr auto BLOCKS =
    names<Block>("a block", "none", "attention", "mlp", "logits", "optimizer", "router", "experts");
constexpr auto COMM_ROLES = names<CommRole>("a collective role", "", "embedding", "logits", "loss", "norm grads",
                                            "embedding grads", "grad norm");
constexpr auto STREAMS =
    names<Stream>("a stream", "compute", "tp comm", "pp comm", "dp comm", "ep comm", "cp comm");
constexpr auto RUN_STATUSES = names<RunStatus>("a run status", "ok", "skipped", "failed");

// Each table has exactly one name per value (the last value's index + 1).
static_assert(TASK_KINDS.names.size() == static_cast<std::size_t>(TaskKind::COLLECTIVE) + 1);
static_assert(COLLECTIVE_OPS.names.size() == static_cast<std::size_t>(CollectiveOp::ALL_TO_ALL) + 1);
static_assert(COLLECTIVE_FORMS.names.size() == static_cast<std::size_t>(CollectiveForm::COARSE) + 1);
static_assert(COMM_GROUPS.names.size() == static_cast<std::size_t>(CommGroup::CP) + 1);
static_assert(PHASES.names.size() == static_cast<std::size_t>(Phase::WEIGHT_GRAD) + 1);
static_assert(BLOCKS.names.size() == static_cast<std::size_t>(Block::EXPERTS) + 1);
static_assert(COMM_ROLES.names.size() == static_cast<std::size_t>(CommRole::GRAD_NORM) + 1);
static_assert(STREAMS.names.size() == static_cast<std::size_t>(Stream::CP_COMM) + 1);
static_assert(STREAMS.names.size() == STREAM_COUNT);
static_assert(RUN_STATUSES.names.size() == static_cast<std::size_t>(RunStatus::FAILED) + 1);

} // namespace

std::string_view to_string(TaskKind k) { return TASK_KINDS.of(k); }
TaskKind task_kind_by_name(std::string_view name) { return TASK_KINDS.get(name); }
std::optional<TaskKind> task_kind_by_name_or_null(std::string_view name) { return TASK_KINDS.find(name); }

std::string_view to_string(CollectiveOp op) { return COLLECTIVE_OPS.of(op); }
CollectiveOp collective_op_by_name(std::string_view name) { return COLLECTIVE_OPS.get(name); }
std::optional<CollectiveOp> collective_op_by_name_or_null(std::string_view name) { return COLLECTIVE_OPS.find(name); }

std::string_view to_string(CollectiveForm f) { return COLLECTIVE_FORMS.of(f); }
CollectiveForm collective_form_by_name(std::string_view name) { return COLLECTIVE_FORMS.get(name); }
std::optional<CollectiveForm> collective_form_by_name_or_null(std::string_view name) {
  return COLLECTIVE_FORMS.find(name);
}

std::string_view to_string(CommGroup g) { return COMM_GROUPS.of(g); }
CommGroup comm_group_by_name(std::string_view name) { return COMM_GROUPS.get(name); }
std::optional<CommGroup> comm_group_by_name_or_null(std::string_view name) { return COMM_GROUPS.find(name); }

std::string_view to_string(Phase p) { return PHASES.of(p); }
Phase phase_by_name(std::string_view name) { return PHASES.get(name); }
std::optional<Phase> phase_by_name_or_null(std::string_view name) { return PHASES.find(name); }

std::string_view to_string(Block b) { return BLOCKS.of(b); }
Block block_by_name(std::string_view name) { return BLOCKS.get(name); }
std::optional<Block> block_by_name_or_null(std::string_view name) { return BLOCKS.find(name); }

std::string_view to_string(CommRole r) { return COMM_ROLES.of(r); }
CommRole comm_role_by_name(std::string_view name) { return COMM_ROLES.get(name); }
std::optional<CommRole> comm_role_by_name_or_null(std::string_view name) { return COMM_ROLES.find(name); }

std::string_view to_string(Stream s) { return STREAMS.of(s); }
Stream stream_by_name(std::string_view name) { return STREAMS.get(name); }
std::optional<Stream> stream_by_name_or_null(std::string_view name) { return STREAMS.find(name); }

std::string_view to_string(RunStatus s) { return RUN_STATUSES.of(s); }
RunStatus run_status_by_name(std::string_view name) { return RUN_STATUSES.get(name); }
std::optional<RunStatus> run_status_by_name_or_null(std::string_view name) { return RUN_STATUSES.find(name); }

} // namespace stepsim
