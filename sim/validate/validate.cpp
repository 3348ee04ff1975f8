#include "validate/validate.hpp"

#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "report/summary.hpp"
#include "runner/simulate.hpp"

#include <algorithm>
#include <map>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace stepsim::validate {

namespace {

using Clock = std::chrono::steady_clock;

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t n = text.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

/// In the child: simulate and report "ok STEP_TIME" or "error MESSAGE" through `fd`. Never returns.
[[noreturn]] void child_main(const RunPlan& plan, const std::filesystem::path& dir, int fd) {
  std::string verdict;
  int code = 0;
  try {
    const ClusterSpec cluster = config::load_cluster(plan.cluster_file, plan.overrides);
    WorkloadSpec workload = config::load_workload(dir / "workload.yaml", plan.overrides);
    workload = config::check_layout(cluster, workload).workload;
    const runner::Simulation sim = runner::simulate(cluster, workload);
    write_file_atomically(dir / "summary.json", [&](std::ostream& o) { report::write_summary_json(o, sim.summary); });
    std::ostringstream v;
    const report::MemoryReport& mem = sim.summary.memory;
    // The step's model and hardware FLOPs as the summary counts them for this architecture.
    const report::Summary& s = sim.summary;
    const double model_flops = s.tflops_per_gpu * 1e12 * s.step_time.value() * s.num_gpus;
    const double hardware_flops = s.mfu > 0 ? model_flops * s.hfu / s.mfu : 0.0;
    v << std::setprecision(17) << "ok " << sim.summary.step_time.value() << ' ' << mem.worst.peak().value() << ' '
      << mem.capacity.value() << ' ' << mem.worst_stage << ' ' << mem.host_peak.value() << ' '
      << (mem.fits_in_memory ? 1 : 0) << ' ' << model_flops << ' ' << hardware_flops;
    verdict = v.str();
  } catch (const std::exception& e) {
    verdict = "error " + one_line(e.what());
    code = 1;
  }
  write_all(fd, verdict);
  ::close(fd);
  std::fflush(nullptr);
  ::_exit(code);
}

struct Child {
  std::size_t index = 0;
  pid_t pid = -1;
  int fd = -1;
  std::string data;
  Clock::time_point started;
  bool timed_out = false;
};

Child spawn(std::size_t index, const RunPlan& plan, const std::filesystem::path& dir) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(std::string("validate: cannot create a pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("validate: cannot fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(plan, dir, fds[1]);
  }
  ::close(fds[1]);
  return Child{.index = index, .pid = pid, .fd = fds[0], .data = {}, .started = Clock::now(), .timed_out = false};
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const auto& s : parts)
    out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos)
    return s;
  std::string out = "\"";
  for (char c : s)
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string fmt(double v, int precision) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(precision) << v;
  return o.str();
}

/// Digits that suit a metric's magnitude.
int digits(double v) {
  return std::abs(v) >= 100 ? 1 : (std::abs(v) >= 10 ? 2 : 3);
}

} // namespace

const char* to_string(RunStatus s) {
  switch (s) {
  case RunStatus::OK: return "ok";
  case RunStatus::SKIPPED: return "skipped";
  case RunStatus::FAILED: return "failed";
  }
  return "?";
}

