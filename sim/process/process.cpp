#include "process/process.hpp"

#include "core/atomic_file.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <list>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace stepsim::process {

namespace {

constexpr int TICK_MS = 200;          // the longest a parent sleeps without looking at its children
constexpr int ORPHANED_EXIT = 125;    // a child whose parent died before it started
constexpr int EXEC_FAILED_EXIT = 127; // as a shell reports a command it cannot run
constexpr std::size_t READ_CHUNK = 65536;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string errno_text() {
  return std::strerror(errno);
}

struct Pipe {
  int read = -1;
  int write = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error("cannot create a pipe: " + errno_text());
  return Pipe{fds[0], fds[1]};
}

void close_fd(int& fd) {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

/// The child's stdin from /dev/null; stdout and stderr where `output` says.
void redirect_stdio(Output output, int capture_fd) {
  const int devnull = ::open("/dev/null", O_RDWR);
  if (devnull >= 0)
    ::dup2(devnull, STDIN_FILENO);
  if (output == Output::CAPTURE) {
    ::dup2(capture_fd, STDOUT_FILENO);
    ::dup2(capture_fd, STDERR_FILENO);
  } else if (output == Output::DISCARD && devnull >= 0) {
    ::dup2(devnull, STDOUT_FILENO);
    ::dup2(devnull, STDERR_FILENO);
  }
  if (devnull > STDERR_FILENO)
    ::close(devnull);
}

std::string envelope_text(const Message& envelope) {
  return envelope.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

[[noreturn]] void exec_main(const std::vector<std::string>& argv, int message_fd) {
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  if (!argv.empty())
    ::execvp(args[0], args.data()); // the message pipe is close-on-exec: success closes it
  const std::string why = argv.empty() ? "empty command" : "cannot run '" + argv[0] + "': " + errno_text();
  (void)write_fully(message_fd, envelope_text(Message{{"exception", why}})); // nobody to tell if it fails
  ::_exit(EXEC_FAILED_EXIT);
}

/// The child's whole life after fork(). Never returns.
[[noreturn]] void child_main(const Job& job, Output output, const Pipe& message, const Pipe& captured,
                             pid_t parent) {
  ::setpgid(0, 0); // its own process group, so a timeout also kills what it started
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) // the parent died before the line above
    ::_exit(ORPHANED_EXIT);
  ::close(message.read);
  if (captured.read >= 0)
    ::close(captured.read);
  redirect_stdio(output, captured.write);
  if (captured.write > STDERR_FILENO)
    ::close(captured.write);
  if (!job.body)
    exec_main(job.argv, message.write);
  int code = 0;
  std::string text;
  try {
    Message envelope;
    envelope["message"] = job.body();
    text = envelope_text(envelope);
  } catch (const std::exception& e) {
    text = envelope_text(Message{{"exception", e.what()}});
    code = 1;
  } catch (...) {
    text = envelope_text(Message{{"exception", "unknown exception"}});
    code = 1;
  }
  (void)write_fully(message.write, text); // the parent is gone if this fails
  std::fflush(nullptr);
  ::_exit(code); // no atexit handlers of the parent (gtest, SimGrid) run in the child
}

/// A descriptor readable once the process has ended, or -1 where the kernel has no pidfd.
int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return static_cast<int>(fd);
  }
#else
  (void)pid;
#endif
  return -1;
}

/// Sleeps until one of `children` has something to read or ends, or TICK_MS or the nearest
/// deadline passes.
void wait_for_any(const std::vector<const Child*>& children) {
  std::vector<pollfd> fds;
  int timeout = TICK_MS;
  for (const Child* c : children) {
    for (const int fd : c->fds())
      fds.push_back(pollfd{fd, POLLIN, 0});
    const int ms = c->ms_to_deadline();
    if (ms >= 0)
      timeout = std::min(timeout, ms);
  }
  ::poll(fds.data(), fds.size(), timeout); // EINTR and errors: the children are looked at anyway
}

} // namespace

Child::Child(const Job& job, const SpawnOptions& options) : options_(options) {
  Pipe message = make_pipe();
  Pipe captured;
  if (options.output == Output::CAPTURE) {
    try {
      captured = make_pipe();
    } catch (const Error&) {
      close_fd(message.read);
      close_fd(message.write);
      throw;
    }
  }
  std::fflush(nullptr); // no buffered output duplicated into the child
  const pid_t parent = ::getpid();
  started_s_ = now_s();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const std::string why = errno_text();
    for (int* fd : {&message.read, &message.write, &captured.read, &captured.write})
      close_fd(*fd);
    throw Error("cannot fork: " + why);
  }
  if (pid == 0)
    child_main(job, options.output, message, captured, parent);
  pid_ = pid;
  ::setpgid(pid, pid); // as the child does: whichever runs first (fails once it exec'd)
  close_fd(message.write);
  close_fd(captured.write);
  message_fd_ = message.read;
  output_fd_ = captured.read;
  for (const int fd : {message_fd_, output_fd_})
    if (fd >= 0)
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  pid_fd_ = open_pidfd(pid);
}

Child::Child(Child&& other) noexcept
    : options_(other.options_), pid_(other.pid_), message_fd_(other.message_fd_),
      output_fd_(other.output_fd_), pid_fd_(other.pid_fd_), message_text_(std::move(other.message_text_)),
      started_s_(other.started_s_), reaped_(other.reaped_), outcome_(std::move(other.outcome_)) {
  other.pid_ = -1;
  other.message_fd_ = other.output_fd_ = other.pid_fd_ = -1;
  other.reaped_ = true;
}

