#pragma once
// How far long work has got, on stderr: "stepsim: simulated 120 / 327 tasks (37 %), ETA 4 s".
// One reporter for every command (run's tasks, plan's layouts, sweep's configurations, validate's
// runs). On a terminal the line is redrawn in place, at most twice a second, once the work has
// lasted a moment; with `--progress` it is shown from the start, also into a pipe or a file (one
// line every few seconds); otherwise nothing is written.

#include <chrono>
#include <cstddef>
#include <functional>
#include <ostream>
#include <string>

namespace stepsim {

/// "7 s", "2:03" or "1:02:03"; "?" for a negative or non-finite value.
std::string format_duration(double seconds);

/// Whether and how progress is shown.
enum class ProgressMode {
  OFF,      ///< nothing (stderr is a pipe or a file, no --progress)
  TERMINAL, ///< stderr is a terminal: redrawn in place once the work has lasted ProgressOptions::delay_s
  FORCED,   ///< --progress: from the start; in place on a terminal, else one line at a time
};

/// True when stderr is a terminal.
bool stderr_is_terminal();

/// The mode for a command: FORCED with `flag` (--progress), TERMINAL when stderr is a terminal
/// and `quiet` is false, else OFF.
ProgressMode progress_mode(bool flag, bool quiet = false);

struct ProgressOptions {
  ProgressMode mode = ProgressMode::OFF;
  std::string verb = "simulated"; ///< "stepsim: VERB DONE / TOTAL UNIT ..."
  std::string unit = "tasks";
  double delay_s = 2.0;                 ///< TERMINAL: nothing is drawn before the work has lasted this long
  std::size_t already = 0;              ///< items done before this process started (a resumed sweep's rows)
  bool in_place = stderr_is_terminal(); ///< redraw one line with '\r' instead of writing whole lines
};

class ProgressReporter {
public:
  ProgressReporter(std::ostream& err, ProgressOptions options);

  /// DONE of TOTAL items finished; `detail` follows the figures ("ok 3, failed 1"). Drawn at most
  /// twice a second on a terminal and every few seconds into a file; always when done == total.
  void update(std::size_t done, std::size_t total, const std::string& detail = {});
  /// A line that stays (a failure): written whatever the mode, above the redrawn line.
  void note(const std::string& line);
  /// update() as a function of (done, total), for runner::SimulateOptions::progress and the like.
  [[nodiscard]] std::function<void(std::size_t, std::size_t)> callback();
  /// Ends the redrawn line, if one was drawn.
  void finish();

  /// True when lines are written (FORCED, or TERMINAL once the delay passed).
  [[nodiscard]] bool shown() const { return shown_; }
  /// True when this reporter writes anything at all (mode is not OFF).
  [[nodiscard]] bool enabled() const { return options_.mode != ProgressMode::OFF; }

private:
  void draw(std::size_t done, std::size_t total, const std::string& detail);

  std::ostream& err_;
  ProgressOptions options_;
  bool shown_ = false;
  bool open_line_ = false; ///< a redrawn line waits for its newline
  bool complete_ = false;  ///< the last line (done == total) was drawn
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

} // namespace stepsim
