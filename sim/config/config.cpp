#include "config/config.hpp"

#include "config/fields.hpp"
#include "config/yaml_tree.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string_view>
#include <vector>

namespace stepsim::config {

namespace {

using detail::Document;
using detail::read_cluster;
using detail::read_workload;

constexpr std::string_view CLUSTER_PREFIX = "cluster.";

/// "--set PATH=VALUE", as errors name an override.
std::string shown(const Override& o) {
  return "--set " + o.path + "=" + o.value;
}

int64_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions, adjacent transpositions.
  const std::size_t n = a.size();
  const std::size_t m = b.size();
  std::vector<std::vector<int64_t>> d(n + 1, std::vector<int64_t>(m + 1, 0));
  for (std::size_t i = 0; i <= n; ++i) {
    d[i][0] = static_cast<int64_t>(i);
  }
  for (std::size_t j = 0; j <= m; ++j) {
    d[0][j] = static_cast<int64_t>(j);
  }
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const int64_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

} // namespace

// ---- public API ----------------------------------------------------------------------------

Override parse_override(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    throw ConfigError("--set " + text + ": expected PATH=VALUE, e.g. parallel.pp=4");
  }
  std::string path = text.substr(0, eq);
  while (!path.empty() && std::isspace(static_cast<unsigned char>(path.back())) != 0) {
    path.pop_back();
  }
  while (!path.empty() && std::isspace(static_cast<unsigned char>(path.front())) != 0) {
    path.erase(path.begin());
  }
  if (path.empty()) {
    throw ConfigError("--set " + text + ": expected PATH=VALUE with a non-empty PATH, e.g. parallel.pp=4");
  }
  if (path.front() == '.' || path.back() == '.' || path.find("..") != std::string::npos) {
    throw ConfigError("--set " + text + ": empty key in path '" + path + "'");
  }
  return Override{path, text.substr(eq + 1)};
}

ClusterSpec load_cluster(const std::filesystem::path& file, const std::vector<Override>& overrides,
                         const std::filesystem::path& degrade) {
  Document doc(file, /*collect=*/true, schema::File::CLUSTER);
  for (const auto& o : overrides) {
    if (o.path.starts_with(CLUSTER_PREFIX)) {
      doc.apply(o.path.substr(CLUSTER_PREFIX.size()), o.value, shown(o));
    }
  }
  ClusterSpec c = read_cluster(doc);
  doc.throw_errors();
  if (!degrade.empty()) {
    Document extra(degrade, /*collect=*/true, schema::File::CLUSTER);
    const auto top = detail::MapReader::root(extra, {"degraded"});
    if (auto degraded = detail::section(top, "degraded", schema::File::CLUSTER))
      detail::read_degraded(*degraded, c);
    extra.throw_errors();
  }
  return c;
}

WorkloadSpec load_workload(const std::filesystem::path& file, const std::vector<Override>& overrides) {
  Document doc(file, /*collect=*/true, schema::File::WORKLOAD);
  for (const auto& o : overrides) {
    if (!o.path.starts_with(CLUSTER_PREFIX)) {
      doc.apply(o.path, o.value, shown(o));
    }
  }
  WorkloadSpec w = read_workload(doc);
  doc.throw_errors();
  return w;
}

std::string did_you_mean(const std::string& key, const std::vector<std::string>& candidates) {
  const std::string wanted = lowercase(key);
  const int64_t limit = std::max<int64_t>(1, static_cast<int64_t>(key.size()) / 3);
  std::string best;
  int64_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    const int64_t d = edit_distance(wanted, lowercase(candidate));
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

} // namespace stepsim::config
