#include "trace/chrome_trace.hpp"

#include "core/error.hpp"
#include "engine/replay.hpp"
#include "model/transformer.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace stepsim::trace {
namespace {

using nlohmann::json;

ClusterSpec small_cluster() {
  ClusterSpec c;
  c.name = "test-cluster \"1x8\"";
  c.nodes = 1;
  c.gpus_per_node = 8;
  c.gpu.kind = "A100";
  c.gpu.peak_bf16 = FlopsPerSec(312e12);
  c.gpu.peak_fp16 = FlopsPerSec(312e12);
  c.gpu.hbm_capacity = Bytes(80.0 * (1 << 30));
  c.gpu.hbm_bandwidth = BytesPerSec(2039e9);
  c.gpu.compute_efficiency = 0.7;
  c.gpu.memory_efficiency = 0.85;
  c.gpu.runtime_overhead = Bytes(1024.0 * 1024 * 1024);
  c.gpu.allocator_fragmentation = 1.10;
  c.nvswitch = LinkSpec{BytesPerSec(300e9), Seconds(3e-6), 0.8};
  c.nics_per_node = 8;
  c.nic = LinkSpec{BytesPerSec(25e9), Seconds(3e-6), 0.96};
  c.fabric.nodes_per_leaf = 16;
  c.fabric.switch_latency = Seconds(0.5e-6);
  return c;
}

WorkloadSpec small_workload() {
  WorkloadSpec w;
  w.name = "tiny-gpt";
  w.model.name = "tiny";
  w.model.layers = 4;
  w.model.hidden = 256;
  w.model.heads = 8;
  w.model.kv_heads = 8;
  w.model.ffn_hidden = 1024;
  w.model.vocab = 1024;
  w.model.seq_len = 256;
  w.batch = BatchSpec{16, 2};
  w.parallel.tp = 2;
  w.parallel.pp = 2;
  w.parallel.dp = 2;
  w.training.dp_bucket = Bytes(64.0 * 1024); // several buckets
  return w;
}

graph::StepProgram build(const ClusterSpec& cluster, const WorkloadSpec& workload, bool fold_dp) {
  graph::BuildOptions o;
  o.fold_dp = fold_dp;
  o.compute_time = [&cluster](const graph::ComputeQuery& q) {
    return model::roofline_time(q.flops, q.bytes, cluster.gpu, Precision::BF16);
  };
  return graph::build_step(workload, o);
}

/// Earliest start of every task given its predecessors (compute: its duration; collectives: a
/// fixed 10 us). A stand-in for a replay where a second simulation in the process is not allowed.
engine::ReplayResult asap_times(const graph::StepProgram& p) {
  const graph::StepGraph& g = p.graph;
  engine::ReplayResult r;
  r.start.assign(g.size(), Seconds(0));
  r.end.assign(g.size(), Seconds(0));
  std::vector<size_t> waiting(g.size());
  std::vector<graph::TaskId> ready;
  for (graph::TaskId id = 0; id < g.size(); ++id)
    if ((waiting[id] = g.predecessors(id).size()) == 0)
      ready.push_back(id);
  while (!ready.empty()) {
    const graph::TaskId id = ready.back();
    ready.pop_back();
    const graph::Task& t = g.task(id);
    for (graph::TaskId pred : g.predecessors(id))
      r.start[id] = std::max(r.start[id], r.end[pred]);
    r.end[id] = r.start[id] + (t.kind == graph::TaskKind::COMPUTE ? t.duration : Seconds(10e-6));
    r.step_time = std::max(r.step_time, r.end[id]);
    for (graph::TaskId succ : g.successors(id))
      if (--waiting[succ] == 0)
        ready.push_back(succ);
  }
  return r;
}

/// A small step and the times to draw: a real replay (at most one per process: SimGrid allows a
/// single simulation) or the ASAP stand-in.
struct Fixture {
  ClusterSpec cluster = small_cluster();
  WorkloadSpec workload = small_workload();
  graph::StepProgram program;
  engine::ReplayResult result;

