#include "validate/kineto.hpp"

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_message.hpp"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iomanip>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace stepsim::validate {

namespace {

using Json = nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains(const std::string& text, const char* word) {
  return text.find(word) != std::string::npos;
}

struct Interval {
  double start = 0; ///< seconds
  double end = 0;
};

/// One GPU's activity: compute and communication intervals with their categories.
struct Device {
  std::vector<Interval> compute;
  std::vector<Interval> comm;
};

/// The text of a gzip file (PyTorch's tensorboard_trace_handler writes `*.pt.trace.json.gz` with
/// use_gzip). Throws ConfigError naming the file when it is not whole gzip data or inflates past
/// the input size limit.
std::string gunzip(const std::filesystem::path& file, const std::string& data) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    throw ConfigError(file.string() + ": cannot start gzip decompression");
  std::string out;
  char buffer[1 << 16];
  std::size_t fed = 0;
  int rc = Z_OK;
  for (;;) {
    if (z.avail_in == 0 && fed < data.size()) {
      const std::size_t n = std::min<std::size_t>(data.size() - fed, 1u << 30);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + fed));
      z.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof buffer;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buffer, sizeof buffer - z.avail_out);
    if (out.size() > kMaxInputBytes) {
      inflateEnd(&z);
      throw ConfigError(file.string() + ": its gzip data inflates past the " +
                        std::to_string(kMaxInputBytes) + " bytes accepted");
    }
    // Z_BUF_ERROR: no progress without more input, which is fed above unless it has ended.
    if (rc == Z_STREAM_END || (rc != Z_OK && !(rc == Z_BUF_ERROR && fed < data.size())))
      break;
  }
  const std::string why = z.msg != nullptr ? z.msg : "truncated";
  inflateEnd(&z);
  if (rc != Z_STREAM_END)
    throw ConfigError(file.string() + ": not a whole gzip file (" + why + ")");
  return out;
}

Json read_json(const std::filesystem::path& file) {
  std::string text = read_input_file(file, "trace");
  if (text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f &&
      static_cast<unsigned char>(text[1]) == 0x8b)
    text = gunzip(file, text);
  try {
    Json j = Json::parse(text);
    if (j.is_array())
      return Json{{"traceEvents", j}};
    if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
      throw ConfigError(file.string() + ": not a Chrome trace (expected an object with a traceEvents list)");
    return j;
  } catch (const Json::exception& e) { // syntax, or a number out of double's range
    throw ConfigError(file.string() + ": not valid JSON: " + json_message(e));
  }
}

double number(const Json& e, const char* key) {
  const auto it = e.find(key);
  return it != e.end() && it->is_number() ? it->get<double>() : 0.0;
}

/// An event's `ts` or `dur` in seconds: a number of microseconds, >= 0; a duration at most 10^12
/// µs (11.6 days). Anything else is an error naming the file, the event and the key.
double event_time(const std::filesystem::path& file, std::size_t index, const Json& e, const char* key) {
  const auto it = e.find(key);
  const double limit = std::string_view(key) == "dur" ? 1e12 : 1e18;
  if (it == e.end() || !it->is_number() || !(it->get<double>() >= 0) || it->get<double>() > limit)
    throw ConfigError(
        file.string() + ": traceEvents[" + std::to_string(index) + "] ('" +
        (e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : std::string()) +
        "'): expected '" + key + "' as microseconds in [0, " + (limit == 1e12 ? "1e12" : "1e18") +
        "], found " + (it == e.end() ? std::string("nothing") : it->dump()));
  return it->get<double>() * 1e-6;
}

std::string text(const Json& e, const char* key) {
  const auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// Sorted, merged union of intervals.
std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.start <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

/// Length of `a` not covered by `b` (both merged).
double uncovered(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  std::size_t j = 0;
  for (const Interval& i : a) {
    double covered = 0;
    while (j < b.size() && b[j].end <= i.start)
      ++j;
    for (std::size_t k = j; k < b.size() && b[k].start < i.end; ++k)
      covered += std::min(i.end, b[k].end) - std::max(i.start, b[k].start);
    total += (i.end - i.start) - covered;
  }
  return total;
}

/// Per-step, per-device means from the devices' intervals and the category sums.
TraceBreakdown finish(const std::map<int64_t, Device>& devices, std::map<std::string, double> compute,
                      std::map<std::string, double> comm, double step_time, int steps) {
  TraceBreakdown b;
  b.devices = static_cast<int>(devices.size());
  b.steps = std::max(1, steps);
  const double per =
      static_cast<double>(std::max(1, b.devices)) * static_cast<double>(b.steps); // no int overflow
  for (auto& [k, v] : compute) {
    b.compute_s[k] = v / per;
    b.compute_total_s += v / per;
  }
  for (auto& [k, v] : comm) {
    b.comm_s[k] = v / per;
    b.comm_total_s += v / per;
  }
  double exposed = 0;
  double lo = 1e300;
  double hi = -1e300;
  for (const auto& [id, d] : devices) {
    const auto c = merged(d.compute);
    const auto n = merged(d.comm);
    exposed += uncovered(n, c);
    for (const auto* list : {&c, &n})
      for (const Interval& i : *list) {
        lo = std::min(lo, i.start);
        hi = std::max(hi, i.end);
      }
  }
  b.exposed_comm_s = exposed / per;
  b.step_time_s = step_time > 0 ? step_time : (hi > lo ? hi - lo : 0);
  return b;
}

std::string collective_of(const std::string& name) {
  const std::string n = lower(name);
  if (contains(n, "allreduce") || contains(n, "all_reduce"))
    return "all_reduce";
  if (contains(n, "allgather") || contains(n, "all_gather"))
    return "all_gather";
  if (contains(n, "reducescatter") || contains(n, "reduce_scatter"))
    return "reduce_scatter";
  if (contains(n, "sendrecv") || contains(n, "send") || contains(n, "recv"))
    return "send_recv";
  if (contains(n, "alltoall") || contains(n, "all_to_all"))
    return "all_to_all";
  return "other";
}

} // namespace

