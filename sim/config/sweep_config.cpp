#include "config/sweep_config.hpp"

#include "config/yaml_tree.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string_view>
#include <utility>

namespace stepsim::config {

namespace detail {

/// The YAML text `--set` takes for `node`: a scalar as written, anything else in flow style.
std::string value_text(const YAML::Node& node) {
  if (node.IsScalar()) {
    return node.Scalar();
  }
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

bool is_dotted_key(const std::string& key) {
  if (key.empty() || key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos) {
    return false;
  }
  return std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
  });
}

/// Reads the key of a sweep mapping entry (`set:`, `grid:` or a point) and checks it is a dotted
/// path. `parent` names the mapping in messages.
std::string read_key(const Document& doc, const std::string& parent, const YAML::Node& key) {
  if (!key.IsScalar()) {
    doc.fail(parent, key,
             "key '" + parent + "': expected a dotted key such as parallel.tp, found " + describe(key));
  }
  const std::string text = key.Scalar();
  if (!is_dotted_key(text)) {
    doc.fail(parent, key,
             "key '" + parent + "': expected a dotted key such as parallel.tp or cluster.nodes, found '" +
                 text + "'");
  }
  return text;
}

/// A mapping of dotted keys to scalar values (`set:` or one point), duplicates rejected.
std::vector<Override> read_overrides(const Document& doc, const std::string& path, const YAML::Node& anchor,
                                     const YAML::Node& map) {
  if (!map.IsMap() || map.size() == 0) {
    doc.fail(path, map.IsDefined() && !map.IsNull() ? map : anchor,
             "key '" + path +
                 "': expected a mapping of dotted keys to values, e.g. {parallel.tp: 8}, found " +
                 (map.IsMap() ? std::string("an empty mapping") : describe(map)));
  }
  std::vector<Override> out;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = read_key(doc, path, it->first);
    for (const auto& o : out) {
      if (o.path == key) {
        doc.fail(path, it->first, "key '" + path + "': '" + key + "' is given twice");
      }
    }
    if (!it->second.IsDefined() || it->second.IsNull()) {
      doc.fail(path, it->first, "key '" + path + "." + key + "': expected a value, found nothing");
    }
    out.push_back(Override{key, value_text(it->second)});
  }
  return out;
}

} // namespace detail

namespace {

using detail::describe;
using detail::Document;
using detail::Field;
using detail::MapReader;
using detail::read_key;
using detail::read_overrides;
using detail::value_text;

std::string mark_of(const Document& doc, const std::string& path, const YAML::Node& node) {
  return doc.location(path, node);
}

/// `grid:` (every axis's values distinct) or `zip:` (lists of one length, paired by position).
enum class Axes { GRID, ZIP };

/// The axes of `grid:` or `zip:`: a mapping of dotted keys to non-empty lists of values.
std::vector<SweepAxis> read_axes(const Document& doc, const Field& f, Axes kind) {
  const std::string name = kind == Axes::GRID ? "grid" : "zip";
  const YAML::Node& map = f.value();
  if (!map.IsMap() || map.size() == 0) {
    f.fail("expected a mapping of dotted keys to lists of values, e.g. {parallel.tp: [4, 8]}, found " +
           (map.IsMap() ? std::string("an empty mapping") : describe(map)));
  }
  std::vector<SweepAxis> axes;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node key_node = it->first;
    const YAML::Node values = it->second;
    SweepAxis axis;
    axis.key = read_key(doc, name, key_node);
    const std::string path = name + "." + axis.key;
    for (const auto& other : axes) {
      if (other.key == axis.key) {
        doc.fail(path, key_node, "key '" + path + "' is given twice");
      }
    }
    if (!values.IsSequence() || values.size() == 0) {
      const YAML::Node at = values.IsDefined() && !values.IsNull() ? values : key_node;
      doc.fail(path, at,
               "key '" + path + "': expected a non-empty list of values, e.g. [1, 2, 4], found " +
                   (values.IsSequence() ? std::string("an empty list") : describe(values)));
    }
    for (const auto& v : values) {
      if (!v.IsDefined() || v.IsNull()) {
        doc.fail(path, values, "key '" + path + "': expected a value, found nothing in the list");
      }
      const std::string text = value_text(v);
      if (kind == Axes::GRID &&
          std::find(axis.values.begin(), axis.values.end(), text) != axis.values.end()) {
        doc.fail(path, v, "key '" + path + "': value '" + text + "' is listed twice");
      }
      axis.values.push_back(text);
      axis.where.push_back(mark_of(doc, path, v));
    }
    if (kind == Axes::ZIP && !axes.empty() && axis.values.size() != axes.front().values.size()) {
      doc.fail(path, values,
               "key '" + path + "': expected " + std::to_string(axes.front().values.size()) +
                   " values, as many as zip." + axes.front().key +
                   " (zip pairs the lists by position), found " + std::to_string(axis.values.size()));
    }
    axes.push_back(std::move(axis));
  }
  return axes;
}

} // namespace

