#include "kernels/profile.hpp"

#include "core/error.hpp"
#include "core/input_file.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace stepsim::kernels {

namespace {

constexpr const char* kShapeColumns = "kernel,dtype,shape";
constexpr const char* kProfileColumns = "kernel,dtype,shape,time_s,flop_per_s,byte_per_s,impl";
constexpr const char* kTimesColumns = "kernel,dtype,shape,time_s,impl";

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(trim(cur));
  return out;
}

bool parse_int(const std::string& text, int64_t& out) {
  const char* b = text.data();
  const char* e = text.data() + text.size();
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && p == e && !text.empty();
}

bool parse_double(const std::string& text, double& out) {
  if (text.empty())
    return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size() && std::isfinite(out);
}

std::string fmt(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", digits, v);
  return buf;
}

[[noreturn]] void fail(const std::string& origin, int line, const std::string& what) {
  throw ConfigError(origin + ":" + std::to_string(line) + ": " + what);
}

/// True for a `# format: ...` comment line, after checking it names `expected`.
bool format_line(const std::string& origin, int line, const std::string& text, const char* expected) {
  if (text.rfind("format:", 0) != 0)
    return false;
  const std::string value = trim(text.substr(7));
  if (value != expected)
    fail(origin, line, "format '" + value + "' is not " + expected);
  return true;
}

/// Parses "kernel,dtype,shape" (the first three columns). Returns "" or the reason.
std::string parse_shape_columns(const std::vector<std::string>& cols, KernelShape& out) {
  KernelKind kind{};
  Dtype dtype{};
  if (!parse_kind(cols[0], kind))
    return "unknown kernel '" + cols[0] + "'";
  if (!parse_dtype(cols[1], dtype))
    return "unknown dtype '" + cols[1] + "'";
  return parse_shape_fields(kind, dtype, cols[2], out);
}

/// Yields the non-blank, non-comment lines with their numbers; comment lines go to `on_comment`.
template <class OnComment, class OnLine>
void scan_lines(std::istream& in, OnComment on_comment, OnLine on_line) {
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    const std::string text = trim(raw);
    if (text.empty())
      continue;
    if (text[0] == '#') {
      on_comment(line, trim(text.substr(1)));
    } else {
      on_line(line, text);
    }
  }
}

} // namespace

const char* to_string(Provenance p) {
  return p == Provenance::MEASURED ? "measured" : "modelled";
}

std::string parse_shape_fields(KernelKind kind, Dtype dtype, const std::string& text, KernelShape& out) {
  KernelShape s;
  s.kind = kind;
  s.dtype = dtype;
  std::map<std::string, int64_t*> slots;
  int64_t causal = -1;
  switch (family(kind)) {
  case KernelFamily::GEMM:
    slots = {{"batch", &s.batch}, {"m", &s.m}, {"n", &s.n}, {"k", &s.k}};
    break;
  case KernelFamily::ATTENTION:
    slots = {{"batch", &s.batch}, {"heads", &s.heads},       {"kv_heads", &s.kv_heads},
             {"seq", &s.seq},     {"head_dim", &s.head_dim}, {"causal", &causal}};
    break;
  case KernelFamily::ROWWISE:
    slots = {{"rows", &s.rows}, {"cols", &s.cols}};
    break;
  case KernelFamily::ELEMENTWISE:
    slots = {{"elements", &s.elements}};
    break;
  }
  std::set<std::string> seen;
  for (const std::string& item : split(text, ';')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      return "shape item '" + item + "' is not key=value";
    const std::string key = trim(item.substr(0, eq));
    const std::string value = trim(item.substr(eq + 1));
    auto it = slots.find(key);
    if (it == slots.end()) {
      std::string keys;
      for (const auto& [k, p] : slots)
        keys += (keys.empty() ? "" : ", ") + k;
      return "unknown shape key '" + key + "' for " + to_string(kind) + " (expected " + keys + ")";
    }
    if (!seen.insert(key).second)
      return "shape key '" + key + "' given twice";
    if (!parse_int(value, *it->second))
      return "shape key '" + key + "': '" + value + "' is not an integer";
  }
  // A GEMM's batch is optional: absent means one product.
  if (family(kind) == KernelFamily::GEMM && !seen.count("batch"))
    s.batch = 1;
  for (const auto& [k, p] : slots) {
    if (!seen.count(k) && !(family(kind) == KernelFamily::GEMM && k == "batch"))
      return "shape lacks '" + k + "'";
  }
  if (family(kind) == KernelFamily::ATTENTION) {
    if (causal != 0 && causal != 1)
      return "shape key 'causal' must be 0 or 1";
    s.causal = causal == 1;
  }
  std::string why = validate(s);
  if (!why.empty())
    return why;
  out = s;
  return "";
}

