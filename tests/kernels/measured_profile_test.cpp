// The kernel profiles measured on an H200 (kernels_profiles/data/measured/, docs/kernels.md
// "Measured on an H200") and the modelled profiles checked against them: the model's attention
// fit, its fp8 training mix and its GEMM scale are facts about that GPU, not assumptions.

#include "kernels/kernel_table.hpp"
#include "kernels/profile.hpp"
#include "kernels/roofline.hpp"

#include "core/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace stepsim::kernels {
namespace {

const std::string kData = std::string(STEPSIM_SOURCE_DIR) + "/kernels_profiles/data/";

GpuSpec h200() {
  GpuSpec g;
  g.kind = "H200-SXM-141GB";
  g.peak_bf16 = g.peak_fp16 = FlopsPerSec(989e12);
  g.peak_fp8 = FlopsPerSec(1979e12);
  g.hbm_capacity = Bytes(141e9);
  g.hbm_bandwidth = BytesPerSec(4800e9);
  return g;
}

/// Fast-accumulation fp8 run (the bundled measured profile) and the split-accumulation run.
const KernelProfile& fast_run() {
  static const KernelProfile p = read_profile(kData + "measured/H200-SXM-141GB.csv");
  return p;
}
const KernelProfile& split_run() {
  static const KernelProfile p = read_profile(kData + "measured/H200-SXM-141GB-fp8-split-accum.csv");
  return p;
}

std::map<KernelShape, const ProfileRow*> by_shape(const KernelProfile& p) {
  std::map<KernelShape, const ProfileRow*> m;
  for (const ProfileRow& r : p.rows)
    m[r.shape] = &r;
  return m;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

TEST(MeasuredH200, ProfilesAreWholeAndPhysical) {
  for (const KernelProfile* p : {&fast_run(), &split_run()}) {
    EXPECT_EQ(p->header.obtained, Provenance::MEASURED);
    EXPECT_EQ(p->header.gpu_kind, "H200-SXM-141GB");
    EXPECT_EQ(p->header.sm_count, 132);
    ASSERT_GT(p->rows.size(), 700u);
    for (const ProfileRow& r : p->rows) {
      const double t = r.time.value();
      if (is_compute_bound(r.shape.kind)) {
        const double peak = r.shape.dtype == Dtype::FP8_E4M3 ? 1979e12 : 989e12;
        EXPECT_LT(kernel_flops(r.shape).value() / t, peak) << describe(r.shape);
      }
      // No kernel moves its bytes faster than the HBM (small ones may sit in the 60 MB L2).
      if (kernel_bytes(r.shape).value() > 1e9) {
        EXPECT_LT(kernel_bytes(r.shape).value() / t, 4800e9) << describe(r.shape);
      }
      if (r.shape.kind == KernelKind::ATTENTION_FWD || r.shape.kind == KernelKind::ATTENTION_BWD) {
        EXPECT_EQ(r.impl.rfind("torch_sdpa_", 0), 0u) << describe(r.shape); // fused, not the naive kernels
      }
    }
  }
  // The table answers a measured shape with its own row.
  const KernelTable t(fast_run(), h200());
  const KernelShape copy = elementwise(KernelKind::MEMCPY, Dtype::BF16, int64_t{2} << 30);
  EXPECT_EQ(t.lookup(copy).source, Source::MEASURED);
  // A 4 GiB copy reaches ~89 % of the 4.8 TB/s datasheet bandwidth (the 0.9 the models assume).
  EXPECT_NEAR(kernel_bytes(copy).value() / t.lookup(copy).time.value() / 4800e9, 0.9, 0.02);
}

// The modelled H200 profile against the measurement, kind by kind: median and spread of
// modelled / measured time over the shapes both have.
struct Agreement {
  double median = 0;
  double p10 = 0;
  double p90 = 0;
  std::size_t n = 0;
};

Agreement agreement(KernelKind kind, Dtype dtype) {
  const KernelProfile modelled = read_profile(kData + "H200-SXM-141GB.csv");
  const auto fast = by_shape(fast_run());
  const auto split = by_shape(split_run());
  std::vector<double> ratios;
  for (const ProfileRow& m : modelled.rows) {
    if (m.shape.kind != kind || m.shape.dtype != dtype || m.impl != "model")
      continue;
    const auto f = fast.find(m.shape);
    const auto s = split.find(m.shape);
    if (f == fast.end() || s == split.end())
      continue;
    // fp8: one fast-accumulation forward and two split-accumulation backward GEMMs; otherwise
    // the geometric mean of the two runs (same kernels).
    const double measured = dtype == Dtype::FP8_E4M3
                                ? (f->second->time.value() + 2 * s->second->time.value()) / 3
                                : std::sqrt(f->second->time.value() * s->second->time.value());
    ratios.push_back(m.time.value() / measured);
  }
  if (ratios.empty())
    return {};
  return {quantile(ratios, 0.5), quantile(ratios, 0.1), quantile(ratios, 0.9), ratios.size()};
}

TEST(MeasuredH200, ModelledAttentionFollowsTheFusedKernels) {
  // The attention shape factor is fitted to these rows (work per SM and per-row-block cost);
  // before that fit the model was 27-34 % too fast at the median and up to 2.3x at small heads.
  for (const KernelKind kind : {KernelKind::ATTENTION_FWD, KernelKind::ATTENTION_BWD}) {
    const Agreement a = agreement(kind, Dtype::BF16);
    ASSERT_GE(a.n, 15u) << to_string(kind);
    EXPECT_NEAR(a.median, 1.0, 0.10) << to_string(kind);
    EXPECT_GT(a.p10, 0.80) << to_string(kind);
    EXPECT_LT(a.p90, 1.10) << to_string(kind);
  }
}

TEST(MeasuredH200, ModelledGemmsHaveOneScaleAcrossShapesAndPrecisions) {
  // The model is anchored on the published best bf16 GEMM (mamf-finder, 792 TFLOP/s), which the
  // suite's single cuBLASLt heuristic, timed launch by launch, reaches only on mid-sized shapes:
  // the model runs ~13 % faster than the measurement at the median, the same for bf16 and for
  // fp8 in its training mix; gpu.gemm_efficiency (calibrated on runs) carries the rest.
  const Agreement bf16 = agreement(KernelKind::GEMM, Dtype::BF16);
  const Agreement fp8 = agreement(KernelKind::GEMM, Dtype::FP8_E4M3);
  ASSERT_GE(bf16.n, 200u);
  ASSERT_GE(fp8.n, 200u);
  EXPECT_GT(bf16.median, 0.80);
  EXPECT_LT(bf16.median, 1.0);
  EXPECT_NEAR(fp8.median / bf16.median, 1.0, 0.03); // the fp8 anchor carries the measured mix
  // Shape effects (waves, tiles, edges): 80 % of shapes within 12 % of the median scale.
  for (const Agreement& a : {bf16, fp8}) {
    EXPECT_GT(a.p10, a.median * 0.88);
    EXPECT_LT(a.p90, a.median * 1.12);
  }
}

TEST(MeasuredH200, Fp8FastAccumulationIsFasterThanSplit) {
  // cuBLASLt's fast accumulation (Transformer Engine's forward) against split accumulation (its
  // backward) on the same shapes: a few % to ~20 % faster, never slower beyond noise.
  const auto split = by_shape(split_run());
  std::vector<double> speedups;
  for (const ProfileRow& r : fast_run().rows) {
    if (r.shape.kind != KernelKind::GEMM || r.shape.dtype != Dtype::FP8_E4M3)
      continue;
    EXPECT_EQ(r.impl, "cublaslt_fast_accum");
    const auto s = split.find(r.shape);
    ASSERT_NE(s, split.end()) << describe(r.shape);
    EXPECT_EQ(s->second->impl, "cublaslt");
    speedups.push_back(s->second->time.value() / r.time.value());
  }
  ASSERT_GE(speedups.size(), 200u);
  EXPECT_GT(quantile(speedups, 0.5), 1.03);
  EXPECT_LT(quantile(speedups, 0.5), 1.15);
  EXPECT_GT(quantile(speedups, 0.02), 0.95);
}

// --- the time-list format the suite merges (--times) ---------------------------------------

TEST(Formats, TimeListReadsRowsTimedOutsideTheSuite) {
  std::istringstream in(
      "# format: stepsim-kernel-times/1\n# timed by a test\nkernel,dtype,shape,time_s,impl\n"
      "attention_fwd,bf16,batch=1;heads=32;kv_heads=8;seq=8192;head_dim=128;causal=1,9.9e-04,"
      "torch_sdpa_cudnn\nlayernorm,bf16,rows=2048;cols=12288,6.18e-05,torch_layer_norm\n");
  const std::vector<ProfileRow> rows = parse_time_list(in, "t.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].shape.kind, KernelKind::ATTENTION_FWD);
  EXPECT_EQ(rows[0].shape.kv_heads, 8);
  EXPECT_DOUBLE_EQ(rows[0].time.value(), 9.9e-4);
  EXPECT_EQ(rows[0].impl, "torch_sdpa_cudnn");
  EXPECT_EQ(rows[1].shape.cols, 12288);
}

std::string time_list_error(const std::string& text) {
  std::istringstream in(text);
  try {
    (void)parse_time_list(in, "t.csv");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Formats, TimeListErrorsNameFileAndLine) {
  const std::string head = "# format: stepsim-kernel-times/1\nkernel,dtype,shape,time_s,impl\n";
  EXPECT_EQ(time_list_error("kernel,dtype,shape,time_s,impl\ngelu,bf16,elements=8,1e-6,x\n")
                .rfind("t.csv:1: missing header key 'format: stepsim-kernel-times/1'", 0),
            0u);
  EXPECT_EQ(time_list_error("# format: stepsim-kernel-shapes/1\n")
                .rfind("t.csv:1: format 'stepsim-kernel-shapes/1'", 0),
            0u);
  EXPECT_EQ(
      time_list_error(head + "gelu,bf16,elements=8,0,x\n").rfind("t.csv:3: time_s '0' is not a positive", 0),
      0u);
  EXPECT_EQ(time_list_error(head + "gelu,bf16,elements=8,1e-6\n").rfind("t.csv:3: expected 5 columns", 0),
            0u);
  EXPECT_EQ(time_list_error(head + "gelu,bf16,elements=8,1e-6,\n").rfind("t.csv:3: impl is empty", 0), 0u);
  EXPECT_EQ(time_list_error(head + "gelu,bf16,elements=8,1e-6,a\ngelu,bf16,elements=8,2e-6,b\n")
                .rfind("t.csv:4: duplicate row", 0),
            0u);
  EXPECT_EQ(time_list_error("# format: stepsim-kernel-times/1\n").rfind("t.csv:0: no column line", 0), 0u);
}

} // namespace
} // namespace stepsim::kernels
