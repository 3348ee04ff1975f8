// `stepsim collective`: an nccl-tests-like sweep of one collective over the first N GPUs of a
// cluster. All sizes run in ONE simulation (SimGrid allows one per process), as a chain of
// collective tasks: each starts when the previous one ends, so each is measured alone.

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "cli/json_output.hpp"
#include "collectives/collective.hpp"
#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/vocabulary.hpp"
#include "engine/replay.hpp"
#include "graph/step_builder.hpp"
#include "runner/simulate.hpp"
#include "topology/degrade.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace stepsim::cli {

namespace {

/// The command's name of `op` (--op, the table's title, the CSV's op column): the vocabulary's
/// name, except "p2p" for a send (nccl-tests' sendrecv).
std::string_view op_cli_name(CollectiveOp op) {
  return op == CollectiveOp::SEND ? "p2p" : to_string(op);
}

/// Parses an --op name of op_cli_name. Throws ConfigError.
CollectiveOp op_from_cli_name(std::string_view text) {
  if (text == op_cli_name(CollectiveOp::SEND))
    return CollectiveOp::SEND;
  if (const auto op = collective_op_by_name_or_null(text); op && *op != CollectiveOp::SEND)
    return *op;
  throw ConfigError(
      "expected one of all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, p2p, found '" +
      std::string(text) + "'");
}

/// One message size: whole bytes, from 1 B to 1 TiB (a step's largest collective is a few GiB).
Bytes parse_size(const std::string& text) {
  const Bytes b = config::parse_bytes(text, "--sizes");
  if (!(b.value() >= 1) || b.value() > std::ldexp(1.0, 40) || b.value() != std::floor(b.value()))
    throw ConfigError("--sizes: expected whole bytes from 1B to 1TiB, found '" + text + "'");
  return b;
}

std::vector<Bytes> parse_sizes(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos)
    return {parse_size(text)};
  const Bytes lo = parse_size(text.substr(0, colon));
  const Bytes hi = parse_size(text.substr(colon + 1));
  if (hi < lo)
    throw ConfigError("--sizes: expected A:B with 0 < A <= B, found '" + text + "'");
  std::vector<Bytes> out;
  for (Bytes s = lo; s <= hi; s = s * 2.0)
    out.push_back(s);
  return out;
}

/// What the command line asks of `stepsim collective`, as written: its options, declared and bound.
struct CollectiveArgs {
  std::string cluster_file;
  std::string op_text;
  std::string gpus_text;
  std::string sizes_text = "1MiB:8GiB";
  std::string algorithm_text = "auto";
  std::string csv_file;
  std::string form_text = "auto";
  bool no_sampling = false;
  std::vector<std::string> sets;
  bool json = false;

  explicit CollectiveArgs(Options& o) {
    o.describe(R"(usage: stepsim collective --cluster FILE --op OP --gpus N [options]

Simulates OP over GPUs 0..N-1 at each size, one after the other, and prints an nccl-tests-style
table (bus bandwidth as nccl-tests defines it).)");
    o.required("--cluster", cluster_file, "FILE", "cluster description (topologies/*.yaml)");
    std::vector<std::string> ops;
    for (const CollectiveOp op :
         {CollectiveOp::ALL_REDUCE, CollectiveOp::ALL_GATHER, CollectiveOp::REDUCE_SCATTER,
          CollectiveOp::BROADCAST, CollectiveOp::REDUCE, CollectiveOp::ALL_TO_ALL, CollectiveOp::SEND})
      ops.emplace_back(op_cli_name(op));
    o.choice("--op", op_text, ops, "the collective (p2p: GPU 0 sends to GPU N-1)");
    o.required("--gpus", gpus_text, "N", "ranks");
    o.value("--sizes", sizes_text, "A:B|A", "sizes from A to B doubling, or one size");
    o.choice("--algorithm", algorithm_text, {"auto", "ring", "tree", "hierarchical", "nvls", "pairwise"},
             "the collective algorithm");
    o.choice("--collectives", form_text, COLLECTIVE_FORMS, "how collectives expand into flows");
    o.flag("--no-sampling", no_sampling,
           "run every flow (slower; by default, over whole nodes of a non-blocking fabric, only the "
           "flows that set node 0's time run)");
    o.value("--csv", csv_file, "FILE",
            "also write op,size_bytes,gpus,algorithm,time_s,algbw_GBps,busbw_GBps");
    o.values("--set", sets, "PATH=VALUE", "override a cluster key: --set cluster.nodes=2");
    o.flag("--json", json, "print the table as JSON (schema stepsim.collective/1, docs/output.md) instead");
  }
};

