// stepsim_kernel_suite: checks the suite's kernels against references, times kernel shapes on
// this GPU and writes a measured profile (docs/kernels.md). Exit codes: 0 ok, 1 a check or
// CUDA call failed, 2 usage, 77 no usable GPU (ctest's skip code).

#include "suite.hpp"

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "kernels/profile.hpp"
#include "kernels/workload_kernels.hpp"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

namespace {

namespace k = stepsim::kernels;
namespace s = stepsim::suite;

struct Options {
  std::vector<std::string> shape_files;
  std::vector<std::string> time_files; ///< kernel times measured outside the suite, merged in
  bool reference = false;              ///< add reference_profile_shapes()
  std::string out;
  std::string list_shapes; ///< write the shapes that would be timed to this file and stop
  std::string gpu_kind;
  s::TimingOptions timing;
  double total_budget_s = 420; ///< stop timing new shapes after this many seconds
  bool check_only = false;
  bool time_naive_attention = false;
  double overlap_slowdown = 1.10;
};

int usage(const char* why) {
  std::cerr
      << "stepsim_kernel_suite: " << why << "\n"
      << "usage: stepsim_kernel_suite [--shapes FILE]... [--reference] --out FILE [--gpu-kind KIND]\n"
      << "         [--budget-s 0.2] [--total-budget-s 420] [--naive-attention] [--overlap-slowdown 1.10]\n"
      << "         [--times FILE]...   (rows timed outside the suite, format stepsim-kernel-times/1)\n"
      << "         [--fp8-fast-accum]  (fp8 GEMMs with cuBLASLt fast accumulation)\n"
      << "       stepsim_kernel_suite [--shapes FILE]... [--reference] --list-shapes FILE   (no GPU needed)\n"
      << "       stepsim_kernel_suite --check-only\n";
  return 2;
}

bool parse_args(int argc, char** argv, Options& o, std::string& why) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        why = a + " needs a value";
        return nullptr;
      }
      return argv[++i];
    };
    const char* v = nullptr;
    if (a == "--reference")
      o.reference = true;
    else if (a == "--check-only")
      o.check_only = true;
    else if (a == "--naive-attention")
      o.time_naive_attention = true;
    else if (a == "--fp8-fast-accum")
      o.timing.fp8_fast_accum = true;
    else if (a == "--shapes" && (v = value()))
      o.shape_files.emplace_back(v);
    else if (a == "--list-shapes" && (v = value()))
      o.list_shapes = v;
    else if (a == "--times" && (v = value()))
      o.time_files.emplace_back(v);
    else if (a == "--out" && (v = value()))
      o.out = v;
    else if (a == "--gpu-kind" && (v = value()))
      o.gpu_kind = v;
    else if (a == "--budget-s" && (v = value()))
      o.timing.budget_s = std::atof(v);
    else if (a == "--total-budget-s" && (v = value()))
      o.total_budget_s = std::atof(v);
    else if (a == "--overlap-slowdown" && (v = value()))
      o.overlap_slowdown = std::atof(v);
    else {
      if (why.empty())
        why = "unknown option '" + a + "'";
      return false;
    }
  }
  if (!o.check_only && o.out.empty() && o.list_shapes.empty())
    why = "--out (or --list-shapes) is required";
  else if (!o.check_only && o.shape_files.empty() && !o.reference)
    why = "give --shapes FILE or --reference";
  else if (o.timing.budget_s <= 0 || o.total_budget_s <= 0)
    why = "budgets must be > 0";
  else if (o.overlap_slowdown < 1.0)
    why = "--overlap-slowdown must be >= 1";
  return why.empty();
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

/// The kernel module's version line ("NVRM version: ...") when readable, else the API version.
std::string driver_version(const s::DeviceInfo& d) {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (in && std::getline(in, line) && !line.empty())
    return line + " (CUDA driver API " + d.driver_api + ")";
  return "CUDA driver API " + d.driver_api;
}

