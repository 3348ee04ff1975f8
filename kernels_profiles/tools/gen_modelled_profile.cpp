// Writes the bundled modelled profiles (kernels_profiles/data/<gpu-kind>.csv) from the
// efficiency model, calibrated to published best cases. Usage:
//   stepsim_gen_profile --gpu
//   V100-SXM2-32GB|A100-SXM4-80GB|A100-SXM4-40GB|H100-SXM5-80GB|H200-SXM-141GB|B200-SXM-180GB|GB200-186GB
//   --date YYYY-MM-DD --out FILE
// Deterministic: the same arguments give the same bytes.

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "kernels/kernel_table.hpp"
#include "kernels/profile.hpp"
#include "kernels/workload_kernels.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace stepsim;
using namespace stepsim::kernels;

/// Everything the generator knows about one GPU kind, with where each number comes from.
struct GpuFacts {
  GpuSpec gpu;
  ProfileHeader header;
  double best_gemm_tflops = 0;                     ///< published best bf16 GEMM
  KernelShape best_gemm;                           ///< its shape, m x n x k
  const char* gemm_impl = "published_mamf_finder"; ///< the anchor row's impl: where its rate comes from
  double best_fp8_gemm_tflops = 0; ///< published fp8 GEMM (0: none; fp8 then 0.8x the bf16 ceiling)
  KernelShape best_fp8_gemm;
  const char* fp8_impl = "published_cublaslt";
  /// Fused attention anchors (0: none; the table then borrows 0.85 / 0.70 of the GEMM ceiling).
  double attention_fwd_tflops = 0;
  double attention_bwd_tflops = 0;
  KernelShape attention_anchor; ///< the shape both attention anchors are timed at
  const char* attention_impl = "measured_h200_cudnn";
  double copy_fraction = 0.9; ///< achievable fraction of spec HBM bandwidth
};

/// The Hopper anchors measured on an H200 (kernels_profiles/data/measured/, docs/kernels.md
/// "Measured on an H200"): the same GH100 die, SM count, clocks and power limit as the H100 SXM,
/// so they hold for both. Fused attention (cuDNN through PyTorch's SDPA, the fastest backend)
/// at Llama-3-70B-like heads, 8192 tokens: the mean of two runs. fp8: large GEMMs ran 1.888x
/// the bf16 time with fast accumulation (Transformer Engine's forward) and 1.799x with split
/// accumulation (its dgrad and wgrad); one forward and two backward GEMMs per linear layer mix
/// to 3 / (1/1.888 + 2/1.799) = 1.828x, applied to the published bf16 best case.
constexpr double kHopperAttentionFwdTflops = 553.0;
constexpr double kHopperAttentionBwdTflops = 467.0;
constexpr double kHopperFp8OverBf16 = 1.828;
KernelShape hopper_attention_anchor() {
  KernelShape s;
  s.kind = KernelKind::ATTENTION_FWD;
  s.dtype = Dtype::BF16;
  s.batch = 1;
  s.heads = 32;
  s.kv_heads = 8;
  s.seq = 8192;
  s.head_dim = 128;
  s.causal = true;
  return s;
}

ProfileHeader common_header(const std::string& kind) {
  ProfileHeader h;
  h.gpu_kind = kind;
  h.obtained = Provenance::MODELLED;
  h.driver = "n/a";
  h.cuda = "n/a";
  h.tool = "stepsim_gen_profile (kernels_profiles/tools/gen_modelled_profile.cpp), model of docs/kernels.md";
  h.launch_overhead = Seconds(4e-6);
  h.overlap_slowdown = 1.10;
  h.sources = {
      "gemm ceiling: measured_runs.yaml gemm_measurements (stas00/ml-engineering mamf-finder table, "
      "https://github.com/stas00/ml-engineering/tree/master/compute/accelerator)",
      "memory: spec HBM bandwidth x 0.9 (typical achieved device-to-device copy), reference/MODEL.md section "
      "7",
      "launch_overhead_s: assumed 4 us back-to-back kernel time floor (replace by the suite's empty-kernel "
      "measurement)",
      "overlap_slowdown: assumed 1.10 (NCCL kernels hold 8-32 of the SMs and share HBM; 1.05-1.15 reported, "
      "see docs/kernels.md)",
      "attention and memory-bound kernels: relative ceilings of docs/kernels.md (no published measurement "
      "used)",
  };
  return h;
}

