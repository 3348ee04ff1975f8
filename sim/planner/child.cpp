// Simulations of planner candidates, each in its own forked process (SimGrid runs one simulation
// per process). The child sends its figures back through a pipe: 'V' + doubles, or 'E' + text.

#include "planner/planner.hpp"

#include "runner/simulate.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace stepsim::planner {

namespace {

constexpr size_t FIELDS = 8;

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    out.append(buf, static_cast<size_t>(k));
  }
  return out;
}

[[noreturn]] void child_main(int fd, const ClusterSpec& cluster, const WorkloadSpec& w) {
  int code = 0;
  try {
    const runner::Simulation sim = runner::simulate(cluster, w);
    const report::Summary& s = sim.summary;
    const double v[FIELDS] = {s.step_time.value(),  s.bubble_fraction,     s.exposed.tp.value(),
                              s.exposed.pp.value(), s.exposed.dp.value(),  s.mfu,
                              s.memory.worst.peak().value(), s.memory.fits_in_memory ? 1.0 : 0.0};
    const char tag = 'V';
    if (!write_all(fd, &tag, 1) || !write_all(fd, v, sizeof v))
      code = 4;
  } catch (const std::exception& e) {
    const std::string msg = std::string("E") + e.what();
    write_all(fd, msg.data(), msg.size());
    code = 3;
  }
  ::close(fd);
  std::fflush(nullptr);
  ::_exit(code);
}

struct Running {
  pid_t pid = -1;
  int fd = -1;
};

Simulated collect(const Running& run) {
  Simulated out;
  const std::string data = read_all(run.fd);
  ::close(run.fd);
  int status = 0;
  while (::waitpid(run.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!data.empty() && data[0] == 'E') {
    out.error = data.substr(1);
  } else if (WIFSIGNALED(status)) {
    out.error = "simulation killed by signal " + std::to_string(WTERMSIG(status));
  } else if (data.size() != 1 + FIELDS * sizeof(double) || data[0] != 'V') {
    out.error = "simulation process exited without a result";
  } else {
    double v[FIELDS];
    std::memcpy(v, data.data() + 1, sizeof v);
    out.ok = true;
    out.step_s = v[0];
    out.bubble_fraction = v[1];
    out.exposed_tp_s = v[2];
    out.exposed_pp_s = v[3];
    out.exposed_dp_s = v[4];
    out.mfu = v[5];
    out.peak_bytes = v[6];
    out.fits = v[7] != 0.0;
  }
  return out;
}

} // namespace

std::vector<Simulated> simulate_all(const ClusterSpec& cluster, const std::vector<WorkloadSpec>& specs, int jobs) {
  std::vector<Simulated> out(specs.size());
  const size_t batch = static_cast<size_t>(std::max(1, jobs));
  for (size_t first = 0; first < specs.size(); first += batch) {
    std::vector<std::pair<size_t, Running>> running;
    for (size_t i = first; i < std::min(specs.size(), first + batch); ++i) {
      int fds[2];
      if (::pipe(fds) != 0) {
        out[i].error = std::string("pipe: ") + std::strerror(errno);
        continue;
      }
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      if (pid < 0) {
        out[i].error = std::string("fork: ") + std::strerror(errno);
        ::close(fds[0]);
        ::close(fds[1]);
        continue;
      }
      if (pid == 0) {
        ::close(fds[0]);
        child_main(fds[1], cluster, specs[i]);
      }
      ::close(fds[1]);
      running.push_back({i, Running{pid, fds[0]}});
    }
    for (const auto& [i, run] : running)
      out[i] = collect(run);
  }
  return out;
}

} // namespace stepsim::planner