std::vector<RunResult> validate_runs(const config::RunsFile& runs, const ValidateOptions& options,
                                     std::ostream* progress) {
  std::set<std::string> only(options.only.begin(), options.only.end());
  for (const auto& id : options.only) {
    const bool known = std::any_of(runs.runs.begin(), runs.runs.end(), [&](const auto& r) { return r.id == id; });
    if (!known)
      throw ConfigError(runs.source + ": no run with id '" + id + "'");
  }
  PlanOptions plan_options{.topologies = options.topologies, .calibration = options.calibration, .extra = options.extra};
  std::vector<RunResult> results;
  std::vector<std::filesystem::path> dirs;
  for (const config::MeasuredRun& run : runs.runs) {
    if (!only.empty() && !only.contains(run.id))
      continue;
    RunResult r;
    r.plan = plan_run(run, plan_options);
    const std::filesystem::path dir = options.work_dir / "runs" / run.id;
    if (r.plan.skip_reason.empty()) {
      std::filesystem::create_directories(dir);
      write_file_atomically(dir / "workload.yaml", [&](std::ostream& o) { o << r.plan.workload_yaml; });
      std::ofstream cmd(dir / "command.txt");
      cmd << "stepsim run --cluster " << r.plan.cluster_file.string() << " --workload " << (dir / "workload.yaml").string();
      for (const auto& o : r.plan.overrides)
        cmd << " --set " << o.path << "=" << o.value;
      cmd << "\n";
      check_plan(r.plan, dir / "workload.yaml");
    }
    if (!r.plan.skip_reason.empty()) {
      r.status = RunStatus::SKIPPED;
      r.reason = one_line(r.plan.skip_reason);
    }
    results.push_back(std::move(r));
    dirs.push_back(dir);
  }

  // Simulate the rest, at most `jobs` at a time; the longest (most GPUs) first.
  std::vector<std::size_t> pending;
  for (std::size_t i = 0; i < results.size(); ++i)
    if (results[i].plan.skip_reason.empty())
      pending.push_back(i);
  std::stable_sort(pending.begin(), pending.end(),
                   [&](std::size_t a, std::size_t b) { return results[a].plan.num_gpus > results[b].plan.num_gpus; });
  const std::size_t jobs = static_cast<std::size_t>(std::max(1, options.jobs));
  std::size_t next = 0;
  std::vector<Child> running;
  while (next < pending.size() || !running.empty()) {
    while (running.size() < jobs && next < pending.size()) {
      const std::size_t i = pending[next++];
      running.push_back(spawn(i, results[i].plan, dirs[i]));
    }
    std::vector<pollfd> fds;
    for (const Child& c : running)
      fds.push_back(pollfd{c.fd, POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), 200);
    if (ready < 0 && errno != EINTR)
      throw Error(std::string("validate: poll failed: ") + std::strerror(errno));
    std::vector<std::size_t> done;
    for (std::size_t k = 0; k < running.size(); ++k) {
      Child& c = running[k];
      if (ready > 0 && (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        char buf[4096];
        const ssize_t n = ::read(c.fd, buf, sizeof buf);
        if (n > 0) {
          c.data.append(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          done.push_back(k);
          continue;
        }
      }
      if (options.timeout_s > 0 && !c.timed_out &&
          std::chrono::duration<double>(Clock::now() - c.started).count() > options.timeout_s) {
        c.timed_out = true;
        ::kill(c.pid, SIGKILL);
      }
    }
    for (auto it = done.rbegin(); it != done.rend(); ++it) {
      Child c = std::move(running[*it]);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(*it));
      ::close(c.fd);
      int status = 0;
      while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
      }
      RunResult& r = results[c.index];
      r.wall_s = std::chrono::duration<double>(Clock::now() - c.started).count();
      if (c.data.rfind("ok ", 0) == 0) {
        std::istringstream verdict(c.data.substr(3));
        int fits = 1;
        StepFlops flops;
        verdict >> r.step_time_s >> r.peak_bytes >> r.capacity_bytes >> r.peak_stage >> r.host_bytes >> fits >>
            flops.model >> flops.hardware;
        r.fits_memory = fits != 0;
        r.status = RunStatus::OK;
        r.predicted = predicted_metric(r.plan, Seconds(r.step_time_s), flops);
        r.error_pct = (r.predicted - r.plan.measured) / r.plan.measured * 100.0;
        r.reason = r.plan.defaults.empty() ? "" : "defaults: " + join(r.plan.defaults, "; ");
      } else {
        r.status = RunStatus::FAILED;
        if (c.timed_out)
          r.reason = "timed out after " + fmt(options.timeout_s, 0) + " s";
        else if (c.data.rfind("error ", 0) == 0)
          r.reason = c.data.substr(6);
        else if (WIFSIGNALED(status))
          r.reason = std::string("simulation died: ") + strsignal(WTERMSIG(status));
        else
          r.reason = "simulation failed (exit " + std::to_string(WEXITSTATUS(status)) + ")";
      }
      if (progress != nullptr) {
        *progress << "  " << r.plan.id << ": " << to_string(r.status);
        if (r.status == RunStatus::OK)
          *progress << ", step " << fmt(r.step_time_s, 3) << " s, error " << fmt(r.error_pct, 1) << " %";
        *progress << " (" << fmt(r.wall_s, 1) << " s wall)\n" << std::flush;
      }
    }
  }
  return results;
}

