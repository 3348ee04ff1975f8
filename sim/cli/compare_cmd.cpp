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

constexpr const char* COMPARE_USAGE =
    R"(usage: stepsim compare --measured TRACE [--measured TRACE ...] --simulated trace.json

Reads PyTorch profiler (Kineto) Chrome traces of a real run and stepsim's trace.json and prints,
per step and GPU: step time (ProfilerStep# spans, else the trace's span), kernel time by category
(GEMM, attention, elementwise; stepsim: by block), NCCL time by collective, and exposed
communication (NCCL time not overlapped by compute kernels on the same GPU).

  --measured TRACE     a Kineto trace (.json, or gzip as .json.gz), or a folder of them (one per
                       rank, as tensorboard_trace_handler writes them); repeatable. The ranks'
                       per-step, per-GPU figures are averaged over all their GPUs.
  --simulated FILE     trace.json of `stepsim run --out`
)";

} // namespace

int compare_command(Args& args, std::ostream& out, std::ostream&) {
  if (args.flag("--help")) {
    out << COMPARE_USAGE;
    return 0;
  }
  const std::vector<std::string> measured = args.values("--measured");
  if (measured.empty())
    (void)args.required("--measured"); // the missing-option error
  const std::string simulated = args.required("--simulated");
  args.finish();
  const validate::TraceBreakdown m =
      validate::read_kineto_traces(std::vector<std::filesystem::path>(measured.begin(), measured.end()));
  const validate::TraceBreakdown s = validate::read_stepsim_trace(simulated);
  validate::print_comparison(out, m, s);
  return 0;
}

} // namespace stepsim::cli
