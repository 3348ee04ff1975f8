#include "core/vocabulary.hpp"

#include "core/error.hpp"

#include <array>
#include <cstddef>
#include <string>

namespace stepsim {

namespace {

/// The names of an enum's values, in declaration order (value i is spelled names[i]).
template <class E, std::size_t N> struct Names {
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
    throw ConfigError("expected " + std::string(kind) + " (" + accepted + "), found '" + std::string(name) +
                      "'");
  }
};

/// The names of E's values from its first to `LAST`, one each.
template <class E, E LAST, class... S> constexpr Names<E, sizeof...(S)> names(std::string_view kind, S... s) {
  static_assert(sizeof...(S) == static_cast<std::size_t>(LAST) + 1, "one name per value");
  return {kind, {std::string_view(s)...}};
}

constexpr auto TASK_KINDS = names<TaskKind, TaskKind::COLLECTIVE>("a task kind", "compute", "collective");
constexpr auto COLLECTIVE_OPS = names<CollectiveOp, CollectiveOp::ALL_TO_ALL>(
    "a collective", "all_reduce", "all_gather", "reduce_scatter", "send", "broadcast", "reduce",
    "all_to_all");
constexpr auto COLLECTIVE_FORMS =
    names<CollectiveForm, CollectiveForm::COARSE>("a collective form", "auto", "fine", "coarse");
constexpr auto COMM_GROUPS =
    names<CommGroup, CommGroup::CP>("a communication group", "none", "tp", "pp", "dp", "ep", "cp");
constexpr auto PHASES = names<Phase, Phase::WEIGHT_GRAD>("a phase", "forward", "backward", "recompute",
                                                         "optimizer", "weight_grad");
constexpr auto BLOCKS = names<Block, Block::EXPERTS>("a block", "none", "attention", "mlp", "logits",
                                                     "optimizer", "router", "experts");
constexpr auto COMM_ROLES = names<CommRole, CommRole::GRAD_NORM>(
    "a collective role", "", "embedding", "logits", "loss", "norm grads", "embedding grads", "grad norm");
constexpr auto STREAMS = names<Stream, Stream::CP_COMM>("a stream", "compute", "tp comm", "pp comm",
                                                        "dp comm", "ep comm", "cp comm");
static_assert(STREAMS.names.size() == STREAM_COUNT);
constexpr auto RUN_STATUSES =
    names<RunStatus, RunStatus::OOM>("a run status", "ok", "skipped", "failed", "oom");

} // namespace

// to_string, X_by_name and X_by_name_or_null of each enum, from its table.
#define STEPSIM_VOCABULARY(Enum, prefix, table)                                                              \
  std::string_view to_string(Enum e) {                                                                       \
    return table.of(e);                                                                                      \
  }                                                                                                          \
  Enum prefix##_by_name(std::string_view name) {                                                             \
    return table.get(name);                                                                                  \
  }                                                                                                          \
  std::optional<Enum> prefix##_by_name_or_null(std::string_view name) {                                      \
    return table.find(name);                                                                                 \
  }

STEPSIM_VOCABULARY(TaskKind, task_kind, TASK_KINDS)
STEPSIM_VOCABULARY(CollectiveOp, collective_op, COLLECTIVE_OPS)
STEPSIM_VOCABULARY(CollectiveForm, collective_form, COLLECTIVE_FORMS)
STEPSIM_VOCABULARY(CommGroup, comm_group, COMM_GROUPS)
STEPSIM_VOCABULARY(Phase, phase, PHASES)
STEPSIM_VOCABULARY(Block, block, BLOCKS)
STEPSIM_VOCABULARY(CommRole, comm_role, COMM_ROLES)
STEPSIM_VOCABULARY(Stream, stream, STREAMS)
STEPSIM_VOCABULARY(RunStatus, run_status, RUN_STATUSES)

#undef STEPSIM_VOCABULARY

} // namespace stepsim
