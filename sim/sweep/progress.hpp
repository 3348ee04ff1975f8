#pragma once
// A sweep on stderr: one line saying what runs (configurations, resumed, at a time), the shared
// progress line while configurations finish (core/progress.hpp: done/total, ETA, the counts by
// status), a line for each failure, and a last line summing up.

#include "core/progress.hpp"
#include "sweep/results.hpp"

#include <chrono>
#include <cstddef>
#include <ostream>
#include <string>

namespace stepsim::sweep {

struct SweepProgressOptions {
  std::size_t total = 0;   ///< configurations this process is responsible for
  std::size_t resumed = 0; ///< of those, already finished by an earlier run
  int jobs = 1;            ///< processes at a time
  ProgressMode mode = ProgressMode::OFF;
  std::string label; ///< prefix, e.g. "sweep" or "sweep rank 1/4"
};

class SweepProgress {
public:
  SweepProgress(std::ostream& out, SweepProgressOptions options);

  /// Counts a finished configuration and shows it.
  void finished(const Row& row, double wall_s);
  /// Moves the progress line on (ETA); drawn at most twice a second.
  void tick();
  /// Ends the progress line and writes the summary line.
  void close();

  [[nodiscard]] std::size_t ok() const { return ok_; }
  [[nodiscard]] std::size_t skipped() const { return skipped_; }
  [[nodiscard]] std::size_t failed() const { return failed_; }

private:
  [[nodiscard]] std::string counts() const;

  std::ostream& out_;
  SweepProgressOptions options_;
  ProgressReporter line_;
  std::chrono::steady_clock::time_point start_;
  std::size_t done_ = 0; ///< finished in this run
  std::size_t ok_ = 0;
  std::size_t skipped_ = 0;
  std::size_t oom_ = 0;
  std::size_t failed_ = 0;
  double busy_s_ = 0; ///< summed wall time of this run's configurations
};

} // namespace stepsim::sweep
