// GPU variants (docs/kernels.md, "GPU variants"): the derivation rules in closed form, the
// cluster keys and their errors, and the bundled variant topologies against published figures.

#include "config/config.hpp"
#include "core/error.hpp"
#include "kernels/kernel_table.hpp"
#include "kernels/variant.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace stepsim::kernels {
namespace {

namespace fs = std::filesystem;

const std::string kSourceDir = STEPSIM_SOURCE_DIR;
const fs::path kH100Profile = fs::path(kSourceDir) / "kernels_profiles/data/H100-SXM5-80GB.csv";

GpuSpec h100() {
  GpuSpec g;
  g.kind = "H100-SXM5-80GB";
  g.peak_bf16 = FlopsPerSec(989e12);
  g.peak_fp16 = FlopsPerSec(989e12);
  g.peak_fp8 = FlopsPerSec(1979e12);
  g.hbm_capacity = Bytes(80e9);
  g.hbm_bandwidth = BytesPerSec(3350e9);
  return g;
}

/// `base` as the variant of `v` would be resolved by the cluster reader.
GpuSpec as_variant(GpuSpec g, const GpuVariant& v) {
  g.peak_bf16 = g.peak_bf16 * v.compute_ratio;
  g.peak_fp16 = g.peak_fp16 * v.compute_ratio;
  g.peak_fp8 = g.peak_fp8 * v.compute_ratio;
  g.hbm_bandwidth = g.hbm_bandwidth * v.memory_ratio;
  g.variant = v;
  return g;
}

KernelShape gemm(int64_t m, int64_t n, int64_t k) {
  KernelShape s;
  s.kind = KernelKind::GEMM;
  s.dtype = Dtype::BF16;
  s.batch = 1;
  s.m = m;
  s.n = n;
  s.k = k;
  return s;
}

KernelShape copy(int64_t elements) {
  KernelShape s;
  s.kind = KernelKind::MEMCPY;
  s.dtype = Dtype::BF16;
  s.elements = elements;
  return s;
}

double tflops(const KernelTable& t, const KernelShape& s) {
  return kernel_flops(s).value() / t.lookup(s).time.value() / 1e12;
}

/// The profile's largest 16-bit GEMM row (by FLOPs).
KernelShape largest_gemm(const KernelProfile& p) {
  KernelShape best;
  double most = 0;
  for (const ProfileRow& r : p.rows)
    if (r.shape.kind == KernelKind::GEMM && r.shape.dtype == Dtype::BF16 &&
        kernel_flops(r.shape).value() > most) {
      most = kernel_flops(r.shape).value();
      best = r.shape;
    }
  return best;
}

// The rules: a compute-bound row's time / the compute ratio, a memory-bound row's / the memory
// ratio, none below the launch overhead, which is the base's.
TEST(GpuVariant, RowsScaleByKindAndLaunchOverheadStays) {
  const KernelProfile base = read_profile(kH100Profile);
  const GpuVariant v{.name = "test", .compute_ratio = 0.8, .memory_ratio = 1.6};
  const KernelProfile d = derive_variant(base, v);
  ASSERT_EQ(d.rows.size(), base.rows.size());
  EXPECT_EQ(d.header.gpu_kind, base.header.gpu_kind);
  EXPECT_EQ(d.header.sm_count, base.header.sm_count);
  EXPECT_EQ(d.header.launch_overhead.value(), base.header.launch_overhead.value());
  const double launch = base.header.launch_overhead.value();
  int floored = 0;
  for (std::size_t i = 0; i < base.rows.size(); ++i) {
    const ProfileRow& b = base.rows[i];
    ASSERT_EQ(d.rows[i].shape, b.shape);
    const double ratio = is_compute_bound(b.shape.kind) ? 0.8 : 1.6;
    EXPECT_DOUBLE_EQ(d.rows[i].time.value(), std::max(launch, b.time.value() / ratio)) << describe(b.shape);
    floored += b.time.value() / ratio < launch ? 1 : 0;
  }
  EXPECT_GT(floored, 0); // the smallest copies sit at the floor at 1.6x the bandwidth
}

// Through the table: an exact row and a modelled shape (not in the profile) both run at the base
// time x the ratio, since the ceilings are fractions of the variant's own peak and bandwidth.
TEST(GpuVariant, TableTimesFollowTheRatiosForRowsAndModelledShapes) {
  const GpuVariant v{.name = "test", .compute_ratio = 0.7, .memory_ratio = 0.6};
  const KernelTable base = KernelTable::load(kH100Profile, h100());
  const KernelTable var = KernelTable::load(kH100Profile, as_variant(h100(), v));
  const KernelShape row = largest_gemm(base.profile());
  const KernelShape modelled = gemm(6000, 7000, 5000);
  ASSERT_EQ(base.profile().rows.end(),
            std::find_if(base.profile().rows.begin(), base.profile().rows.end(),
                         [&](const ProfileRow& r) { return r.shape == modelled; }));
  for (const KernelShape& s : {row, modelled})
    EXPECT_NEAR(var.lookup(s).time.value(), base.lookup(s).time.value() / 0.7, 1e-12) << describe(s);
  for (const KernelShape& s : {copy(int64_t{1} << 31), copy(300'000'000)})
    EXPECT_NEAR(var.lookup(s).time.value(), base.lookup(s).time.value() / 0.6, 1e-12) << describe(s);
  EXPECT_EQ(var.launch_overhead().value(), base.launch_overhead().value());
  EXPECT_NEAR(var.peak(Dtype::BF16).value(), 0.7 * 989e12, 1);
}

TEST(GpuVariant, SmCountReplacesTheProfilesAndIsCheckedAgainstIt) {
  const KernelProfile base = read_profile(kH100Profile);
  const KernelProfile d =
      derive_variant(base, {.name = "pcie", .compute_ratio = 0.5, .sm_count = 114, .base_sm_count = 132});
  EXPECT_EQ(d.header.sm_count, 114);
  try {
    derive_variant(base, {.name = "x", .compute_ratio = 0.5, .sm_count = 100, .base_sm_count = 108});
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gpu.sm_count is 108, the profile's sm_count 132"),
              std::string::npos)
        << e.what();
  }
}

