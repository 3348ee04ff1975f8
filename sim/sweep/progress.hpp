#pragma once
// Progress of a sweep on stderr: on a terminal, one bar redrawn in place (done/total, ok,
// skipped, failed, ETA); otherwise one plain line per finished configuration.

#include "sweep/results.hpp"

#include <chrono>
#include <cstddef>
#include <ostream>
#include <string>

namespace stepsim::sweep {

struct ProgressOptions {
  std::size_t total = 0;   ///< configurations this process is responsible for
  std::size_t resumed = 0; ///< of those, already finished by an earlier run
  int jobs = 1;            ///< processes at a time (for the ETA)
  bool tty = false;        ///< redraw a bar instead of printing lines
  std::string label;       ///< prefix, e.g. "sweep" or "sweep shard 1/4"
};

class Progress {
public:
  Progress(std::ostream& out, ProgressOptions options);

  /// Counts a finished configuration and shows it.
  void finished(const Row& row, double wall_s);
  /// Redraws the bar (ETA and elapsed time move on); no-op without a terminal.
  void tick();
  /// Ends the bar with a final summary line.
  void close();

  [[nodiscard]] std::size_t ok() const { return ok_; }
  [[nodiscard]] std::size_t skipped() const { return skipped_; }
  [[nodiscard]] std::size_t failed() const { return failed_; }

private:
  void draw();
  [[nodiscard]] std::string eta() const;

  std::ostream& out_;
  ProgressOptions options_;
  std::chrono::steady_clock::time_point start_;
  std::size_t done_ = 0; ///< finished in this run
  std::size_t ok_ = 0;
  std::size_t skipped_ = 0;
  std::size_t oom_ = 0;
  std::size_t failed_ = 0;
  double busy_s_ = 0; ///< summed wall time of this run's configurations
};

/// "1:02:03", "2:03" or "7 s".
std::string format_duration(double seconds);

} // namespace stepsim::sweep