namespace {

/// What parse_profile has read so far.
struct ProfileParse {
  const std::string& origin;
  KernelProfile profile{};
  std::set<std::string> seen_keys{};
  std::set<KernelShape> seen_shapes{};
  bool have_columns = false;
  bool have_format = false;
};

/// One `# key: value` header line of a profile.
struct HeaderLine {
  const std::string& origin;
  int line;
  const std::string& key;
  const std::string& value;
};

double header_number(const HeaderLine& h) {
  double out = 0;
  if (!parse_double(h.value, out))
    fail(h.origin, h.line, "header key '" + h.key + "': '" + h.value + "' is not a number");
  return out;
}

int64_t header_integer(const HeaderLine& h) {
  int64_t out = 0;
  if (!parse_int(h.value, out))
    fail(h.origin, h.line, "header key '" + h.key + "': '" + h.value + "' is not an integer");
  return out;
}

/// The header keys whose value is kept as written. Returns false for any other key.
bool read_text_key(const HeaderLine& l, ProfileHeader& h) {
  if (l.key == "gpu")
    h.gpu = l.value;
  else if (l.key == "gpu_kind")
    h.gpu_kind = l.value;
  else if (l.key == "compute_capability")
    h.compute_capability = l.value;
  else if (l.key == "driver")
    h.driver = l.value;
  else if (l.key == "cuda")
    h.cuda = l.value;
  else if (l.key == "date")
    h.date = l.value;
  else if (l.key == "tool")
    h.tool = l.value;
  else if (l.key == "source")
    h.sources.push_back(l.value);
  else if (l.key == "note")
    h.notes.push_back(l.value);
  else
    return false;
  return true;
}

/// The header keys with a checked value (format, obtained, numbers), or fails on an unknown key.
void read_checked_key(const HeaderLine& l, ProfileParse& st) {
  ProfileHeader& h = st.profile.header;
  if (l.key == "format") {
    if (l.value != kProfileFormat)
      fail(l.origin, l.line, "format '" + l.value + "' is not " + kProfileFormat);
    st.have_format = true;
  } else if (l.key == "obtained") {
    if (l.value == "measured")
      h.obtained = Provenance::MEASURED;
    else if (l.value == "modelled")
      h.obtained = Provenance::MODELLED;
    else
      fail(l.origin, l.line, "obtained: '" + l.value + "' is neither 'measured' nor 'modelled'");
  } else if (l.key == "sm_count") {
    const int64_t i = header_integer(l);
    if (i <= 0)
      fail(l.origin, l.line, "sm_count must be > 0");
    h.sm_count = static_cast<int>(i);
  } else if (l.key == "sm_clock_mhz") {
    h.sm_clock_mhz = header_number(l);
  } else if (l.key == "mem_clock_mhz") {
    h.mem_clock_mhz = header_number(l);
  } else if (l.key == "l2_bytes") {
    h.l2_bytes = header_integer(l);
  } else if (l.key == "launch_overhead_s") {
    const double x = header_number(l);
    if (x <= 0 || x > 1e-3)
      fail(l.origin, l.line, "launch_overhead_s must be in (0, 1e-3] seconds");
    h.launch_overhead = Seconds(x);
  } else if (l.key == "overlap_slowdown") {
    const double x = header_number(l);
    if (x < 1.0 || x > 3.0)
      fail(l.origin, l.line, "overlap_slowdown must be in [1, 3]");
    h.overlap_slowdown = x;
  } else {
    fail(l.origin, l.line,
         "unknown header key '" + l.key +
             "' (expected format, gpu, gpu_kind, obtained, sm_count, compute_capability, "
             "sm_clock_mhz, mem_clock_mhz, l2_bytes, driver, cuda, date, tool, "
             "launch_overhead_s, overlap_slowdown, source, note)");
  }
}

/// A comment line: a `key: value` header entry (lower-case key), or a free comment.
void read_profile_comment(ProfileParse& st, int line, const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos)
    return; // free comment
  const std::string key = text.substr(0, colon);
  if (key.empty() || key.find_first_not_of("abcdefghijklmnopqrstuvwxyz_0-9") != std::string::npos)
    return; // free comment that happens to contain ':'
  if (st.have_columns)
    fail(st.origin, line, "header key '" + key + "' after the first row");
  const std::string value = trim(text.substr(colon + 1));
  const bool repeatable = key == "source" || key == "note";
  if (!repeatable && !st.seen_keys.insert(key).second)
    fail(st.origin, line, "header key '" + key + "' given twice");
  const HeaderLine l{.origin = st.origin, .line = line, .key = key, .value = value};
  if (!read_text_key(l, st.profile.header))
    read_checked_key(l, st);
}

