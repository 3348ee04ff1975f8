// `stepsim compare --measured TRACE.json --simulated out/trace.json`: a measured PyTorch profiler
// (Kineto) trace beside a simulated one (docs/validation.md, "Traces").

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "validate/kineto.hpp"

#include <string>

namespace stepsim::cli {

namespace {

constexpr const char* COMPARE_USAGE = R"(usage: stepsim compare --measured TRACE.json --simulated trace.json

Reads a PyTorch profiler (Kineto) Chrome trace of a real run and stepsim's trace.json and prints,
per step and GPU: step time (ProfilerStep# spans, else the trace's span), kernel time by category
(GEMM, attention, elementwise; stepsim: by block), NCCL time by collective, and exposed
communication (NCCL time not overlapped by compute kernels on the same GPU).
)";

} // namespace

int compare_command(Args& args, std::ostream& out, std::ostream&) {
  if (args.flag("--help")) {
    out << COMPARE_USAGE;
    return 0;
  }
  const std::string measured = args.required("--measured");
  const std::string simulated = args.required("--simulated");
  args.finish();
  const validate::TraceBreakdown m = validate::read_kineto_trace(measured);
  const validate::TraceBreakdown s = validate::read_stepsim_trace(simulated);
  validate::print_comparison(out, m, s);
  return 0;
}

} // namespace stepsim::cli
