#pragma once
// Machine-readable output of the subcommands: `--json` prints one JSON document on stdout instead
// of the table; `--out DIR` writes it to DIR/<file> (atomically). Every document starts with a
// "schema" key naming its format and version ("stepsim.memory/1", ...; docs/output.md).

#include "config/spec.hpp"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace stepsim::cli {

/// Where a command's JSON document goes.
struct JsonTargets {
  bool to_stdout = false; ///< --json
  std::string out_dir;    ///< --out DIR ("" = none)
  std::string file_name;  ///< the file in DIR, e.g. "memory.json"
};

/// Checks before any work that DIR/<file> can be written (ConfigError otherwise); nothing when
/// there is no --out.
void check_json_target(const JsonTargets& t);

/// Writes `doc` (2-space indent, keys in insertion order) to stdout and/or DIR/<file>.
void emit_json(std::ostream& out, const JsonTargets& t, const nlohmann::ordered_json& doc);

/// The first keys of a command's document: `schema`, `cluster`, `workload` (when not ""), `num_gpus`.
nlohmann::ordered_json document_head(const char* schema, const ClusterSpec& cluster,
                                     const std::string& workload);

/// A layout as JSON: the parallel degrees, micro-batch, ZeRO stage, recomputation, sequence
/// parallelism, schedule and offloading of `w` (memory and plan documents).
nlohmann::ordered_json layout_json(const WorkloadSpec& w);

} // namespace stepsim::cli
