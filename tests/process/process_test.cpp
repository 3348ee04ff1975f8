// The subprocess module: how children end, timeouts over the process group, the parent-death
// signal, captured output beyond a pipe buffer, the bounded pool, and no zombie left behind.

#include "process/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {

using namespace stepsim::process;
using namespace std::chrono_literals;

double monotonic_s() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t); // one clock for every process of the machine
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

/// True once `pid` is gone or a zombie (reparented to an init that has not reaped it yet).
bool dead(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line))
    return true;
  const auto close = line.rfind(')');
  return close == std::string::npos || line.substr(close + 2, 1) == "Z";
}

bool dies_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!dead(pid)) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

/// No child of this process is left, zombie or running.
void expect_no_children() {
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

// A body that returns: its message arrives whole, exit status 0, no signal.
TEST(Process, BodyMessageAndExitZero) {
  const Outcome o = run(Job{.body = [] { return Message{{"pid", ::getpid()}, {"x", 1.5}}; }, .argv = {}});
  ASSERT_TRUE(o.message.has_value());
  EXPECT_NE((*o.message)["pid"].get<int>(), ::getpid());
  EXPECT_EQ((*o.message)["x"].get<double>(), 1.5);
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.signal, 0);
  EXPECT_FALSE(o.timed_out);
  EXPECT_TRUE(o.exception.empty());
  expect_no_children();
}

// A body that throws: the exception's text, exit status 1, no message.
TEST(Process, BodyExceptionIsReported) {
  const Outcome o =
      run(Job{.body = []() -> Message { throw std::runtime_error("no such layout"); }, .argv = {}});
  EXPECT_FALSE(o.message.has_value());
  EXPECT_EQ(o.exception, "no such layout");
  EXPECT_EQ(o.exit_code, 1);
  expect_no_children();
}

// A body that exits on its own with 7, and one that aborts: the status and the signal.
TEST(Process, NonZeroExitAndSignal) {
  const Outcome exited = run(Job{.body = []() -> Message { std::_Exit(7); }, .argv = {}});
  EXPECT_FALSE(exited.message.has_value());
  EXPECT_EQ(exited.exit_code, 7);
  EXPECT_EQ(exited.signal, 0);
  const Outcome killed = run(Job{.body = []() -> Message {
                                   std::signal(SIGABRT, SIG_DFL);
                                   std::abort();
                                 },
                                 .argv = {}});
  EXPECT_FALSE(killed.message.has_value());
  EXPECT_EQ(killed.exit_code, -1);
  EXPECT_EQ(killed.signal, SIGABRT);
  expect_no_children();
}

// exec: the program's output and status; a program that does not exist: 127 and why.
TEST(Process, ExecProgram) {
  const Outcome o = run(Job{.body = {}, .argv = {"sh", "-c", "echo out; echo err >&2; exit 3"}});
  EXPECT_EQ(o.output, "out\nerr\n");
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_FALSE(o.message.has_value());
  const Outcome missing = run(Job{.body = {}, .argv = {"/nonexistent/stepsim-no-such-program"}});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.exception.find("cannot run '/nonexistent/stepsim-no-such-program'"), std::string::npos)
      << missing.exception;
  expect_no_children();
}

// A child that sleeps for a minute with a timeout of 0.3 s, after starting a grandchild that
// sleeps too: both are killed (SIGKILL to the process group), well before the minute.
TEST(Process, TimeoutKillsTheProcessGroup) {
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome o = run(Job{.body = []() -> Message {
                              const pid_t grandchild = ::fork();
                              if (grandchild == 0) {
                                ::sleep(60);
                                std::_Exit(0);
                              }
                              std::printf("%d\n", static_cast<int>(grandchild));
                              std::fflush(stdout);
                              ::sleep(60);
                              return Message{};
                            },
                            .argv = {}},
                        SpawnOptions{.output = Output::CAPTURE, .timeout_s = 0.3});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_TRUE(o.timed_out);
  EXPECT_EQ(o.signal, SIGKILL);
  EXPECT_FALSE(o.message.has_value());
  const pid_t grandchild = static_cast<pid_t>(std::atoi(o.output.c_str()));
  ASSERT_GT(grandchild, 0) << o.output;
  EXPECT_TRUE(dies_within(grandchild, 5000ms));
  expect_no_children();
}

