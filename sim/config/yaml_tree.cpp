#include "config/yaml_tree.hpp"

#include "core/error.hpp"
#include "core/input_file.hpp"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace stepsim::config::detail {

namespace {

std::string format_mark(const std::string& file, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0 || mark.column < 0) {
    return file;
  }
  return file + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

/// True when `path` is `prefix` or lies below it.
bool covers(const std::string& prefix, const std::string& path) {
  return path == prefix ||
         (path.size() > prefix.size() && path.starts_with(prefix) && path[prefix.size()] == '.');
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string::size_type start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) {
      break;
    }
    start = dot + 1;
  }
  return parts;
}

std::string key_list(const std::vector<std::string_view>& keys) {
  std::string out;
  for (const auto& key : keys) {
    out += (out.empty() ? "" : ", ") + std::string(key);
  }
  return out;
}

/// Deepest nesting of mappings and lists accepted (the schema needs a handful).
constexpr int kMaxNesting = 64;

/// Walks a YAML stream's events without building it, to refuse what yaml-cpp 0.7 would mishandle
/// before YAML::Load builds the first document: text the parser cannot consume (its LoadAll then
/// loops forever, producing empty documents), a second document, and deep nesting.
class StreamCheck : public YAML::EventHandler {
public:
  using Fail = std::function<void(const YAML::Mark&, const std::string&)>;
  explicit StreamCheck(Fail fail) : fail_(std::move(fail)) {}

  /// Calls the failure function (which throws) for the first problem of `text`.
  void run(const std::string& text) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    std::optional<YAML::Mark> previous;
    while (true) {
      documents_ += 1;
      content_ = false;
      if (!parser.HandleNextDocument(*this))
        return;
      // A document that starts where the previous one started consumed nothing: the text there
      // is something the parser cannot read.
      if (previous && previous->pos == start_.pos)
        fail_(start_, "YAML syntax error: unexpected text here");
      if (documents_ > 1 && content_)
        fail_(start_, "a second YAML document (after '---'); a stepsim file holds one");
      previous = start_;
    }
  }

  void OnDocumentStart(const YAML::Mark& mark) override { start_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { content_ = true; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {
    content_ = true;
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnMapEnd() override { --depth_; }

private:
  void enter(const YAML::Mark& mark) {
    content_ = true;
    if (++depth_ > kMaxNesting)
      fail_(mark, "YAML nested deeper than " + std::to_string(kMaxNesting) + " levels of mappings and lists");
  }

  Fail fail_;
  YAML::Mark start_;
  int documents_ = 0;
  int depth_ = 0;
  bool content_ = false;
};

} // namespace

YAML::Node load_yaml(const std::string& text, const std::string& where, bool in_file) {
  const auto fail = [&](const YAML::Mark& mark, const std::string& message) {
    if (in_file)
      throw ConfigError(format_mark(where, mark) + ": " + message);
    throw ConfigError(where + ": the value is not valid YAML: " + message);
  };
  try {
    StreamCheck(fail).run(text);
    return YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    fail(e.mark, "YAML nested too deeply");
  } catch (const YAML::Exception& e) {
    fail(e.mark, in_file ? "YAML syntax error: " + e.msg : e.msg);
  }
  return {}; // not reached: `fail` throws
}

std::string join_key(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) {
    return "nothing";
  }
  if (node.IsMap()) {
    return "a mapping";
  }
  if (node.IsSequence()) {
    return "a list of " + std::to_string(node.size()) + (node.size() == 1 ? " item" : " items");
  }
  return "'" + printable(node.Scalar()) + "'";
}

// ---- Document ------------------------------------------------------------------------------

Document::Document(const std::filesystem::path& file, bool collect, std::optional<schema::File> schema)
    : file_(file.string()), collect_(collect), schema_(schema) {
  root_ = load_yaml(read_input_file(file, "file", kMaxConfigBytes), file_, true);
}