/// The --set overrides, each of a cluster key (there is no workload here). Throws ConfigError.
std::vector<config::Override> cluster_overrides(const CollectiveArgs& a) {
  std::vector<config::Override> overrides = overrides_from(a.sets);
  for (const config::Override& o : overrides)
    if (!o.path.starts_with("cluster.") || o.path.size() == std::string_view("cluster.").size())
      throw ConfigError(
          "--set " + o.path + "=" + o.value +
          ": `stepsim collective` reads only a cluster; name a cluster key, e.g. --set cluster.nodes=2");
  return overrides;
}

/// The sweep to simulate: OP over `ranks` (GPUs 0..n-1, or 0 and n-1 for p2p) at each size.
struct CollectiveSweep {
  CollectiveOp op = CollectiveOp::ALL_REDUCE;
  collectives::Algorithm algorithm = collectives::Algorithm::AUTO;
  int n = 0;
  std::vector<Bytes> sizes;
  ClusterSpec cluster;
  std::vector<graph::Rank> ranks;
};

/// Checks the options against each other and the cluster. Throws ConfigError.
CollectiveSweep resolve_sweep(const CollectiveArgs& a) {
  CollectiveSweep w;
  try {
    w.op = op_from_cli_name(a.op_text);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("--op: ") + e.what());
  }
  try {
    w.algorithm = collectives::parse_algorithm(a.algorithm_text);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("--algorithm: ") + e.what());
  }
  if (w.op == CollectiveOp::SEND && w.algorithm != collectives::Algorithm::AUTO)
    throw ConfigError("--algorithm " + a.algorithm_text +
                      ": a point-to-point send has no algorithm to choose (omit it)");
  try {
    w.n = std::stoi(a.gpus_text);
  } catch (const std::exception&) {
    w.n = 0;
  }
  w.sizes = parse_sizes(a.sizes_text);
  w.cluster = config::load_cluster(a.cluster_file, cluster_overrides(a));
  if (w.n < 2 || w.n > w.cluster.num_gpus())
    throw ConfigError("--gpus: expected an integer in 2.." + std::to_string(w.cluster.num_gpus()) +
                      " (the cluster's GPUs), found '" + a.gpus_text + "'");
  if (w.op == CollectiveOp::SEND)
    w.ranks = {0, w.n - 1};
  else
    for (int i = 0; i < w.n; ++i)
      w.ranks.push_back(i);
  return w;
}

/// A forced algorithm that cannot run this op on these GPUs is a usage error (exit 2).
void check_forced_algorithm(const CollectiveSweep& w) {
  collectives::TopologyView shape;
  shape.gpus_per_node = w.cluster.gpus_per_node;
  shape.nics_per_node = w.cluster.nics_per_node;
  shape.nvls = w.cluster.nvls.enabled && w.cluster.intra == IntraNodeKind::NVSWITCH;
  if (w.op != CollectiveOp::SEND && !collectives::applicable(w.op, w.algorithm, w.ranks, shape))
    throw ConfigError("--algorithm: " + std::string(collectives::to_string(w.algorithm)) + " cannot run " +
                      std::string(op_cli_name(w.op)) + " over " + std::to_string(w.n) +
                      " GPUs of this cluster");
}

/// Whether the sweep may be symmetry-sampled (docs/engine.md): every node of the group alike
/// (whole nodes on a non-blocking fabric) and more ranks than the sampling threshold. Then node
/// 0's GPUs are the observed ones: what runs is what sets their times.
bool sampled(const CollectiveSweep& w) {
  return w.op != CollectiveOp::SEND && w.n > runner::SAMPLE_ABOVE_RANKS &&
         w.n % w.cluster.gpus_per_node == 0 && runner::non_blocking(w.cluster) &&
         topology::degraded_ranks(w.cluster, w.n).empty();
}

/// One collective task per size, each depending on the previous one.
graph::StepProgram chain_program(const CollectiveSweep& w, bool sample) {
  graph::StepProgram prog;
  for (size_t i = 0; i < w.sizes.size(); ++i) {
    graph::Task t;
    t.group = graph::CommGroup::DP;
    t.op = w.op;
    t.stream = graph::Stream::DP_COMM;
    t.rank = 0;
    t.bytes = w.sizes[i];
    const graph::TaskId id = prog.graph.add_collective(t, w.ranks);
    if (i > 0)
      prog.graph.add_edge(id - 1, id);
  }
  prog.graph.finalize();
  prog.simulated_ranks = w.ranks;
  if (sample)
    prog.simulated_ranks.resize(static_cast<size_t>(w.cluster.gpus_per_node));
  prog.grid = graph::RankGrid{w.n, 1, 1};
  prog.micro_batches = 1;
  return prog;
}

