#include "sweep/progress.hpp"

#include <cstdio>

namespace stepsim::sweep {

SweepProgress::SweepProgress(std::ostream& out, SweepProgressOptions options)
    : out_(out), options_(std::move(options)), line_(out, ProgressOptions{.mode = options_.mode,
                                                                          .verb = options_.label + " ran",
                                                                          .unit = "configurations",
                                                                          .already = options_.resumed}),
      start_(std::chrono::steady_clock::now()) {
  out_ << options_.label << ": " << options_.total << " configuration(s)";
  if (options_.resumed > 0) {
    out_ << ", " << options_.resumed << " already done (resuming)";
  }
  out_ << ", " << options_.jobs << " at a time\n" << std::flush;
}

std::string SweepProgress::counts() const {
  char text[160];
  std::snprintf(text, sizeof text, "ok %zu, oom %zu, skipped %zu, failed %zu", ok_, oom_, skipped_, failed_);
  return text;
}

void SweepProgress::finished(const Row& row, double wall_s) {
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
  if (row.status == RunStatus::FAILED) {
    // Failures are written whatever the progress mode, and stay above the progress line.
    line_.note(options_.label + ": config " + std::to_string(row.index) + " (" + row.id +
               ") failed: " + row.reason);
  }
  line_.update(options_.resumed + done_, options_.total, counts());
}

void SweepProgress::tick() {
  if (options_.resumed + done_ < options_.total)
    line_.update(options_.resumed + done_, options_.total, counts());
}

void SweepProgress::close() {
  line_.finish();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: done: %zu ok, %zu oom, %zu skipped, %zu failed in this run (%zu resumed) in %s wall, "
                "%.2f s per configuration\n",
                options_.label.c_str(), ok_, oom_, skipped_, failed_, options_.resumed,
                format_duration(elapsed).c_str(), done_ == 0 ? 0.0 : busy_s_ / static_cast<double>(done_));
  out_ << line << std::flush;
}

} // namespace stepsim::sweep