  Fixture(bool fold_dp, bool replay) : program(build(cluster, workload, fold_dp)) {
    if (replay) {
      engine::Replay engine(program, cluster);
      result = engine.run();
    } else {
      result = asap_times(program);
    }
  }
  [[nodiscard]] TraceInput input() const { return {program, result.start, result.end, cluster, workload}; }
};

/// The unfolded step (all 8 ranks simulated), replayed once and shared by the tests of a process.
const Fixture& unfolded() {
  static const Fixture f(false, true);
  return f;
}

std::string chrome(const TraceInput& in) {
  std::ostringstream s;
  write_chrome_trace(s, in);
  return s.str();
}

/// Slices the trace should hold: one per compute task, one per simulated participant of a
/// collective.
size_t expected_slices(const graph::StepProgram& p) {
  const std::set<graph::Rank> sim(p.simulated_ranks.begin(), p.simulated_ranks.end());
  size_t n = 0;
  for (const graph::Task& t : p.graph.tasks()) {
    if (t.kind == graph::TaskKind::COMPUTE) {
      n += sim.count(t.rank);
    } else {
      for (graph::Rank r : p.graph.participants(t))
        n += sim.count(r);
    }
  }
  return n;
}

size_t pp_sends(const graph::StepProgram& p) {
  const std::set<graph::Rank> sim(p.simulated_ranks.begin(), p.simulated_ranks.end());
  size_t n = 0;
  for (const graph::Task& t : p.graph.tasks()) {
    if (t.kind != graph::TaskKind::COLLECTIVE || t.op != graph::CollectiveOp::SEND)
      continue;
    const auto pr = p.graph.participants(t);
    n += pr.size() == 2 && sim.count(pr[0]) && sim.count(pr[1]);
  }
  return n;
}

void check_trace(const Fixture& f) {
  const std::string text = chrome(f.input());
  const json doc = json::parse(text); // throws on invalid JSON
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  const json& meta = doc.at("metadata");
  EXPECT_EQ(meta.at("workload"), f.workload.name);
  EXPECT_EQ(meta.at("cluster"), f.cluster.name);
  EXPECT_EQ(meta.at("gpus"), 8);
  EXPECT_NEAR(meta.at("step_time_s").get<double>(), f.result.step_time.value(), 1e-9);

  const graph::RankGrid& grid = f.program.grid;
  std::map<int, std::string> process_names;
  std::set<std::pair<int, int>> named_threads;
  size_t slices = 0;
  std::map<int64_t, std::tuple<int, int, double>> flow_starts; // id -> (pid, tid, ts)
  std::map<int64_t, std::tuple<int, int, double>> flow_ends;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> thread_slices;
  for (const json& e : doc.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M") {
      if (e.at("name") == "process_name") {
        const int pid = e.at("pid");
        EXPECT_TRUE(process_names.emplace(pid, e.at("args").at("name")).second) << "duplicate pid " << pid;
      } else if (e.at("name") == "thread_name") {
        named_threads.emplace(e.at("pid"), e.at("tid"));
        EXPECT_TRUE(e.at("args").at("name").is_string());
      }
    } else if (ph == "X") {
      ++slices;
      EXPECT_GE(e.at("ts").get<double>(), 0.0);
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      EXPECT_TRUE(e.at("name").is_string());
      EXPECT_TRUE(e.at("cat") == "compute" || e.at("cat") == "tp" || e.at("cat") == "pp" ||
                  e.at("cat") == "dp");
      const double ts = e.at("ts");
      thread_slices[{e.at("pid"), e.at("tid")}].emplace_back(ts, ts + e.at("dur").get<double>());
    } else if (ph == "s") {
      EXPECT_TRUE(flow_starts.emplace(e.at("id"), std::tuple{e.at("pid"), e.at("tid"), e.at("ts")}).second);
      EXPECT_EQ(e.at("cat"), "pp");
    } else if (ph == "f") {
      EXPECT_TRUE(flow_ends.emplace(e.at("id"), std::tuple{e.at("pid"), e.at("tid"), e.at("ts")}).second);
      EXPECT_EQ(e.at("bp"), "e");
      EXPECT_EQ(e.at("cat"), "pp");
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }

  // One process per simulated GPU, named with its node, GPU and (dp, pp, tp) coordinates.
  ASSERT_EQ(process_names.size(), f.program.simulated_ranks.size());
  for (graph::Rank r : f.program.simulated_ranks) {
    const std::string want = "node 0 / GPU " + std::to_string(r) + " (dp " + std::to_string(grid.dp_of(r)) +
                             ", pp " + std::to_string(grid.pp_of(r)) + ", tp " +
                             std::to_string(grid.tp_of(r)) + ")";
    EXPECT_EQ(process_names.at(r), want);
  }
  // Every thread that carries slices is named.
  // Slices on one thread never partially overlap (viewers need proper nesting per thread).
  for (auto& [th, spans] : thread_slices) {
    EXPECT_TRUE(named_threads.count(th)) << th.first << "/" << th.second;
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-3)
          << "pid " << th.first << " tid " << th.second << " at " << spans[i].first;
  }

