#pragma once
// Private to config/: readers of one value with the schema's ranges and sanity limits
// (docs/schema.md, "Size limits"), and the steps that read a mapping key by key, shared by the
// cluster and the workload readers.

#include "config/schema.hpp"
#include "config/spec.hpp"
#include "config/yaml_tree.hpp"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stepsim::config::detail {

using schema::File;

/// The declaration of the key `f` holds (in its document's file kind), which must be of one of
/// `kinds`. Throws std::logic_error otherwise (a reader out of step with schema.cpp).
const schema::Key& declared(const Field& f, std::initializer_list<schema::Kind> kinds);

/// The one range check of every number-like key: fails unless `value` (written `text`) lies in
/// `key`'s declared range, naming what was expected ("expected a positive integer, found 0") or
/// the sanity or size limit it passes ("expected at most 1PiB (the sanity limit), found '2PiB'").
void check_range(const Field& f, const schema::Key& key, double value, const std::string& text);

// Typed readers: each reads the value of `f` as its declaration's kind and checks it against the
// declared range or allowed names.
int64_t read_integer(const Field& f);
/// As read_integer, for a key whose declared range lies within int.
int read_int(const Field& f);
double read_number(const Field& f);
bool read_bool(const Field& f);
/// A non-empty string (STRING or PATH keys).
std::string read_string(const Field& f);
Bytes read_bytes(const Field& f);
BytesPerSec read_bandwidth(const Field& f);
Seconds read_duration(const Field& f);
FlopsPerSec read_flops(const Field& f);
/// Watts (POWER keys, e.g. 500W) and hertz (FREQUENCY keys, e.g. 1830MHz).
double read_power(const Field& f);
double read_frequency(const Field& f);
/// One of the declared names, mapped to its enum value by `options`, which must list exactly the
/// declared names in their order.
template <class E>
E read_choice(const Field& f, std::initializer_list<std::pair<std::string_view, E>> options);

/// The largest value `path` of `file` accepts: its declared maximum or size limit.
int64_t upper_bound(File file, std::string_view path);

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
/// A switch holding NICs that the first NIC's switch does not reach over the fabric's links,
/// the links between the pairs `down` lists with bandwidth 0 left out; -1 when all are reached.
int unreached_switch(const FabricSpec& f, const std::vector<DegradedSpec::Link>& down);
/// A `degraded` mapping (of a cluster file or a --degrade file), checked against `c` and added to
/// `c.degraded` (degraded.cpp).
void read_degraded(const MapReader& degraded, ClusterSpec& c);
/// The cluster file (cluster_reader.cpp).
ClusterSpec read_cluster(const Document& doc);
/// The workload file (workload_reader.cpp).
WorkloadSpec read_workload(const Document& doc);

/// Throws std::logic_error unless `names` are `key`'s declared names, in order.
void check_choices(const schema::Key& key, const std::vector<std::string_view>& names);

template <class E>
E read_choice(const Field& f, std::initializer_list<std::pair<std::string_view, E>> options) {
  std::vector<std::string_view> names;
  for (const auto& option : options)
    names.push_back(option.first);
  check_choices(declared(f, {schema::Kind::ENUM}), names);
  return f.choice(options);
}

} // namespace stepsim::config::detail
