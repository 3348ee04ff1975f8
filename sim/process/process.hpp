#pragma once
// Child processes: fork (running a function) or exec, one JSON message back, stdout/stderr
// captured or discarded, a timeout that kills the child's process group, and a bounded pool.
// SimGrid allows one simulation per process, so sweep, plan, validate and the tests simulate in
// children of this module (docs/architecture.md says why it is not Boost.Process).
//
// Every child: is the leader of its own process group; gets SIGKILL when the thread that spawned
// it ends (PR_SET_PDEATHSIG), and exits at once if its parent is already gone; reads stdin from
// /dev/null. A function child sends what the function returns as one newline-terminated JSON
// object on a pipe of its own, {"message": ...} or {"exception": "what()"}, then _exit()s
// (no atexit handlers of the parent run in it). Every child is reaped, EINTR or not.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace stepsim::process {

/// A child's message; key order is kept.
using Message = nlohmann::ordered_json;

/// Runs in the child; what it returns is the child's message. An exception leaving it is sent
/// as the outcome's `exception` instead.
using Body = std::function<Message()>;

/// What a child runs: `body` in a forked copy of this process, or, when `body` is empty, the
/// program `argv[0]` (searched in PATH) with `argv`.
struct Job {
  Body body;
  std::vector<std::string> argv;
};

/// Where a child's stdout and stderr go.
enum class Output {
  CAPTURE, ///< both into the outcome's `output`, in the order written
  DISCARD, ///< /dev/null
  INHERIT, ///< the parent's: only when asked (the child's own process group is not the
           ///< terminal's foreground, so Ctrl-C reaches it through the parent's death)
};

struct SpawnOptions {
  Output output = Output::CAPTURE;
  double timeout_s = 0;                       ///< SIGKILL the child's process group after this; 0: never
  std::size_t max_output_bytes = 64ull << 20; ///< captured output beyond this is read and dropped
};

/// How a child ended and what it sent.
struct Outcome {
  std::optional<Message> message; ///< what the body returned; empty if it threw, died or was exec'd
  std::string exception;          ///< what() of an exception that left the body, or why exec failed
  bool timed_out = false;         ///< the timeout killed it
  int exit_code = -1;             ///< its exit status when it exited, else -1
  int signal = 0;                 ///< the signal that ended it, else 0
  std::string output;             ///< stdout and stderr (Output::CAPTURE)
  double wall_s = 0;              ///< from fork to reaping, seconds
};

/// One running child. Destroying it before wait() kills its process group and reaps it.
class Child {
public:
  /// Forks (and for an argv job execs). Throws Error "cannot fork: ..." or "cannot create a
  /// pipe: ..." when the process cannot be started.
  Child(const Job& job, const SpawnOptions& options);
  Child(Child&& other) noexcept;
  Child& operator=(Child&&) = delete;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] bool finished() const { return reaped_; }

  /// Blocks until the child has ended (or its timeout killed it) and returns its outcome.
  Outcome wait();

  /// Pollable descriptors this child still has open (pipes, pidfd), for a caller's poll().
  [[nodiscard]] std::vector<int> fds() const;
  /// Milliseconds until this child's deadline, or -1 without a timeout.
  [[nodiscard]] int ms_to_deadline() const;
  /// Reads what is readable, enforces the timeout, reaps the child once it has ended. Never
  /// blocks except to reap a child whose pipes are closed (without pidfd support).
  void step();
  /// The outcome; only once finished().
  [[nodiscard]] Outcome take_outcome();

private:
  void kill_group();
  void read_pipe(int& fd, std::string& into, std::size_t limit);
  void reap(int status);
  void close_fds();

  SpawnOptions options_;
  pid_t pid_ = -1;
  int message_fd_ = -1;
  int output_fd_ = -1;
  int pid_fd_ = -1;
  std::string message_text_;
  double started_s_ = 0;
  bool reaped_ = false;
  Outcome outcome_;
};

/// Runs `job` to its end in a child.
Outcome run(const Job& job, const SpawnOptions& options = {});

struct PoolOptions {
  int jobs = 1;       ///< children at a time (values below 1 count as 1)
  SpawnOptions spawn; ///< for every child
  std::string name;   ///< prefix of the Error thrown when a child cannot be started ("sweep")
};

/// Called in the parent for each ended job with its index, in the order they end (jobs ending
/// in the same poll round: in the order they were started).
using OnDone = std::function<void(std::size_t index, Outcome&& outcome)>;
/// Called in the parent about five times a second while children run.
using OnTick = std::function<void()>;

/// Runs jobs 0..count-1, `job(i)` made when its turn comes, started in index order, at most
/// `options.jobs` at a time. If a callback throws, the running children are killed and reaped
/// and the exception propagates.
void run_each(std::size_t count, const std::function<Job(std::size_t)>& job, const PoolOptions& options,
              const OnDone& on_done, const OnTick& on_tick = {});

/// Runs every job as run_each does; the outcomes in the order of `jobs`.
std::vector<Outcome> run_all(const std::vector<Job>& jobs, const PoolOptions& options);

/// A double as a message value, NaN and infinities included (JSON numbers have neither).
Message number(double v);
/// The double of number(v); throws nlohmann::json::exception on anything else.
double number_of(const Message& m);

} // namespace stepsim::process
