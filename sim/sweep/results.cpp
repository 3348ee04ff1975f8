#include "sweep/results.hpp"

#include "core/atomic_file.hpp"
#include "core/csv.hpp"
#include "core/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace stepsim::sweep {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

/// Metric columns after `reason`, in order.
constexpr const char* METRIC_COLUMNS[] = {
    "num_gpus",
    "micro_batches",
    "step_time_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "mfu",
    "hfu",
    "bubble_fraction",
    "compute_s",
    "exposed_tp_s",
    "exposed_pp_s",
    "exposed_dp_s",
    "exposed_ep_s",
    "exposed_cp_s",
    "peak_memory_bytes",
    "fits_in_memory",
    "hbm_capacity_bytes",
};

std::string format_number(double v) {
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) {
    return "";
  }
  return std::string(buf, ptr);
}

/// The value at the first of `paths` (each a list of keys) that exists, or nullptr.
const json* find_any(const json& root, std::initializer_list<std::initializer_list<const char*>> paths) {
  for (const auto& path : paths) {
    const json* node = &root;
    for (const char* key : path) {
      if (!node->is_object()) {
        node = nullptr;
        break;
      }
      const auto it = node->find(key);
      if (it == node->end()) {
        node = nullptr;
        break;
      }
      node = &*it;
    }
    if (node != nullptr && !node->is_null()) {
      return node;
    }
  }
  return nullptr;
}

std::string number_cell(const json* v) {
  if (v == nullptr) {
    return "";
  }
  if (v->is_number_integer()) {
    return std::to_string(v->get<int64_t>());
  }
  if (v->is_number_unsigned()) {
    return std::to_string(v->get<uint64_t>());
  }
  if (v->is_number()) {
    return format_number(v->get<double>());
  }
  if (v->is_boolean()) {
    return v->get<bool>() ? "true" : "false";
  }
  return "";
}

std::vector<std::string> metric_cells(const Row& row) {
  std::vector<std::string> cells(std::size(METRIC_COLUMNS));
  if (row.hbm_capacity_bytes > 0) {
    cells.back() = format_number(row.hbm_capacity_bytes);
  }
  if ((row.status != RunStatus::OK && row.status != RunStatus::OOM) || row.summary_json.empty()) {
    return cells;
  }
  const json s = json::parse(row.summary_json, nullptr, false);
  if (s.is_discarded()) {
    return cells;
  }
  std::size_t i = 0;
  cells[i++] = number_cell(find_any(s, {{"num_gpus"}}));
  cells[i++] = number_cell(find_any(s, {{"micro_batches"}}));
  cells[i++] = number_cell(find_any(s, {{"step_time_s"}}));
  cells[i++] = number_cell(find_any(s, {{"tokens_per_s"}}));
  cells[i++] = number_cell(find_any(s, {{"tflops_per_gpu"}}));
  cells[i++] = number_cell(find_any(s, {{"mfu"}}));
  cells[i++] = number_cell(find_any(s, {{"hfu"}}));
  cells[i++] = number_cell(find_any(s, {{"bubble_fraction"}}));
  cells[i++] = number_cell(find_any(s, {{"compute_s"}}));
  cells[i++] = number_cell(find_any(s, {{"exposed_comm_s", "tp"}}));
  cells[i++] = number_cell(find_any(s, {{"exposed_comm_s", "pp"}}));
  cells[i++] = number_cell(find_any(s, {{"exposed_comm_s", "dp"}}));
  cells[i++] = number_cell(find_any(s, {{"exposed_comm_s", "ep"}}));
  cells[i++] = number_cell(find_any(s, {{"exposed_comm_s", "cp"}}));
  // Memory figures, when the summary has them (docs/sweeps.md lists the names looked for).
  cells[i++] = number_cell(find_any(s, {{"peak_memory_bytes"},
                                        {"memory", "peak_bytes"},
                                        {"memory", "peak_memory_bytes"},
                                        {"memory", "peak_per_gpu_bytes"},
                                        {"memory", "peak"}}));
  cells[i++] =
      number_cell(find_any(s, {{"fits_in_memory"}, {"memory", "fits_in_memory"}, {"memory", "fits"}}));
  if (const json* cap = find_any(s, {{"memory", "capacity_bytes"}, {"hbm_capacity_bytes"}})) {
    cells[i] = number_cell(cap);
  }
  return cells;
}