std::string kineto_category(const std::string& kernel_name) {
  const std::string n = lower(kernel_name);
  if (contains(n, "nccl"))
    return "nccl:" + collective_of(n);
  if (contains(n, "flash") || contains(n, "fmha") || contains(n, "sdpa") || contains(n, "attention"))
    return "attention";
  // cuBLAS/cuBLASLt (xmma, nvjet, gemv), CUTLASS, and torch.compile's Triton matmul templates
  // (triton_tem_fused_mm, ..._addmm, ..._bmm).
  if (contains(n, "gemm") || contains(n, "cutlass") || contains(n, "xmma") || contains(n, "nvjet") ||
      contains(n, "cublas") || contains(n, "gemv") || (contains(n, "triton_tem") && contains(n, "mm")))
    return "gemm";
  return "elementwise";
}

TraceBreakdown read_kineto_trace(const std::filesystem::path& file) {
  const Json j = read_json(file);
  std::map<int64_t, Device> devices;
  std::map<std::string, double> compute;
  std::map<std::string, double> comm;
  std::set<std::string> step_names;
  double step_sum = 0;
  std::size_t index = 0;
  for (const Json& e : j["traceEvents"]) {
    const std::size_t i = index++;
    if (!e.is_object() || text(e, "ph") != "X")
      continue;
    const std::string name = text(e, "name");
    const std::string cat = lower(text(e, "cat"));
    const bool step =
        name.rfind("ProfilerStep#", 0) == 0 && (cat == "user_annotation" || cat == "cpu_op" || cat.empty());
    const bool kernel = cat == "kernel";
    const bool memop = cat == "gpu_memcpy" || cat == "gpu_memset";
    if (!step && !kernel && !memop)
      continue;
    const double ts = event_time(file, i, e, "ts");
    const double dur = event_time(file, i, e, "dur");
    if (step) {
      if (step_names.insert(name).second)
        step_sum += dur;
      continue;
    }
    int64_t device = static_cast<int64_t>(number(e, "pid"));
    if (const auto a = e.find("args");
        a != e.end() && a->is_object() && a->contains("device") && (*a)["device"].is_number())
      device = (*a)["device"].get<int64_t>();
    const std::string category = kernel ? kineto_category(name) : "elementwise";
    Device& d = devices[device];
    if (category.rfind("nccl:", 0) == 0) {
      comm[category.substr(5)] += dur;
      d.comm.push_back({ts, ts + dur});
    } else {
      compute[category] += dur;
      d.compute.push_back({ts, ts + dur});
    }
  }
  if (devices.empty())
    throw ConfigError(
        file.string() +
        ": no GPU kernel events (ph 'X', cat 'kernel', 'gpu_memcpy' or 'gpu_memset'): not a PyTorch "
        "profiler trace of a GPU run (record it with ProfilerActivity.CUDA)");
  const int steps = static_cast<int>(step_names.size());
  return finish(devices, compute, comm, steps > 0 ? step_sum / steps : 0.0, steps);
}