/// "NVIDIA H100 80GB HBM3" -> "H100-80GB-HBM3" (file-name safe); pass --gpu-kind to match the
/// cluster file.
std::string default_kind(const std::string& name) {
  std::string n = name.rfind("NVIDIA ", 0) == 0 ? name.substr(7) : name;
  for (char& c : n) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (!keep)
      c = '-';
  }
  return n;
}

} // namespace

int main(int argc, char** argv) {
  Options o;
  std::string why;
  if (!parse_args(argc, argv, o, why))
    return usage(why.c_str());

  std::vector<k::KernelShape> shapes;
  std::vector<k::ProfileRow> imported;
  std::set<k::KernelShape> imported_shapes;
  try {
    for (const auto& f : o.time_files)
      for (auto& row : k::read_time_list(f)) {
        if (!imported_shapes.insert(row.shape).second)
          throw stepsim::ConfigError(f + ": " + k::describe(row.shape) + " is timed in two --times files");
        imported.push_back(std::move(row));
      }
    std::set<k::KernelShape> seen;
    auto add = [&](const k::KernelShape& sh) {
      if (seen.insert(sh).second)
        shapes.push_back(sh);
    };
    for (const auto& f : o.shape_files)
      for (const auto& sh : k::read_shape_list(f))
        add(sh);
    if (o.reference)
      for (const auto& sh : k::reference_profile_shapes())
        add(sh);
  } catch (const stepsim::Error& e) {
    std::cerr << "stepsim_kernel_suite: " << e.what() << "\n";
    return 2;
  }

  if (!o.list_shapes.empty()) {
    try {
      stepsim::write_file_atomically(o.list_shapes, [&](std::ostream& os) {
        k::write_shape_list(os, shapes, {"shapes stepsim_kernel_suite would time (--list-shapes)"});
      });
    } catch (const stepsim::Error& e) {
      std::cerr << "stepsim_kernel_suite: " << e.what() << "\n";
      return 1;
    }
    std::printf("wrote %zu shapes to %s\n", shapes.size(), o.list_shapes.c_str());
    return 0;
  }

  if (!s::device_available(why)) {
    std::cerr << "stepsim_kernel_suite: no usable GPU (" << why << "); skipping\n";
    return 77;
  }
  const s::DeviceInfo dev = s::device_info();
  std::printf("device: %s, %d SMs, cc %d.%d, %.0f MHz, L2 %lld MiB, %.1f GiB free, runtime %s\n",
              dev.name.c_str(), dev.sm_count, dev.cc_major, dev.cc_minor, dev.sm_clock_mhz,
              static_cast<long long>(dev.l2_bytes >> 20), static_cast<double>(dev.free_bytes) / (1 << 30),
              dev.runtime.c_str());

  // 1. Correctness before any timing.
  bool all_passed = true;
  for (const s::CheckResult& r : s::run_correctness_checks()) {
    std::printf("check %-4s %s: max rel error %.3g (tolerance %.3g)\n", r.passed ? "ok" : "FAIL",
                r.name.c_str(), r.max_error, r.tolerance);
    all_passed = all_passed && r.passed;
  }
  if (!all_passed) {
    std::fprintf(stderr, "stepsim_kernel_suite: correctness checks failed; no profile written\n");
    return 1;
  }
  if (o.check_only)
    return 0;

  // 2. Timing.
  const bool fp8 = dev.cc_major * 10 + dev.cc_minor >= 89;
  const double empty = s::measure_empty_kernel(o.timing);
  std::printf("empty kernel: %.2f us\n", empty * 1e6);
  k::KernelProfile profile;
  k::ProfileHeader& h = profile.header;
  h.gpu = dev.name;
  h.gpu_kind = o.gpu_kind.empty() ? default_kind(dev.name) : o.gpu_kind;
  h.obtained = k::Provenance::MEASURED;
  h.sm_count = dev.sm_count;
  h.compute_capability = std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor);
  h.sm_clock_mhz = dev.sm_clock_mhz;
  h.mem_clock_mhz = dev.mem_clock_mhz;
  h.l2_bytes = dev.l2_bytes;
  h.driver = driver_version(dev);
  h.cuda = "runtime " + dev.runtime;
  h.date = today_utc();
  h.tool = "stepsim_kernel_suite (kernels_profiles/suite)";
  h.launch_overhead = stepsim::Seconds(empty);
  h.overlap_slowdown = o.overlap_slowdown;
  h.sources = {"measured on this GPU by stepsim_kernel_suite: CUDA events around each launch, median, inputs "
               "rotated over > 3x L2, random inputs",
               "launch_overhead_s: median time of an empty kernel launched back to back",
               "overlap_slowdown: not measured (needs concurrent NCCL kernels); set by --overlap-slowdown"};
  h.notes = {std::string("gemm: cuBLASLt, TN layout, fp32 accumulation, heuristic's first algorithm; fp8: ") +
                 (o.timing.fp8_fast_accum
                      ? "fast (reduced-precision) accumulation, as Transformer Engine's forward"
                      : "split (full-precision) accumulation, as Transformer Engine's dgrad/wgrad"),
             "attention rows: impl naive_warp = the suite's fallback kernels (ignored by KernelTable by "
             "default); any other impl was timed outside the suite (--times)",
             "norms, activations, softmax_xent, adam: the suite's own straightforward kernels (impl suite), "
             "except rows timed outside the suite (--times)"};

  const auto start = std::chrono::steady_clock::now();
  int skipped = 0;
  int out_of_time = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const k::KernelShape& sh = shapes[i];
    const std::string name = k::describe(sh);
    if (imported_shapes.count(sh))
      continue; // timed outside the suite (--times), merged below
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > o.total_budget_s) {
      ++out_of_time;
      continue;
    }
    if (sh.dtype == k::Dtype::FP8_E4M3 && !fp8)
      continue; // not a skip: the GPU has no fp8
    if (k::family(sh.kind) == k::KernelFamily::ATTENTION && !o.time_naive_attention) {
      ++skipped;
      continue;
    }
    const s::Measurement m = s::measure(sh, o.timing);
    if (!m.ok) {
      std::printf("[%zu/%zu] %s: skipped (%s)\n", i + 1, shapes.size(), name.c_str(), m.why.c_str());
      ++skipped;
      continue;
    }
    profile.rows.push_back({sh, stepsim::Seconds(m.time_s), m.impl});
    std::printf("[%zu/%zu] %s: %.4g ms, %.1f TFLOP/s, %.0f GB/s (%s, %d reps)\n", i + 1, shapes.size(),
                name.c_str(), m.time_s * 1e3, k::kernel_flops(sh).value() / m.time_s / 1e12,
                k::kernel_bytes(sh).value() / m.time_s / 1e9, m.impl.c_str(), m.reps);
    std::fflush(stdout);
  }
  for (const k::ProfileRow& row : imported)
    profile.rows.push_back(row);
  if (!imported.empty()) {
    std::string names;
    for (const auto& f : o.time_files) {
      if (!names.empty())
        names += ' ';
      names += std::filesystem::path(f).filename().string();
    }
    h.sources.push_back(std::to_string(imported.size()) + " rows timed outside the suite (--times " + names +
                        "); their impl column names what was timed");
  }
  if (skipped)
    h.notes.push_back(std::to_string(skipped) + " shapes skipped (see the suite's log)");
  if (out_of_time)
    h.notes.push_back(std::to_string(out_of_time) + " shapes not timed: total budget reached");
  std::printf("%zu rows, %d skipped, %d not timed (budget)\n", profile.rows.size(), skipped, out_of_time);
  try {
    stepsim::write_file_atomically(o.out, [&](std::ostream& os) { k::write_profile(os, profile); });
  } catch (const stepsim::Error& e) {
    std::cerr << "stepsim_kernel_suite: " << e.what() << "\n";
    return 1;
  }
  std::printf("wrote %s\n", o.out.c_str());
  return 0;
}