  EXPECT_EQ(slices, expected_slices(f.program));

  // Flow arrows pair up, one per PP send, from the sender's pp-comm thread to the receiver's
  // compute thread, never backwards in time.
  const size_t sends = pp_sends(f.program);
  EXPECT_GT(sends, 0u);
  ASSERT_EQ(flow_starts.size(), sends);
  ASSERT_EQ(flow_ends.size(), sends);
  for (const auto& [id, s] : flow_starts) {
    ASSERT_TRUE(flow_ends.count(id)) << id;
    const auto& e = flow_ends.at(id);
    const graph::Task& t = f.program.graph.task(static_cast<graph::TaskId>(id));
    ASSERT_EQ(t.op, graph::CollectiveOp::SEND);
    const auto pr = f.program.graph.participants(t);
    EXPECT_EQ(std::get<0>(s), pr[0]);
    EXPECT_EQ(std::get<1>(s), static_cast<int>(graph::Stream::PP_COMM));
    EXPECT_EQ(std::get<0>(e), pr[1]);
    EXPECT_EQ(std::get<1>(e), static_cast<int>(graph::Stream::COMPUTE));
    EXPECT_LE(std::get<2>(s), std::get<2>(e));
    EXPECT_GE(std::get<2>(e) + 1e-3, f.result.end[id].value() * 1e6);
  }

  // Same input, same bytes.
  EXPECT_EQ(text, chrome(f.input()));
}

TEST(ChromeTrace, UnfoldedStepIsCompleteAndDeterministic) {
  check_trace(unfolded());
}

TEST(ChromeTrace, FoldedStepSkipsUnsimulatedRanks) {
  const Fixture f(true, false);
  ASSERT_LT(f.program.simulated_ranks.size(), 8u); // dp replicas folded into replica 0
  check_trace(f);
}

