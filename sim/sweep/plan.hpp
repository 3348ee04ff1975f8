#pragma once
// A sweep expanded into configurations: each is the base cluster and workload plus a list of
// overrides, with a stable id (a hash of what defines it) and an index (its place in the
// expansion, used for sharding and for ordering the result files).

#include "config/config.hpp"
#include "config/sweep_config.hpp"

#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace stepsim::sweep {

/// A swept key and the value it takes in one configuration (YAML text).
using KeyValue = std::pair<std::string, std::string>;

struct SweepConfig {
  std::size_t index = 0;                   ///< position in the expansion, 0-based
  std::string id;                          ///< 16 hex digits, see config_id()
  std::vector<KeyValue> swept;             ///< the swept keys this configuration sets, in column order
  std::vector<config::Override> overrides; ///< everything applied: `set`, then the point, then the grid
};

struct SweepPlan {
  std::string name;
  std::string source;             ///< the sweep file
  std::filesystem::path cluster;  ///< resolved base cluster file
  std::filesystem::path workload; ///< resolved base workload file
  std::vector<std::string>
      columns; ///< swept keys: the points' keys (first appearance), zip's, then the grid's
  std::vector<SweepConfig> configs; ///< in index order
};

/// Upper bound on the number of configurations a sweep may expand to.
inline constexpr std::size_t MAX_CONFIGS = 1000000;

/// Expands a sweep: every point (or one empty point when there are none) combined with every
/// zip position (the zipped lists' i-th values together) and every grid combination; points vary
/// slowest, then zip, then the grid axes, the first grid axis slowest. Throws ConfigError when two
/// configurations are identical or the expansion exceeds MAX_CONFIGS.
SweepPlan expand(const config::SweepFile& file);

/// The id of a configuration: FNV-1a 64-bit over "cluster=C\nworkload=W\n" and one
/// "path=value\n" per override sorted by path, as 16 lowercase hex digits. `cluster` and
/// `workload` are the base files as the sweep file writes them. Independent of axis order,
/// host and run.
std::string config_id(const std::string& cluster, const std::string& workload,
                      const std::vector<config::Override>& overrides);

} // namespace stepsim::sweep
