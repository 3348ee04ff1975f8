#include "core/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unistd.h>

namespace stepsim {

namespace {

using Clock = std::chrono::steady_clock;

/// Redraws on a terminal at most this often; whole lines into a file at most this often.
constexpr std::chrono::milliseconds REDRAW_EVERY(500);
constexpr std::chrono::milliseconds LINE_EVERY(2000);

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

} // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    return "?";
  const long s = std::lround(seconds);
  char buf[48];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%ld s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

bool stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) != 0;
}

ProgressMode progress_mode(bool flag, bool quiet) {
  if (flag)
    return ProgressMode::FORCED;
  return !quiet && stderr_is_terminal() ? ProgressMode::TERMINAL : ProgressMode::OFF;
}

ProgressReporter::ProgressReporter(std::ostream& err, ProgressOptions options)
    : err_(err), options_(std::move(options)), start_(Clock::now()), last_(start_) {}

void ProgressReporter::update(std::size_t done, std::size_t total, const std::string& detail) {
  if (options_.mode == ProgressMode::OFF || complete_)
    return;
  const Clock::time_point now = Clock::now();
  const bool last = done >= total;
  if (options_.mode == ProgressMode::TERMINAL && !shown_ && seconds_between(start_, now) < options_.delay_s)
    return; // short work stays silent on a terminal
  if (shown_ && !last && now - last_ < (options_.in_place ? REDRAW_EVERY : LINE_EVERY))
    return;
  last_ = now;
  shown_ = true;
  complete_ = last;
  draw(done, total, detail);
}

void ProgressReporter::draw(std::size_t done, std::size_t total, const std::string& detail) {
  const double elapsed = seconds_between(start_, last_);
  const std::size_t here = done > options_.already ? done - options_.already : 0;
  const std::size_t left = total > done ? total - done : 0;
  const std::string eta =
      left == 0   ? format_duration(0)
      : here == 0 ? std::string("?")
                  : format_duration(elapsed * static_cast<double>(left) / static_cast<double>(here));
  char line[256];
  std::snprintf(line, sizeof line, "stepsim: %s %zu / %zu %s (%.0f %%), ETA %s", options_.verb.c_str(), done,
                total, options_.unit.c_str(),
                100.0 * static_cast<double>(std::min(done, total)) /
                    static_cast<double>(std::max<std::size_t>(total, 1)),
                eta.c_str());
  const std::string text = detail.empty() ? std::string(line) : std::string(line) + ", " + detail;
  if (options_.in_place) {
    err_ << '\r' << text << "\033[K";
    open_line_ = true;
    if (done >= total)
      finish();
  } else {
    err_ << text << '\n';
  }
  err_ << std::flush;
}

std::function<void(std::size_t, std::size_t)> ProgressReporter::callback() {
  return [this](std::size_t done, std::size_t total) { update(done, total); };
}

void ProgressReporter::note(const std::string& line) {
  if (open_line_)
    err_ << "\r\033[K";
  err_ << line << '\n' << std::flush;
  open_line_ = false;
}

void ProgressReporter::finish() {
  if (open_line_)
    err_ << '\n' << std::flush;
  open_line_ = false;
}

} // namespace stepsim