ErrorStats error_stats(const std::vector<RunResult>& results) {
  ErrorStats s;
  std::vector<double> errs;
  for (const RunResult& r : results) {
    if (r.status == RunStatus::OK) {
      ++s.validated;
      errs.push_back(std::abs(r.error_pct));
    } else {
      ++s.skipped;
    }
  }
  if (!errs.empty()) {
    std::sort(errs.begin(), errs.end());
    const std::size_t n = errs.size();
    s.median_abs = n % 2 == 1 ? errs[n / 2] : 0.5 * (errs[n / 2 - 1] + errs[n / 2]);
    s.max_abs = errs.back();
    for (double e : errs)
      s.mean_abs += e;
    s.mean_abs /= static_cast<double>(n);
  }
  return s;
}

MemoryStats memory_stats(const std::vector<RunResult>& results) {
  MemoryStats m;
  for (const RunResult& r : results) {
    if (r.status != RunStatus::OK)
      continue;
    ++m.checked;
    if (r.fits())
      ++m.fitting;
  }
  return m;
}

void print_table(std::ostream& out, const std::vector<RunResult>& results) {
  std::size_t w_id = 2;
  std::size_t w_layout = 6;
  for (const RunResult& r : results) {
    w_id = std::max(w_id, r.plan.id.size());
    w_layout = std::max(w_layout, r.plan.layout.size());
  }
  out << std::left << std::setw(static_cast<int>(w_id)) << "id" << "  " << std::right << std::setw(5) << "GPUs"
      << "  " << std::left << std::setw(static_cast<int>(w_layout)) << "layout" << "  " << std::setw(20) << "metric"
      << std::right << std::setw(11) << "measured" << std::setw(11) << "predicted" << std::setw(9) << "error %"
      << '\n';
  for (const RunResult& r : results) {
    if (r.status != RunStatus::OK)
      continue;
    out << std::left << std::setw(static_cast<int>(w_id)) << r.plan.id << "  " << std::right << std::setw(5)
        << r.plan.num_gpus << "  " << std::left << std::setw(static_cast<int>(w_layout)) << r.plan.layout << "  "
        << std::setw(20) << to_string(r.plan.metric) << std::right << std::setw(11)
        << fmt(r.plan.measured, digits(r.plan.measured)) << std::setw(11)
        << fmt(r.predicted, digits(r.plan.measured)) << std::setw(9) << ((r.error_pct >= 0 ? "+" : "") + fmt(r.error_pct, 1))
        << '\n';
  }
  bool any = false;
  for (const RunResult& r : results) {
    if (r.status == RunStatus::OK)
      continue;
    if (!any)
      out << "\nnot validated:\n";
    any = true;
    out << "  " << r.plan.id << " (" << r.plan.num_gpus << " GPUs, " << r.plan.layout << "): " << to_string(r.status)
        << ": " << r.reason << '\n';
  }
  const MemoryStats mem = memory_stats(results);
  if (mem.checked > 0) {
    out << "\nmemory: the ledger fits " << mem.fitting << " of " << mem.checked << " simulated runs in GPU memory";
    if (mem.fitting == mem.checked)
      out << '\n';
    else
      out << "; the rest ran, so for each the ledger over-counts or the record lacks a memory setting:\n";
    for (const RunResult& r : results) {
      if (r.status == RunStatus::OK && !r.fits())
        out << "  " << r.plan.id << ": peak " << fmt(r.peak_bytes / 1073741824.0, 1) << " GiB of "
            << fmt(r.capacity_bytes / 1073741824.0, 1) << " (pipeline stage " << r.peak_stage << ")"
            << (r.host_bytes > 0 ? ", " + fmt(r.host_bytes / 1073741824.0, 1) + " GiB offloaded to host memory" : "")
            << "\n";
    }
  }
  // The error by GPU family and by model kind, when the runs mix them.
  std::map<std::string, std::vector<RunResult>> groups;
  for (const RunResult& r : results)
    if (r.status == RunStatus::OK) {
      groups["GPU " + (r.plan.gpu_kind.empty() ? std::string("unknown") : r.plan.gpu_kind)].push_back(r);
      groups[r.plan.moe ? "model MoE" : "model dense"].push_back(r);
    }
  const auto kinds = [&](const std::string& prefix) {
    return std::count_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first.starts_with(prefix); });
  };
  if (kinds("GPU ") > 1 || kinds("model ") > 1) {
    out << "\nerror by group (|error %|):\n";
    for (const auto& [name, rows] : groups) {
      const ErrorStats s = error_stats(rows);
      out << "  " << std::left << std::setw(16) << name << std::right << std::setw(4) << s.validated
          << " runs  median " << std::setw(6) << fmt(s.median_abs, 2) << "  mean " << std::setw(6) << fmt(s.mean_abs, 2)
          << "  max " << std::setw(7) << fmt(s.max_abs, 2) << '\n';
    }
  }
  any = false;
  for (const RunResult& r : results) {
    if (r.status != RunStatus::OK || r.plan.defaults.empty())
      continue;
    if (!any)
      out << "\ndefaults used:\n";
    any = true;
    out << "  " << r.plan.id << ": " << join(r.plan.defaults, "; ") << '\n';
  }
}

