#include "sweep/executor.hpp"

#include "config/config.hpp"
#include "core/error.hpp"
#include "core/vocabulary.hpp"
#include "process/process.hpp"

#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>

#include <sched.h>
#include <unistd.h>

namespace stepsim::sweep {

namespace {

/// One line, no control characters: reasons go into CSV cells and progress lines.
std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') {
      c = ' ';
    }
  }
  while (!text.empty() && text.back() == ' ') {
    text.pop_back();
  }
  return text;
}

/// The child's work: simulate one configuration; the verdict is its message.
process::Message simulate_config(const SweepConfig& config, const ExecuteOptions& options) {
  process::Message verdict;
  try {
    const ClusterSpec cluster = config::load_cluster(options.cluster, config.overrides);
    verdict["hbm_capacity_bytes"] = cluster.gpu.hbm_capacity.value();
    WorkloadSpec workload = config::load_workload(options.workload, config.overrides);
    workload = config::check_layout(cluster, workload).workload;
    const runner::Simulation sim = runner::simulate(cluster, workload, options.simulate);
    std::ostringstream summary;
    report::write_summary_json(summary, sim.summary);
    const bool fits = sim.summary.memory.fits_in_memory;
    verdict["status"] = std::string(to_string(fits ? RunStatus::OK : RunStatus::OOM));
    if (!fits)
      verdict["reason"] = "does not fit in memory: " + sim.summary.memory.reason;
    verdict["summary"] = process::Message::parse(summary.str());
  } catch (const ConfigError& e) {
    verdict["status"] = std::string(to_string(RunStatus::SKIPPED));
    verdict["reason"] = e.what();
  } catch (const ModelError& e) {
    verdict["status"] = std::string(to_string(RunStatus::SKIPPED));
    verdict["reason"] = e.what();
  } catch (const SimulationError& e) {
    verdict["status"] = std::string(to_string(RunStatus::FAILED));
    verdict["reason"] = std::string("simulation error: ") + e.what();
  } catch (const std::exception& e) {
    verdict["status"] = std::string(to_string(RunStatus::FAILED));
    verdict["reason"] = std::string("error: ") + e.what();
  } catch (...) {
    verdict["status"] = std::string(to_string(RunStatus::FAILED));
    verdict["reason"] = "unknown exception";
  }
  return verdict;
}

Row verdict_row(const SweepConfig& config, const process::Outcome& child, double timeout_s) {
  Row row;
  row.id = config.id;
  row.index = config.index;
  row.config = config.swept;
  row.status = RunStatus::FAILED;
  const process::Message verdict = child.message.value_or(process::Message());
  const bool parsed = verdict.is_object() && verdict.contains("status");
  if (parsed && verdict.contains("hbm_capacity_bytes")) {
    row.hbm_capacity_bytes = verdict["hbm_capacity_bytes"].get<double>();
  }
  if (child.timed_out) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "timed out after %g s (--timeout)", timeout_s);
    row.reason = buf;
    return row;
  }
  if (child.signal != 0) {
    const char* name = ::strsignal(child.signal);
    row.reason = "simulation process killed by signal " + std::to_string(child.signal) +
                 (name != nullptr ? std::string(" (") + name + ")" : std::string());
    return row;
  }
  if (!parsed) {
    row.reason =
        "simulation process exited with code " + std::to_string(child.exit_code) + " without a verdict";
    return row;
  }
  const std::optional<RunStatus> s = run_status_by_name_or_null(verdict["status"].get<std::string>());
  if ((s == RunStatus::OK || s == RunStatus::OOM) && verdict.contains("summary")) {
    row.status = *s;
    row.summary_json = verdict["summary"].dump();
    row.reason = one_line(verdict.value("reason", std::string()));
  } else if (s == RunStatus::SKIPPED) {
    row.status = RunStatus::SKIPPED;
    row.reason = one_line(verdict.value("reason", std::string("skipped")));
  } else {
    row.reason = one_line(verdict.value("reason", std::string("failed")));
  }
  return row;
}

} // namespace

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) {
      return n;
    }
  }
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

void execute(const std::vector<const SweepConfig*>& pending, const ExecuteOptions& options,
             const OnFinished& on_finished, const OnTick& on_tick) {
  // Children die with the sweep (a killed sweep leaves no simulations running), quietly.
  const process::PoolOptions pool{
      .jobs = options.jobs,
      .spawn = {.output = process::Output::DISCARD, .timeout_s = options.timeout_s},
      .name = "sweep"};
  process::run_each(
      pending.size(),
      [&](std::size_t i) {
        return process::Job{.body = [&, i] { return simulate_config(*pending[i], options); }, .argv = {}};
      },
      pool,
      [&](std::size_t i, process::Outcome&& child) {
        on_finished(verdict_row(*pending[i], child, options.timeout_s), child.wall_s);
      },
      on_tick);
}

} // namespace stepsim::sweep
