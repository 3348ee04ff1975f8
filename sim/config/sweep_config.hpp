#pragma once
// A sweep file (sweeps/*.yaml, docs/sweeps.md): a base cluster and workload plus the overrides
// that vary between configurations. Parsed here because config/ is the only user of yaml-cpp;
// the result is plain structs. Expansion into configurations lives in sweep/.

#include "config/config.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace stepsim::config {

/// One grid axis: a key and the values it takes, in file order.
struct SweepAxis {
  std::string key;                 ///< dotted override path, e.g. "parallel.tp"
  std::vector<std::string> values; ///< YAML text of each value, as `--set` takes it
  std::vector<std::string> where;  ///< "FILE:LINE:COL" of each value (for messages)
};

/// One explicit configuration of a `cases:` list (`points:`, its older name).
struct SweepPointSpec {
  std::vector<Override> overrides; ///< in file order
  std::string where;               ///< "FILE:LINE:COL" of the point
};

struct SweepFile {
  std::string source;             ///< the sweep file, as given
  std::string name;               ///< `name`, or the file's stem
  std::string description;        ///< `description`, or ""
  std::string cluster_text;       ///< `cluster` as written (part of every configuration id)
  std::string workload_text;      ///< `workload` as written
  std::filesystem::path cluster;  ///< resolved against the sweep file's folder
  std::filesystem::path workload; ///< resolved against the sweep file's folder
  std::vector<Override> fixed;    ///< `set:` applied to every configuration, in file order
  std::vector<SweepAxis> grid;    ///< `grid:` axes, in file order (the first varies slowest)
  /// `zip:` lists of one length, paired by position: one axis of tuples, crossed with the grid
  /// (varying slower than every grid axis) and the points.
  std::vector<SweepAxis> zip;
  std::vector<SweepPointSpec> points; ///< `cases:` (or `points:`), in file order
  std::string where_points;           ///< "FILE:LINE:COL" of the `cases` (`points`) list, or ""
};

/// Reads and checks a sweep file: known top-level keys (name, description, cluster, workload,
/// set, grid, zip, points), zip lists of one length, non-empty lists, keys that look like dotted paths, no
/// key both fixed and swept. Whether a key or value is valid for the cluster or workload is not judged here:
/// every configuration is validated when it is loaded. Throws ConfigError naming FILE:LINE:COL.
SweepFile load_sweep(const std::filesystem::path& file);

} // namespace stepsim::config