/// Profiles with attention anchors keep only the memory-bound kernels on the relative ceilings.
void measured_attention_source(ProfileHeader& h) {
  std::erase_if(h.sources, [](const std::string& src) {
    return src.rfind("attention and memory-bound kernels", 0) == 0;
  });
  h.sources.push_back(
      "memory-bound kernels: relative ceilings of docs/kernels.md (no published measurement used)");
}

/// A memory variant of a GPU kind already in `f`: the same die, SM count, clocks and power limit
/// (so the same tensor-core anchors) with other HBM, which the memory-bound kernels follow. The
/// source line starting with `replaced_source` gives way to the variant's two.
void memory_variant(GpuFacts& f, const std::string& kind, const char* name, Bytes capacity,
                    BytesPerSec bandwidth, int mem_clock_mhz, const char* replaced_source,
                    std::string spec_source, std::string ceiling_source) {
  f.gpu.kind = kind;
  f.gpu.hbm_capacity = capacity;
  f.gpu.hbm_bandwidth = bandwidth;
  f.header.gpu_kind = kind;
  f.header.gpu = name;
  f.header.mem_clock_mhz = mem_clock_mhz;
  std::erase_if(f.header.sources, [&](const std::string& s) { return s.rfind(replaced_source, 0) == 0; });
  f.header.sources.push_back(std::move(spec_source));
  f.header.sources.push_back(std::move(ceiling_source));
}

bool facts_for(const std::string& kind, GpuFacts& f);

/// A Blackwell GPU (148 SMs, 8 TB/s HBM3e, fp8 at twice the 16-bit peak). No published Blackwell
/// GEMM measurement was found: the tensor-core anchors (bf16 and fp8 GEMMs, fused attention) are
/// the H100 SXM's fractions of its peaks applied to this GPU's, the GEMMs at 8192^3.
void blackwell(GpuFacts& f, const std::string& kind, const char* name, double peak_bf16_tflops,
               Bytes capacity, std::string spec_source) {
  GpuFacts h100;
  facts_for("H100-SXM5-80GB", h100);
  f.gpu.kind = kind;
  f.gpu.peak_bf16 = FlopsPerSec(peak_bf16_tflops * 1e12);
  f.gpu.peak_fp16 = f.gpu.peak_bf16;
  f.gpu.peak_fp8 = f.gpu.peak_bf16 * 2.0;
  f.gpu.hbm_capacity = capacity;
  f.gpu.hbm_bandwidth = BytesPerSec(8000e9);
  f.header = common_header(kind);
  f.header.sources[0] =
      "gemm, fp8 gemm and attention ceilings: assumed, the H100 SXM's fractions of peak (bf16 "
      "792.1/989 TFLOP/s, mamf-finder; fp8 1.828x bf16 and fused attention 553/467 TFLOP/s fwd/bwd, "
      "measured on the same die, an H200) (no published Blackwell measurement used; "
      "kernels_profiles/run_suite.sh on the GPU replaces them)";
  f.header.gpu = name;
  f.header.sm_count = 148;
  f.header.compute_capability = "10.0";
  f.header.sources.push_back(std::move(spec_source));
  measured_attention_source(f.header);
  const double bf16_fraction = h100.best_gemm_tflops * 1e12 / h100.gpu.peak_bf16.value();
  const double fp8_fraction = h100.best_fp8_gemm_tflops * 1e12 / (2 * h100.gpu.peak_bf16.value());
  f.best_gemm_tflops = std::round(bf16_fraction * peak_bf16_tflops * 10) / 10;
  f.best_gemm = gemm(Dtype::BF16, 8192, 8192, 8192);
  f.gemm_impl = "assumed_h100_fraction";
  f.best_fp8_gemm_tflops = std::round(fp8_fraction * 2 * peak_bf16_tflops * 10) / 10;
  f.best_fp8_gemm = gemm(Dtype::FP8_E4M3, 8192, 8192, 8192);
  f.fp8_impl = "assumed_h100_fraction";
  const double h100_peak = h100.gpu.peak_bf16.value() / 1e12;
  f.attention_fwd_tflops = std::round(h100.attention_fwd_tflops / h100_peak * peak_bf16_tflops * 10) / 10;
  f.attention_bwd_tflops = std::round(h100.attention_bwd_tflops / h100_peak * peak_bf16_tflops * 10) / 10;
  f.attention_anchor = h100.attention_anchor;
  f.attention_impl = "assumed_h100_fraction";
}

