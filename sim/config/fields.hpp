#pragma once
// Private to config/: readers of one value with the schema's ranges and sanity limits
// (docs/schema.md, "Size limits"), and the steps that read a mapping key by key, shared by the
// cluster and the workload readers.

#include "config/schema.hpp"
#include "config/spec.hpp"
#include "config/yaml_tree.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stepsim::config::detail {

using schema::File;

constexpr int64_t INT_MAX_VALUE = std::numeric_limits<int>::max();
constexpr int64_t INT64_MAX_VALUE = std::numeric_limits<int64_t>::max();

int64_t positive_int64(const Field& f);
/// A positive integer up to `max` (the size limit).
int64_t limited_int64(const Field& f, int64_t max);
int limited_int(const Field& f, int64_t max);
/// An efficiency: a fraction of a peak, at least 0.001 (the sanity limit: below it a time would
/// overflow to infinity or round to nonsense; docs/schema.md, "Size limits").
double fraction(const Field& f);
Bytes nonnegative_bytes(const Field& f);
/// Fails unless `v` <= `max`, naming the limit.
void at_most(const Field& f, double v, double max, const std::string& text, const char* limit);
Bytes positive_bytes(const Field& f);
BytesPerSec positive_bandwidth(const Field& f);
/// A time >= 0 up to 10 s.
Seconds latency(const Field& f);
FlopsPerSec positive_flops(const Field& f);

/// The keys of `mapping` in `file`, as declared in schema.cpp.
std::vector<std::string_view> keys_of(File file, std::string_view mapping);

// Each key is read in its own step: a collecting document keeps the step's error and reading
// goes on with the next key (docs/schema.md, "Errors").

/// Reads `key` of `m` with `read` when it is given.
template <class Read> void optional_key(const MapReader& m, std::string_view key, const Read& read) {
  m.document().attempt([&] {
    if (auto f = m.find(key))
      read(*f);
  });
}

/// Reads `key` of `m` with `read`; its absence is an error.
template <class Read> void required_key(const MapReader& m, std::string_view key, const Read& read) {
  m.document().attempt([&] { read(m.require(key)); });
}

/// The mapping under `key` of `m` (keys as declared for `file`), or nullopt when it is absent
/// (an error when `required`) or not a mapping.
std::optional<MapReader> section(const MapReader& m, std::string_view key, File file, bool required = true);

/// A link's bandwidth, latency and efficiency (nvswitch, pcie, nics).
void read_link(const MapReader& m, LinkSpec& link);

/// `gpu.variant` and the base part's figures it is stated against (gpu_variant.cpp): resolves
/// `g`'s peaks, HBM bandwidth and capacity to the variant's. Called after the other gpu keys.
void read_gpu_variant(const Document& doc, const MapReader& gpu, GpuSpec& g);
/// The cluster file (cluster_reader.cpp).
ClusterSpec read_cluster(const Document& doc);
/// The workload file (workload_reader.cpp).
WorkloadSpec read_workload(const Document& doc);

} // namespace stepsim::config::detail
