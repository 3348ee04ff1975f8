#include "core/vocabulary.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <string_view>
#include <utility>
#include <vector>

namespace stepsim {
namespace {

/// Each enum's every value with the spelling the outputs print (traces, CSVs, summary.json,
/// status words), written out here independently of the tables they check.
template <class E> using Spellings = std::vector<std::pair<E, std::string_view>>;

/// to_string gives each value its spelling; the throwing and the optional parser read the
/// spelling back to the same value; every value is listed once.
template <class E, class ByName, class ByNameOrNull>
void expect_round_trips(const Spellings<E>& spellings, ByName by_name, ByNameOrNull by_name_or_null) {
  for (size_t i = 0; i < spellings.size(); ++i) {
    const auto [value, name] = spellings[i];
    EXPECT_EQ(static_cast<size_t>(value), i) << name;
    EXPECT_EQ(to_string(value), name);
    EXPECT_EQ(by_name(name), value) << name;
    ASSERT_TRUE(by_name_or_null(name).has_value()) << name;
    EXPECT_EQ(*by_name_or_null(name), value) << name;
  }
  // One past the last value has no name.
  EXPECT_EQ(to_string(static_cast<E>(spellings.size())), "?");
}

/// An unknown name (a near miss: another spelling of a value, or a different case) throws
/// ConfigError from X_by_name and is nullopt from X_by_name_or_null.
template <class ByName, class ByNameOrNull>
void expect_unknown(std::string_view name, ByName by_name, ByNameOrNull by_name_or_null) {
  EXPECT_THROW((void)by_name(name), ConfigError) << name;
  EXPECT_FALSE(by_name_or_null(name).has_value()) << name;
}

TEST(Vocabulary, TaskKindRoundTrips) {
  expect_round_trips<TaskKind>({{TaskKind::COMPUTE, "compute"}, {TaskKind::COLLECTIVE, "collective"}},
                               task_kind_by_name, task_kind_by_name_or_null);
  expect_unknown("COMPUTE", task_kind_by_name, task_kind_by_name_or_null);
  expect_unknown("", task_kind_by_name, task_kind_by_name_or_null);
}

TEST(Vocabulary, CollectiveOpRoundTrips) {
  expect_round_trips<CollectiveOp>({{CollectiveOp::ALL_REDUCE, "all_reduce"},
                                    {CollectiveOp::ALL_GATHER, "all_gather"},
                                    {CollectiveOp::REDUCE_SCATTER, "reduce_scatter"},
                                    {CollectiveOp::SEND, "send"},
                                    {CollectiveOp::BROADCAST, "broadcast"},
                                    {CollectiveOp::REDUCE, "reduce"},
                                    {CollectiveOp::ALL_TO_ALL, "all_to_all"}},
                                   collective_op_by_name, collective_op_by_name_or_null);
  // "p2p" is the `stepsim collective` command's spelling of a send, not the vocabulary's.
  for (std::string_view bad : {"allreduce", "ALL_REDUCE", "p2p", "all-to-all"})
    expect_unknown(bad, collective_op_by_name, collective_op_by_name_or_null);
}

TEST(Vocabulary, CollectiveFormRoundTrips) {
  expect_round_trips<CollectiveForm>(
      {{CollectiveForm::AUTO, "auto"}, {CollectiveForm::FINE, "fine"}, {CollectiveForm::COARSE, "coarse"}},
      collective_form_by_name, collective_form_by_name_or_null);
  expect_unknown("Fine", collective_form_by_name, collective_form_by_name_or_null);
}

TEST(Vocabulary, CommGroupRoundTrips) {
  expect_round_trips<CommGroup>({{CommGroup::NONE, "none"},
                                 {CommGroup::TP, "tp"},
                                 {CommGroup::PP, "pp"},
                                 {CommGroup::DP, "dp"},
                                 {CommGroup::EP, "ep"},
                                 {CommGroup::CP, "cp"}},
                                comm_group_by_name, comm_group_by_name_or_null);
  expect_unknown("TP", comm_group_by_name, comm_group_by_name_or_null);
  expect_unknown("tp comm", comm_group_by_name, comm_group_by_name_or_null);
}

TEST(Vocabulary, PhaseRoundTrips) {
  expect_round_trips<Phase>({{Phase::FORWARD, "forward"},
                             {Phase::BACKWARD, "backward"},
                             {Phase::RECOMPUTE, "recompute"},
                             {Phase::OPTIMIZER, "optimizer"},
                             {Phase::WEIGHT_GRAD, "weight_grad"}},
                            phase_by_name, phase_by_name_or_null);
  // The trace's slice-name abbreviations are not phase names.
  expect_unknown("fwd", phase_by_name, phase_by_name_or_null);
  expect_unknown("wgrad", phase_by_name, phase_by_name_or_null);
}

TEST(Vocabulary, BlockRoundTrips) {
  expect_round_trips<Block>({{Block::NONE, "none"},
                             {Block::ATTENTION, "attention"},
                             {Block::MLP, "mlp"},
                             {Block::LOGITS, "logits"},
                             {Block::OPTIMIZER, "optimizer"},
                             {Block::ROUTER, "router"},
                             {Block::EXPERTS, "experts"}},
                            block_by_name, block_by_name_or_null);
  expect_unknown("attn", block_by_name, block_by_name_or_null);
}

TEST(Vocabulary, CommRoleRoundTrips) {
  expect_round_trips<CommRole>({{CommRole::NONE, ""},
                                {CommRole::EMBEDDING, "embedding"},
                                {CommRole::LOGITS, "logits"},
                                {CommRole::LOSS, "loss"},
                                {CommRole::NORM_GRADS, "norm grads"},
                                {CommRole::TIED_EMBEDDING, "embedding grads"},
                                {CommRole::GRAD_NORM, "grad norm"}},
                               comm_role_by_name, comm_role_by_name_or_null);
  expect_unknown("none", comm_role_by_name, comm_role_by_name_or_null);
  expect_unknown("norm_grads", comm_role_by_name, comm_role_by_name_or_null);
}

TEST(Vocabulary, StreamRoundTrips) {
  expect_round_trips<Stream>({{Stream::COMPUTE, "compute"},
                              {Stream::TP_COMM, "tp comm"},
                              {Stream::PP_COMM, "pp comm"},
                              {Stream::DP_COMM, "dp comm"},
                              {Stream::EP_COMM, "ep comm"},
                              {Stream::CP_COMM, "cp comm"}},
                             stream_by_name, stream_by_name_or_null);
  EXPECT_EQ(STREAM_COUNT, 6);
  expect_unknown("tp", stream_by_name, stream_by_name_or_null);
}

TEST(Vocabulary, RunStatusRoundTrips) {
  expect_round_trips<RunStatus>({{RunStatus::OK, "ok"},
                                 {RunStatus::SKIPPED, "skipped"},
                                 {RunStatus::FAILED, "failed"},
                                 {RunStatus::OOM, "oom"}},
                                run_status_by_name, run_status_by_name_or_null);
  expect_unknown("OK", run_status_by_name, run_status_by_name_or_null);
  expect_unknown("fail", run_status_by_name, run_status_by_name_or_null);
}

// The error names what was expected and what was found.
TEST(Vocabulary, UnknownNameErrorListsTheNames) {
  try {
    (void)collective_form_by_name("medium");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "expected a collective form ('auto', 'fine', 'coarse'), found 'medium'");
  }
}

} // namespace
} // namespace stepsim