bool facts_for(const std::string& kind, GpuFacts& f) {
  if (kind == "V100-SXM2-32GB") {
    // Volta: fp16 tensor cores only (no bf16, no fp8). No published V100 GEMM measurement is in
    // the reference data: the anchor is the A100 SXM's published fraction of peak (267.9 / 312,
    // mamf-finder) applied to the V100's 125 TFLOP/s, at 8192^3, in fp16.
    GpuFacts a100;
    facts_for("A100-SXM4-80GB", a100);
    f.gpu.kind = kind;
    f.gpu.peak_fp16 = FlopsPerSec(125e12);
    f.gpu.hbm_capacity = Bytes(32.0 * 1024 * 1024 * 1024);
    f.gpu.hbm_bandwidth = BytesPerSec(900e9);
    f.header = common_header(kind);
    f.header.gpu = "Tesla V100-SXM2-32GB";
    f.header.sm_count = 80;
    f.header.compute_capability = "7.0";
    f.header.sm_clock_mhz = 1530;
    f.header.mem_clock_mhz = 877;
    f.header.l2_bytes = 6 * 1024 * 1024;
    f.header.sources[0] = "gemm ceiling: assumed, the A100 SXM's fraction of peak (267.9/312 TFLOP/s bf16, "
                          "mamf-finder) applied to the V100's fp16 peak (no published V100 measurement used; "
                          "kernels_profiles/run_suite.sh on the GPU replaces it)";
    f.header.sources.push_back(
        "V100 SXM2 32GB: 125 TFLOP/s fp16 tensor-core peak (640 tensor cores at 1530 MHz), no "
        "bf16 or fp8, 900 GB/s HBM2, 32 GB, 80 SMs: NVIDIA Tesla V100 datasheet; the "
        "DGX-2's V100 SXM3 32GB has the same die and peak");
    const double fraction = a100.best_gemm_tflops * 1e12 / a100.gpu.peak_bf16.value();
    f.best_gemm_tflops = std::round(fraction * 125.0 * 10) / 10;
    f.best_gemm = gemm(Dtype::FP16, 8192, 8192, 8192);
    f.gemm_impl = "assumed_a100_fraction";
    return true;
  }
  if (kind == "A100-SXM4-80GB") {
    f.gpu.kind = kind;
    f.gpu.peak_bf16 = FlopsPerSec(312e12);
    f.gpu.peak_fp16 = FlopsPerSec(312e12);
    f.gpu.hbm_capacity = Bytes(80.0 * 1024 * 1024 * 1024);
    f.gpu.hbm_bandwidth = BytesPerSec(2039e9);
    f.header = common_header(kind);
    f.header.gpu = "NVIDIA A100-SXM4-80GB";
    f.header.sm_count = 108;
    f.header.compute_capability = "8.0";
    f.header.sm_clock_mhz = 1410;
    f.header.mem_clock_mhz = 1593;
    f.header.l2_bytes = 40 * 1024 * 1024;
    f.header.sources.push_back(
        "A100 peaks 312 TFLOP/s bf16 dense, 2039 GB/s HBM2e, 108 SMs: NVIDIA A100 datasheet");
    f.best_gemm_tflops = 267.9;
    f.best_gemm = gemm(Dtype::BF16, 6912, 16384, 2048);
    return true;
  }
  if (kind == "A100-SXM4-40GB") {
    // The A100 SXM's GA100 die, SM count, clocks and 400 W limit with 40 GB of HBM2 at 1555 GB/s.
    facts_for("A100-SXM4-80GB", f);
    memory_variant(
        f, kind, "NVIDIA A100-SXM4-40GB", Bytes(40.0 * 1024 * 1024 * 1024), BytesPerSec(1555e9), 1215,
        "A100 peaks",
        "A100 SXM4 40GB: 312 TFLOP/s bf16 dense, 1555 GB/s HBM2, 40 GB, 108 SMs: NVIDIA A100 datasheet "
        "(the 80 GB part's tensor cores)",
        "gemm ceiling: the A100 SXM's published best case above, same die, clocks and power limit (no "
        "published 40 GB GEMM measurement used)");
    return true;
  }
  if (kind == "H100-SXM5-80GB") {
    f.gpu.kind = kind;
    f.gpu.peak_bf16 = FlopsPerSec(989e12);
    f.gpu.peak_fp16 = FlopsPerSec(989e12);
    f.gpu.hbm_capacity = Bytes(80.0 * 1024 * 1024 * 1024);
    f.gpu.hbm_bandwidth = BytesPerSec(3350e9);
    f.header = common_header(kind);
    f.header.gpu = "NVIDIA H100 80GB HBM3";
    f.header.sm_count = 132;
    f.header.compute_capability = "9.0";
    f.header.sm_clock_mhz = 1980;
    f.header.mem_clock_mhz = 2619;
    f.header.l2_bytes = 50 * 1024 * 1024;
    f.header.sources.push_back(
        "H100 SXM peaks 989 TFLOP/s bf16 dense (1979 fp8), 3350 GB/s HBM3, 132 SMs: NVIDIA H100 datasheet");
    f.header.sources.push_back(
        "fp8 gemm ceiling: 1.828x the bf16 best case, the training mix of one fast-accumulation (forward) "
        "and two "
        "split-accumulation (dgrad, wgrad) cuBLASLt e4m3 GEMMs measured on an H200 (same die; "
        "kernels_profiles/data/measured/); a published fast-accumulation 8192^3 GEMM alone reaches 1611 "
        "TFLOP/s "
        "(mean of 16 H100 SXM GPUs, test_gpu_scripts reports_cublaslt_fp8_crosscheck_20260524.md, "
        "gitea.d-robotics.cc/han.zhao)");
    f.header.sources.push_back(
        "attention ceilings: fused attention (cuDNN through PyTorch SDPA) measured on an "
        "H200, the same die: 553 TFLOP/s forward, 467 backward at batch 1, 32 heads, 8 kv "
        "heads, 8192 tokens, head_dim 128, causal (kernels_profiles/data/measured/)");
    measured_attention_source(f.header);
    f.best_gemm_tflops = 792.1;
    f.best_gemm = gemm(Dtype::BF16, 6144, 17920, 2816);
    f.best_fp8_gemm_tflops = std::round(792.1 * kHopperFp8OverBf16 * 10) / 10;
    f.best_fp8_gemm = gemm(Dtype::FP8_E4M3, 8192, 8192, 8192);
    f.fp8_impl = "measured_h200_training_mix";
    f.attention_fwd_tflops = kHopperAttentionFwdTflops;
    f.attention_bwd_tflops = kHopperAttentionBwdTflops;
    f.attention_anchor = hopper_attention_anchor();
    return true;
  }
  if (kind == "H200-SXM-141GB") {
    // The H100 SXM's GH100 die, SM count, clocks and 700 W limit with 141 GB of HBM3e at 4.8 TB/s.
    facts_for("H100-SXM5-80GB", f);
    memory_variant(
        f, kind, "NVIDIA H200", Bytes(141e9), BytesPerSec(4800e9), 3201, "H100 SXM peaks",
        "H200 SXM: 989 TFLOP/s bf16 dense (1979 fp8), 4800 GB/s HBM3e, 141 GB, 132 SMs: NVIDIA H200 "
        "datasheet (the H100 SXM's tensor cores)",
        "gemm ceilings: the H100 SXM's published best cases above, same die, clocks and power limit (no "
        "published H200 GEMM measurement used)");
    return true;
  }
  if (kind == "B200-SXM-180GB") {
    blackwell(
        f, kind, "NVIDIA B200", 2250, Bytes(180e9),
        "B200 (DGX B200): 2250 TFLOP/s bf16 and 4500 fp8 dense (DGX B200: 72 PFLOP/s fp8 with sparsity per 8 "
        "GPUs), 8000 GB/s HBM3e, 180 GB per GPU (1440 GB per DGX), 148 SMs: NVIDIA DGX B200 datasheet");
    return true;
  }
  if (kind == "GB200-186GB") {
    blackwell(
        f, kind, "NVIDIA GB200 (Blackwell GPU)", 2500, Bytes(186e9),
        "GB200 NVL72, per GPU: 2500 TFLOP/s bf16 and 5000 fp8 dense (NVL72: 360 and 720 PFLOP/s with "
        "sparsity per 72 GPUs), 8000 GB/s HBM3e (576 TB/s per rack), 186 GB (13.4 TB per rack), 148 SMs: "
        "NVIDIA GB200 NVL72 datasheet");
    return true;
  }
  return false;
}