TraceBreakdown read_kineto_traces(const std::vector<std::filesystem::path>& paths) {
  std::vector<std::filesystem::path> files;
  for (const auto& path : paths) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
      files.push_back(path); // read_input_file names a missing one
      continue;
    }
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      const std::string name = entry.path().filename().string();
      const auto ends = [&](std::string_view suffix) {
        return name.size() >= suffix.size() &&
               name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
      };
      if (entry.is_regular_file() && (ends(".json") || ends(".json.gz")))
        found.push_back(entry.path());
    }
    if (ec)
      throw ConfigError(path.string() + ": cannot list the folder: " + ec.message());
    if (found.empty())
      throw ConfigError(path.string() + ": a folder without trace files (*.json or *.json.gz)");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  if (files.empty())
    throw ConfigError("no measured trace given");
  std::vector<TraceBreakdown> parts;
  for (const auto& f : files)
    parts.push_back(read_kineto_trace(f));
  if (parts.size() == 1)
    return parts.front();
  TraceBreakdown b;
  b.files = static_cast<int>(parts.size());
  b.steps = parts.front().steps;
  for (const TraceBreakdown& x : parts) {
    b.devices += x.devices;
    b.steps = std::min(b.steps, x.steps);
  }
  for (const TraceBreakdown& x : parts) {
    const double w = static_cast<double>(x.devices) / b.devices; // each file has >= 1 GPU
    b.step_time_s += w * x.step_time_s;
    b.compute_total_s += w * x.compute_total_s;
    b.comm_total_s += w * x.comm_total_s;
    b.exposed_comm_s += w * x.exposed_comm_s;
    for (const auto& [k, v] : x.compute_s)
      b.compute_s[k] += w * v;
    for (const auto& [k, v] : x.comm_s)
      b.comm_s[k] += w * v;
  }
  return b;
}

TraceBreakdown read_stepsim_trace(const std::filesystem::path& file) {
  const Json j = read_json(file);
  std::map<int64_t, Device> devices;
  std::map<std::string, double> compute;
  std::map<std::string, double> comm;
  std::size_t index = 0;
  for (const Json& e : j["traceEvents"]) {
    const std::size_t i = index++;
    if (!e.is_object() || text(e, "ph") != "X")
      continue;
    const std::string name = text(e, "name");
    const std::string cat = text(e, "cat");
    const double ts = event_time(file, i, e, "ts");
    const double dur = event_time(file, i, e, "dur");
    Device& d = devices[static_cast<int64_t>(number(e, "pid"))];
    if (cat == "compute") {
      std::string block = "other";
      for (const char* b : {"attn", "mlp", "logits", "optimizer", "router", "experts"})
        if (contains(name, b))
          block = b;
      compute[block == "attn" ? "attention block" : block == "mlp" ? "mlp block" : block] += dur;
      d.compute.push_back({ts, ts + dur});
    } else if (!cat.empty()) {
      comm[contains(name, " send") ? "send_recv" : collective_of(name)] += dur;
      d.comm.push_back({ts, ts + dur});
    }
  }
  if (devices.empty())
    throw ConfigError(file.string() + ": no task events (ph 'X'): not a trace.json written by `stepsim run`");
  return finish(devices, compute, comm, 0.0, 1);
}

void print_comparison(std::ostream& out, const TraceBreakdown& m, const TraceBreakdown& s) {
  const auto row = [&](const std::string& label, const double* a, const double* b) {
    out << "  " << std::left << std::setw(28) << label << std::right;
    const auto cell = [&](const double* v) {
      if (v == nullptr)
        out << std::setw(14) << "-";
      else
        out << std::setw(11) << std::fixed << std::setprecision(3) << *v * 1e3 << " ms";
    };
    cell(a);
    cell(b);
    if (a != nullptr && b != nullptr && *a > 0)
      out << std::setw(9) << std::showpos << std::setprecision(1) << (*b - *a) / *a * 100 << std::noshowpos
          << " %";
    out << '\n';
  };
  out << "per step and GPU (measured: " << m.steps << " step(s) on " << m.devices << " GPU(s)"
      << (m.files > 1 ? " of " + std::to_string(m.files) + " trace files" : std::string())
      << "; simulated: " << s.devices << " GPU(s))\n";
  out << "  " << std::left << std::setw(28) << "" << std::right << std::setw(14) << "measured"
      << std::setw(14) << "simulated" << std::setw(11) << "diff" << '\n';
  row("step time", &m.step_time_s, &s.step_time_s);
  row("compute (all kernels)", &m.compute_total_s, &s.compute_total_s);
  std::set<std::string> keys;
  for (const auto& [k, v] : m.compute_s)
    keys.insert(k);
  for (const auto& [k, v] : s.compute_s)
    keys.insert(k);
  for (const auto& k : keys) {
    const auto a = m.compute_s.find(k);
    const auto b = s.compute_s.find(k);
    row("  " + k, a == m.compute_s.end() ? nullptr : &a->second,
        b == s.compute_s.end() ? nullptr : &b->second);
  }
  row("communication (NCCL)", &m.comm_total_s, &s.comm_total_s);
  keys.clear();
  for (const auto& [k, v] : m.comm_s)
    keys.insert(k);
  for (const auto& [k, v] : s.comm_s)
    keys.insert(k);
  for (const auto& k : keys) {
    const auto a = m.comm_s.find(k);
    const auto b = s.comm_s.find(k);
    row("  " + k, a == m.comm_s.end() ? nullptr : &a->second, b == s.comm_s.end() ? nullptr : &b->second);
  }
  row("exposed communication", &m.exposed_comm_s, &s.exposed_comm_s);
}

} // namespace stepsim::validate
