#include "sweep/sweep.hpp"

#include "config/sweep_config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "sweep/executor.hpp"
#include "sweep/plan.hpp"
#include "sweep/progress.hpp"
#include "sweep/results.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace stepsim::sweep {

namespace {

constexpr const char* MANIFEST = "sweep.json";

int parse_int(std::string_view text) {
  int v = -1;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return -1;
  }
  return v;
}

void write_manifest(const std::filesystem::path& dir, const SweepPlan& plan) {
  nlohmann::ordered_json j;
  j["name"] = plan.name;
  j["source"] = plan.source;
  j["columns"] = plan.columns;
  j["configs"] = plan.configs.size();
  write_file_atomically(dir / MANIFEST, [&](std::ostream& o) { o << j.dump(2) << '\n'; });
}

struct Manifest {
  std::vector<std::string> columns;
  std::size_t configs = 0;
};

std::optional<Manifest> read_manifest(const std::filesystem::path& dir) {
  std::ifstream in(dir / MANIFEST, std::ios::binary);
  if (!in) {
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return std::nullopt;
  }
  try {
    return Manifest{j.at("columns").get<std::vector<std::string>>(), j.at("configs").get<std::size_t>()};
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

} // namespace

Shard parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  const int i = slash == std::string::npos ? -1 : parse_int(std::string_view(text).substr(0, slash));
  const int k = slash == std::string::npos ? -1 : parse_int(std::string_view(text).substr(slash + 1));
  if (i < 0 || k < 1 || i >= k) {
    throw ConfigError("--shard: expected I/K with 0 <= I < K (e.g. 0/4), got '" + text + "'");
  }
  return Shard{i, k};
}

SweepOutcome run_sweep(const SweepOptions& options, std::ostream& err) {
  const config::SweepFile file = config::load_sweep(options.sweep_file);
  const SweepPlan plan = expand(file);

  std::vector<const SweepConfig*> mine;
  for (const SweepConfig& c : plan.configs) {
    if (!options.shard ||
        static_cast<int>(c.index % static_cast<std::size_t>(options.shard->count)) == options.shard->index) {
      mine.push_back(&c);
    }
  }

  write_manifest(options.out_dir, plan);
  ResultLog log(ResultFiles::in(options.out_dir,
                                options.shard ? std::optional<int>(options.shard->index) : std::nullopt),
                plan.columns, options.retry_failed, err);

  std::map<std::string, RunStatus> status; // id -> status, for this shard's configurations
  std::set<std::string> mine_ids;
  for (const SweepConfig* c : mine) {
    mine_ids.insert(c->id);
  }
  for (const Row& r : log.existing()) {
    if (mine_ids.count(r.id) != 0) {
      status[r.id] = r.status;
    }
  }
  std::vector<const SweepConfig*> pending;
  for (const SweepConfig* c : mine) {
    if (status.count(c->id) == 0) {
      pending.push_back(c);
    }
  }

  const int jobs = options.jobs > 0 ? options.jobs : available_cpus();
  SweepProgress progress(err, SweepProgressOptions{.total = mine.size(),
                                                   .resumed = mine.size() - pending.size(),
                                                   .jobs = jobs,
                                                   .mode = options.progress,
                                                   .label = options.label});
  const ExecuteOptions exec{.cluster = plan.cluster,
                            .workload = plan.workload,
                            .jobs = jobs,
                            .timeout_s = options.timeout_s,
                            .simulate = options.simulate};
  execute(
      pending, exec,
      [&](const Row& row, double wall_s) {
        log.append(row);
        status[row.id] = row.status;
        progress.finished(row, wall_s);
      },
      [&] { progress.tick(); });
  progress.close();

  SweepOutcome out;
  out.total = mine.size();
  out.resumed = mine.size() - pending.size();
  for (const auto& [id, s] : status) {
    std::size_t* const count[] = {&out.ok, &out.skipped, &out.failed, &out.oom}; // RunStatus order
    ++*count[static_cast<std::size_t>(s)];
  }
  if (status.size() == mine.size()) {
    log.rewrite_sorted();
  }
  return out;
}

MergeOutcome merge_results(const std::filesystem::path& dir, std::ostream& err) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw ConfigError("--merge: " + dir.string() + " is not a directory");
  }
  const ResultFiles merged = ResultFiles::in(dir, std::nullopt);
  const FileLock lock(merged.lock, merged.jsonl.string());

  std::vector<std::pair<int, fs::path>> shards;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = "results.shard-";
    const std::string suffix = ".jsonl";
    if (name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) && name.ends_with(suffix)) {
      const int n = parse_int(
          std::string_view(name).substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
      if (n >= 0) {
        shards.emplace_back(n, entry.path());
      }
    }
  }
  std::sort(shards.begin(), shards.end());
  if (shards.empty() && !fs::exists(merged.jsonl, ec)) {
    throw ConfigError("--merge: " + dir.string() + " holds no results.shard-*.jsonl files");
  }

  MergeOutcome out;
  out.shard_files = shards.size();
  std::vector<Row> rows;
  std::map<std::string, std::string> by_id; // id -> its JSON line
  auto take = [&](const fs::path& file) {
    const ReadRows read = read_rows(file);
    if (read.torn_bytes > 0) {
      err << "sweep: " << file.string() << ": ignoring a partial last line (" << read.torn_bytes
          << " bytes)\n";
    }
    for (const Row& r : read.rows) {
      const std::string line = json_line(r);
      const auto [it, fresh] = by_id.emplace(r.id, line);
      if (fresh) {
        rows.push_back(r);
      } else if (it->second != line) {
        ++out.conflicts;
        err << "sweep: " << file.string() << ": configuration " << r.id
            << " has a different row in an earlier file; keeping the first\n";
      }
    }
  };
  take(merged.jsonl);
  for (const auto& [n, file] : shards) {
    take(file);
  }
  sort_rows(rows);

  std::vector<std::string> columns;
  const auto manifest = read_manifest(dir);
  if (manifest) {
    columns = manifest->columns;
    out.expected = manifest->configs;
  } else {
    for (const Row& r : rows) {
      for (const auto& [k, v] : r.config) {
        if (std::find(columns.begin(), columns.end(), k) == columns.end()) {
          columns.push_back(k);
        }
      }
    }
  }
  write_results(merged.jsonl, merged.csv, rows, columns);
  out.rows = rows.size();
  err << "sweep: merged " << out.rows << " row(s) from " << out.shard_files << " shard file(s) into "
      << merged.csv.string();
  if (out.expected > 0) {
    err << " (" << out.expected << " configuration(s) in the sweep"
        << (out.rows < out.expected ? ", " + std::to_string(out.expected - out.rows) + " missing"
                                    : std::string())
        << ")";
  }
  err << '\n';
  return out;
}

} // namespace stepsim::sweep
