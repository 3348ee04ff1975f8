#pragma once
// The keys of the cluster and workload files, each declared once with its value kind, range,
// default and meaning. The readers take every mapping's keys from here (so the unknown-key check
// and its "did you mean" do too) and check each value against its declared range or allowed
// values (fields.hpp's typed readers), and docs/schema.md's key tables are generated from it: the
// test SchemaDoc fails when the document and this declaration disagree, and rewrites the tables
// with STEPSIM_WRITE_SCHEMA_DOC=1 (docs/schema.md, "Keys").

#include <array>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stepsim::config::schema {

/// What a key holds (docs/schema.md, "Value types").
enum class Kind {
  MAPPING,
  LIST,
  STRING,
  PATH, ///< a file name (or a word such as `none`), resolved by the reader
  INTEGER,
  NUMBER,
  BOOL,
  ENUM,
  BYTES,
  BANDWIDTH,
  DURATION,
  FLOPS,
  POWER,     ///< watts, e.g. 700W
  FREQUENCY, ///< hertz, e.g. 1830MHz
};

/// One end of a range. `text` is how messages and the document write it ("1PiB", "1bps");
/// empty for a plain number.
struct Bound {
  double value = 0;
  bool inclusive = true;
  std::string_view text{};
};

/// The values a key accepts. `min`/`max` are the key's meaning ("a positive byte size");
/// `limit_min`/`limit_max` are sanity or size limits beyond any real hardware or model
/// (docs/schema.md, "Size limits"), reported as such. An absent bound does not limit.
struct Range {
  std::optional<Bound> min{}, max{};
  std::optional<Bound> limit_min{}, limit_max{};
  bool or_zero = false;       ///< 0 is accepted too (an "off" value below `min`)
  std::string_view note = {}; ///< said after the range in messages, e.g. "the sanity limit"
};

/// The allowed names of an enum key, in the order messages list them.
struct Choices {
  std::array<std::string_view, 8> names{};
  std::size_t count = 0;
  constexpr Choices() = default;
  constexpr Choices(std::initializer_list<std::string_view> list) {
    for (std::string_view n : list)
      names[count++] = n;
  }
  [[nodiscard]] constexpr std::span<const std::string_view> all() const { return {names.data(), count}; }
};

/// A key's value: its kind, range (number-like kinds) or allowed names (ENUM), and for lists
/// and paths how the type column names it ("list of names").
struct Value {
  Kind kind = Kind::STRING;
  Range range{};
  Choices choices{};
  std::string_view type_text{}; ///< overrides the kind's name in the type column
};

enum class Presence {
  REQUIRED,    ///< "required", followed by `when` ("required in `nvls`")
  OPTIONAL,    ///< "optional", the default in bold (or `when`)
  CONDITIONAL, ///< `when` says it all ("exactly one of `switch`, `rails`")
};

/// One key of a file. `path` is dotted from the file's root ("gpu.hbm_capacity"); the keys of
/// the mappings inside a list's items are written "fabric.links[].bandwidth".
struct Key {
  std::string_view path;
  Value value;
  Presence presence = Presence::OPTIONAL;
  /// The default of an optional key as a YAML value of its kind ("1GiB", "false", "prefetch");
  /// it equals the initialiser of the spec field (test SchemaDoc.DefaultsAreTheSpecInitialisers).
  /// Empty when there is none or it is derived (then `when` says how).
  std::string_view dflt = {};
  std::string_view when = {};    ///< presence beyond the bare word: condition, derived default
  std::string_view rule = {};    ///< constraint beyond the value's range (other keys, the layout)
  std::string_view meaning = {}; ///< what it sets (and the spec field)
};

enum class File { CLUSTER, WORKLOAD };

/// "cluster" or "workload".
std::string_view file_name(File file);

/// Every key of `file`, parents before their children, siblings in reading order.
std::span<const Key> keys(File file);

/// The key at `path`; list indices are written "[]" or "[N]" ("fabric.links[2].latency").
/// Throws std::logic_error when `file` declares none (a reader out of step with the declaration).
const Key& key(File file, std::string_view path);

/// Names of the keys directly under `mapping` ("" = the file's root), in declaration order.
/// Throws std::logic_error when `mapping` declares none (a reader naming an undeclared mapping).
const std::vector<std::string_view>& children(File file, std::string_view mapping);

/// How messages name the values `value` accepts: "a positive integer", "a number in [0.001, 1]
/// (the sanity limit)", "a positive byte size": its kind and its `min`/`max` (not the limits).
std::string expected(const Value& value);

/// The type, presence and constraint columns of docs/schema.md for `key`.
std::string type_column(const Key& key);
std::string presence_column(const Key& key);
std::string constraint_column(const Key& key);

/// docs/schema.md's table of `file`'s keys: a header row and one row per key.
std::string markdown_table(File file);

/// `document` (docs/schema.md's text) with the table between the markers of `file` replaced by
/// markdown_table(file). Throws std::runtime_error when the markers are missing.
std::string with_table(const std::string& document, File file);

} // namespace stepsim::config::schema