Child::~Child() {
  if (!reaped_ && pid_ > 0) {
    kill_group();
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  close_fds();
}

std::vector<int> Child::fds() const {
  std::vector<int> out;
  for (const int fd : {message_fd_, output_fd_, pid_fd_})
    if (fd >= 0)
      out.push_back(fd);
  return out;
}

int Child::ms_to_deadline() const {
  if (options_.timeout_s <= 0 || outcome_.timed_out || reaped_)
    return -1;
  const double left = started_s_ + options_.timeout_s - now_s();
  return left <= 0 ? 0 : static_cast<int>(std::ceil(left * 1000.0));
}

void Child::kill_group() {
  ::kill(-pid_, SIGKILL); // the child and whatever it started
  ::kill(pid_, SIGKILL);  // in case it never got its own group
}

void Child::read_pipe(int& fd, std::string& into, std::size_t limit) {
  char buf[READ_CHUNK];
  while (fd >= 0) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      const std::size_t keep = std::min(static_cast<std::size_t>(n), limit - std::min(limit, into.size()));
      into.append(buf, keep);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {
      close_fd(fd); // end of file, or an error that leaves nothing to read
    }
  }
}

void Child::step() {
  if (reaped_)
    return;
  read_pipe(message_fd_, message_text_, std::numeric_limits<std::size_t>::max());
  read_pipe(output_fd_, outcome_.output, options_.max_output_bytes);
  if (ms_to_deadline() == 0) {
    outcome_.timed_out = true;
    kill_group();
  }
  // Without a pidfd, a child whose pipes are closed is waited for (it is ending).
  const bool block = pid_fd_ < 0 && message_fd_ < 0 && output_fd_ < 0;
  int status = 0;
  pid_t r = -1;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0)
    return;
  if (r < 0) // ECHILD: reaped elsewhere (SIGCHLD ignored); how it ended is unknown
    status = -1;
  // What it wrote before it ended is in the pipes; anything a leftover grandchild writes is not.
  read_pipe(message_fd_, message_text_, std::numeric_limits<std::size_t>::max());
  read_pipe(output_fd_, outcome_.output, options_.max_output_bytes);
  reap(status);
}

void Child::reap(int status) {
  outcome_.wall_s = now_s() - started_s_;
  if (status != -1 && WIFEXITED(status))
    outcome_.exit_code = WEXITSTATUS(status);
  if (status != -1 && WIFSIGNALED(status))
    outcome_.signal = WTERMSIG(status);
  const Message envelope = Message::parse(message_text_, nullptr, false);
  if (!envelope.is_discarded() && envelope.is_object()) {
    if (envelope.contains("message"))
      outcome_.message = envelope["message"];
    else if (envelope.contains("exception") && envelope["exception"].is_string())
      outcome_.exception = envelope["exception"].get<std::string>();
  }
  message_text_.clear();
  close_fds();
  reaped_ = true;
}

void Child::close_fds() {
  close_fd(message_fd_);
  close_fd(output_fd_);
  close_fd(pid_fd_);
}

Outcome Child::take_outcome() {
  return std::move(outcome_);
}

Outcome Child::wait() {
  for (step(); !reaped_; step())
    wait_for_any({this});
  return take_outcome();
}

Outcome run(const Job& job, const SpawnOptions& options) {
  return Child(job, options).wait();
}

void run_each(std::size_t count, const std::function<Job(std::size_t)>& job, const PoolOptions& options,
              const OnDone& on_done, const OnTick& on_tick) {
  struct Running {
    std::size_t index;
    Child child;
  };
  const std::size_t limit = static_cast<std::size_t>(std::max(1, options.jobs));
  const std::string prefix = options.name.empty() ? "" : options.name + ": ";
  std::list<Running> running; // destroyed on an exception: kills and reaps what is left
  std::size_t next = 0;
  double last_tick = now_s();
  while (next < count || !running.empty()) {
    while (running.size() < limit && next < count) {
      try {
        running.push_back(Running{next, Child(job(next), options.spawn)});
      } catch (const Error& e) {
        throw Error(prefix + e.what());
      }
      ++next;
    }
    std::vector<const Child*> children;
    for (const Running& r : running)
      children.push_back(&r.child);
    wait_for_any(children);
    std::vector<std::pair<std::size_t, Outcome>> ended;
    for (auto it = running.begin(); it != running.end();) {
      it->child.step();
      if (!it->child.finished()) {
        ++it;
        continue;
      }
      ended.emplace_back(it->index, it->child.take_outcome());
      it = running.erase(it);
    }
    for (auto& [index, outcome] : ended)
      on_done(index, std::move(outcome));
    if (on_tick && now_s() - last_tick > TICK_MS / 1000.0) {
      last_tick = now_s();
      on_tick();
    }
  }
}

std::vector<Outcome> run_all(const std::vector<Job>& jobs, const PoolOptions& options) {
  std::vector<Outcome> out(jobs.size());
  run_each(
      jobs.size(), [&](std::size_t i) { return jobs[i]; }, options,
      [&](std::size_t i, Outcome&& o) { out[i] = std::move(o); });
  return out;
}

Message number(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  return v;
}

double number_of(const Message& m) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    if (s == "nan")
      return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf")
      return std::numeric_limits<double>::infinity();
    if (s == "-inf")
      return -std::numeric_limits<double>::infinity();
  }
  return m.get<double>();
}

} // namespace stepsim::process
