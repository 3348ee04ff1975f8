// Reading what an output folder holds into a page (html/page.hpp): summary.json, tasks.csv, the
// result tables and plots.

#include "core/error.hpp"
#include "html/page.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace stepsim::html {

namespace {

namespace fs = std::filesystem;

// The records of CSV text; a quoted field may hold commas, quotes ("") and line breaks.
std::vector<std::vector<std::string>> csv_records(std::istream& in) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false, any = false;
  char c;
  while (in.get(c)) {
    any = true;
    if (quoted) {
      if (c == '"') {
        if (in.peek() == '"') {
          field += '"';
          in.get();
        } else {
          quoted = false;
        }
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      record.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      if (!field.empty() && field.back() == '\r')
        field.pop_back();
      record.push_back(std::move(field));
      field.clear();
      records.push_back(std::move(record));
      record.clear();
      any = false;
    } else {
      field += c;
    }
  }
  if (any) {
    record.push_back(std::move(field));
    records.push_back(std::move(record));
  }
  return records;
}

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw ConfigError(file.string() + ": cannot read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

Table table_from_csv(std::istream& csv, const std::string& source, const std::string& caption) {
  std::vector<std::vector<std::string>> records = csv_records(csv);
  Table t{caption, {}, {}};
  if (records.empty())
    return t;
  t.columns = std::move(records.front());
  for (std::size_t i = 1; i < records.size(); ++i) {
    if (records[i].size() != t.columns.size())
      throw ConfigError(source + ": row " + std::to_string(i + 1) + " has " +
                        std::to_string(records[i].size()) + " fields, expected " +
                        std::to_string(t.columns.size()) + " as the header has");
    t.rows.push_back(std::move(records[i]));
  }
  return t;
}

std::vector<Slice> pipeline_from_task_csv(std::istream& csv, const std::string& source) {
  const Table t = table_from_csv(csv, source, "");
  auto column = [&](const std::string& name) {
    const auto it = std::find(t.columns.begin(), t.columns.end(), name);
    if (it == t.columns.end())
      throw ConfigError(source + ": expected a column '" + name + "' (trace::write_task_csv's header)");
    return static_cast<std::size_t>(it - t.columns.begin());
  };
  const std::size_t kind = column("kind"), rank = column("rank"), stream = column("stream"),
                    phase = column("phase"), block = column("block"), group = column("group"),
                    op = column("op"), stage = column("stage"), micro_batch = column("micro_batch"),
                    start = column("start_s"), end = column("end_s");
  auto number = [&](std::size_t row, std::size_t col) {
    const std::string& text = t.rows[row][col];
    double v = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || ptr != text.data() + text.size())
      throw ConfigError(source + ": row " + std::to_string(row + 2) + ", column '" + t.columns[col] +
                        "': expected a number, got '" + text + "'");
    return v;
  };
  // The pipeline drawn: per stage, the lowest rank that computes for it.
  std::map<int, int> rank_of_stage;
  for (std::size_t r = 0; r < t.rows.size(); ++r)
    if (t.rows[r][kind] == "compute" && !t.rows[r][stage].empty()) {
      const int s = static_cast<int>(number(r, stage)), g = static_cast<int>(number(r, rank));
      const auto [it, inserted] = rank_of_stage.emplace(s, g);
      if (!inserted)
        it->second = std::min(it->second, g);
    }
  std::map<int, int> stage_of_rank;
  for (const auto& [s, g] : rank_of_stage)
    stage_of_rank[g] = s;
  std::vector<Slice> slices;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const auto& row = t.rows[r];
    const auto it = stage_of_rank.find(static_cast<int>(number(r, rank)));
    if (it == stage_of_rank.end())
      continue;
    const bool compute = row[kind] == "compute";
    std::string label = compute ? row[block] + ' ' + row[phase] : row[group] + ' ' + row[op];
    if (!row[micro_batch].empty())
      label += " mb " + row[micro_batch];
    slices.push_back(Slice{.stage = it->second,
                           .rank = it->first,
                           .stream = row[stream],
                           .kind = compute ? row[phase] : row[group],
                           .label = label,
                           .start_s = number(r, start),
                           .end_s = number(r, end)});
  }
  return slices;
}

PageInput read_folder(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root))
    throw ConfigError("report: '" + dir +
                      "' is not a folder (give a `stepsim run`, `sweep` or `plan` --out folder)");
  PageInput page;
  page.title = "stepsim: " + root.filename().string();
  if (root.filename().empty())
    page.title = "stepsim: " + root.parent_path().filename().string();
  bool found = false;
  if (const fs::path file = root / "summary.json"; fs::exists(file)) {
    try {
      page.summary = nlohmann::ordered_json::parse(read_bytes(file));
    } catch (const nlohmann::json::parse_error& e) {
      throw ConfigError(file.string() + ": not JSON: " + e.what());
    }
    page.title = "stepsim: " + page.summary.value("workload", std::string()) + " on " +
                 page.summary.value("cluster", std::string());
    found = true;
  }
  if (const fs::path file = root / "sweep.json"; fs::exists(file) && !page.summary.is_object()) {
    try {
      page.title = "stepsim sweep: " + nlohmann::ordered_json::parse(read_bytes(file)).value("name", dir);
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(file.string() + ": " + e.what());
    }
  }
  std::set<fs::path> csvs, pngs; // sorted: the page does not depend on directory order
  for (const fs::path& folder : {root, root / "plots"}) {
    if (!fs::is_directory(folder))
      continue;
    for (const fs::directory_entry& e : fs::directory_iterator(folder)) {
      if (!e.is_regular_file())
        continue;
      if (e.path().extension() == ".png")
        pngs.insert(e.path());
      else if (e.path().extension() == ".csv" && folder == root)
        csvs.insert(e.path());
    }
  }
  for (const fs::path& file : csvs) {
    std::istringstream in(read_bytes(file));
    if (file.filename() == "tasks.csv")
      page.timeline = pipeline_from_task_csv(in, file.string());
    else
      page.tables.push_back(table_from_csv(in, file.string(), file.filename().string()));
    found = true;
  }
  for (const fs::path& file : pngs) {
    page.images.push_back({fs::relative(file, root).string(), read_bytes(file)});
    found = true;
  }
  if (!found)
    throw ConfigError("report: '" + dir + "' holds no summary.json, CSV table or PNG plot to report");
  return page;
}

} // namespace stepsim::html