SweepFile load_sweep(const std::filesystem::path& file) {
  const Document doc(file);
  const auto top = MapReader::root(
      doc, {"name", "description", "cluster", "workload", "set", "grid", "zip", "cases", "points"});
  SweepFile s;
  s.source = doc.file();
  s.name = file.stem().string();
  if (auto f = top.find("name")) {
    s.name = f->string();
  }
  if (auto f = top.find("description")) {
    s.description = f->string();
  }
  const std::filesystem::path base = file.parent_path();
  s.cluster_text = top.require("cluster").string();
  s.workload_text = top.require("workload").string();
  s.cluster = base / s.cluster_text;
  s.workload = base / s.workload_text;
  // Every configuration reads both files: a missing one is the sweep file's error, not a row's.
  for (const auto& [key, path] : {std::pair{"cluster", s.cluster}, std::pair{"workload", s.workload}})
    if (const std::string why = input_file_problem(path); !why.empty())
      top.require(key).fail("'" + path.lexically_normal().string() + "': " + why);

  if (auto f = top.find("set")) {
    s.fixed = read_overrides(doc, "set", f->value(), f->value());
  }

  if (auto f = top.find("grid")) {
    s.grid = read_axes(doc, *f, Axes::GRID);
  }
  if (auto f = top.find("zip")) {
    s.zip = read_axes(doc, *f, Axes::ZIP);
    for (const auto& axis : s.zip) {
      for (const auto& other : s.grid) {
        if (other.key == axis.key) {
          throw ConfigError(axis.where.front() + ": key 'zip." + axis.key +
                            "': also a grid axis; a key is either zipped or in the grid");
        }
      }
    }
  }

  // `cases:` is the list's name; `points:`, its older name, still reads the same.
  auto cases = top.find("cases");
  if (auto points = top.find("points")) {
    if (cases)
      points->fail("`points` is the older name of `cases`: give one list, under `cases`");
    cases = points;
  }
  if (auto f = cases) {
    const std::string key = f->path();
    const YAML::Node& points = f->value();
    s.where_points = mark_of(doc, key, f->value());
    if (!points.IsSequence() || points.size() == 0) {
      f->fail("expected a non-empty list of mappings, e.g. [{parallel.tp: 8, parallel.pp: 4}], found " +
              (points.IsSequence() ? std::string("an empty list") : describe(points)));
    }
    std::size_t i = 0;
    for (const auto& p : points) {
      const std::string path = key + "[" + std::to_string(i++) + "]";
      s.points.push_back(SweepPointSpec{read_overrides(doc, path, p, p), mark_of(doc, path, p)});
    }
  }

  // A key is fixed, a grid axis or set by points: never two of these.
  auto fixed_has = [&](const std::string& key) {
    return std::any_of(s.fixed.begin(), s.fixed.end(), [&](const Override& o) { return o.path == key; });
  };
  for (const auto* axes : {&s.grid, &s.zip}) {
    for (const auto& axis : *axes) {
      if (fixed_has(axis.key)) {
        throw ConfigError(axis.where.front() + ": key '" + (axes == &s.grid ? "grid." : "zip.") + axis.key +
                          "': '" + axis.key + "' is also under `set`; a key is either fixed or swept");
      }
    }
  }
  for (const auto& point : s.points) {
    for (const auto& o : point.overrides) {
      if (fixed_has(o.path)) {
        throw ConfigError(point.where + ": point sets '" + o.path +
                          "', which is also under `set`; a key is either fixed or swept");
      }
      for (const auto* axes : {&s.grid, &s.zip}) {
        for (const auto& axis : *axes) {
          if (axis.key == o.path) {
            throw ConfigError(point.where + ": point sets '" + o.path + "', which is also " +
                              (axes == &s.grid ? "a grid axis" : "zipped") +
                              "; a key is either in the grid, in zip or in points");
          }
        }
      }
    }
  }
  return s;
}

} // namespace stepsim::config
