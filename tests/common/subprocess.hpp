#pragma once
// SimGrid allows one simulation per process (SIMGRID_NOTES trap 4). A test that compares two
// simulations runs each one in a forked child with run_in_child(): the child computes a vector
// of doubles and sends it back through a pipe; the parent waits for it and checks its exit
// status. The parent itself must not have started SimGrid.

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace stepsim::test {

struct ChildResult {
  bool ok = false;            ///< the child exited 0 and sent its values
  std::string error;          ///< why not (exception text, signal, exit code)
  std::vector<double> values; ///< what the child's function returned
};

namespace detail {

inline bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (r == 0)
      break;
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

} // namespace detail

/// Runs `fn` in a forked child process and returns what it produced. Message format on the
/// pipe: 'V' + doubles, or 'E' + an error text.
inline ChildResult run_in_child(const std::function<std::vector<double>()>& fn) {
  ChildResult result;
  int fds[2];
  if (::pipe(fds) != 0) {
    result.error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  std::fflush(nullptr); // no buffered output duplicated into the child
  const pid_t pid = ::fork();
  if (pid < 0) {
    result.error = std::string("fork: ") + std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return result;
  }
  if (pid == 0) {
    ::close(fds[0]);
    int code = 0;
    try {
      const std::vector<double> v = fn();
      const char tag = 'V';
      if (!detail::write_all(fds[1], &tag, 1) || !detail::write_all(fds[1], v.data(), v.size() * sizeof(double)))
        code = 4;
    } catch (const std::exception& e) {
      const std::string msg = std::string("E") + e.what();
      detail::write_all(fds[1], msg.data(), msg.size());
      code = 3;
    } catch (...) {
      detail::write_all(fds[1], "Eunknown exception", 18);
      code = 3;
    }
    ::close(fds[1]);
    std::fflush(nullptr);
    ::_exit(code); // skip the parent's atexit handlers (gtest) in the child
  }
  ::close(fds[1]);
  const std::string data = detail::read_all(fds[0]);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    result.error = "child killed by signal " + std::to_string(WTERMSIG(status));
    return result;
  }
  if (!WIFEXITED(status)) {
    result.error = "child did not exit normally";
    return result;
  }
  if (!data.empty() && data[0] == 'E') {
    result.error = "child threw: " + data.substr(1);
    return result;
  }
  if (WEXITSTATUS(status) != 0) {
    result.error = "child exited with code " + std::to_string(WEXITSTATUS(status));
    return result;
  }
  if (data.empty() || data[0] != 'V' || (data.size() - 1) % sizeof(double) != 0) {
    result.error = "child sent a malformed reply";
    return result;
  }
  result.values.resize((data.size() - 1) / sizeof(double));
  std::memcpy(result.values.data(), data.data() + 1, data.size() - 1);
  result.ok = true;
  return result;
}

} // namespace stepsim::test
