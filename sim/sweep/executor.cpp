#include "sweep/executor.hpp"

#include "config/config.hpp"
#include "core/error.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <sstream>
#include <string>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace stepsim::sweep {

namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  const SweepConfig* config = nullptr;
  pid_t pid = -1;
  int fd = -1;
  std::string data;
  Clock::time_point started;
  bool timed_out = false;
};

/// One line, no control characters: reasons go into CSV cells and progress lines.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') {
      c = ' ';
    }
  }
  while (!text.empty() && text.back() == ' ') {
    text.pop_back();
  }
  return text;
}

/// A child reports on its pipe; if the parent is gone there is nobody to tell.
void write_fd(int fd, const std::string& text) { (void)write_fully(fd, text); }

/// The child's whole life: simulate one configuration, report a JSON verdict on `fd`, exit.
[[noreturn]] void child_main(const SweepConfig& config, const ExecuteOptions& options, int fd, pid_t parent) {
  // Die with the parent (a killed sweep leaves no simulations running), quietly.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {
    ::_exit(1);
  }
  const int devnull = ::open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    ::dup2(devnull, STDIN_FILENO);
    ::dup2(devnull, STDOUT_FILENO);
    ::dup2(devnull, STDERR_FILENO);
    ::close(devnull);
  }
  nlohmann::ordered_json verdict;

  try {
    const ClusterSpec cluster = config::load_cluster(options.cluster, config.overrides);
    verdict["hbm_capacity_bytes"] = cluster.gpu.hbm_capacity.value();
    WorkloadSpec workload = config::load_workload(options.workload, config.overrides);
    workload = config::check_layout(cluster, workload).workload;
    const runner::Simulation sim = runner::simulate(cluster, workload, options.simulate);
    std::ostringstream summary;
    report::write_summary_json(summary, sim.summary);
    verdict["status"] = "ok";
    verdict["summary"] = nlohmann::ordered_json::parse(summary.str());
  } catch (const ConfigError& e) {
    verdict["status"] = "skipped";
    verdict["reason"] = e.what();
  } catch (const ModelError& e) {
    verdict["status"] = "skipped";
    verdict["reason"] = e.what();
  } catch (const SimulationError& e) {
    verdict["status"] = "failed";
    verdict["reason"] = std::string("simulation error: ") + e.what();
  } catch (const std::exception& e) {
    verdict["status"] = "failed";
    verdict["reason"] = std::string("error: ") + e.what();
  } catch (...) {
    verdict["status"] = "failed";
    verdict["reason"] = "unknown exception";
  }
  write_fd(fd, verdict.dump());
  ::close(fd);
  ::_exit(0); // no atexit handlers, no flushing of the parent's buffers
}

Row verdict_row(const Child& child, int status, double timeout_s) {
  Row row;
  row.id = child.config->id;
  row.index = child.config->index;
  row.config = child.config->swept;
  row.status = RowStatus::FAILED;
  const auto verdict = nlohmann::ordered_json::parse(child.data, nullptr, false);
  const bool parsed = !verdict.is_discarded() && verdict.is_object() && verdict.contains("status");
  if (parsed && verdict.contains("hbm_capacity_bytes")) {
    row.hbm_capacity_bytes = verdict["hbm_capacity_bytes"].get<double>();
  }
  if (child.timed_out) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "timed out after %g s (--timeout)", timeout_s);
    row.reason = buf;
    return row;
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    row.reason = "simulation process killed by signal " + std::to_string(sig) +
                 (name != nullptr ? std::string(" (") + name + ")" : std::string());
    return row;
  }
  if (!parsed) {
    row.reason = "simulation process exited with code " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
                 " without a verdict";
    return row;
  }
  const std::string s = verdict["status"].get<std::string>();
  if (s == "ok" && verdict.contains("summary")) {
    row.status = RowStatus::OK;
    row.summary_json = verdict["summary"].dump();
  } else if (s == "skipped") {
    row.status = RowStatus::SKIPPED;
    row.reason = one_line(verdict.value("reason", std::string("skipped")));
  } else {
    row.reason = one_line(verdict.value("reason", std::string("failed")));
  }
  return row;
}

Child spawn(const SweepConfig& config, const ExecuteOptions& options) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(std::string("sweep: cannot create a pipe: ") + std::strerror(errno));
  }
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("sweep: cannot fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    child_main(config, options, fds[1], parent);
  }
  ::close(fds[1]);
  Child c;
  c.config = &config;
  c.pid = pid;
  c.fd = fds[0];
  c.started = Clock::now();
  return c;
}

} // namespace

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) {
      return n;
    }
  }
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

void execute(const std::vector<const SweepConfig*>& pending, const ExecuteOptions& options,
             const OnFinished& on_finished, const OnTick& on_tick) {
  const std::size_t jobs = static_cast<std::size_t>(options.jobs < 1 ? 1 : options.jobs);
  std::size_t next = 0;
  std::vector<Child> running;
  auto last_tick = Clock::now();
  while (next < pending.size() || !running.empty()) {
    while (running.size() < jobs && next < pending.size()) {
      running.push_back(spawn(*pending[next++], options));
    }
    std::vector<pollfd> fds;
    fds.reserve(running.size());
    for (const Child& c : running) {
      fds.push_back(pollfd{c.fd, POLLIN, 0});
    }
    const int ready = ::poll(fds.data(), fds.size(), 200);
    if (ready < 0 && errno != EINTR) {
      throw Error(std::string("sweep: poll failed: ") + std::strerror(errno));
    }
    const auto now = Clock::now();
    std::vector<std::size_t> done;
    for (std::size_t i = 0; i < running.size(); ++i) {
      Child& c = running[i];
      if (ready > 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        char buf[65536];
        const ssize_t r = ::read(c.fd, buf, sizeof buf);
        if (r > 0) {
          c.data.append(buf, static_cast<std::size_t>(r));
        } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
          done.push_back(i);
          continue;
        }
      }
      if (options.timeout_s > 0 && !c.timed_out &&
          std::chrono::duration<double>(now - c.started).count() > options.timeout_s) {
        c.timed_out = true;
        ::kill(c.pid, SIGKILL); // the pipe then closes and the child is reaped above
      }
    }
    std::vector<Child> finished;
    for (auto it = done.rbegin(); it != done.rend(); ++it) {
      finished.insert(finished.begin(), std::move(running[*it]));
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(*it));
    }
    for (Child& c : finished) {
      ::close(c.fd);
      int status = 0;
      while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
      }
      const double wall = std::chrono::duration<double>(Clock::now() - c.started).count();
      on_finished(verdict_row(c, status, options.timeout_s), wall);
    }
    if (on_tick && Clock::now() - last_tick > std::chrono::milliseconds(200)) {
      last_tick = Clock::now();
      on_tick();
    }
  }
}

} // namespace stepsim::sweep