void write_csv(std::ostream& out, const std::vector<RunResult>& results) {
  out << "id,num_gpus,metric,measured,predicted,error_pct,status,reason\n";
  for (const RunResult& r : results) {
    const bool ok = r.status == RunStatus::OK;
    std::ostringstream meas;
    meas << std::setprecision(10) << r.plan.measured;
    std::ostringstream pred;
    pred << std::setprecision(10) << r.predicted;
    out << csv_field(r.plan.id) << ',' << r.plan.num_gpus << ',' << to_string(r.plan.metric) << ','
        << (r.plan.measured > 0 ? meas.str() : "") << ',' << (ok ? pred.str() : "") << ','
        << (ok ? fmt(r.error_pct, 3) : "") << ',' << to_string(r.status) << ',' << csv_field(r.reason) << '\n';
  }
}

std::filesystem::path topologies_dir(const std::string& explicit_dir) {
  namespace fs = std::filesystem;
  if (!explicit_dir.empty()) {
    if (!fs::is_directory(explicit_dir))
      throw ConfigError("--topologies: no such folder '" + explicit_dir + "'");
    return explicit_dir;
  }
  if (fs::is_regular_file("topologies/dgx-a100-superpod.yaml"))
    return "topologies";
  const fs::path built_in(STEPSIM_DEFAULT_TOPOLOGIES);
  if (fs::is_directory(built_in))
    return built_in;
  throw ConfigError("cannot find the bundled topologies (no ./topologies, no " + built_in.string() +
                    "); pass --topologies DIR");
}

int parse_jobs(std::vector<std::string>& positionals, const std::string& jobs_option, int fallback) {
  std::string text = jobs_option;
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < positionals.size(); ++i) {
    if (positionals[i] == "-j") {
      if (i + 1 >= positionals.size())
        throw ConfigError("option -j needs a value");
      text = positionals[++i];
    } else if (positionals[i].starts_with("-j")) {
      text = positionals[i].substr(2);
    } else {
      rest.push_back(positionals[i]);
    }
  }
  positionals = rest;
  if (text.empty())
    return fallback;
  std::size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 1)
    throw ConfigError("-j/--jobs: expected a positive integer, got '" + text + "'");
  return v;
}

std::string summary_line(const ErrorStats& s) {
  return "validated " + std::to_string(s.validated) + " runs, skipped " + std::to_string(s.skipped) +
         ": median_abs_error_pct=" + fmt(s.median_abs, 2) + " max_abs_error_pct=" + fmt(s.max_abs, 2);
}

} // namespace stepsim::validate
