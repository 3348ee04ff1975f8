// `stepsim compare --measured TRACE.json --simulated out/trace.json`: a measured PyTorch profiler
// (Kineto) trace beside a simulated one (docs/validation.md, "Traces").

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "validate/kineto.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace stepsim::cli {

namespace {

class CompareCommand final : public Command {
public:
  explicit CompareCommand(Options& o) {
    o.describe(R"(usage: stepsim compare --measured TRACE [--measured TRACE ...] --simulated trace.json

Reads PyTorch profiler (Kineto) Chrome traces of a real run and stepsim's trace.json and prints,
per step and GPU: step time (ProfilerStep# spans, else the trace's span), kernel time by category
(GEMM, attention, elementwise; stepsim: by block), NCCL time by collective, and exposed
communication (NCCL time not overlapped by compute kernels on the same GPU).)");
    o.values("--measured", measured_, "TRACE",
             "a Kineto trace (.json, or gzip as .json.gz), or a folder of them (one per rank, as "
             "tensorboard_trace_handler writes them); the ranks' per-step, per-GPU figures are averaged "
             "over all their GPUs (at least one)");
    o.required("--simulated", simulated_, "FILE", "trace.json of `stepsim run --out`");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::vector<std::string> measured_;
  std::string simulated_;
};

} // namespace

std::unique_ptr<Command> compare_command(Options& options) {
  return std::make_unique<CompareCommand>(options);
}

int CompareCommand::run(std::ostream& out, std::ostream& /*err*/) {
  if (measured_.empty())
    throw ConfigError("missing required option --measured (see `stepsim compare --help`)");
  const validate::TraceBreakdown m =
      validate::read_kineto_traces(std::vector<std::filesystem::path>(measured_.begin(), measured_.end()));
  const validate::TraceBreakdown s = validate::read_stepsim_trace(simulated_);
  validate::print_comparison(out, m, s);
  return 0;
}

} // namespace stepsim::cli