/// A swept value as JSON: an integer, a number or a bool when its YAML text is exactly that
/// value's canonical spelling (so that it reads back to the same text), else the text.
ordered_json typed_value(const std::string& text) {
  if (text == "true" || text == "false") {
    return text == "true";
  }
  int64_t i = 0;
  if (const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), i);
      ec == std::errc() && ptr == text.data() + text.size() && std::to_string(i) == text) {
    return i;
  }
  double d = 0;
  if (const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
      ec == std::errc() && ptr == text.data() + text.size() && std::isfinite(d) && format_number(d) == text) {
    return d;
  }
  return text;
}

/// The text of a swept value read back from JSON (typed_value's inverse).
std::string value_text(const ordered_json& v) {
  if (v.is_string()) {
    return v.get<std::string>();
  }
  if (v.is_boolean()) {
    return v.get<bool>() ? "true" : "false";
  }
  if (v.is_number_integer()) {
    return std::to_string(v.get<int64_t>());
  }
  if (v.is_number_unsigned()) {
    return std::to_string(v.get<uint64_t>());
  }
  if (v.is_number()) {
    return format_number(v.get<double>());
  }
  return v.dump();
}

void write_all(int fd, const std::string& text, const std::filesystem::path& file) {
  if (!write_fully(fd, text)) {
    throw Error("cannot append to " + file.string() + ": " + std::strerror(errno));
  }
  if (::fsync(fd) != 0) {
    throw Error("cannot sync " + file.string() + ": " + std::strerror(errno));
  }
}

} // namespace

std::string csv_header(const std::vector<std::string>& columns) {
  std::string line = "id,index";
  for (const auto& c : columns) {
    line += "," + csv_cell(c);
  }
  line += ",status,reason";
  for (const char* m : METRIC_COLUMNS) {
    line += std::string(",") + m;
  }
  return line + "\n";
}

std::string csv_line(const Row& row, const std::vector<std::string>& columns) {
  std::string line = row.id + "," + std::to_string(row.index);
  for (const auto& c : columns) {
    const auto it =
        std::find_if(row.config.begin(), row.config.end(), [&](const KeyValue& kv) { return kv.first == c; });
    line += "," + (it == row.config.end() ? std::string() : csv_cell(it->second));
  }
  line += "," + std::string(to_string(row.status)) + "," + csv_cell(row.reason);
  for (const auto& cell : metric_cells(row)) {
    line += "," + cell;
  }
  return line + "\n";
}

std::string json_line(const Row& row) {
  ordered_json j;
  j["id"] = row.id;
  j["index"] = row.index;
  ordered_json config = ordered_json::object();
  for (const auto& [k, v] : row.config) {
    config[k] = typed_value(v);
  }
  j["config"] = config;
  j["status"] = std::string(to_string(row.status));
  j["reason"] = row.reason;
  j["hbm_capacity_bytes"] = row.hbm_capacity_bytes;
  if (row.summary_json.empty()) {
    j["summary"] = nullptr;
  } else {
    j["summary"] = ordered_json::parse(row.summary_json);
  }
  return j.dump() + "\n";
}

std::optional<Row> parse_json_line(std::string_view line) {
  const ordered_json j = ordered_json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return std::nullopt;
  }
  try {
    Row row;
    row.id = j.at("id").get<std::string>();
    row.index = j.at("index").get<std::size_t>();
    for (const auto& [k, v] : j.at("config").items()) {
      row.config.emplace_back(k, value_text(v));
    }
    const auto status = run_status_by_name_or_null(j.at("status").get<std::string>());
    if (!status) {
      return std::nullopt;
    }
    row.status = *status;
    row.reason = j.at("reason").get<std::string>();
    if (j.contains("hbm_capacity_bytes")) {
      row.hbm_capacity_bytes = j.at("hbm_capacity_bytes").get<double>();
    }
    if (j.contains("summary") && !j.at("summary").is_null()) {
      row.summary_json = j.at("summary").dump();
    }
    if (row.id.empty()) {
      return std::nullopt;
    }
    return row;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

void sort_rows(std::vector<Row>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.index != b.index ? a.index < b.index : a.id < b.id;
  });
}

ReadRows read_rows(const std::filesystem::path& jsonl) {
  ReadRows out;
  std::error_code ec;
  if (!std::filesystem::exists(jsonl, ec)) {
    return out;
  }
  std::ifstream in(jsonl, std::ios::binary);
  if (!in) {
    throw Error("cannot read " + jsonl.string());
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  std::set<std::string> ids;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      out.torn_bytes = text.size() - start;
      break;
    }
    const std::string_view line(text.data() + start, nl - start);
    start = nl + 1;
    if (line.empty()) {
      continue;
    }
    auto row = parse_json_line(line);
    if (!row) {
      ++out.bad_lines;
      continue;
    }
    if (!ids.insert(row->id).second) {
      ++out.duplicates;
      continue;
    }
    out.rows.push_back(std::move(*row));
  }
  return out;
}

