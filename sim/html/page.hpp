#pragma once
// The HTML report (docs/report.md): one self-contained page (inline CSS, SVG drawn here, a few
// lines of JavaScript that sort tables; no network) with the summary figures, per-stage bars of
// compute / bubble / exposed communication, the memory ledger per stage and over time, a
// timeline of one pipeline, and the tables and plots of a sweep or plan folder. Every part is
// optional: a page shows what its input holds.

#include "core/counter_series.hpp"

#include <nlohmann/json.hpp>

#include <istream>
#include <ostream>
#include <string>
#include <vector>

namespace stepsim::html {

/// One task of the pipeline the timeline draws.
struct Slice {
  int stage = 0;
  int rank = 0;
  std::string stream; ///< lane within the GPU: compute, tp, pp, dp, ...
  std::string kind;   ///< what colours it: fwd, bwd, opt, or the communication group
  std::string label;  ///< tooltip text
  double start_s = 0;
  double end_s = 0;
};

/// A table shown sortable (click a header; `#sort=COLUMN` in the page's address sorts on load).
struct Table {
  std::string caption;
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

/// A PNG embedded as a data: URI.
struct Image {
  std::string caption;
  std::string png; ///< the file's bytes
};

struct PageInput {
  std::string title;
  nlohmann::ordered_json summary;    ///< summary.json of a run; null: none
  nlohmann::ordered_json ledger;     ///< the per-stage memory ledger (api::memory_json's form); null: none
  std::vector<Slice> timeline;       ///< one pipeline's tasks; empty: no timeline
  std::vector<CounterSeries> memory; ///< bytes in use over time, one series per GPU of that pipeline
  std::vector<Table> tables;
  std::vector<Image> images;
};

/// Writes the page. Same input, same bytes.
void write_page(std::ostream& out, const PageInput& in);

/// The tasks of one pipeline (per stage, the lowest rank holding it) from a task CSV as
/// trace::write_task_csv writes it. Throws ConfigError naming `source` when a column is missing
/// or a value is malformed.
std::vector<Slice> pipeline_from_task_csv(std::istream& csv, const std::string& source);

/// Parses CSV text (RFC 4180 quoting) into a table, the first line its header. Throws ConfigError
/// naming `source` on a row whose width differs from the header's.
Table table_from_csv(std::istream& csv, const std::string& source, const std::string& caption);

/// What an output folder holds, for the page: summary.json (a run), tasks.csv (the timeline),
/// every other *.csv (sweep or plan results: a table each) and every PNG in it or in plots/.
/// Throws ConfigError when the folder does not exist or holds none of these.
PageInput read_folder(const std::string& dir);

} // namespace stepsim::html