/// The column line, which ends the header: it must hold the format and the required keys.
void read_profile_columns(ProfileParse& st, int line, const std::string& text) {
  if (text != kProfileColumns)
    fail(st.origin, line, std::string("expected the column line '") + kProfileColumns + "'");
  st.have_columns = true;
  if (!st.have_format)
    fail(st.origin, line, std::string("missing header key 'format: ") + kProfileFormat + "'");
  for (const char* key : {"gpu_kind", "obtained", "sm_count", "launch_overhead_s", "overlap_slowdown"}) {
    if (!st.seen_keys.count(key))
      fail(st.origin, line, std::string("missing header key '") + key + "'");
  }
}

/// True when two rates agree within 1 %.
bool rates_agree(double a, double b) {
  return std::fabs(a - b) <= 0.01 * std::max(std::fabs(a), std::fabs(b)) + 1e-30;
}

/// One data row: kernel, dtype, shape, time and the two derived rates, which must agree with them.
ProfileRow parse_profile_row(const std::string& origin, int line, const std::string& text) {
  const std::vector<std::string> cols = split(text, ',');
  if (cols.size() != 7)
    fail(origin, line,
         "expected 7 columns (" + std::string(kProfileColumns) + "), got " + std::to_string(cols.size()));
  ProfileRow row;
  std::string why = parse_shape_columns(cols, row.shape);
  if (!why.empty())
    fail(origin, line, why);
  double t = 0;
  double flop_s = 0;
  double byte_s = 0;
  if (!parse_double(cols[3], t) || t <= 0)
    fail(origin, line, "time_s '" + cols[3] + "' is not a positive number");
  if (!parse_double(cols[4], flop_s) || flop_s < 0)
    fail(origin, line, "flop_per_s '" + cols[4] + "' is not a number >= 0");
  if (!parse_double(cols[5], byte_s) || byte_s < 0)
    fail(origin, line, "byte_per_s '" + cols[5] + "' is not a number >= 0");
  row.time = Seconds(t);
  // The rates are derived columns for readers; they must agree with the shape and time.
  const double want_flop_s = kernel_flops(row.shape).value() / t;
  const double want_byte_s = kernel_bytes(row.shape).value() / t;
  if (!rates_agree(flop_s, want_flop_s))
    fail(origin, line,
         "flop_per_s " + cols[4] + " disagrees with the shape and time_s (expected " + fmt(want_flop_s, 4) +
             ")");
  if (!rates_agree(byte_s, want_byte_s))
    fail(origin, line,
         "byte_per_s " + cols[5] + " disagrees with the shape and time_s (expected " + fmt(want_byte_s, 4) +
             ")");
  row.impl = cols[6];
  if (row.impl.empty())
    fail(origin, line, "impl is empty");
  return row;
}

/// A non-comment line: the column line first, then one row per line.
void read_profile_line(ProfileParse& st, int line, const std::string& text) {
  if (!st.have_columns) {
    read_profile_columns(st, line, text);
    return;
  }
  ProfileRow row = parse_profile_row(st.origin, line, text);
  if (!st.seen_shapes.insert(row.shape).second)
    fail(st.origin, line, "duplicate row for " + describe(row.shape));
  st.profile.rows.push_back(std::move(row));
}

} // namespace

KernelProfile parse_profile(std::istream& in, const std::string& origin) {
  ProfileParse st{.origin = origin};
  st.profile.origin = origin;
  scan_lines(
      in, [&st](int line, const std::string& text) { read_profile_comment(st, line, text); },
      [&st](int line, const std::string& text) { read_profile_line(st, line, text); });
  if (!st.have_columns)
    fail(origin, 0, std::string("no column line '") + kProfileColumns + "' (empty profile?)");
  return std::move(st.profile);
}

KernelProfile read_profile(const std::filesystem::path& file) {
  std::istringstream in(read_input_file(file, "kernel profile", kMaxTableBytes));
  return parse_profile(in, file.string());
}