void Document::apply(const std::string& path, const std::string& value, const std::string& shown) {
  const YAML::Node parsed = load_yaml(value, shown, false);
  const auto parts = split_path(path);
  for (const auto& part : parts) {
    if (part.empty()) {
      throw ConfigError(shown + ": empty key in path '" + path + "'");
    }
  }

  // Walk down, creating mappings that the file omitted. `node` is a handle that shares the
  // tree's storage, so assignments through it edit the document.
  if (!root_.IsMap() && !root_.IsNull()) {
    throw ConfigError(shown + ": cannot apply the override: the top level of " + file_ + " is not a mapping");
  }
  YAML::Node node = root_;
  std::string walked;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string here = join_key(walked, parts[i]);
    YAML::Node child = node[parts[i]];
    if (!child.IsDefined() || child.IsNull()) {
      child = YAML::Node(YAML::NodeType::Map);
      std::erase_if(origins_, [&](const auto& o) { return covers(here, o.first); });
      origins_.emplace_back(here, shown);
    } else if (!child.IsMap()) {
      throw ConfigError(shown + ": key '" + here + "' is " + describe(child) + " at " +
                        location(here, child) + ", not a mapping, so it has no key '" + parts[i + 1] + "'");
    }
    node.reset(child);
    walked = here;
  }
  node[parts.back()] = parsed;
  std::erase_if(origins_, [&](const auto& o) { return covers(path, o.first); });
  origins_.emplace_back(path, shown);
}

std::string Document::location(const std::string& path, const YAML::Node& node) const {
  const std::pair<std::string, std::string>* best = nullptr;
  for (const auto& origin : origins_) {
    if (covers(origin.first, path) && (best == nullptr || origin.first.size() >= best->first.size())) {
      best = &origin;
    }
  }
  if (best != nullptr) {
    return best->second;
  }
  if (!node.IsDefined()) {
    return file_;
  }
  return format_mark(file_, node.Mark());
}

void Document::fail(const std::string& path, const YAML::Node& node, const std::string& message) const {
  throw ConfigError(location(path, node) + ": " + message);
}

void Document::report(const std::string& path, const YAML::Node& node, const std::string& message) const {
  if (!collect_)
    fail(path, node, message);
  errors_.push_back(location(path, node) + ": " + message);
}

bool Document::attempt(const std::function<void()>& step) const {
  if (!collect_) {
    step();
    return true;
  }
  try {
    step();
    return true;
  } catch (const ConfigError& e) {
    errors_.emplace_back(e.what());
    return false;
  }
}

void Document::throw_errors() const {
  if (errors_.empty())
    return;
  std::string all;
  for (const std::string& e : errors_)
    all += (all.empty() ? "" : "\n") + e;
  throw ConfigError(all);
}

// ---- Field ---------------------------------------------------------------------------------

Field::Field(const Document& doc, std::string path, const YAML::Node& key, const YAML::Node& value)
    : doc_(&doc), path_(std::move(path)), key_(key), value_(value) {}

const YAML::Node& Field::anchor() const {
  return value_.IsDefined() && !value_.IsNull() ? value_ : key_;
}

std::string Field::where() const {
  return doc_->location(path_, anchor()) + ": key '" + path_ + "'";
}

void Field::fail(const std::string& what) const {
  throw ConfigError(where() + ": " + what);
}

std::string Field::scalar(std::string_view expected) const {
  if (!value_.IsScalar()) {
    fail("expected " + std::string(expected) + ", found " + describe(value_));
  }
  return value_.Scalar();
}

std::string Field::string() const {
  std::string text = scalar("a non-empty string");
  if (text.empty()) {
    fail("expected a non-empty string, found ''");
  }
  return text;
}

int64_t Field::integer(int64_t lo, int64_t hi, std::string_view expected) const {
  const std::string text = scalar(expected);
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != end) {
    fail("expected " + std::string(expected) + ", found '" + text + "' (not an integer)");
  }
  if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
    fail("expected " + std::string(expected) + ", found " + text);
  }
  return v;
}

double Field::number(std::string_view expected, const std::function<bool(double)>& ok) const {
  const std::string text = scalar(expected);
  const std::size_t first = (!text.empty() && text[0] == '-') ? 1 : 0;
  const bool starts_ok = text.size() > first &&
                         (std::isdigit(static_cast<unsigned char>(text[first])) != 0 || text[first] == '.');
  double v = 0;
  const char* end = text.data() + text.size();
  if (starts_ok) {
    const auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (ec == std::errc() && ptr == end && std::isfinite(v)) {
      if (!ok(v)) {
        fail("expected " + std::string(expected) + ", found " + text);
      }
      return v;
    }
  }
  fail("expected " + std::string(expected) + ", found '" + text + "' (not a number)");
}

