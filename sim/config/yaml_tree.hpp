#pragma once
// Private to config/: a YAML document that remembers where every value came from (a position in
// the file or a --set override), and checked readers over its mappings. Not part of the public
// API; nothing outside sim/config/ includes this header.

#include "config/config.hpp"
#include "config/schema.hpp"

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace stepsim::config::detail {

/// Parses `text` as one YAML document. Throws ConfigError for a syntax error, text the parser
/// cannot consume, a second document or nesting deeper than 64 levels: "WHERE:LINE:COL: ..."
/// when `in_file` (WHERE is the file), else "WHERE: the value is not valid YAML: ..." (WHERE
/// names a --set override).
YAML::Node load_yaml(const std::string& text, const std::string& where, bool in_file);

/// "a.b" joined with "c" -> "a.b.c"; an empty parent gives just "c".
std::string join_key(const std::string& parent, std::string_view key);

/// How a YAML node is described in "found ..." messages: 'text', a mapping, a list, nothing.
std::string describe(const YAML::Node& node);

/// A parsed YAML file plus the overrides applied on top of it.
///
/// With `collect`, the document gathers the errors of its readers instead of stopping at the
/// first (LLVM's joinErrors): `attempt` keeps what a step throws and reading goes on, and
/// `throw_errors` throws one ConfigError listing them all, one per line, in the order found.
/// Without it every error throws where it is found.
class Document {
public:
  /// Reads and parses `file`. Throws ConfigError when it cannot be read or is not valid YAML.
  /// `schema`: the file kind whose declaration (schema.hpp) gives the keys' value ranges, for
  /// the typed readers of fields.hpp; none for the other YAML files.
  explicit Document(const std::filesystem::path& file, bool collect = false,
                    std::optional<schema::File> schema = std::nullopt);

  /// Sets dotted `path` (relative to the document root) to the YAML text `value`, creating
  /// missing mappings on the way. `shown` is how errors name the override
  /// ("--set cluster.nodes=2"). Throws ConfigError (bad YAML value, path through a non-mapping).
  void apply(const std::string& path, const std::string& value, const std::string& shown);

  [[nodiscard]] const std::string& file() const { return file_; }
  [[nodiscard]] const YAML::Node& root() const { return root_; }
  [[nodiscard]] std::optional<schema::File> schema() const { return schema_; }

  /// Where the node at dotted `path` came from: "--set PATH=VALUE" when an override supplied it,
  /// else "FILE:LINE:COL" (1-based) from the node's mark, else "FILE".
  [[nodiscard]] std::string location(const std::string& path, const YAML::Node& node) const;

  /// Throws ConfigError "LOCATION: MESSAGE".
  [[noreturn]] void fail(const std::string& path, const YAML::Node& node, const std::string& message) const;

  /// Keeps the error "LOCATION: MESSAGE" (throws it without `collect`).
  void report(const std::string& path, const YAML::Node& node, const std::string& message) const;
  /// Runs `step`; with `collect`, a ConfigError it throws is kept and false returned.
  bool attempt(const std::function<void()>& step) const;
  /// True while no error was kept: checks that combine several keys run only then, so that a
  /// bad key does not bring follow-on errors about values it left unset.
  [[nodiscard]] bool clean() const { return errors_.empty(); }
  /// Throws one ConfigError listing every kept error; nothing when none.
  void throw_errors() const;

private:
  std::string file_;
  YAML::Node root_;
  bool collect_ = false;
  std::optional<schema::File> schema_;
  mutable std::vector<std::string> errors_;                  ///< kept by const readers, hence mutable
  std::vector<std::pair<std::string, std::string>> origins_; ///< (path, shown) of overridden subtrees
};

class MapReader;

/// One key's value inside a mapping, with readers that check its type and range. Every reader
/// throws ConfigError "LOCATION: key 'PATH': expected ..., found ...".
class Field {
public:
  Field(const Document& doc, std::string path, const YAML::Node& key, const YAML::Node& value);

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const YAML::Node& value() const { return value_; }
  [[nodiscard]] const Document& document() const { return *doc_; }
  /// "LOCATION: key 'PATH'", the prefix of every message about this field.
  [[nodiscard]] std::string where() const;
  /// Throws ConfigError "LOCATION: key 'PATH': WHAT".
  [[noreturn]] void fail(const std::string& what) const;

  /// The scalar text; fails with "expected EXPECTED, found a mapping" etc. otherwise.
  [[nodiscard]] std::string scalar(std::string_view expected) const;
  /// A non-empty string.
  [[nodiscard]] std::string string() const;
  /// A decimal integer (no fraction, no exponent) in [lo, hi]; `expected` names the range.
  [[nodiscard]] int64_t integer(int64_t lo, int64_t hi, std::string_view expected) const;
  /// A finite decimal number accepted by `ok`; `expected` names the range.
  [[nodiscard]] double number(std::string_view expected, const std::function<bool(double)>& ok) const;
  /// true or false (also True/TRUE/False/FALSE).
  [[nodiscard]] bool boolean() const;
  /// One of the named values; fails listing them all (and a "did you mean").
  template <class E>
  [[nodiscard]] E choice(std::initializer_list<std::pair<std::string_view, E>> options) const {
    return choice_in(std::span<const std::pair<std::string_view, E>>(options.begin(), options.size()));
  }
  /// As `choice`, over a table of names (config/workload_names.hpp).
  template <class E> [[nodiscard]] E choice_in(std::span<const std::pair<std::string_view, E>> options) const;
  /// A mapping whose keys are all in `keys`. With `ignored`, an unknown key is not an error: a
  /// line "LOCATION: unknown key 'PATH' ignored[; did you mean ...]" is appended there instead.
  [[nodiscard]] MapReader map(std::vector<std::string_view> keys,
                              std::vector<std::string>* ignored = nullptr) const;

private:
  /// Node whose mark locates the value: the value, or the key when the value is empty.
  [[nodiscard]] const YAML::Node& anchor() const;
  [[noreturn]] void fail_choice(const std::string& found, const std::vector<std::string>& names) const;

  const Document* doc_;
  std::string path_;
  YAML::Node key_;
  YAML::Node value_;
};

/// A mapping checked on construction: every key is a scalar, none repeats and each is one of
/// the allowed keys (else "unknown key ... did you mean ..."). Those errors are reported
/// through the document (each one, when it collects), the offending entries left out.
class MapReader {
public:
  /// `anchor` locates the mapping itself in messages (its key, or the root node).
  /// `ignored`: as for Field::map.
  MapReader(const Document& doc, std::string path, const YAML::Node& anchor, const YAML::Node& map,
            std::vector<std::string_view> keys, std::vector<std::string>* ignored = nullptr);

  /// The root mapping of `doc`.
  static MapReader root(const Document& doc, std::vector<std::string_view> keys,
                        std::vector<std::string>* ignored = nullptr);

  [[nodiscard]] bool has(std::string_view key) const;
  /// The field, or nullopt when the key is absent. Throws std::logic_error for a key the
  /// mapping does not allow (a reader out of step with its declaration).
  [[nodiscard]] std::optional<Field> find(std::string_view key) const;
  /// The field; throws ConfigError at the mapping's location when the key is absent.
  [[nodiscard]] Field require(std::string_view key) const;

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const Document& document() const { return *doc_; }
  /// Throws ConfigError at the mapping's location: "LOCATION: key 'PATH': WHAT".
  [[noreturn]] void fail(const std::string& what) const;

private:
  struct Entry {
    std::string name;
    YAML::Node key;
    YAML::Node value;
  };

  const Document* doc_;
  std::string path_;
  YAML::Node anchor_;
  std::vector<Entry> entries_;
  std::vector<std::string_view> keys_;
};

/// The YAML text `--set` takes for `node`: a scalar as written, anything else in flow style.
std::string value_text(const YAML::Node& node);
/// Whether `key` looks like a dotted path (letters, digits, '_', '-', '.'; no empty part).
bool is_dotted_key(const std::string& key);
/// The key of a mapping of overrides, checked to be a dotted path. `parent` names the mapping.
std::string read_key(const Document& doc, const std::string& parent, const YAML::Node& key);
/// A mapping of dotted keys to values (a sweep's `set:` or point, a job's `set:`), as overrides
/// in file order; an empty mapping, a repeated key or a missing value is refused.
std::vector<Override> read_overrides(const Document& doc, const std::string& path, const YAML::Node& anchor,
                                     const YAML::Node& map);

template <class E> E Field::choice_in(std::span<const std::pair<std::string_view, E>> options) const {
  std::vector<std::string> names;
  for (const auto& [name, value] : options) {
    names.emplace_back(name);
  }
  std::string expected = "one of";
  for (const auto& name : names) {
    expected += (name == names.front() ? " " : ", ") + name;
  }
  const std::string text = scalar(expected);
  for (const auto& [name, value] : options) {
    if (text == name) {
      return value;
    }
  }
  fail_choice(text, names);
}

} // namespace stepsim::config::detail