/// One size's measurement.
struct Row {
  double size, time, algbw, busbw;
  std::string algorithm;
};

/// Simulates the chain and measures each size.
std::vector<Row> measure(const CollectiveSweep& w, CollectiveForm form, bool sample) {
  const graph::StepProgram prog = chain_program(w, sample);
  engine::ReplayOptions options;
  options.collective_form = form;
  options.algorithms.dp = w.algorithm;
  if (sample)
    options.sample_above_ranks = runner::SAMPLE_ABOVE_RANKS;
  engine::Replay replay(prog, w.cluster, options);
  const engine::ReplayResult r = replay.run();

  std::vector<Row> rows;
  // The algorithm AUTO resolves to, reported per size (the engine resolves it the same way).
  const int nr = static_cast<int>(w.ranks.size());
  for (size_t i = 0; i < w.sizes.size(); ++i) {
    const double t = r.end[i].value() - r.start[i].value();
    const double algbw = t > 0 ? w.sizes[i].value() / t / 1e9 : 0.0;
    std::string name =
        w.op == CollectiveOp::SEND ? "direct" : std::string(collectives::to_string(w.algorithm));
    if (w.op != CollectiveOp::SEND)
      name = std::string(collectives::to_string(r.algorithm[i]));
    rows.push_back({w.sizes[i].value(), t, algbw, algbw * collectives::bus_factor(w.op, nr), name});
  }
  return rows;
}

/// The nccl-tests-style table.
void print_table(std::ostream& out, const CollectiveSweep& w, const std::vector<Row>& rows) {
  char line[256];
  std::snprintf(line, sizeof line, "# %s over %d GPUs of %s\n", std::string(op_cli_name(w.op)).c_str(), w.n,
                w.cluster.name.c_str());
  out << line;
  std::snprintf(line, sizeof line, "#%15s %12s %12s %12s  %s\n", "size(B)", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "algorithm");
  out << line;
  for (const Row& row : rows) {
    std::snprintf(line, sizeof line, "%16.0f %12.2f %12.2f %12.2f  %s\n", row.size, row.time * 1e6, row.algbw,
                  row.busbw, row.algorithm.c_str());
    out << line;
  }
}

/// The rows as CSV, written atomically to `file`.
void write_csv(const std::string& file, const CollectiveSweep& w, const std::vector<Row>& rows) {
  write_file_atomically(file, [&](std::ostream& o) {
    char line[256];
    o << "op,size_bytes,gpus,algorithm,time_s,algbw_GBps,busbw_GBps\n";
    for (const Row& row : rows) {
      std::snprintf(line, sizeof line, "%s,%.0f,%d,%s,%.9g,%.6g,%.6g\n",
                    std::string(op_cli_name(w.op)).c_str(), row.size, w.n, row.algorithm.c_str(), row.time,
                    row.algbw, row.busbw);
      o << line;
    }
  });
}

/// The `stepsim.collective/1` document (docs/output.md).
nlohmann::ordered_json collective_json(const CollectiveSweep& w, const std::vector<Row>& rows) {
  using nlohmann::ordered_json;
  ordered_json sizes = ordered_json::array();
  for (const Row& row : rows)
    sizes.push_back(ordered_json{{"size_bytes", row.size},
                                 {"time_s", row.time},
                                 {"algbw_GBps", row.algbw},
                                 {"busbw_GBps", row.busbw},
                                 {"algorithm", row.algorithm}});
  return ordered_json{{"schema", "stepsim.collective/1"},
                      {"cluster", w.cluster.name},
                      {"op", std::string(op_cli_name(w.op))},
                      {"gpus", w.n},
                      {"sizes", sizes}};
}

class CollectiveCommand final : public Command {
public:
  explicit CollectiveCommand(Options& o) : a_(o) {}
  int run(std::ostream& out, std::ostream& err) override;

private:
  CollectiveArgs a_;
};

} // namespace

std::unique_ptr<Command> collective_command(Options& options) {
  return std::make_unique<CollectiveCommand>(options);
}

int CollectiveCommand::run(std::ostream& out, std::ostream& /*err*/) {
  const CollectiveArgs& a = a_;
  const CollectiveSweep w = resolve_sweep(a);
  check_forced_algorithm(w);
  const std::vector<Row> rows = measure(w, parse_collective_form(a.form_text), !a.no_sampling && sampled(w));
  if (a.json)
    out << collective_json(w, rows).dump(2) << '\n';
  else
    print_table(out, w, rows);
  if (!a.csv_file.empty())
    write_csv(a.csv_file, w, rows);
  return 0;
}

} // namespace stepsim::cli
