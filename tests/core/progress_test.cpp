// The shared progress line (core/progress.hpp): when it is drawn, what it says, and that a
// terminal's redrawn line and a file's whole lines end cleanly.

#include "core/progress.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>

namespace {

using stepsim::format_duration;
using stepsim::ProgressMode;
using stepsim::ProgressOptions;
using stepsim::ProgressReporter;

TEST(Progress, DurationsReadAsSecondsMinutesAndHours) {
  EXPECT_EQ(format_duration(0), "0 s");
  EXPECT_EQ(format_duration(59.4), "59 s");
  EXPECT_EQ(format_duration(123), "2:03");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(-1), "?");
}

TEST(Progress, OffWritesNothingButNotes) {
  std::ostringstream err;
  ProgressReporter p(err, ProgressOptions{.mode = ProgressMode::OFF, .in_place = false});
  for (std::size_t i = 0; i <= 10; ++i)
    p.update(i, 10);
  p.finish();
  EXPECT_EQ(err.str(), "");
  EXPECT_FALSE(p.enabled());
  p.note("sweep: config 3 (abc) failed: why");
  EXPECT_EQ(err.str(), "sweep: config 3 (abc) failed: why\n");
}

TEST(Progress, ForcedIntoAFileWritesTheFirstAndTheLastLine) {
  std::ostringstream err;
  ProgressReporter p(err,
                     ProgressOptions{.mode = ProgressMode::FORCED, .unit = "layouts", .in_place = false});
  for (std::size_t i = 1; i <= 4; ++i)
    p.update(i, 4, i == 4 ? "last x" : "");
  p.update(4, 4); // drawn once only
  p.finish();
  // The lines between are within the two seconds a file waits between lines.
  EXPECT_EQ(err.str(), "stepsim: simulated 1 / 4 layouts (25 %), ETA 0 s\n"
                       "stepsim: simulated 4 / 4 layouts (100 %), ETA 0 s, last x\n");
}

TEST(Progress, EtaExtrapolatesThisRunsRateAndSkipsWhatWasDoneBefore) {
  std::ostringstream err;
  // Four of ten were done by an earlier run: one more in ~1 s leaves five, ~5 s.
  ProgressReporter p(
      err, ProgressOptions{.mode = ProgressMode::FORCED, .unit = "runs", .already = 4, .in_place = false});
  p.update(4, 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  p.update(5, 10);
  const std::string text = err.str();
  EXPECT_NE(text.find("stepsim: simulated 4 / 10 runs (40 %), ETA ?\n"), std::string::npos) << text;
  // At least 2.1 s for one item, five left: at least 10.5 s (a little more on a busy machine).
  const std::string head = "stepsim: simulated 5 / 10 runs (50 %), ETA ";
  const std::size_t at = text.find(head);
  ASSERT_NE(at, std::string::npos) << text;
  const int eta = std::stoi(text.substr(at + head.size()));
  EXPECT_GE(eta, 10) << text;
  EXPECT_LE(eta, 20) << text;
}

TEST(Progress, ATerminalIsQuietForShortWorkThenRedrawsOneLine) {
  std::ostringstream quick;
  {
    ProgressReporter p(quick,
                       ProgressOptions{.mode = ProgressMode::TERMINAL, .delay_s = 0.3, .in_place = true});
    p.update(1, 2);
    p.update(2, 2);
    p.finish();
  }
  EXPECT_EQ(quick.str(), "") << "work shorter than the delay draws nothing";

  std::ostringstream slow;
  ProgressReporter p(slow, ProgressOptions{.mode = ProgressMode::TERMINAL, .delay_s = 0.3, .in_place = true});
  p.update(1, 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  p.update(2, 3);
  p.note("a failure");
  p.update(3, 3);
  p.finish();
  EXPECT_EQ(slow.str(), "\rstepsim: simulated 2 / 3 tasks (67 %), ETA 0 s\033[K"
                        "\r\033[Ka failure\n"
                        "\rstepsim: simulated 3 / 3 tasks (100 %), ETA 0 s\033[K\n");
}

} // namespace