// A child whose parent dies: the middle process starts `sleep 60` (exec), prints its pid and
// exits at once; the sleeper gets SIGKILL from PR_SET_PDEATHSIG.
TEST(Process, ParentDeathKillsTheChild) {
  const Outcome o = run(
      Job{.body = []() -> Message {
            Child sleeper(Job{.body = {}, .argv = {"sleep", "60"}}, SpawnOptions{.output = Output::DISCARD});
            std::printf("%d\n", static_cast<int>(sleeper.pid()));
            std::fflush(stdout);
            std::_Exit(0); // without reaping or killing the sleeper
          },
          .argv = {}});
  EXPECT_EQ(o.exit_code, 0);
  const pid_t sleeper = static_cast<pid_t>(std::atoi(o.output.c_str()));
  ASSERT_GT(sleeper, 0) << o.output;
  EXPECT_TRUE(dies_within(sleeper, 5000ms));
  expect_no_children();
}

// 1 MiB on stdout and a 1 MiB message, both far beyond a pipe's 64 KiB buffer: all of it
// arrives and nothing deadlocks.
TEST(Process, LargeOutputAndMessage) {
  constexpr std::size_t MIB = 1 << 20;
  const Outcome o = run(Job{.body =
                                [] {
                                  const std::string line(1023, 'x');
                                  for (std::size_t i = 0; i < MIB / 1024; ++i)
                                    std::printf("%s\n", line.c_str());
                                  return Message{{"big", std::string(MIB, 'y')}};
                                },
                            .argv = {}});
  ASSERT_EQ(o.output.size(), MIB);
  EXPECT_EQ(std::count(o.output.begin(), o.output.end(), '\n'), static_cast<long>(MIB / 1024));
  ASSERT_TRUE(o.message.has_value());
  EXPECT_EQ((*o.message)["big"].get<std::string>().size(), MIB);
  EXPECT_EQ(o.exit_code, 0);
  expect_no_children();
}

// Captured output beyond max_output_bytes is dropped (the child still finishes).
TEST(Process, OutputLimit) {
  const Outcome o = run(Job{.body = {}, .argv = {"sh", "-c", "yes | head -c 100000"}},
                        SpawnOptions{.output = Output::CAPTURE, .max_output_bytes = 1000});
  EXPECT_EQ(o.output.size(), 1000u);
  EXPECT_EQ(o.exit_code, 0);
}

// Discarded output reaches neither the outcome nor the parent's stdout.
TEST(Process, DiscardedOutput) {
  ::testing::internal::CaptureStdout();
  const Outcome o = run(Job{.body = {}, .argv = {"echo", "hidden"}}, SpawnOptions{.output = Output::DISCARD});
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(o.output, "");
  EXPECT_EQ(o.exit_code, 0);
}

// 12 jobs of 0.1 s, 3 at a time: each job's interval (measured inside it) overlaps at most two
// others at any moment, every job ran once, and run_all returns them in job order.
TEST(Pool, BoundedAndOrdered) {
  constexpr int N = 12;
  constexpr int J = 3;
  std::vector<Job> jobs;
  for (int i = 0; i < N; ++i)
    jobs.push_back(Job{.body =
                           [i] {
                             const double start = monotonic_s();
                             std::this_thread::sleep_for(100ms);
                             return Message{{"index", i}, {"start", start}, {"end", monotonic_s()}};
                           },
                       .argv = {}});
  const std::vector<Outcome> out = run_all(jobs, PoolOptions{.jobs = J, .spawn = {}, .name = "test"});
  ASSERT_EQ(out.size(), static_cast<std::size_t>(N));
  std::vector<std::pair<double, int>> edges; // +1 at a start, -1 at an end
  for (int i = 0; i < N; ++i) {
    ASSERT_TRUE(out[i].message.has_value()) << i;
    EXPECT_EQ((*out[i].message)["index"].get<int>(), i);
    edges.emplace_back((*out[i].message)["start"].get<double>(), +1);
    edges.emplace_back((*out[i].message)["end"].get<double>(), -1);
  }
  std::sort(edges.begin(), edges.end()); // at equal times ends (-1) come first
  int now = 0;
  int most = 0;
  for (const auto& [t, d] : edges)
    most = std::max(most, now += d);
  EXPECT_LE(most, J);
  EXPECT_GE(most, 1);
  expect_no_children();
}