KernelProfile generate(const GpuFacts& f, const std::string& date) {
  // Anchor rows: the published best GEMM and a large copy at the achievable bandwidth. The
  // table calibrates its ceilings to them; every other row is the model's answer.
  KernelProfile anchors;
  anchors.header = f.header;
  anchors.header.date = date;
  const double gemm_time = kernel_flops(f.best_gemm).value() / (f.best_gemm_tflops * 1e12);
  anchors.rows.push_back({f.best_gemm, Seconds(gemm_time), f.gemm_impl});
  if (f.best_fp8_gemm_tflops > 0) {
    const double fp8_time = kernel_flops(f.best_fp8_gemm).value() / (f.best_fp8_gemm_tflops * 1e12);
    anchors.rows.push_back({f.best_fp8_gemm, Seconds(fp8_time), f.fp8_impl});
  }
  KernelShape attention_bwd = f.attention_anchor;
  attention_bwd.kind = KernelKind::ATTENTION_BWD;
  if (f.attention_fwd_tflops > 0) {
    for (const auto& [shape, tflops] : {std::pair{f.attention_anchor, f.attention_fwd_tflops},
                                        std::pair{attention_bwd, f.attention_bwd_tflops}})
      anchors.rows.push_back(
          {shape, Seconds(kernel_flops(shape).value() / (tflops * 1e12)), f.attention_impl});
  }
  const KernelShape copy = elementwise(KernelKind::MEMCPY, Dtype::BF16, int64_t{2} << 30);
  const double copy_time = kernel_bytes(copy).value() / (f.copy_fraction * f.gpu.hbm_bandwidth.value());
  anchors.rows.push_back({copy, Seconds(copy_time), "assumed_spec_x0.9"});
  const KernelTable table(anchors, f.gpu);

  KernelProfile out;
  out.header = anchors.header;
  out.rows = anchors.rows;
  // A GPU without bf16 tensor cores (V100) gets the reference GEMMs and attention in fp16, its
  // 16-bit format (memory-bound kernels move the same bytes in either).
  const bool fp16_only = table.peak(Dtype::BF16).value() <= 0;
  for (KernelShape s : reference_profile_shapes()) {
    if (fp16_only && s.dtype == Dtype::BF16 && is_compute_bound(s.kind))
      s.dtype = Dtype::FP16;
    if (s == f.best_gemm || s == copy || (f.best_fp8_gemm_tflops > 0 && s == f.best_fp8_gemm) ||
        (f.attention_fwd_tflops > 0 && (s == f.attention_anchor || s == attention_bwd)))
      continue;
    if (is_compute_bound(s.kind) && table.peak(s.dtype).value() <= 0)
      continue;
    out.rows.push_back({s, table.model_time(s), "model"});
  }
  return out;
}

