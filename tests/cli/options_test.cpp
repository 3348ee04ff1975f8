// Options (sim/cli/options.hpp) in-process: each kind of declaration fills its variable from
// every spelling CLI11 accepts, and each misuse is a ConfigError that says what is wrong, in the
// documented order (unknown option first, a missing required option last).

#include "cli/options.hpp"
#include "core/error.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <sstream>
#include <string>
#include <vector>

namespace {

using stepsim::ConfigError;
using stepsim::cli::Options;

/// A command with one option of each kind.
struct Declared {
  std::string cluster, out = "none", form = "auto";
  std::vector<std::string> sets, files;
  bool quiet = false;
  int jobs = 1;
  double timeout = 0;
  Options o{"demo"};
  Declared() {
    o.describe("usage: stepsim demo --cluster FILE [FILES...]\n\nA command for the tests.");
    o.required("--cluster", cluster, "FILE", "the cluster");
    o.value("--out", out, "DIR", "where to write");
    o.values("--set", sets, "PATH=VALUE", "an override");
    o.flag("--quiet", quiet, "no table");
    o.integer("-j,--jobs", jobs, 1, INT_MAX, "N", "at a time");
    o.seconds("--timeout", timeout, "give up after");
    o.choice("--collectives", form, {"auto", "fine", "coarse"}, "flow form");
    o.positionals("FILES", files, "inputs");
  }
  bool parse(const std::vector<std::string>& args) {
    std::ostringstream help;
    return o.parse(args, help);
  }
};

/// The ConfigError message parsing `args` throws ("" when none).
std::string error_of(const std::vector<std::string>& args) {
  Declared d;
  try {
    d.parse(args);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(Options, FillsEveryKindInAnyOrder) {
  Declared d;
  ASSERT_TRUE(d.parse({"a.yaml", "--quiet", "--set", "x=1", "--cluster=c.yaml", "-j4", "b.yaml", "--set=y=2",
                       "--timeout", "2.5", "--collectives", "fine", "--out", "o"}));
  EXPECT_EQ(d.cluster, "c.yaml");
  EXPECT_EQ(d.out, "o");
  EXPECT_EQ(d.sets, (std::vector<std::string>{"x=1", "y=2"}));
  EXPECT_EQ(d.files, (std::vector<std::string>{"a.yaml", "b.yaml"}));
  EXPECT_TRUE(d.quiet);
  EXPECT_EQ(d.jobs, 4);
  EXPECT_EQ(d.timeout, 2.5);
  EXPECT_EQ(d.form, "fine");
  Declared e;
  ASSERT_TRUE(e.parse({"--cluster", "c", "-j", "3"}));
  EXPECT_EQ(e.jobs, 3);
  EXPECT_EQ(e.out, "none"); // the declared default stays
  EXPECT_FALSE(e.quiet);
  Declared f;
  ASSERT_TRUE(f.parse({"--cluster", "c", "--jobs=7"}));
  EXPECT_EQ(f.jobs, 7);
}

TEST(Options, HelpIsGeneratedFromTheDeclarations) {
  Declared d;
  std::ostringstream out;
  EXPECT_FALSE(d.o.parse({"--bogus", "-h"}, out)); // help wins, nothing else is checked
  const std::string help = out.str();
  EXPECT_EQ(help.rfind("usage: stepsim demo --cluster FILE", 0), 0u) << help;
  for (const char* line :
       {"--cluster FILE", "the cluster (required)", "--out DIR", "where to write (default none)",
        "--set PATH=VALUE", "an override (repeatable)", "--quiet", "-j, --jobs N", "at a time (default 1)",
        "--collectives auto|fine|coarse", "flow form (default auto)", "--timeout SECONDS", "FILES",
        "--log-level LEVEL", "-h, --help"})
    EXPECT_NE(help.find(line), std::string::npos) << line << "\n" << help;
  EXPECT_EQ(d.o.help(), help);
}

TEST(Options, MisuseSaysWhatIsWrong) {
  // An unknown option is reported before a required one is missed, with the nearest name.
  EXPECT_EQ(error_of({"--clustr", "c"}),
            "unknown option --clustr for `stepsim demo`; did you mean --cluster?");
  EXPECT_EQ(error_of({"--cluster", "c", "--qiuet"}),
            "unknown option --qiuet for `stepsim demo`; did you mean --quiet?");
  EXPECT_EQ(error_of({"--cluster", "c", "--zzzzzz"}), "unknown option --zzzzzz for `stepsim demo`");
  EXPECT_EQ(error_of({}), "missing required option --cluster (see `stepsim demo --help`)");
  EXPECT_EQ(error_of({"--cluster", "a", "--cluster", "b"}),
            "option --cluster is given 2 times; it takes one value");
  EXPECT_EQ(error_of({"--cluster", "c", "--out", ""}), "option --out needs a non-empty value");
  EXPECT_EQ(error_of({"--cluster", "c", "--out"}), "option --out needs a value (see `stepsim demo --help`)");
  EXPECT_EQ(error_of({"--cluster", "c", "--out", "--quiet"}),
            "option --out needs a value, found the option --quiet");
  EXPECT_EQ(error_of({"--cluster", "c", "--quiet=yes"}), "option --quiet takes no value, got 'yes'");
  EXPECT_EQ(error_of({"--cluster", "c", "-j", "0"}), "-j/--jobs: expected a positive integer, got '0'");
  EXPECT_EQ(error_of({"--cluster", "c", "-j", ""}), "-j/--jobs: expected a positive integer, got ''");
  EXPECT_EQ(error_of({"--cluster", "c", "--jobs", "2x"}), "-j/--jobs: expected a positive integer, got '2x'");
  EXPECT_EQ(error_of({"--cluster", "c", "--timeout", "0"}), "--timeout: expected seconds > 0, got '0'");
  EXPECT_EQ(error_of({"--cluster", "c", "--timeout", "inf"}), "--timeout: expected seconds > 0, got 'inf'");
  EXPECT_EQ(error_of({"--cluster", "c", "--collectives", "fien"}),
            "--collectives fien: expected auto, fine or coarse; did you mean fine?");
  EXPECT_EQ(error_of({"--cluster", "c", "--collectives", "xyz"}),
            "--collectives xyz: expected auto, fine or coarse");
  EXPECT_EQ(error_of({"--cluster", "c", "--log-level", "loud"}),
            "option --log-level: 'loud' is not a level (trace, debug, info, warn, error, off)");
}

TEST(Options, IntegerBoundsAreInTheMessage) {
  int top = 3;
  Options o("plan");
  o.integer("--top", top, 0, 128, "K", "best estimates");
  std::ostringstream help;
  try {
    o.parse({"--top", "129"}, help);
    FAIL() << "accepted --top 129";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--top: expected an integer in [0, 128], got '129'");
  }
  Options p("plan");
  p.integer("--top", top, 0, 128, "K", "best estimates");
  ASSERT_TRUE(p.parse({"--top", "0"}, help));
  EXPECT_EQ(top, 0);
}