void write_results(const std::filesystem::path& jsonl, const std::filesystem::path& csv,
                   const std::vector<Row>& rows, const std::vector<std::string>& columns) {
  write_file_atomically(jsonl, [&](std::ostream& o) {
    for (const Row& r : rows) {
      o << json_line(r);
    }
  });
  write_file_atomically(csv, [&](std::ostream& o) {
    o << csv_header(columns);
    for (const Row& r : rows) {
      o << csv_line(r, columns);
    }
  });
}

ResultFiles ResultFiles::in(const std::filesystem::path& dir, std::optional<int> shard) {
  const std::string stem = shard ? "results.shard-" + std::to_string(*shard) : "results";
  return ResultFiles{dir / (stem + ".jsonl"), dir / (stem + ".csv"), dir / ("." + stem + ".lock")};
}

FileLock::FileLock(const std::filesystem::path& file, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) {
    throw ConfigError("cannot create " + file.parent_path().string() + ": " + ec.message());
  }
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw ConfigError("cannot open " + file.string() + ": " + std::strerror(errno));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw ConfigError("another process is writing " + what + " (it holds the lock " + file.string() + ")");
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

ResultLog::ResultLog(ResultFiles files, std::vector<std::string> columns, bool drop_failed, std::ostream& err)
    : files_(std::move(files)), lock_(files_.lock, files_.jsonl.string()), columns_(std::move(columns)) {
  ReadRows read = read_rows(files_.jsonl);
  if (read.torn_bytes > 0) {
    err << "sweep: " << files_.jsonl.string() << ": dropping a partial last line (" << read.torn_bytes
        << " bytes, a write cut short)\n";
  }
  if (read.bad_lines > 0) {
    err << "sweep: " << files_.jsonl.string() << ": dropping " << read.bad_lines << " unreadable line(s)\n";
  }
  if (read.duplicates > 0) {
    err << "sweep: " << files_.jsonl.string() << ": dropping " << read.duplicates << " repeated row(s)\n";
  }
  const std::size_t before = read.rows.size();
  if (drop_failed) {
    std::erase_if(read.rows, [](const Row& r) { return r.status == RunStatus::FAILED; });
    if (read.rows.size() != before) {
      err << "sweep: retrying " << before - read.rows.size() << " failed configuration(s)\n";
    }
  }
  existing_ = std::move(read.rows);
  // The jsonl is the record; rewrite it only when something was dropped. The CSV is always
  // rebuilt from it (it may lack the last row, or hold a partial one).
  if (read.torn_bytes > 0 || read.bad_lines > 0 || read.duplicates > 0 || existing_.size() != before) {
    write_file_atomically(files_.jsonl, [&](std::ostream& o) {
      for (const Row& r : existing_) {
        o << json_line(r);
      }
    });
  }
  write_file_atomically(files_.csv, [&](std::ostream& o) {
    o << csv_header(columns_);
    for (const Row& r : existing_) {
      o << csv_line(r, columns_);
    }
  });
  open_for_append();
}

ResultLog::~ResultLog() {
  close_files();
}

void ResultLog::open_for_append() {
  jsonl_fd_ = ::open(files_.jsonl.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  csv_fd_ = ::open(files_.csv.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (jsonl_fd_ < 0 || csv_fd_ < 0) {
    const std::string why = std::strerror(errno);
    close_files();
    throw Error("cannot open " + files_.jsonl.string() + " for appending: " + why);
  }
}

void ResultLog::close_files() {
  if (jsonl_fd_ >= 0) {
    ::close(jsonl_fd_);
    jsonl_fd_ = -1;
  }
  if (csv_fd_ >= 0) {
    ::close(csv_fd_);
    csv_fd_ = -1;
  }
}

void ResultLog::append(const Row& row) {
  write_all(jsonl_fd_, json_line(row), files_.jsonl);
  write_all(csv_fd_, csv_line(row, columns_), files_.csv);
  appended_.push_back(row);
}

void ResultLog::rewrite_sorted() {
  std::vector<Row> all = existing_;
  all.insert(all.end(), appended_.begin(), appended_.end());
  sort_rows(all);
  close_files();
  write_results(files_.jsonl, files_.csv, all, columns_);
  existing_ = std::move(all);
  appended_.clear();
  open_for_append();
}

} // namespace stepsim::sweep