// --- the cluster keys ------------------------------------------------------------------------

fs::path write_cluster(const std::string& name, const std::string& gpu_extra) {
  const fs::path dir = fs::temp_directory_path() / "stepsim_variant_test";
  fs::create_directories(dir);
  const fs::path file = dir / (name + ".yaml");
  std::ofstream(file) << "name: " << name << "\n"
                      << "nodes: 1\ngpus_per_node: 8\n"
                      << "gpu:\n"
                      << "  kind: H100-SXM5-80GB\n"
                      << "  peak_flops: {bf16: 989TFLOPS, fp16: 989TFLOPS, fp8: 1979TFLOPS}\n"
                      << "  hbm_capacity: 80GiB\n  hbm_bandwidth: 3350GBps\n"
                      << "  compute_efficiency: 0.65\n  memory_efficiency: 0.85\n"
                      << gpu_extra << "nvswitch: {bandwidth: 450GBps, latency: 1.5us, efficiency: 0.8}\n"
                      << "nics: {count: 8, bandwidth: 400Gbps, latency: 3us, efficiency: 0.96}\n"
                      << "fabric: {kind: fat_tree}\n";
  return file;
}

std::string load_error(const std::string& name, const std::string& gpu_extra) {
  const fs::path file = write_cluster(name, gpu_extra);
  try {
    config::load_cluster(file);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(GpuVariantKeys, PowerLimitClockAndSmsResolveThePeaks) {
  const ClusterSpec c =
      config::load_cluster(write_cluster("capped", "  power_limit: 700W\n  sm_count: 132\n"
                                                   "  variant:\n    name: capped\n"
                                                   "    power_limit: 350W\n    sm_count: 114\n"
                                                   "    hbm_bandwidth: 2TBps\n"
                                                   "    hbm_capacity: 94GB\n"));
  const double r = std::cbrt(350.0 / 700.0) * 114.0 / 132.0;
  EXPECT_NEAR(c.gpu.variant.compute_ratio, r, 1e-12);
  EXPECT_NEAR(c.gpu.peak_bf16.value(), 989e12 * r, 1);
  EXPECT_NEAR(c.gpu.peak_fp8.value(), 1979e12 * r, 1);
  EXPECT_EQ(c.gpu.hbm_bandwidth.value(), 2e12);
  EXPECT_NEAR(c.gpu.variant.memory_ratio, 2000.0 / 3350.0, 1e-12);
  EXPECT_EQ(c.gpu.hbm_capacity.value(), 94e9);
  EXPECT_EQ(c.gpu.variant.sm_count, 114);

  const ClusterSpec clock = config::load_cluster(
      write_cluster("clock", "  boost_clock: 1830MHz\n  variant: {name: locked, sustained_clock: 1.5GHz}\n"));
  EXPECT_NEAR(clock.gpu.peak_bf16.value(), 989e12 * 1500.0 / 1830.0, 1);
  EXPECT_EQ(clock.gpu.hbm_bandwidth.value(), 3350e9); // unchanged
  EXPECT_EQ(clock.gpu.variant.memory_ratio, 1.0);

  const ClusterSpec none = config::load_cluster(write_cluster("plain", ""));
  EXPECT_FALSE(none.gpu.variant.active());
}

TEST(GpuVariantKeys, ImpossibleValuesNameTheFileKeyAndExpectation) {
  struct Case {
    const char* name;
    const char* gpu;
    const char* key;
    const char* expected;
  };
  const Case cases[] = {
      {"over_boost", "  boost_clock: 1830MHz\n  variant: {name: v, sustained_clock: 2GHz}\n",
       "gpu.variant.sustained_clock", "expected a clock in (0, 1830MHz] (at most gpu.boost_clock"},
      {"no_boost", "  variant: {name: v, sustained_clock: 1GHz}\n", "gpu.variant.sustained_clock",
       "needs gpu.boost_clock"},
      {"zero_hbm", "  variant: {name: v, hbm_bandwidth: 0GBps}\n", "gpu.variant.hbm_bandwidth",
       "expected a positive bandwidth"},
      {"over_power", "  power_limit: 700W\n  variant: {name: v, power_limit: 800W}\n",
       "gpu.variant.power_limit", "expected a power limit in [175W, 700W]"},
      {"low_power", "  power_limit: 700W\n  variant: {name: v, power_limit: 100W}\n",
       "gpu.variant.power_limit", "expected a power limit in [175W, 700W]"},
      {"no_base_power", "  variant: {name: v, power_limit: 500W}\n", "gpu.variant.power_limit",
       "needs gpu.power_limit"},
      {"bare_power", "  power_limit: 700W\n  variant: {name: v, power_limit: 500}\n",
       "gpu.variant.power_limit", "expected a power with a unit"},
      {"two_rates",
       "  power_limit: 700W\n  boost_clock: 1830MHz\n  variant: {name: v, power_limit: 500W, "
       "sustained_clock: 1.5GHz}\n",
       "gpu.variant", "expected at most one of power_limit, sustained_clock, peak_flops"},
      {"over_peak", "  variant: {name: v, peak_flops: 1200TFLOPS}\n", "gpu.variant.peak_flops",
       "expected at most the base part's 16-bit peak"},
      {"over_sms", "  sm_count: 132\n  variant: {name: v, sm_count: 140}\n", "gpu.variant.sm_count",
       "expected an SM count in [1, 132] (at most gpu.sm_count), found 140"},
      {"no_name", "  variant: {hbm_capacity: 96GB}\n", "gpu.variant",
       "missing required key 'gpu.variant.name'"},
  };
  for (const Case& c : cases) {
    const std::string e = load_error(c.name, c.gpu);
    EXPECT_NE(e.find(std::string(c.name) + ".yaml"), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find(c.key), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.name << ": " << e;
  }
}

// --- the bundled variant topologies against published figures --------------------------------

ClusterSpec bundled(const char* file) {
  return config::load_cluster(fs::path(kSourceDir) / "topologies" / file);
}

/// The bundled topology's derived profile: its largest GEMM's rate over the H100 SXM's.
double gemm_rate_ratio(const ClusterSpec& c) {
  const KernelTable base = KernelTable::load(kH100Profile, h100());
  const KernelTable var = KernelTable::load(c.gpu.profile, c.gpu);
  const KernelShape s = largest_gemm(base.profile());
  return tflops(var, s) / tflops(base, s);
}

// One published matmul benchmark run on many parts (zzc0721/torch-performance-test-data,
// database.md: the best bf16 torch.matmul over square sizes 1024..10240). Its H100 SXM figure,
// the mean of its two machines (797.51 and 783.66 TFLOP/s), is the base the ratios are taken to.
constexpr double kHarnessH100Sxm = (797.51 + 783.66) / 2;

// H100 PCIe: 114 SMs at 350 W. The cube-root law with the SM ratio gives 0.685 of the SXM's
// rate; the harness measured 495.93 TFLOP/s (0.627), so the derivation runs 9.3 % fast: within
// the stated 10 %, and above the measurement (the PCIe card sits further into its power limit
// than the law's dynamic-power-only form says).
TEST(BundledVariant, H100PcieAgainstItsDatasheetAndAMeasuredMatmul) {
  const ClusterSpec c = bundled("h100-pcie.yaml");
  EXPECT_EQ(c.gpu.variant.name, "H100-PCIe-80GB");
  EXPECT_EQ(c.intra, IntraNodeKind::PCIE);
  EXPECT_EQ(c.gpu.hbm_bandwidth.value(), 2000e9); // datasheet: 2 TB/s HBM2e
  const double measured = 495.93 / kHarnessH100Sxm;
  const double derived = gemm_rate_ratio(c);
  EXPECT_NEAR(derived, 114.0 / 132.0 * std::cbrt(0.5), 1e-9);
  EXPECT_GT(derived, measured);
  EXPECT_LT(derived / measured - 1, 0.10);
  // The variant's peak (678 TFLOP/s) lies below the datasheet's 756, which holds at the boost
  // clock (114 SMs x 4096 FLOP/clock x 1.62 GHz) the card does not sustain in dense GEMMs.
  EXPECT_LT(c.gpu.peak_bf16.value(), 756e12);
  EXPECT_GT(c.gpu.peak_bf16.value(), 0.85 * 756e12);
}

// The power law alone on the same die, against NVIDIA's own figure: the H100 NVL (132 SMs, like
// the SXM5) is specified at 835 TFLOPS bf16 dense (1671 with sparsity) for a 400 W limit; the
// cube root of 400/700 gives 821 (-1.6 %).
TEST(BundledVariant, PowerLawMatchesTheH100NvlDatasheet) {
  const ClusterSpec c = config::load_cluster(
      write_cluster("nvl", "  power_limit: 700W\n  variant: {name: H100-NVL-94GB, power_limit: 400W, "
                           "hbm_bandwidth: 3900GBps, hbm_capacity: 94GB}\n"));
  EXPECT_NEAR(c.gpu.peak_bf16.value() / 835e12, 1.0, 0.02);
}

// A100 PCIe 40 GB (250 W) as a variant of the A100 SXM (400 W, the same 108 SMs and clocks): the
// law gives 0.855 of the SXM's GEMM rate; the same harness measured 234.14 against 264.53
// (0.885): the law runs 3.4 % slow.
TEST(BundledVariant, PowerLawAgainstTheMeasuredA100Pcie) {
  const double law = std::cbrt(250.0 / 400.0);
  const double measured = 234.14 / 264.53;
  EXPECT_NEAR(law / measured, 1.0, 0.05);
  EXPECT_LT(law, measured);
}

TEST(BundledVariant, PowerCappedH100) {
  const ClusterSpec c = bundled("dgx-h100-500w.yaml");
  const double r = std::cbrt(500.0 / 700.0);
  EXPECT_NEAR(c.gpu.peak_bf16.value(), 989e12 * r, 1);
  EXPECT_NEAR(gemm_rate_ratio(c), r, 1e-9);
  EXPECT_NEAR(c.gpu.variant.clock_ratio, r, 1e-12);
  EXPECT_EQ(c.gpu.hbm_bandwidth.value(), 3350e9); // the cap leaves the HBM clock alone
  const KernelTable base = KernelTable::load(kH100Profile, h100());
  const KernelTable var = KernelTable::load(c.gpu.profile, c.gpu);
  const KernelShape big_copy = copy(int64_t{1} << 31);
  EXPECT_EQ(var.lookup(big_copy).time.value(), base.lookup(big_copy).time.value());
  EXPECT_NEAR(var.profile().header.sm_clock_mhz, base.profile().header.sm_clock_mhz * r, 1e-9);
}

// H20: 148 TFLOPS bf16 dense, 4.0 TB/s, 96 GB. The derivation keeps the H100's fraction of peak
// (80 %), while the harness measured 142.06 TFLOP/s (the mean of 141.86 and 142.25: 96 % of
// 148): the derived GEMMs are 17 % slow, conservative; the bound below says how far.
TEST(BundledVariant, H20IsConservativeAgainstItsMeasuredMatmul) {
  const ClusterSpec c = bundled("hgx-h20.yaml");
  EXPECT_NEAR(c.gpu.peak_bf16.value(), 148e12, 1);
  EXPECT_NEAR(c.gpu.peak_fp8.value(), 1979e12 * 148 / 989, 1);
  EXPECT_EQ(c.gpu.hbm_bandwidth.value(), 4000e9);
  EXPECT_EQ(c.gpu.hbm_capacity.value(), 96e9);
  EXPECT_EQ(c.nvswitch.bandwidth.value(), 450e9);
  const double measured = (141.86 + 142.25) / 2 / kHarnessH100Sxm;
  const double derived = gemm_rate_ratio(c);
  EXPECT_LT(derived, measured);
  EXPECT_GT(derived / measured, 0.80);
  // Memory-bound kernels run at 4.0/3.35 of the H100's.
  const KernelTable base = KernelTable::load(kH100Profile, h100());
  const KernelTable var = KernelTable::load(c.gpu.profile, c.gpu);
  const KernelShape big_copy = copy(int64_t{1} << 31);
  EXPECT_NEAR(base.lookup(big_copy).time.value() / var.lookup(big_copy).time.value(), 4000.0 / 3350.0, 1e-9);
}

// H800 SXM5: the H100's compute and memory, NVLink 400 GB/s bidirectional.
TEST(BundledVariant, H800IsTheH100WithSlowerNvlink) {
  const ClusterSpec c = bundled("dgx-h800.yaml");
  const ClusterSpec h = bundled("dgx-h100.yaml");
  EXPECT_EQ(c.gpu.variant.name, "H800-SXM5-80GB");
  EXPECT_EQ(c.gpu.peak_bf16.value(), h.gpu.peak_bf16.value());
  EXPECT_EQ(c.gpu.hbm_bandwidth.value(), h.gpu.hbm_bandwidth.value());
  EXPECT_EQ(c.nvswitch.bandwidth.value(), 200e9);
  EXPECT_EQ(gemm_rate_ratio(c), 1.0);
}

} // namespace
} // namespace stepsim::kernels