void write_profile(std::ostream& out, const KernelProfile& p) {
  const ProfileHeader& h = p.header;
  out << "# stepsim kernel profile (see docs/kernels.md)\n";
  out << "# format: " << kProfileFormat << "\n";
  out << "# gpu: " << h.gpu << "\n";
  out << "# gpu_kind: " << h.gpu_kind << "\n";
  out << "# obtained: " << to_string(h.obtained) << "\n";
  out << "# sm_count: " << h.sm_count << "\n";
  if (!h.compute_capability.empty())
    out << "# compute_capability: " << h.compute_capability << "\n";
  out << "# sm_clock_mhz: " << h.sm_clock_mhz << "\n";
  out << "# mem_clock_mhz: " << h.mem_clock_mhz << "\n";
  out << "# l2_bytes: " << h.l2_bytes << "\n";
  out << "# driver: " << h.driver << "\n";
  out << "# cuda: " << h.cuda << "\n";
  out << "# date: " << h.date << "\n";
  out << "# tool: " << h.tool << "\n";
  out << "# launch_overhead_s: " << fmt(h.launch_overhead.value(), 3) << "\n";
  out << "# overlap_slowdown: " << h.overlap_slowdown << "\n";
  for (const auto& s : h.sources)
    out << "# source: " << s << "\n";
  for (const auto& n : h.notes)
    out << "# note: " << n << "\n";
  out << kProfileColumns << "\n";
  for (const ProfileRow& r : p.rows) {
    const double t = r.time.value();
    out << to_string(r.shape.kind) << ',' << to_string(r.shape.dtype) << ',' << shape_fields(r.shape) << ','
        << fmt(t, 6) << ',' << fmt(kernel_flops(r.shape).value() / t, 4) << ','
        << fmt(kernel_bytes(r.shape).value() / t, 4) << ',' << r.impl << "\n";
  }
}

std::vector<KernelShape> parse_shape_list(std::istream& in, const std::string& origin) {
  std::vector<KernelShape> shapes;
  bool have_columns = false;
  auto on_comment = [&](int line, const std::string& text) {
    (void)format_line(origin, line, text, kShapeListFormat);
  };
  auto on_line = [&](int line, const std::string& text) {
    if (!have_columns) {
      if (text != kShapeColumns)
        fail(origin, line, std::string("expected the column line '") + kShapeColumns + "'");
      have_columns = true;
      return;
    }
    const std::vector<std::string> cols = split(text, ',');
    if (cols.size() != 3)
      fail(origin, line, "expected 3 columns (kernel,dtype,shape), got " + std::to_string(cols.size()));
    KernelShape s;
    std::string why = parse_shape_columns(cols, s);
    if (!why.empty())
      fail(origin, line, why);
    shapes.push_back(s);
  };
  scan_lines(in, on_comment, on_line);
  return shapes;
}

std::vector<KernelShape> read_shape_list(const std::filesystem::path& file) {
  std::istringstream in(read_input_file(file, "shape list", kMaxTableBytes));
  return parse_shape_list(in, file.string());
}

std::vector<ProfileRow> parse_time_list(std::istream& in, const std::string& origin) {
  std::vector<ProfileRow> rows;
  std::set<KernelShape> seen;
  bool have_format = false;
  bool have_columns = false;
  auto on_comment = [&](int line, const std::string& text) {
    have_format = format_line(origin, line, text, kTimesFormat) || have_format;
  };
  auto on_line = [&](int line, const std::string& text) {
    if (!have_columns) {
      if (text != kTimesColumns)
        fail(origin, line, std::string("expected the column line '") + kTimesColumns + "'");
      if (!have_format)
        fail(origin, line, std::string("missing header key 'format: ") + kTimesFormat + "'");
      have_columns = true;
      return;
    }
    const std::vector<std::string> cols = split(text, ',');
    if (cols.size() != 5)
      fail(origin, line,
           "expected 5 columns (" + std::string(kTimesColumns) + "), got " + std::to_string(cols.size()));
    ProfileRow row;
    std::string why = parse_shape_columns(cols, row.shape);
    if (!why.empty())
      fail(origin, line, why);
    double t = 0;
    if (!parse_double(cols[3], t) || t <= 0)
      fail(origin, line, "time_s '" + cols[3] + "' is not a positive number");
    row.time = Seconds(t);
    row.impl = cols[4];
    if (row.impl.empty())
      fail(origin, line, "impl is empty");
    if (!seen.insert(row.shape).second)
      fail(origin, line, "duplicate row for " + describe(row.shape));
    rows.push_back(std::move(row));
  };
  scan_lines(in, on_comment, on_line);
  if (!have_columns)
    fail(origin, 0, std::string("no column line '") + kTimesColumns + "'");
  return rows;
}

std::vector<ProfileRow> read_time_list(const std::filesystem::path& file) {
  std::istringstream in(read_input_file(file, "kernel time list", kMaxTableBytes));
  return parse_time_list(in, file.string());
}

void write_shape_list(std::ostream& out, const std::vector<KernelShape>& shapes,
                      const std::vector<std::string>& comments) {
  out << "# format: " << kShapeListFormat << "\n";
  for (const auto& c : comments)
    out << "# " << c << "\n";
  out << kShapeColumns << "\n";
  for (const KernelShape& s : shapes) {
    out << to_string(s.kind) << ',' << to_string(s.dtype) << ',' << shape_fields(s) << "\n";
  }
}

} // namespace stepsim::kernels
