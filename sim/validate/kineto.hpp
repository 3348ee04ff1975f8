#pragma once
// Import of measured PyTorch profiler (Kineto) Chrome traces and of stepsim's own trace.json
// into one breakdown per step and GPU, for `stepsim compare` (docs/validation.md, "Traces").

#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace stepsim::validate {

/// Times per step per GPU (means over the GPUs in the trace), seconds.
struct TraceBreakdown {
  double step_time_s = 0; ///< mean ProfilerStep# span, else the span of all GPU activity
  int steps = 1;          ///< ProfilerStep# spans found (1 when none)
  int devices = 0;        ///< GPUs with activity
  int files = 1;          ///< trace files read (one per rank, or one for all)
  std::map<std::string, double>
      compute_s; ///< by category: gemm, attention, elementwise (Kineto); blocks (stepsim)
  std::map<std::string, double>
      comm_s; ///< by collective: all_reduce, all_gather, reduce_scatter, send_recv, other
  double compute_total_s = 0;
  double comm_total_s = 0;
  double exposed_comm_s = 0; ///< communication time not overlapped by compute on the same GPU
};

/// Kernel category of a Kineto kernel name: "gemm" (gemm, cutlass, xmma, nvjet, cublas),
/// "attention" (flash, fmha, sdpa), "nccl:<collective>" (nccl kernels), else "elementwise".
std::string kineto_category(const std::string& kernel_name);

/// Reads a Kineto trace, plain or gzip: GPU kernels are events with cat "kernel" (device =
/// args.device, else pid); memcpy/memset count as elementwise. Throws ConfigError naming the file
/// for a file that is not a Chrome trace.
TraceBreakdown read_kineto_trace(const std::filesystem::path& file);

/// Reads the Kineto traces of several ranks: files, and folders whose `*.json` and `*.json.gz`
/// files are read in name order (tensorboard_trace_handler writes one per worker). Each file's
/// per-step, per-GPU figures count by its GPUs; GPUs of different files are different GPUs.
/// Throws ConfigError for a folder without trace files.
TraceBreakdown read_kineto_traces(const std::vector<std::filesystem::path>& paths);

/// Reads stepsim's trace.json: cat "compute" slices (category from the name's block: attn, mlp,
/// logits, optimizer) and the communication groups' slices (by operation). Throws ConfigError.
TraceBreakdown read_stepsim_trace(const std::filesystem::path& file);

/// Measured and simulated side by side, with the difference in percent.
void print_comparison(std::ostream& out, const TraceBreakdown& measured, const TraceBreakdown& simulated);

} // namespace stepsim::validate
