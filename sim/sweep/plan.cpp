#include "sweep/plan.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>

namespace stepsim::sweep {

std::string config_id(const std::string& cluster, const std::string& workload,
                      const std::vector<config::Override>& overrides) {
  std::vector<const config::Override*> sorted;
  sorted.reserve(overrides.size());
  for (const auto& o : overrides) {
    sorted.push_back(&o);
  }
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const config::Override* a, const config::Override* b) { return a->path < b->path; });
  std::string text = "cluster=" + cluster + "\nworkload=" + workload + "\n";
  for (const auto* o : sorted) {
    text += o->path + "=" + o->value + "\n";
  }
  constexpr uint64_t FNV_OFFSET = 14695981039346656037ULL;
  constexpr uint64_t FNV_PRIME = 1099511628211ULL;
  uint64_t h = FNV_OFFSET;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= FNV_PRIME;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

SweepPlan expand(const config::SweepFile& file) {
  SweepPlan plan;
  plan.name = file.name;
  plan.source = file.source;
  plan.cluster = file.cluster;
  plan.workload = file.workload;

  for (const auto& point : file.points) {
    for (const auto& o : point.overrides) {
      if (std::find(plan.columns.begin(), plan.columns.end(), o.path) == plan.columns.end()) {
        plan.columns.push_back(o.path);
      }
    }
  }
  for (const auto& axis : file.zip) {
    plan.columns.push_back(axis.key);
  }
  for (const auto& axis : file.grid) {
    plan.columns.push_back(axis.key);
  }
  const std::size_t zip_rows = file.zip.empty() ? 1 : file.zip.front().values.size();

  std::size_t grid_size = 1;
  for (const auto& axis : file.grid) {
    grid_size *= axis.values.size();
    if (grid_size > MAX_CONFIGS) {
      break;
    }
  }
  const std::size_t point_count = std::max<std::size_t>(1, file.points.size());
  if (grid_size > MAX_CONFIGS || grid_size * point_count > MAX_CONFIGS ||
      grid_size * point_count * zip_rows > MAX_CONFIGS) {
    throw ConfigError(file.source + ": the sweep expands to more than " + std::to_string(MAX_CONFIGS) +
                      " configurations");
  }

  std::map<std::string, std::string> seen; // id -> where it came from
  for (std::size_t pz = 0; pz < point_count * zip_rows; ++pz) {
    const std::size_t p = pz / zip_rows, z = pz % zip_rows;
    const config::SweepPointSpec* point = file.points.empty() ? nullptr : &file.points[p];
    std::vector<std::size_t> digit(file.grid.size(), 0);
    for (std::size_t g = 0; g < grid_size; ++g) {
      SweepConfig c;
      c.index = plan.configs.size();
      c.overrides = file.fixed;
      std::map<std::string, std::string> values;
      if (point != nullptr) {
        for (const auto& o : point->overrides) {
          c.overrides.push_back(o);
          values[o.path] = o.value;
        }
      }
      for (const config::SweepAxis& axis : file.zip) {
        c.overrides.push_back(config::Override{axis.key, axis.values[z]});
        values[axis.key] = axis.values[z];
      }
      for (std::size_t a = 0; a < file.grid.size(); ++a) {
        const config::SweepAxis& axis = file.grid[a];
        c.overrides.push_back(config::Override{axis.key, axis.values[digit[a]]});
        values[axis.key] = axis.values[digit[a]];
      }
      for (const auto& column : plan.columns) {
        const auto it = values.find(column);
        if (it != values.end()) {
          c.swept.emplace_back(column, it->second);
        }
      }
      c.id = config_id(file.cluster_text, file.workload_text, c.overrides);
      const std::string where = point != nullptr    ? point->where
                                : !file.zip.empty() ? file.zip.front().where[z]
                                                    : file.source;
      const auto [it, fresh] = seen.emplace(c.id, where);
      if (!fresh) {
        throw ConfigError(where + ": configuration " + std::to_string(c.index) +
                          " repeats an earlier one (from " + it->second + "); every point must differ");
      }
      plan.configs.push_back(std::move(c));
      // Odometer: the last axis varies fastest.
      for (std::size_t a = file.grid.size(); a-- > 0;) {
        if (++digit[a] < file.grid[a].values.size()) {
          break;
        }
        digit[a] = 0;
      }
    }
  }
  return plan;
}

} // namespace stepsim::sweep