// on_done sees each index once; with one worker, in index order; on_tick runs meanwhile.
TEST(Pool, RunEachCallbacks) {
  std::vector<std::size_t> seen;
  int ticks = 0;
  run_each(
      4,
      [](std::size_t i) {
        return Job{.body =
                       [i] {
                         std::this_thread::sleep_for(150ms);
                         return Message(i);
                       },
                   .argv = {}};
      },
      PoolOptions{.jobs = 1, .spawn = {}, .name = ""},
      [&](std::size_t i, Outcome&& o) {
        EXPECT_EQ(o.message.value().get<std::size_t>(), i);
        seen.push_back(i);
      },
      [&] { ++ticks; });
  EXPECT_EQ(seen, (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_GE(ticks, 1);
  expect_no_children();
}

// A callback that throws: the exception reaches the caller, the running children are killed and
// reaped (no zombie, no sleeper left).
TEST(Pool, ThrowingCallbackLeavesNoChild) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(run_each(
                   3,
                   [](std::size_t i) {
                     return i == 0 ? Job{.body = [] { return Message(0); }, .argv = {}}
                                   : Job{.body = {}, .argv = {"sleep", "60"}};
                   },
                   PoolOptions{.jobs = 3, .spawn = {}, .name = ""},
                   [](std::size_t, Outcome&&) { throw std::runtime_error("disk full"); }),
               std::runtime_error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  expect_no_children();
}

void on_alarm(int) {}

// Signals arriving every millisecond (no SA_RESTART) interrupt poll, read and waitpid: every
// result still arrives whole.
TEST(Pool, InterruptedBySignals) {
  struct sigaction sa {};
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  struct sigaction old {};
  ASSERT_EQ(::sigaction(SIGALRM, &sa, &old), 0);
  itimerval every_ms{{0, 1000}, {0, 1000}};
  ASSERT_EQ(::setitimer(ITIMER_REAL, &every_ms, nullptr), 0);
  std::vector<Job> jobs;
  for (int i = 0; i < 6; ++i)
    jobs.push_back(Job{.body =
                           [i] {
                             ::signal(SIGALRM, SIG_IGN);
                             std::this_thread::sleep_for(50ms);
                             std::printf("%s", std::string(200000, 'z').c_str());
                             return Message{{"index", i}};
                           },
                       .argv = {}});
  const std::vector<Outcome> out = run_all(jobs, PoolOptions{.jobs = 2, .spawn = {}, .name = ""});
  itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);
  ::sigaction(SIGALRM, &old, nullptr);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(out[i].message.has_value()) << i;
    EXPECT_EQ((*out[i].message)["index"].get<int>(), i);
    EXPECT_EQ(out[i].output.size(), 200000u);
  }
  expect_no_children();
}

// Numbers keep NaN and the infinities through a message.
TEST(Message, NonFiniteNumbers) {
  const Message m =
      Message::parse(Message{number(1.0 / 3.0), number(NAN), number(INFINITY), number(-INFINITY)}.dump());
  EXPECT_EQ(number_of(m[0]), 1.0 / 3.0);
  EXPECT_TRUE(std::isnan(number_of(m[1])));
  EXPECT_EQ(number_of(m[2]), INFINITY);
  EXPECT_EQ(number_of(m[3]), -INFINITY);
  EXPECT_THROW(number_of(Message("x")), nlohmann::json::exception);
}

} // namespace