TEST(ChromeTrace, NamesAndArgs) {
  const Fixture& f = unfolded();
  const json doc = json::parse(chrome(f.input()));
  std::set<std::string> names;
  for (const json& e : doc.at("traceEvents"))
    if (e.at("ph") == "X")
      names.insert(e.at("name").get<std::string>());
  for (const char* n :
       {"fwd attn L0 mb0", "bwd mlp L3 mb3", "bwd mlp wgrad L3 mb3", "bwd attn wgrad L0 mb0",
        "logits fwd mb2", "logits bwd mb0", "optimizer", "tp all_reduce L1 mb1", "pp send fwd mb3",
        "pp send bwd mb2", "dp all_reduce bucket 0", "tp all_reduce embedding mb0",
        "tp all_reduce logits mb1", "tp all_reduce loss mb2", "dp all_reduce grad norm"})
    EXPECT_TRUE(names.count(n)) << n;

  for (const json& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X")
      continue;
    const json& a = e.at("args");
    if (e.at("name") == "fwd attn L2 mb1") {
      EXPECT_EQ(a.at("layer"), 2);
      EXPECT_EQ(a.at("micro_batch"), 1);
      EXPECT_EQ(a.at("stage"), 1);
      EXPECT_EQ(a.at("phase"), "forward");
      EXPECT_EQ(a.at("block"), "attention");
      EXPECT_GT(a.at("flops").get<double>(), 0);
    }
    if (e.at("name") == "optimizer") {
      EXPECT_FALSE(a.contains("layer") || a.contains("micro_batch"));
    }
    // A send is drawn on the sender's pp-comm thread and on the receiver's receive thread.
    const std::string name = e.at("name");
    const int tid = e.at("tid");
    if (name.rfind("pp send fwd", 0) == 0) {
      EXPECT_TRUE(tid == 2 || tid == 4) << tid;
    }
    if (name.rfind("pp send bwd", 0) == 0) {
      EXPECT_TRUE(tid == 2 || tid == 5) << tid;
    }
    if (e.at("cat") == "dp" && name == "dp all_reduce grad norm") {
      // One fp32 value over the replica's tp*pp GPUs, before the optimizer.
      EXPECT_EQ(a.at("role"), "grad norm");
      EXPECT_EQ(a.at("bytes"), 4);
      EXPECT_EQ(a.at("ranks"), 4);
    } else if (e.at("cat") == "dp") {
      EXPECT_TRUE(a.contains("bucket"));
      EXPECT_FALSE(a.contains("role"));
      EXPECT_GT(a.at("bytes").get<double>(), 0);
      EXPECT_EQ(a.at("ranks"), 2);
    }
  }
}

TEST(ChromeTrace, RejectsMismatchedTimes) {
  const Fixture& f = unfolded();
  const std::vector<Seconds> short_times(3);
  const TraceInput in{f.program, short_times, short_times, f.cluster, f.workload};
  std::ostringstream s;
  EXPECT_THROW(write_chrome_trace(s, in), Error);
  EXPECT_THROW(write_task_csv(s, in), Error);
}

TEST(TaskCsv, OneRowPerTask) {
  const Fixture& f = unfolded();
  std::ostringstream s;
  write_task_csv(s, f.input());
  std::istringstream lines(s.str());
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(
      line,
      "task,kind,rank,stream,phase,block,group,op,stage,layer,micro_batch,start_s,end_s,bytes,flops,role");
  size_t rows = 0, roles = 0;
  while (std::getline(lines, line)) {
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 15) << line;
    const auto comma = line.find(',');
    EXPECT_EQ(std::stoul(line.substr(0, comma)), rows);
    // start_s and end_s read back exactly.
    std::vector<std::string> cols;
    std::istringstream fields(line);
    for (std::string c; std::getline(fields, c, ',');)
      cols.push_back(c);
    // The last column names a collective outside the layers (empty otherwise: getline drops it).
    const std::string_view role =
        graph::to_string(f.program.graph.task(static_cast<graph::TaskId>(rows)).role);
    ASSERT_EQ(cols.size(), role.empty() ? 15u : 16u) << line;
    if (!role.empty()) {
      EXPECT_EQ(cols[15], role);
      ++roles;
    }
    EXPECT_EQ(std::stod(cols[11]), f.result.start[rows].value());
    EXPECT_EQ(std::stod(cols[12]), f.result.end[rows].value());
    ++rows;
  }
  EXPECT_EQ(rows, f.program.graph.size());
  EXPECT_GT(roles, 0u);
  std::ostringstream again;
  write_task_csv(again, f.input());
  EXPECT_EQ(s.str(), again.str());
}

} // namespace
} // namespace stepsim::trace
