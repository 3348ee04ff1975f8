// `stepsim collective`: an nccl-tests-like sweep of one collective over the first N GPUs of a
// cluster. All sizes run in ONE simulation (SimGrid allows one per process), as a chain of
// collective tasks: each starts when the previous one ends, so each is measured alone.

#include "cli/commands.hpp"
#include "cli/job.hpp"
#include "collectives/collective.hpp"
#include "config/config.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/vocabulary.hpp"
#include "engine/replay.hpp"
#include "graph/step_builder.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace stepsim::cli {

namespace {

constexpr const char* COLLECTIVE_USAGE =
    R"(usage: stepsim collective --cluster FILE --op OP --gpus N [options]

Simulates OP over GPUs 0..N-1 at each size, one after the other, and prints an nccl-tests-style
table (bus bandwidth as nccl-tests defines it).

options:
  --cluster FILE         cluster description (topologies/*.yaml)
  --op OP                all_reduce | all_gather | reduce_scatter | broadcast | reduce | all_to_all | p2p
  --gpus N               ranks (p2p: GPU 0 sends to GPU N-1)
  --sizes A:B | A        sizes from A to B doubling (default 1MiB:8GiB), or one size
  --algorithm A          auto | ring | tree | hierarchical | nvls | pairwise (default auto)
  --collectives FORM     auto | fine | coarse (default auto)
  --csv FILE             also write op,size_bytes,gpus,algorithm,time_s,algbw_GBps,busbw_GBps
  --set PATH=VALUE       override a cluster key: --set cluster.nodes=2
)";

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

} // namespace

int collective_command(Args& args, std::ostream& out, std::ostream& err) {
  (void)err;
  if (args.flag("--help")) {
    out << COLLECTIVE_USAGE;
    return 0;
  }
  const std::string cluster_file = args.required("--cluster");
  const std::string op_text = args.required("--op");
  const std::string gpus_text = args.required("--gpus");
  const std::string sizes_text = args.value("--sizes", "1MiB:8GiB");
  const std::string algorithm_text = args.value("--algorithm", "auto");
  const std::string csv_file = args.value("--csv", "");
  const CollectiveForm form = parse_collective_form(args.value("--collectives", "auto"));
  const std::vector<config::Override> overrides = overrides_from(args);
  for (const config::Override& o : overrides) // no workload here: every override is a cluster key
    if (!o.path.starts_with("cluster.") || o.path.size() == std::string_view("cluster.").size())
      throw ConfigError(
          "--set " + o.path + "=" + o.value +
          ": `stepsim collective` reads only a cluster; name a cluster key, e.g. --set cluster.nodes=2");
  args.finish();

  CollectiveOp op;
  collectives::Algorithm algorithm;
  try {
    op = op_from_cli_name(op_text);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("--op: ") + e.what());
  }
  try {
    algorithm = collectives::parse_algorithm(algorithm_text);
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("--algorithm: ") + e.what());
  }
  if (op == CollectiveOp::SEND && algorithm != collectives::Algorithm::AUTO)
    throw ConfigError("--algorithm " + algorithm_text +
                      ": a point-to-point send has no algorithm to choose (omit it)");
  int n = 0;
  try {
    n = std::stoi(gpus_text);
  } catch (const std::exception&) {
    n = 0;
  }
  const std::vector<Bytes> sizes = parse_sizes(sizes_text);
  const ClusterSpec cluster = config::load_cluster(cluster_file, overrides);
  if (n < 2 || n > cluster.num_gpus())
    throw ConfigError("--gpus: expected an integer in 2.." + std::to_string(cluster.num_gpus()) +
                      " (the cluster's GPUs), found '" + gpus_text + "'");

  std::vector<graph::Rank> ranks;
  if (op == CollectiveOp::SEND)
    ranks = {0, n - 1};
  else
    for (int i = 0; i < n; ++i)
      ranks.push_back(i);
  {
    // A forced algorithm that cannot run this op on these GPUs is a usage error (exit 2).
    collectives::TopologyView shape;
    shape.gpus_per_node = cluster.gpus_per_node;
    shape.nics_per_node = cluster.nics_per_node;
    shape.nvls = cluster.nvls.enabled && cluster.intra == IntraNodeKind::NVSWITCH;
    if (op != CollectiveOp::SEND && !collectives::applicable(op, algorithm, ranks, shape))
      throw ConfigError("--algorithm: " + std::string(collectives::to_string(algorithm)) + " cannot run " +
                        std::string(op_cli_name(op)) + " over " + std::to_string(n) +
                        " GPUs of this cluster");
  }

  graph::StepProgram prog;
  for (size_t i = 0; i < sizes.size(); ++i) {
    graph::Task t;
    t.group = graph::CommGroup::DP;
    t.op = op;
    t.stream = graph::Stream::DP_COMM;
    t.rank = 0;
    t.bytes = sizes[i];
    const graph::TaskId id = prog.graph.add_collective(t, ranks);
    if (i > 0)
      prog.graph.add_edge(id - 1, id);
  }
  prog.graph.finalize();
  prog.simulated_ranks = ranks;
  prog.grid = graph::RankGrid{n, 1, 1};
  prog.micro_batches = 1;

  engine::ReplayOptions options;
  options.collective_form = form;
  options.algorithms.dp = algorithm;
  engine::Replay replay(prog, cluster, options);
  const engine::ReplayResult r = replay.run();

  struct Row {
    double size, time, algbw, busbw;
    std::string algorithm;
  };
  std::vector<Row> rows;
  // The algorithm AUTO resolves to, reported per size (the engine resolves it the same way).
  const int nr = static_cast<int>(ranks.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double t = r.end[i].value() - r.start[i].value();
    const double algbw = t > 0 ? sizes[i].value() / t / 1e9 : 0.0;
    std::string name = op == CollectiveOp::SEND ? "direct" : std::string(collectives::to_string(algorithm));
    if (op != CollectiveOp::SEND)
      name = std::string(collectives::to_string(r.algorithm[i]));
    rows.push_back({sizes[i].value(), t, algbw, algbw * collectives::bus_factor(op, nr), name});
  }

  char line[256];
  std::snprintf(line, sizeof line, "# %s over %d GPUs of %s\n", std::string(op_cli_name(op)).c_str(), n,
                cluster.name.c_str());
  out << line;
  std::snprintf(line, sizeof line, "#%15s %12s %12s %12s  %s\n", "size(B)", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "algorithm");
  out << line;
  for (const Row& row : rows) {
    std::snprintf(line, sizeof line, "%16.0f %12.2f %12.2f %12.2f  %s\n", row.size, row.time * 1e6, row.algbw,
                  row.busbw, row.algorithm.c_str());
    out << line;
  }
  if (!csv_file.empty()) {
    write_file_atomically(csv_file, [&](std::ostream& o) {
      o << "op,size_bytes,gpus,algorithm,time_s,algbw_GBps,busbw_GBps\n";
      for (const Row& row : rows) {
        std::snprintf(line, sizeof line, "%s,%.0f,%d,%s,%.9g,%.6g,%.6g\n",
                      std::string(op_cli_name(op)).c_str(), row.size, n, row.algorithm.c_str(), row.time,
                      row.algbw, row.busbw);
        o << line;
      }
    });
  }
  return 0;
}

} // namespace stepsim::cli
