#pragma once
// The keys of the cluster and workload files, each declared once with its type, default, range
// and meaning. The readers take every mapping's keys from here (so the unknown-key check and its
// "did you mean" do too), and docs/schema.md's key tables are generated from it: the test
// SchemaDoc fails when the document and this declaration disagree, and rewrites the tables with
// STEPSIM_WRITE_SCHEMA_DOC=1 (docs/schema.md, "Keys").

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stepsim::config::schema {

/// One key of a file. `path` is dotted from the file's root ("gpu.hbm_capacity"); the keys of
/// the mappings inside a list's items are written "fabric.links[].bandwidth".
struct Key {
  std::string_view path;
  std::string_view type;       ///< value type (docs/schema.md, "Value types")
  std::string_view presence;   ///< "required", or "optional" and the default in bold
  std::string_view constraint; ///< range or allowed values
  std::string_view meaning;    ///< what it sets (and the spec field)
};

enum class File { CLUSTER, WORKLOAD };

/// Every key of `file`, parents before their children, siblings in reading order.
std::span<const Key> keys(File file);

/// Names of the keys directly under `mapping` ("" = the file's root), in declaration order.
/// Throws std::logic_error when `mapping` declares none (a reader naming an undeclared mapping).
const std::vector<std::string_view>& children(File file, std::string_view mapping);

/// docs/schema.md's table of `file`'s keys: a header row and one row per key.
std::string markdown_table(File file);

/// `document` (docs/schema.md's text) with the table between the markers of `file` replaced by
/// markdown_table(file). Throws std::runtime_error when the markers are missing.
std::string with_table(const std::string& document, File file);

} // namespace stepsim::config::schema
