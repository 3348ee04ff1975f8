// `stepsim report DIR`: one self-contained HTML page of what a run, sweep or plan wrote to DIR
// (docs/report.md).

#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "html/page.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace stepsim::cli {

namespace {

class ReportCommand final : public Command {
public:
  explicit ReportCommand(Options& o) {
    o.describe(R"(usage: stepsim report DIR [--html FILE]

Writes DIR/report.html, one self-contained page (no network): the summary figures, per-stage bars
of compute / pipeline bubble / exposed communication and the memory per stage (DIR/summary.json of
`stepsim run --out DIR`), a timeline of one pipeline (DIR/tasks.csv of `run --csv`), and each CSV
table of the folder, sortable (results.csv of `stepsim sweep --out DIR`), with the PNG plots in
DIR or DIR/plots.)");
    o.positionals("DIR", dirs_, "the output folder of `stepsim run`, `sweep` or `plan`");
    o.value("--html", html_, "FILE", "write the page to FILE instead of DIR/report.html");
  }
  int run(std::ostream& out, std::ostream& err) override;

private:
  std::vector<std::string> dirs_;
  std::string html_;
};

} // namespace

std::unique_ptr<Command> report_command(Options& options) {
  return std::make_unique<ReportCommand>(options);
}

int ReportCommand::run(std::ostream& out, std::ostream& /*err*/) {
  if (dirs_.size() != 1)
    throw ConfigError("report: expected one folder, got " + std::to_string(dirs_.size()) +
                      " (usage: stepsim report DIR)");
  const html::PageInput page = html::read_folder(dirs_.front());
  const std::filesystem::path file =
      html_.empty() ? std::filesystem::path(dirs_.front()) / "report.html" : std::filesystem::path(html_);
  write_file_atomically(file, [&](std::ostream& o) { html::write_page(o, page); });
  out << "wrote " << file.string() << '\n';
  return 0;
}

} // namespace stepsim::cli
