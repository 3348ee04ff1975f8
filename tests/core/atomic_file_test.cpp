// Atomic output files, the text cleaners of messages and CSV cells (core/).

#include "core/atomic_file.hpp"
#include "core/csv.hpp"
#include "core/error.hpp"

#include "common/cli.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace stepsim {
namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("stepsim-core-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(CsvCell, FormulaCellsAreDefused) {
  EXPECT_EQ(csv_cell("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
  EXPECT_EQ(csv_cell("+cmd"), "'+cmd");
  EXPECT_EQ(csv_cell("-2+3"), "'-2+3");
  EXPECT_EQ(csv_cell("@SUM(A1)"), "'@SUM(A1)");
  EXPECT_EQ(csv_cell("\tx"), "'\tx");
}

TEST(CsvCell, NumbersAndPlainTextAreData) {
  EXPECT_EQ(csv_cell("-1.5"), "-1.5");
  EXPECT_EQ(csv_cell("+3e8"), "+3e8");
  EXPECT_EQ(csv_cell("1f1b"), "1f1b");
  EXPECT_EQ(csv_cell("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_cell(""), "");
}

TEST(Printable, ControlBytesAreEscapedAndLongTextCut) {
  EXPECT_EQ(printable("a\x1b[0m\n\tb"), "a\\x1b[0m\\n\\tb");
  const std::string cut = printable(std::string(1000, 'x'), 10);
  EXPECT_EQ(cut, "xxxxxxxxxx...(1000 bytes in all)");
}

TEST(Printable, MessagesKeepTheirLinesUpToFifty) {
  EXPECT_EQ(printable_message("one\ntwo"), "one\ntwo");
  std::string many;
  for (int i = 0; i < 60; ++i)
    many += "error " + std::to_string(i) + "\n";
  many.pop_back();
  const std::string shown = printable_message(many);
  EXPECT_NE(shown.find("error 49\n... and 10 more errors"), std::string::npos) << shown;
  EXPECT_EQ(shown.find("error 50"), std::string::npos);
}

TEST(AtomicFile, WriteFailureNamesTheFileAndLeavesNoTemporary) {
  const fs::path dir = fresh_dir("efbig");
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  auto* previous = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write_file_atomically(dir / "big.txt", [](std::ostream& o) { o << std::string(1 << 20, 'x'); });
  } catch (const Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, previous);
  EXPECT_EQ(message, "cannot write " + (dir / "big.txt").string() + ": File too large");
  EXPECT_TRUE(stepsim::test::listing(dir).empty());
}

TEST(AtomicFile, ATerminatedWriterLeavesNoTemporary) {
  const fs::path dir = fresh_dir("sigterm");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    install_interrupt_handlers();
    write_file_atomically(dir / "out.json", [](std::ostream& o) {
      o << std::string(1 << 20, 'x');
      o.flush();
      ::raise(SIGTERM); // killed in the middle of the write
    });
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_TRUE(stepsim::test::listing(dir).empty());
}

TEST(AtomicFile, OutputSetReplacesTheWholeEarlierSet) {
  const fs::path dir = fresh_dir("set");
  const auto text = [](std::string s) { return [s](std::ostream& o) { o << s; }; };
  write_output_set(dir, {{"summary.json", text("1")}, {"trace.json", text("1")}},
                   {"summary.json", "trace.json"});
  write_output_set(dir, {{"summary.json", text("2")}}, {"summary.json", "trace.json"});
  EXPECT_EQ(stepsim::test::listing(dir), std::vector<std::string>{"summary.json"});
  std::ifstream in(dir / "summary.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "2");
}

TEST(AtomicFile, TemporaryNamesAreRecognised) {
  EXPECT_TRUE(is_temporary_name(".trace.json.stepsim-123-0123456789abcdef.tmp"));
  EXPECT_FALSE(is_temporary_name("trace.json.tmp.123"));
  EXPECT_FALSE(is_temporary_name(".x.stepsim-abc-0123456789abcdef.tmp"));
  EXPECT_FALSE(is_temporary_name(".x.stepsim-12-0123.tmp"));
}

} // namespace
} // namespace stepsim
