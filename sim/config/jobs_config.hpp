#pragma once
// A jobs file (`stepsim jobs`, docs/jobs.md): the shared cluster, an optional background share
// and the jobs, each with its workload, `set` overrides and nodes. Read, placed and checked here
// (config/ is the only user of yaml-cpp); the result is plain structs (config/jobs_spec.hpp).

#include "config/config.hpp"
#include "config/jobs_spec.hpp"

#include <filesystem>

namespace stepsim::config {

/// Reads the jobs file, loads its cluster and every job's workload (paths relative to the
/// file), places each job on its nodes (explicit ranges and lists first, then `packed` and
/// `spread` in file order on the nodes left) and checks each layout on its nodes. Refused with
/// ConfigError naming FILE:LINE:COL: unknown keys, a duplicate or unusable name, a share outside
/// [0, 1), a node out of range or given to two jobs, too few free nodes, a layout that does not
/// match its nodes, a `cluster.` key in a job's `set`. `cluster_overrides` (each path starting
/// with "cluster.") apply to the shared cluster.
JobsSpec load_jobs(const std::filesystem::path& file, const std::vector<Override>& cluster_overrides = {});

} // namespace stepsim::config
