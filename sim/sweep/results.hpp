#pragma once
// Sweep results: one row per configuration, kept in two files that grow by appending.
//
// results.jsonl is the record: one JSON object per line (id, index, swept values, status,
// reason, the GPU memory capacity and the full summary). results.csv is derived from it, one
// line per row with fixed columns. A row is appended to each file with a single write() of the
// complete line (O_APPEND) followed by fsync(), jsonl first; on opening, a trailing partial line
// is cut off and the CSV is rebuilt from the jsonl, so a kill at any moment leaves no torn or
// duplicated row.

#include "core/vocabulary.hpp"
#include "sweep/plan.hpp"

#include <cstddef>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace stepsim::sweep {

struct Row {
  std::string id;
  std::size_t index = 0;
  std::vector<KeyValue> config; ///< swept keys set by this configuration, in column order
  RunStatus status = RunStatus::OK;
  std::string reason;            ///< why skipped or failed; "" when ok
  double hbm_capacity_bytes = 0; ///< the cluster's GPU memory; 0 when the cluster did not load
  std::string summary_json;      ///< compact summary.json of an ok row, else ""
};

/// The CSV header line (with '\n'): id, index, the swept keys, status, reason, then the metrics.
std::string csv_header(const std::vector<std::string>& columns);
/// One CSV line (with '\n'). Metrics absent from the summary (or all of them, for a row that is
/// not ok) are empty cells. Numbers in shortest round-trip form.
std::string csv_line(const Row& row, const std::vector<std::string>& columns);
/// One JSON line (with '\n'), keys in a fixed order.
std::string json_line(const Row& row);
/// Parses one JSON line (without '\n'); nullopt when it is not a row.
std::optional<Row> parse_json_line(std::string_view line);

/// Orders rows by (index, id).
void sort_rows(std::vector<Row>& rows);

/// What reading a jsonl file found.
struct ReadRows {
  std::vector<Row> rows;      ///< complete, parseable lines, first occurrence of each id
  std::size_t torn_bytes = 0; ///< bytes after the last '\n' (a write cut short)
  std::size_t bad_lines = 0;  ///< complete lines that are not rows
  std::size_t duplicates = 0; ///< lines repeating an id already read
};

/// Reads a jsonl results file; a missing file reads as empty. Throws Error when it cannot be read.
ReadRows read_rows(const std::filesystem::path& jsonl);

/// Replaces `jsonl` and `csv` (each atomically) with `rows` in the given order.
void write_results(const std::filesystem::path& jsonl, const std::filesystem::path& csv,
                   const std::vector<Row>& rows, const std::vector<std::string>& columns);

/// File names of one result set in DIR: results.{jsonl,csv}, or results.shard-I.{jsonl,csv}.
struct ResultFiles {
  std::filesystem::path jsonl;
  std::filesystem::path csv;
  std::filesystem::path lock; ///< held (flock) while a process writes this set

  static ResultFiles in(const std::filesystem::path& dir, std::optional<int> shard);
};

/// An exclusive flock on a file (created if missing), released on destruction.
class FileLock {
public:
  /// Throws ConfigError naming `what` when another process holds the lock.
  FileLock(const std::filesystem::path& file, const std::string& what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

private:
  int fd_ = -1;
};

/// The append-only log of one result set, held by one process at a time.
class ResultLog {
public:
  /// Takes the lock (throws ConfigError when another process holds it), reads the jsonl,
  /// cuts off a trailing partial line, drops failed rows when `drop_failed`, rebuilds the CSV
  /// from the jsonl and opens both for appending. `err` receives notes on what was repaired.
  ResultLog(ResultFiles files, std::vector<std::string> columns, bool drop_failed, std::ostream& err);
  ~ResultLog();
  ResultLog(const ResultLog&) = delete;
  ResultLog& operator=(const ResultLog&) = delete;

  /// Rows present when the log was opened (after repair), in file order.
  [[nodiscard]] const std::vector<Row>& existing() const { return existing_; }

  /// Appends one row to both files (jsonl, fsync, csv, fsync). Throws Error on I/O failure.
  void append(const Row& row);

  /// Rewrites both files with every row sorted by (index, id); appending continues afterwards.
  void rewrite_sorted();

private:
  void open_for_append();
  void close_files();

  ResultFiles files_;
  FileLock lock_;
  std::vector<std::string> columns_;
  std::vector<Row> existing_;
  std::vector<Row> appended_;
  int jsonl_fd_ = -1;
  int csv_fd_ = -1;
};

} // namespace stepsim::sweep