bool Field::boolean() const {
  const std::string text = scalar("true or false");
  if (text == "true" || text == "True" || text == "TRUE") {
    return true;
  }
  if (text == "false" || text == "False" || text == "FALSE") {
    return false;
  }
  fail("expected true or false, found '" + text + "'");
}

void Field::fail_choice(const std::string& found, const std::vector<std::string>& names) const {
  std::string expected;
  for (const auto& name : names) {
    expected += (expected.empty() ? "" : ", ") + name;
  }
  std::string message = "expected one of " + expected + ", found '" + found + "'";
  const std::string suggestion = did_you_mean(found, names);
  if (!suggestion.empty()) {
    message += "; did you mean '" + suggestion + "'?";
  }
  fail(message);
}

MapReader Field::map(std::vector<std::string_view> keys, std::vector<std::string>* ignored) const {
  return MapReader(*doc_, path_, key_, value_, std::move(keys), ignored);
}

// ---- MapReader -----------------------------------------------------------------------------

MapReader::MapReader(const Document& doc, std::string path, const YAML::Node& anchor, const YAML::Node& map,
                     std::vector<std::string_view> keys, std::vector<std::string>* ignored)
    : doc_(&doc), path_(std::move(path)), anchor_(anchor), keys_(std::move(keys)) {
  if (!map.IsMap()) {
    const YAML::Node& at = map.IsDefined() && !map.IsNull() ? map : anchor_;
    if (path_.empty()) {
      doc.fail(path_, at,
               "expected a mapping with keys " + key_list(keys_) + " at the top level, found " +
                   describe(map));
    }
    doc.fail(path_, at,
             "key '" + path_ + "': expected a mapping with keys " + key_list(keys_) + ", found " +
                 describe(map));
  }
  const std::vector<std::string> known(keys_.begin(), keys_.end());
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar()) {
      doc.report(path_, key,
                 (path_.empty() ? "" : "key '" + path_ + "': ") + "expected a key name, found " +
                     describe(key));
      continue;
    }
    const std::string& name = key.Scalar();
    const std::string full = join_key(path_, name);
    const auto first =
        std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.name == name; });
    if (first != entries_.end()) {
      doc.report(full, key,
                 "key '" + full + "' is given twice (first at " + doc.location(full, first->key) + ")");
      continue;
    }
    if (std::find(keys_.begin(), keys_.end(), name) == keys_.end()) {
      const std::string suggestion = did_you_mean(name, known);
      if (ignored != nullptr) {
        ignored->push_back(
            doc.location(full, key) + ": unknown key '" + full + "' ignored" +
            (suggestion.empty() ? "" : "; did you mean '" + join_key(path_, suggestion) + "'?"));
        continue;
      }
      doc.report(full, key,
                 "unknown key '" + full + "'" +
                     (suggestion.empty() ? "; expected one of " + key_list(keys_)
                                         : "; did you mean '" + join_key(path_, suggestion) + "'?"));
      continue;
    }
    entries_.push_back(Entry{name, key, it->second});
  }
}

MapReader MapReader::root(const Document& doc, std::vector<std::string_view> keys,
                          std::vector<std::string>* ignored) {
  if (doc.root().IsNull() && !doc.root().IsMap()) {
    throw ConfigError(doc.file() + ":1:1: the document is empty; expected a mapping with keys " +
                      key_list(keys));
  }
  return MapReader(doc, "", doc.root(), doc.root(), std::move(keys), ignored);
}

bool MapReader::has(std::string_view key) const {
  return find(key).has_value();
}

std::optional<Field> MapReader::find(std::string_view key) const {
  // A reader may only ask for the keys the mapping allows (for the cluster and workload files,
  // the ones config/schema.cpp declares): any other would never be found.
  if (std::find(keys_.begin(), keys_.end(), key) == keys_.end())
    throw std::logic_error("config: key '" + join_key(path_, key) +
                           "' is read but not declared for its mapping");
  for (const auto& entry : entries_) {
    if (entry.name == key) {
      return Field(*doc_, join_key(path_, key), entry.key, entry.value);
    }
  }
  return std::nullopt;
}

Field MapReader::require(std::string_view key) const {
  auto field = find(key);
  if (!field) {
    fail("missing required key '" + join_key(path_, key) + "'");
  }
  return *field;
}

void MapReader::fail(const std::string& what) const {
  doc_->fail(path_, anchor_, (path_.empty() ? "" : "key '" + path_ + "': ") + what);
}

} // namespace stepsim::config::detail
