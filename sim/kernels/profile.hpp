#pragma once
// Text formats of the kernels module (see docs/kernels.md):
//  - shape list: what the microbenchmark suite measures, one kernel shape per line;
//  - kernel profile: a header of `# key: value` lines describing the GPU and how the numbers
//    were obtained, then one row per measured (or modelled) kernel shape.
// Both are CSV with '#' comment lines; the shape column is "key=value;key=value".

#include "core/units.hpp"
#include "kernels/kernel_shape.hpp"

#include <filesystem>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

namespace stepsim::kernels {

/// How a profile's numbers were obtained.
enum class Provenance { MEASURED, MODELLED };

const char* to_string(Provenance p); ///< "measured", "modelled"

inline constexpr const char* kProfileFormat = "stepsim-kernel-profile/1";
inline constexpr const char* kShapeListFormat = "stepsim-kernel-shapes/1";
inline constexpr const char* kTimesFormat = "stepsim-kernel-times/1";

struct ProfileHeader {
  std::string gpu;      ///< device name as the driver reports it
  std::string gpu_kind; ///< cluster `gpu.kind`, e.g. "A100-SXM4-80GB" (file stem)
  Provenance obtained = Provenance::MEASURED;
  int sm_count = 0;                 ///< streaming multiprocessors
  std::string compute_capability;   ///< "major.minor", e.g. "8.0"; fp8 needs >= 8.9
  double sm_clock_mhz = 0;          ///< peak SM clock, MHz (0 = unknown)
  double mem_clock_mhz = 0;         ///< peak memory clock, MHz (0 = unknown)
  int64_t l2_bytes = 0;             ///< L2 cache size, bytes (0 = unknown)
  std::string driver;               ///< driver version ("n/a" for modelled)
  std::string cuda;                 ///< CUDA runtime version ("n/a" for modelled)
  std::string date;                 ///< ISO date the numbers were produced
  std::string tool;                 ///< program (and version) that wrote the file
  Seconds launch_overhead;          ///< smallest time of any kernel (empty-kernel time), > 0
  double overlap_slowdown = 1.0;    ///< factor >= 1 on compute overlapping NCCL kernels
  std::vector<std::string> sources; ///< where calibration numbers come from
  std::vector<std::string> notes;   ///< free text
};

struct ProfileRow {
  KernelShape shape;
  Seconds time;     ///< median time of one invocation, > 0
  std::string impl; ///< implementation timed, e.g. "cublaslt", "naive" (see docs)
};

struct KernelProfile {
  ProfileHeader header;
  std::vector<ProfileRow> rows;
  std::string origin; ///< file it was read from (for messages), "" when built in memory
};

/// Parses a profile. `origin` names the input in messages. Throws ConfigError whose message
/// starts with "origin:line: " on any malformed line, unknown or missing header key, bad shape
/// or duplicate row.
KernelProfile parse_profile(std::istream& in, const std::string& origin);
/// Reads a profile file. Throws ConfigError (also when the file cannot be opened).
KernelProfile read_profile(const std::filesystem::path& file);
/// Writes `profile` in the format parse_profile reads (rows in the given order).
void write_profile(std::ostream& out, const KernelProfile& profile);

/// Parses a shape list ("kernel,dtype,shape" rows). Throws ConfigError "origin:line: ...".
std::vector<KernelShape> parse_shape_list(std::istream& in, const std::string& origin);
/// Reads a shape-list file. Throws ConfigError.
std::vector<KernelShape> read_shape_list(const std::filesystem::path& file);
/// Writes `shapes` as a shape list; each of `comments` becomes a leading "# " line.
void write_shape_list(std::ostream& out, const std::vector<KernelShape>& shapes,
                      const std::vector<std::string>& comments = {});

/// Parses a list of kernel times measured outside the suite ("kernel,dtype,shape,time_s,impl"
/// rows under `# format: stepsim-kernel-times/1`; e.g. tools/time_kernels_torch.py). The suite
/// merges them into the profile it writes. Throws ConfigError "origin:line: ..." on a malformed
/// line, a time that is not a positive number, an empty impl or a duplicate shape.
std::vector<ProfileRow> parse_time_list(std::istream& in, const std::string& origin);
/// Reads a time-list file. Throws ConfigError.
std::vector<ProfileRow> read_time_list(const std::filesystem::path& file);

/// Parses one "key=value;..." shape column for `kind`/`dtype`. Returns "" and fills `out`, or
/// returns the reason it is malformed.
std::string parse_shape_fields(KernelKind kind, Dtype dtype, const std::string& text, KernelShape& out);

} // namespace stepsim::kernels
