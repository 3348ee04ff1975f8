#include "sweep/progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace stepsim::sweep {

namespace {

constexpr int BAR_WIDTH = 28;

} // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return "?";
  }
  const long s = std::lround(seconds);
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%ld s", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  }
  return buf;
}

Progress::Progress(std::ostream& out, ProgressOptions options)
    : out_(out), options_(std::move(options)), start_(std::chrono::steady_clock::now()) {
  out_ << options_.label << ": " << options_.total << " configuration(s)";
  if (options_.resumed > 0) {
    out_ << ", " << options_.resumed << " already done (resuming)";
  }
  out_ << ", " << options_.jobs << " at a time\n";
  if (options_.tty) {
    draw();
  }
}

std::string Progress::eta() const {
  const std::size_t left = options_.total - options_.resumed - done_;
  if (left == 0) {
    return "0 s";
  }
  if (done_ == 0) {
    return "--";
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Throughput so far (configurations per second, all slots together) extrapolated.
  return format_duration(elapsed / static_cast<double>(done_) * static_cast<double>(left));
}

void Progress::draw() {
  const std::size_t finished = options_.resumed + done_;
  const double frac =
      options_.total == 0 ? 1.0 : static_cast<double>(finished) / static_cast<double>(options_.total);
  const int filled = std::clamp(static_cast<int>(frac * BAR_WIDTH), 0, BAR_WIDTH);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar += std::string(static_cast<std::size_t>(BAR_WIDTH - filled), '.');
  char line[512];
  std::snprintf(line, sizeof line,
                "\r\033[K%s [%s] %zu/%zu  ok %zu  oom %zu  skipped %zu  failed %zu  elapsed %s  ETA %s",
                options_.label.c_str(), bar.c_str(), finished, options_.total, ok_, oom_, skipped_, failed_,
                format_duration(elapsed).c_str(), eta().c_str());
  out_ << line << std::flush;
}

void Progress::finished(const Row& row, double wall_s) {
  ++done_;
  busy_s_ += wall_s;
  switch (row.status) {
  case RunStatus::OK:
    ++ok_;
    break;
  case RunStatus::SKIPPED:
    ++skipped_;
    break;
  case RunStatus::FAILED:
    ++failed_;
    break;
  case RunStatus::OOM:
    ++oom_;
    break;
  }
  if (options_.tty) {
    if (row.status == RunStatus::FAILED) {
      // Failures stay on screen above the bar.
      out_ << "\r\033[K" << options_.label << ": config " << row.index << " (" << row.id
           << ") failed: " << row.reason << '\n';
    }
    draw();
    return;
  }
  char head[512];
  std::snprintf(head, sizeof head, "%s: [%zu/%zu] config %zu (%s) %s in %.2f s", options_.label.c_str(),
                options_.resumed + done_, options_.total, row.index, row.id.c_str(),
                std::string(to_string(row.status)).c_str(), wall_s);
  out_ << head;
  if (!row.reason.empty()) {
    out_ << ": " << row.reason;
  }
  out_ << "  (ETA " << eta() << ")\n" << std::flush;
}

void Progress::tick() {
  if (options_.tty) {
    draw();
  }
}

void Progress::close() {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (options_.tty) {
    draw();
    out_ << '\n';
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: done: %zu ok, %zu oom, %zu skipped, %zu failed in this run (%zu resumed) in %s wall, "
                "%.2f s per configuration\n",
                options_.label.c_str(), ok_, oom_, skipped_, failed_, options_.resumed,
                format_duration(elapsed).c_str(), done_ == 0 ? 0.0 : busy_s_ / static_cast<double>(done_));
  out_ << line << std::flush;
}

} // namespace stepsim::sweep