int usage() {
  std::cerr << "usage: stepsim_gen_profile --gpu "
               "V100-SXM2-32GB|A100-SXM4-80GB|A100-SXM4-40GB|H100-SXM5-80GB|H200-SXM-141GB|B200-SXM-180GB|"
               "GB200-186GB --date YYYY-MM-DD --out FILE\n";
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  std::string gpu;
  std::string date;
  std::string out;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gpu"))
      gpu = argv[i + 1];
    else if (!std::strcmp(argv[i], "--date"))
      date = argv[i + 1];
    else if (!std::strcmp(argv[i], "--out"))
      out = argv[i + 1];
    else
      return usage();
  }
  if (argc % 2 != 1 || gpu.empty() || date.empty() || out.empty())
    return usage();
  GpuFacts facts;
  if (!facts_for(gpu, facts)) {
    std::cerr << "stepsim_gen_profile: unknown GPU kind '" << gpu
              << "' (V100-SXM2-32GB, A100-SXM4-80GB, A100-SXM4-40GB, H100-SXM5-80GB, H200-SXM-141GB, "
                 "B200-SXM-180GB, GB200-186GB)\n";
    return 2;
  }
  try {
    const KernelProfile p = generate(facts, date);
    write_file_atomically(out, [&](std::ostream& os) { write_profile(os, p); });
    std::cout << out << ": " << p.rows.size() << " rows\n";
  } catch (const Error& e) {
    std::cerr << "stepsim_gen_profile: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
