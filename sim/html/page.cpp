#include "html/page.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

namespace stepsim::html {

namespace {

using nlohmann::ordered_json;

constexpr double GIB = 1024.0 * 1024.0 * 1024.0;
constexpr int WIDTH = 960;       // drawing width of every SVG, pixels
constexpr int LABEL_WIDTH = 170; // left margin for lane and stage labels

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string format(const char* pattern, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, pattern, v);
  return buf;
}

// Seconds with four significant digits in s, ms or us (docs/report.md).
std::string seconds(double s) {
  if (std::abs(s) >= 1 || s == 0)
    return format("%.4g s", s);
  if (std::abs(s) >= 1e-3)
    return format("%.4g ms", s * 1e3);
  return format("%.4g us", s * 1e6);
}
std::string percent(double fraction) {
  return format("%.1f %%", 100 * fraction);
}
std::string gib(double bytes) {
  return format("%.2f GiB", bytes / GIB);
}
std::string coordinate(double v) {
  return format("%.2f", v);
}

// The colour of a slice, bar or series by what it is: compute passes, then communication groups.
std::string colour(const std::string& kind) {
  static const std::map<std::string, std::string> colours = {
      {"compute", "#0072b2"},   {"forward", "#0072b2"},     {"backward", "#56b4e9"}, {"optimizer", "#009e73"},
      {"bubble", "#d9d9d9"},    {"tp", "#e69f00"},          {"pp", "#cc79a7"},       {"dp", "#d55e00"},
      {"ep", "#009e73"},        {"cp", "#f0e442"},          {"other", "#ffffff"},    {"weights", "#0072b2"},
      {"gradients", "#56b4e9"}, {"activations", "#e69f00"},
  };
  const auto it = colours.find(kind);
  return it == colours.end() ? "#999999" : it->second;
}

// One row of a figures table; `data-key` and `data-value` carry the summary.json key and value.
void figure(std::ostream& out, const std::string& label, const std::string& key, const ordered_json& value,
            const std::string& text) {
  out << "<tr><th>" << escape(label) << "</th><td class=\"fig\" data-key=\"" << escape(key)
      << "\" data-value=\"" << escape(value.dump()) << "\">" << escape(text) << "</td></tr>\n";
}

double number(const ordered_json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

void summary_section(std::ostream& out, const ordered_json& s) {
  out << "<section id=\"summary\"><h2>Summary</h2>\n<table class=\"figures\">\n";
  const double T = number(s, "step_time_s");
  figure(out, "GPUs (simulated)", "num_gpus", s.value("num_gpus", ordered_json()),
         s.value("num_gpus", ordered_json()).dump() + " (" +
             s.value("simulated_gpus", ordered_json()).dump() + ")");
  figure(out, "micro-batches per pipeline", "micro_batches", s.value("micro_batches", ordered_json()),
         s.value("micro_batches", ordered_json()).dump());
  figure(out, "step time", "step_time_s", s.value("step_time_s", ordered_json()), seconds(T));
  figure(out, "tokens/s", "tokens_per_s", s.value("tokens_per_s", ordered_json()),
         format("%.0f", number(s, "tokens_per_s")));
  figure(out, "model TFLOP/s per GPU", "tflops_per_gpu", s.value("tflops_per_gpu", ordered_json()),
         format("%.1f", number(s, "tflops_per_gpu")));
  figure(out, "MFU", "mfu", s.value("mfu", ordered_json()), percent(number(s, "mfu")));
  figure(out, "HFU", "hfu", s.value("hfu", ordered_json()), percent(number(s, "hfu")));
  figure(out, "pipeline bubble", "bubble_fraction", s.value("bubble_fraction", ordered_json()),
         percent(number(s, "bubble_fraction")));
  figure(out, "compute per GPU", "compute_s", s.value("compute_s", ordered_json()),
         seconds(number(s, "compute_s")));
  if (const auto exposed = s.find("exposed_comm_s"); exposed != s.end() && exposed->is_object())
    for (const auto& [group, v] : exposed->items())
      if (v.is_number())
        figure(out, "exposed " + group + " communication", "exposed_comm_s." + group, v,
               seconds(v.get<double>()));
  figure(out, "other idle", "other_idle_s", s.value("other_idle_s", ordered_json()),
         seconds(number(s, "other_idle_s")));
  if (const auto m = s.find("memory"); m != s.end() && m->is_object()) {
    figure(out, "peak memory per GPU", "memory.peak_bytes", m->value("peak_bytes", ordered_json()),
           gib(number(*m, "peak_bytes")));
    figure(out, "GPU memory", "memory.capacity_bytes", m->value("capacity_bytes", ordered_json()),
           gib(number(*m, "capacity_bytes")));
  }
  const bool fits = s.value("fits_in_memory", true);
  figure(out, "fits in memory", "fits_in_memory", fits, fits ? "yes" : "NO");
  out << "</table></section>\n";
}

// A horizontal stacked bar: parts (kind, value, tooltip) scaled so that `full` spans the width.
struct Part {
  std::string kind;
  double value;
  std::string tip;
};
void stacked_bar(std::ostream& out, double y, double height, double full, const std::vector<Part>& parts) {
  double x = LABEL_WIDTH;
  const double span = WIDTH - LABEL_WIDTH - 10;
  for (const Part& p : parts) {
    if (p.value <= 0 || full <= 0)
      continue;
    const double w = span * p.value / full;
    out << "<rect x=\"" << coordinate(x) << "\" y=\"" << coordinate(y) << "\" width=\"" << coordinate(w)
        << "\" height=\"" << coordinate(height) << "\" fill=\"" << colour(p.kind)
        << "\" stroke=\"#444\" stroke-width=\"0.3\"><title>" << escape(p.tip) << "</title></rect>\n";
    x += w;
  }
}

void legend(std::ostream& out, const std::vector<std::string>& kinds, const std::vector<std::string>& names) {
  out << "<p class=\"legend\">";
  for (std::size_t i = 0; i < kinds.size(); ++i)
    out << "<span><i style=\"background:" << colour(kinds[i]) << "\"></i>" << escape(names[i]) << "</span> ";
  out << "</p>\n";
}

void stages_section(std::ostream& out, const ordered_json& s) {
  const auto stages = s.find("stages");
  const double T = number(s, "step_time_s");
  if (stages == s.end() || !stages->is_array() || stages->empty() || T <= 0)
    return;
  std::vector<std::string> groups; // in first-seen order
  for (const auto& st : *stages)
    if (const auto e = st.find("exposed_comm_s"); e != st.end() && e->is_object())
      for (const auto& [g, v] : e->items())
        if (v.is_number() && std::find(groups.begin(), groups.end(), g) == groups.end())
          groups.push_back(g);
  const double row = 22;
  out << "<section id=\"stages\"><h2>Per pipeline stage: where the step goes (mean per GPU)</h2>\n";
  std::vector<std::string> kinds = {"compute", "bubble"}, names = {"compute", "pipeline bubble"};
  for (const std::string& g : groups) {
    kinds.push_back(g);
    names.push_back("exposed " + g);
  }
  kinds.push_back("other");
  names.push_back("other idle");
  legend(out, kinds, names);
  out << "<svg class=\"chart\" width=\"" << WIDTH << "\" height=\"" << coordinate(row * stages->size() + 24)
      << "\" viewBox=\"0 0 " << WIDTH << ' ' << coordinate(row * stages->size() + 24) << "\">\n";
  double y = 4;
  for (const auto& st : *stages) {
    const int stage = st.value("stage", 0);
    std::vector<Part> parts;
    const double compute = number(st, "compute_s"), bubble = number(st, "bubble_fraction") * T;
    parts.push_back({"compute", compute, "stage " + std::to_string(stage) + " compute " + seconds(compute)});
    parts.push_back(
        {"bubble", bubble, "stage " + std::to_string(stage) + " pipeline bubble " + seconds(bubble)});
    double used = compute + bubble;
    if (const auto e = st.find("exposed_comm_s"); e != st.end() && e->is_object())
      for (const std::string& g : groups) {
        const double v = number(*e, g.c_str());
        parts.push_back({g, v, "stage " + std::to_string(stage) + " exposed " + g + " " + seconds(v)});
        used += v;
      }
    parts.push_back(
        {"other", T - used, "stage " + std::to_string(stage) + " other idle " + seconds(T - used)});
    out << "<text x=\"4\" y=\"" << coordinate(y + 14) << "\">stage " << stage << "</text>\n";
    stacked_bar(out, y, row - 6, T, parts);
    y += row;
  }
  out << "<text x=\"" << LABEL_WIDTH << "\" y=\"" << coordinate(y + 12) << "\">0</text><text x=\""
      << WIDTH - 10 << "\" y=\"" << coordinate(y + 12) << "\" text-anchor=\"end\">" << escape(seconds(T))
      << " (step)</text>\n";
  out << "</svg>\n<table class=\"sortable\"><thead><tr><th>stage</th><th>compute</th><th>bubble</th>";
  for (const std::string& g : groups)
    out << "<th>exposed " << escape(g) << "</th>";
  out << "</tr></thead><tbody>\n";
  for (const auto& st : *stages) {
    out << "<tr><td>" << st.value("stage", 0) << "</td><td>" << escape(seconds(number(st, "compute_s")))
        << "</td><td>" << escape(percent(number(st, "bubble_fraction"))) << "</td>";
    for (const std::string& g : groups) {
      const auto e = st.find("exposed_comm_s");
      out << "<td>" << escape(seconds(e != st.end() && e->is_object() ? number(*e, g.c_str()) : 0.0))
          << "</td>";
    }
    out << "</tr>\n";
  }
  out << "</tbody></table></section>\n";
}

void memory_section(std::ostream& out, const ordered_json& summary, const ordered_json& ledger) {
  static const char* parts[] = {"weights", "gradients", "optimizer", "activations", "other"};
  struct Stage {
    int stage;
    std::vector<double> bytes; // per part; a single "peak" when only peaks are known
  };
  std::vector<Stage> stages;
  double capacity = 0;
  bool detailed = false;
  if (ledger.is_object() && ledger.contains("stages")) {
    detailed = true;
    capacity = number(ledger, "capacity_bytes");
    for (const auto& st : ledger["stages"]) {
      Stage s{st.value("stage", 0), {}};
      for (const char* p : parts)
        s.bytes.push_back(number(st, (std::string(p) + "_bytes").c_str()));
      stages.push_back(s);
    }
  } else if (const auto m = summary.find("memory"); m != summary.end() && m->is_object()) {
    capacity = number(*m, "capacity_bytes");
    int i = 0;
    for (const auto& peak : m->value("stage_peak_bytes", ordered_json::array()))
      stages.push_back({i++, {peak.is_number() ? peak.get<double>() : 0.0}});
  }
  if (stages.empty())
    return;
  double full = capacity;
  for (const Stage& s : stages) {
    double total = 0;
    for (const double b : s.bytes)
      total += b;
    full = std::max(full, total);
  }
  const double row = 22;
  out << "<section id=\"memory\"><h2>Memory per GPU, per pipeline stage</h2>\n";
  if (detailed)
    legend(out, {"weights", "gradients", "optimizer", "activations", "overhead"},
           {"weights", "gradients", "optimizer states", "activations", "other"});
  out << "<svg class=\"chart\" width=\"" << WIDTH << "\" height=\"" << coordinate(row * stages.size() + 24)
      << "\" viewBox=\"0 0 " << WIDTH << ' ' << coordinate(row * stages.size() + 24) << "\">\n";
  double y = 4;
  for (const Stage& s : stages) {
    std::vector<Part> bar;
    for (std::size_t i = 0; i < s.bytes.size(); ++i) {
      const std::string kind = !detailed ? "weights" : i == 4 ? "overhead" : parts[i];
      bar.push_back({kind, s.bytes[i],
                     "stage " + std::to_string(s.stage) + " " + (detailed ? std::string(parts[i]) : "peak") +
                         " " + gib(s.bytes[i])});
    }
    out << "<text x=\"4\" y=\"" << coordinate(y + 14) << "\">stage " << s.stage << "</text>\n";
    stacked_bar(out, y, row - 6, full, bar);
    y += row;
  }
  if (capacity > 0) {
    const double x = LABEL_WIDTH + (WIDTH - LABEL_WIDTH - 10) * capacity / full;
    out << "<line x1=\"" << coordinate(x) << "\" y1=\"0\" x2=\"" << coordinate(x) << "\" y2=\""
        << coordinate(y) << "\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/><text x=\"" << coordinate(x)
        << "\" y=\"" << coordinate(y + 12) << "\" text-anchor=\"end\" fill=\"#c00\">capacity "
        << escape(gib(capacity)) << "</text>\n";
  }
  out << "</svg>\n<table class=\"sortable\"><thead><tr><th>stage</th>";
  if (detailed)
    for (const char* p : parts)
      out << "<th>" << p << " (GiB)</th>";
  out << "<th>peak (GiB)</th></tr></thead><tbody>\n";
  for (const Stage& s : stages) {
    out << "<tr><td>" << s.stage << "</td>";
    double total = 0;
    for (const double b : s.bytes) {
      total += b;
      if (detailed)
        out << "<td>" << format("%.2f", b / GIB) << "</td>";
    }
    out << "<td>" << format("%.2f", total / GIB) << "</td></tr>\n";
  }
  out << "</tbody></table></section>\n";
}

void memory_time_section(std::ostream& out, const std::vector<CounterSeries>& series) {
  double t_max = 0, v_max = 0;
  for (const CounterSeries& c : series)
    for (const auto& [t, v] : c.samples) {
      t_max = std::max(t_max, t);
      v_max = std::max(v_max, v);
    }
  if (series.empty() || t_max <= 0 || v_max <= 0)
    return;
  const double height = 220, span = WIDTH - LABEL_WIDTH - 10;
  static const char* palette[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                  "#e69f00", "#56b4e9", "#000000"};
  out << "<section id=\"memory-time\"><h2>Memory in use over the step (one GPU per stage)</h2>\n<p "
         "class=\"legend\">";
  for (std::size_t i = 0; i < series.size(); ++i)
    out << "<span><i style=\"background:" << palette[i % 7] << "\"></i>GPU " << series[i].gpu << "</span> ";
  out << "</p>\n<svg class=\"chart\" width=\"" << WIDTH << "\" height=\"" << height + 24
      << "\" viewBox=\"0 0 " << WIDTH << ' ' << height + 24 << "\">\n";
  auto x_of = [&](double t) { return coordinate(LABEL_WIDTH + span * t / t_max); };
  auto y_of = [&](double v) { return coordinate(4 + (height - 8) * (1 - v / v_max)); };
  for (std::size_t i = 0; i < series.size(); ++i) {
    out << "<polyline fill=\"none\" stroke=\"" << palette[i % 7] << "\" stroke-width=\"1.2\" points=\"";
    double last = 0;
    for (const auto& [t, v] : series[i].samples) {
      out << x_of(t) << ',' << y_of(last) << ' ' << x_of(t) << ',' << y_of(v) << ' ';
      last = v;
    }
    out << x_of(t_max) << ',' << y_of(last) << "\"><title>GPU " << series[i].gpu << "</title></polyline>\n";
  }
  out << "<text x=\"4\" y=\"14\">" << escape(gib(v_max)) << "</text><text x=\"4\" y=\"" << height - 4
      << "\">0</text><text x=\"" << WIDTH - 10 << "\" y=\"" << height + 16 << "\" text-anchor=\"end\">"
      << escape(seconds(t_max)) << "</text>\n</svg></section>\n";
}

void timeline_section(std::ostream& out, const std::vector<Slice>& slices) {
  if (slices.empty())
    return;
  // Lanes: per stage, the compute stream first, then the others by name.
  using Lane = std::tuple<int, int, bool, std::string>; // stage, rank, not compute, stream
  std::map<Lane, std::size_t> lanes;
  double t_max = 0;
  std::set<std::string> kinds;
  for (const Slice& s : slices) {
    lanes.emplace(Lane{s.stage, s.rank, s.stream != "compute", s.stream}, 0);
    t_max = std::max(t_max, s.end_s);
    kinds.insert(s.kind);
  }
  if (t_max <= 0)
    return;
  std::size_t i = 0;
  for (auto& [lane, index] : lanes)
    index = i++;
  const double row = 16, span = WIDTH - LABEL_WIDTH - 10;
  out << "<section id=\"timeline\"><h2>Timeline of one pipeline</h2>\n";
  legend(out, {kinds.begin(), kinds.end()}, {kinds.begin(), kinds.end()});
  out << "<svg class=\"chart\" width=\"" << WIDTH << "\" height=\"" << coordinate(row * lanes.size() + 24)
      << "\" viewBox=\"0 0 " << WIDTH << ' ' << coordinate(row * lanes.size() + 24) << "\">\n";
  for (const auto& [lane, index] : lanes)
    out << "<text x=\"4\" y=\"" << coordinate(row * index + 12) << "\">stage " << std::get<0>(lane) << " GPU "
        << std::get<1>(lane) << ' ' << escape(std::get<3>(lane)) << "</text>\n";
  for (const Slice& s : slices) {
    const std::size_t index = lanes.at(Lane{s.stage, s.rank, s.stream != "compute", s.stream});
    const double x = LABEL_WIDTH + span * s.start_s / t_max;
    const double w = std::max(0.3, span * (s.end_s - s.start_s) / t_max);
    out << "<rect x=\"" << coordinate(x) << "\" y=\"" << coordinate(row * index + 2) << "\" width=\""
        << coordinate(w) << "\" height=\"" << coordinate(row - 4) << "\" fill=\"" << colour(s.kind)
        << "\"><title>" << escape(s.label) << ' ' << escape(seconds(s.start_s)) << " + "
        << escape(seconds(s.end_s - s.start_s)) << "</title></rect>\n";
  }
  out << "<text x=\"" << LABEL_WIDTH << "\" y=\"" << coordinate(row * lanes.size() + 16)
      << "\">0</text><text x=\"" << WIDTH - 10 << "\" y=\"" << coordinate(row * lanes.size() + 16)
      << "\" text-anchor=\"end\">" << escape(seconds(t_max)) << "</text>\n</svg></section>\n";
}

void table_section(std::ostream& out, const Table& t, std::size_t index) {
  out << "<section id=\"table-" << index << "\"><h2>" << escape(t.caption)
      << "</h2>\n<p class=\"hint\">Click a column to sort.</p>\n<div class=\"scroll\"><table "
         "class=\"sortable\"><thead><tr>";
  for (const std::string& c : t.columns)
    out << "<th>" << escape(c) << "</th>";
  out << "</tr></thead><tbody>\n";
  for (const auto& row : t.rows) {
    out << "<tr>";
    for (const std::string& cell : row)
      out << "<td>" << escape(cell) << "</td>";
    out << "</tr>\n";
  }
  out << "</tbody></table></div></section>\n";
}

std::string base64(const std::string& bytes) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    unsigned v = 0;
    for (std::size_t k = 0; k < 3; ++k)
      v = (v << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k)
      out += k <= n ? digits[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

constexpr const char* STYLE = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
table.figures th{text-align:left;background:#f4f4f4}
table.sortable th{cursor:pointer;background:#f4f4f4}
.scroll{max-height:600px;overflow:auto}
svg.chart{display:block;font-size:11px}
.legend span{margin-right:12px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;border:1px solid #888;vertical-align:middle}
.hint{color:#666;font-size:12px}
)";

// Sorts a table.sortable by the clicked column (numbers as numbers, again to reverse); on load,
// `#sort=COLUMN` (or `#sort=-COLUMN`, descending) sorts every table that has that column.
constexpr const char* SCRIPT = R"(
function cellValue(row, i) { const t = row.cells[i] ? row.cells[i].textContent.trim() : ''; const n = Number(t); return t !== '' && !isNaN(n) ? n : t; }
function sortTable(table, i, descending) {
  const body = table.tBodies[0]; const rows = Array.from(body.rows);
  rows.sort(function (a, b) {
    const x = cellValue(a, i), y = cellValue(b, i);
    let c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
    return descending ? -c : c;
  });
  rows.forEach(function (r) { body.appendChild(r); });
  table.dataset.sorted = (descending ? '-' : '') + i;
}
document.querySelectorAll('table.sortable').forEach(function (table) {
  Array.from(table.tHead.rows[0].cells).forEach(function (th, i) {
    th.addEventListener('click', function () { sortTable(table, i, table.dataset.sorted === String(i)); });
  });
});
const wanted = decodeURIComponent(location.hash).match(/^#sort=(-?)(.+)$/);
if (wanted) document.querySelectorAll('table.sortable').forEach(function (table) {
  Array.from(table.tHead.rows[0].cells).forEach(function (th, i) {
    if (th.textContent === wanted[2]) sortTable(table, i, wanted[1] === '-');
  });
});
)";

} // namespace

void write_page(std::ostream& out, const PageInput& in) {
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << escape(in.title)
      << "</title>\n<style>" << STYLE << "</style></head>\n<body>\n<h1>" << escape(in.title) << "</h1>\n";
  if (in.summary.is_object()) {
    summary_section(out, in.summary);
    stages_section(out, in.summary);
  }
  memory_section(out, in.summary.is_object() ? in.summary : ordered_json::object(), in.ledger);
  memory_time_section(out, in.memory);
  timeline_section(out, in.timeline);
  for (std::size_t i = 0; i < in.tables.size(); ++i)
    table_section(out, in.tables[i], i);
  if (!in.images.empty()) {
    out << "<section id=\"plots\"><h2>Plots</h2>\n";
    for (const Image& img : in.images)
      out << "<figure><img alt=\"" << escape(img.caption) << "\" src=\"data:image/png;base64,"
          << base64(img.png) << "\"><figcaption>" << escape(img.caption) << "</figcaption></figure>\n";
    out << "</section>\n";
  }
  out << "<script>" << SCRIPT << "</script>\n</body></html>\n";
}

} // namespace stepsim::html
