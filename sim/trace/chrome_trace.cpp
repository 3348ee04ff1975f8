#include "trace/chrome_trace.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace stepsim::trace {
namespace {

using graph::Block;
using graph::CollectiveOp;
using graph::CommGroup;
using graph::Phase;
using graph::Rank;
using graph::Stream;
using graph::Task;
using graph::TaskId;
using graph::TaskKind;

/// Output is accumulated here and handed to the stream in large writes.
constexpr size_t FLUSH_BYTES = size_t{1} << 20;

/// Append-only text buffer with locale-free number formatting.
class Sink {
public:
  explicit Sink(std::ostream& out) : out_(out) { buf_.reserve(FLUSH_BYTES + 4096); }

  void put(char c) { buf_.push_back(c); }
  void put(std::string_view s) { buf_.append(s); }

  void put_int(int64_t v) {
    char tmp[24];
    const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    buf_.append(tmp, r.ptr);
  }

  /// Shortest form that reads back to the same double; non-finite values become 0.
  void put_double(double v) {
    if (!std::isfinite(v))
      v = 0;
    char tmp[32];
    const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    buf_.append(tmp, r.ptr);
  }

  /// Nanoseconds printed as microseconds with three decimals ("12.345").
  void put_us(int64_t ns) {
    if (ns < 0) {
      put('-');
      ns = -ns;
    }
    put_int(ns / 1000);
    const auto frac = static_cast<int>(ns % 1000);
    const char digits[4] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                            static_cast<char>('0' + frac % 10)};
    buf_.append(digits, sizeof digits);
  }

  /// A JSON string literal, quotes included.
  void put_json_string(std::string_view s) {
    put('"');
    for (const char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        put('\\');
        put(c);
      } else if (u < 0x20) {
        static constexpr char HEX[] = "0123456789abcdef";
        const char esc[6] = {'\\', 'u', '0', '0', HEX[u >> 4], HEX[u & 0xf]};
        buf_.append(esc, sizeof esc);
      } else {
        put(c);
      }
    }
    put('"');
  }

  void maybe_flush() {
    if (buf_.size() >= FLUSH_BYTES)
      flush();
  }

  /// Writes out what is buffered. Throws Error if the stream fails.
  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
    if (!out_)
      throw Error("trace: writing the output failed");
  }

private:
  std::ostream& out_;
  std::string buf_;
};

void check_input(const TraceInput& in) {
  const size_t n = in.program.graph.size();
  if (in.start.size() != n || in.end.size() != n)
    throw Error("trace: expected start/end times for " + std::to_string(n) + " tasks, got " +
                std::to_string(in.start.size()) + "/" + std::to_string(in.end.size()));
}

/// Seconds to whole nanoseconds (non-finite becomes 0).
int64_t to_ns(Seconds t) {
  const double ns = t.value() * 1e9;
  if (!std::isfinite(ns))
    return 0;
  constexpr double LIMIT = 9.0e18;
  return std::llround(std::clamp(ns, -LIMIT, LIMIT));
}

/// A slice name's abbreviation of a phase ("fwd attn", "pp send bwd"); args and the CSV spell it out.
std::string_view short_phase(Phase p) {
  switch (p) {
  case Phase::FORWARD:
    return "fwd";
  case Phase::BACKWARD:
    return "bwd";
  case Phase::RECOMPUTE:
    return "recomp";
  case Phase::OPTIMIZER:
    return "opt";
  case Phase::WEIGHT_GRAD:
    return "wgrad";
  }
  return "?";
}

/// A slice name's block: its vocabulary name, abbreviated for attention.
std::string_view short_block(Block b) {
  return b == Block::ATTENTION ? "attn" : to_string(b);
}

std::string_view category(const Task& t) {
  return t.kind == TaskKind::COMPUTE ? to_string(t.kind) : to_string(t.group);
}

/// Thread ids: the compute, tp, pp and dp streams (0-3), two for the receiving side of pipeline
/// sends (4, 5), the ep and cp streams (6, 7) and the receiving side of CP ring sends (8). A GPU
/// receives from neighbours whose sends are not ordered with each other nor with its own sends,
/// so drawing them on its own comm thread would overlap slices there. The second pass of a
/// combined 1F1B pair (Task::lane 1) runs alongside the first: its compute, tp and ep tasks get
/// threads 9-11.
constexpr int PP_RECV_FWD_TID = 4;            ///< activations from the previous stage
constexpr int PP_RECV_BWD_TID = 5;            ///< gradients from the next stage
constexpr int CP_RECV_TID = STREAM_COUNT + 2; ///< K,V blocks from the previous CP rank
constexpr int PAIRED_COMPUTE_TID = STREAM_COUNT + 3;
constexpr int PAIRED_TP_TID = STREAM_COUNT + 4;
constexpr int PAIRED_EP_TID = STREAM_COUNT + 5;
constexpr int THREAD_COUNT = STREAM_COUNT + 6;
static_assert(THREAD_COUNT <= 16, "RankTable::threads holds one bit per thread");

int stream_tid(Stream s) {
  const int i = static_cast<int>(s);
  return i < PP_RECV_FWD_TID ? i : i + 2;
}

std::string_view thread_name(int tid) {
  if (tid == PAIRED_COMPUTE_TID)
    return "compute (paired pass)";
  if (tid == PAIRED_TP_TID)
    return "tp comm (paired pass)";
  if (tid == PAIRED_EP_TID)
    return "ep comm (paired pass)";
  if (tid == PP_RECV_FWD_TID)
    return "pp recv fwd";
  if (tid == PP_RECV_BWD_TID)
    return "pp recv bwd";
  if (tid == CP_RECV_TID)
    return "cp recv";
  return to_string(static_cast<Stream>(tid < PP_RECV_FWD_TID ? tid : tid - 2));
}

/// Display order: each paired-pass thread right after its stream's thread.
int thread_sort_index(int tid) {
  switch (tid) {
  case PAIRED_COMPUTE_TID:
    return 2 * stream_tid(Stream::COMPUTE) + 1;
  case PAIRED_TP_TID:
    return 2 * stream_tid(Stream::TP_COMM) + 1;
  case PAIRED_EP_TID:
    return 2 * stream_tid(Stream::EP_COMM) + 1;
  default:
    return 2 * tid;
  }
}

/// The thread on which participant `index` (ring order) of task `t` is drawn.
int thread_of(const Task& t, size_t index) {
  if (t.kind == TaskKind::COLLECTIVE && t.op == CollectiveOp::SEND && index == 1) {
    if (t.group == CommGroup::CP)
      return CP_RECV_TID;
    return t.phase == Phase::BACKWARD ? PP_RECV_BWD_TID : PP_RECV_FWD_TID;
  }
  if (t.lane != 0) {
    switch (t.stream) {
    case Stream::COMPUTE:
      return PAIRED_COMPUTE_TID;
    case Stream::TP_COMM:
      return PAIRED_TP_TID;
    case Stream::EP_COMM:
      return PAIRED_EP_TID;
    default:
      break;
    }
  }
  return stream_tid(t.stream);
}

/// Small reusable text builder for per-task strings (no allocation once warm).
class Text {
public:
  void clear() { s_.clear(); }
  Text& operator<<(std::string_view v) {
    s_.append(v);
    return *this;
  }
  Text& operator<<(char c) {
    s_.push_back(c);
    return *this;
  }
  Text& num(int64_t v) {
    char tmp[24];
    const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    s_.append(tmp, r.ptr);
    return *this;
  }
  Text& num(double v) {
    if (!std::isfinite(v))
      v = 0;
    char tmp[32];
    const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
    s_.append(tmp, r.ptr);
    return *this;
  }
  [[nodiscard]] std::string_view view() const { return s_; }

private:
  std::string s_;
};

/// Slice name, e.g. "fwd attn L12 mb3", "bwd mlp wgrad L12 mb3" (the input linear's weight
/// gradient, beside the block's TP collective), "logits fwd mb2", "optimizer", "tp all_reduce L3 mb1",
/// "tp reduce_scatter logits mb0", "pp send fwd mb4", "dp all_reduce bucket 2",
/// "dp all_reduce grad norm". Names contain no characters that need escaping.
void task_name(const Task& t, Text& name) {
  name.clear();
  bool with_layer = t.layer >= 0;
  if (t.kind == TaskKind::COMPUTE) {
    if (t.block == Block::OPTIMIZER) {
      name << (t.phase == Phase::BACKWARD ? "grad accumulation" : "optimizer");
    } else if (t.block == Block::LOGITS) {
      name << "logits " << short_phase(t.phase);
      with_layer = false;
    } else {
      name << short_phase(t.phase) << ' ' << short_block(t.block);
    }
    if (t.piece == 1)
      name << " dgrad";
    else if (t.piece == 2)
      name << " wgrad";
    else if (t.piece == 3)
      name << " linears";
  } else if (t.op == CollectiveOp::SEND) {
    name << to_string(t.group) << " send " << short_phase(t.phase);
  } else if (t.group == CommGroup::DP && t.bucket >= 0) {
    name << to_string(t.group) << ' ' << to_string(t.op);
    (name << " bucket ").num(int64_t{t.bucket});
  } else {
    name << to_string(t.group) << ' ' << to_string(t.op);
    if (t.role != graph::CommRole::NONE)
      name << ' ' << to_string(t.role);
  }
  if (with_layer)
    (name << " L").num(int64_t{t.layer});
  if (t.micro_batch >= 0)
    (name << " mb").num(int64_t{t.micro_batch});
}

/// The args object of a task's slices (braces included); fields that do not apply are omitted.
void task_args(const graph::StepGraph& g, const Task& t, Text& args) {
  args.clear();
  args << "{\"phase\":\"" << to_string(t.phase) << '"';
  if (t.stage >= 0)
    (args << ",\"stage\":").num(int64_t{t.stage});
  if (t.kind == TaskKind::COMPUTE) {
    args << ",\"block\":\"" << to_string(t.block) << '"';
    if (t.layer >= 0)
      (args << ",\"layer\":").num(int64_t{t.layer});
    if (t.micro_batch >= 0)
      (args << ",\"micro_batch\":").num(int64_t{t.micro_batch});
    if (t.flops.value() > 0)
      (args << ",\"flops\":").num(t.flops.value());
    if (t.bytes.value() > 0)
      (args << ",\"hbm_bytes\":").num(t.bytes.value());
  } else {
    args << ",\"op\":\"" << to_string(t.op) << '"';
    if (t.role != graph::CommRole::NONE)
      args << ",\"role\":\"" << to_string(t.role) << '"';
    if (t.layer >= 0)
      (args << ",\"layer\":").num(int64_t{t.layer});
    if (t.bucket >= 0)
      (args << ",\"bucket\":").num(int64_t{t.bucket});
    if (t.micro_batch >= 0)
      (args << ",\"micro_batch\":").num(int64_t{t.micro_batch});
    if (t.bytes.value() > 0)
      (args << ",\"bytes\":").num(t.bytes.value());
    if (t.duration.value() > 0) // the host's part before the transfer (tensor-list collectives)
      (args << ",\"host_issue_us\":").num(t.duration.value() * 1e6);
    const auto ranks = g.participants(t);
    (args << ",\"ranks\":").num(static_cast<int64_t>(ranks.size()));
    if (t.op == CollectiveOp::SEND && ranks.size() == 2) {
      (args << ",\"src\":").num(int64_t{ranks[0]});
      (args << ",\"dst\":").num(int64_t{ranks[1]});
    }
  }
  args << '}';
}

/// Which ranks are simulated, and which (rank, stream) threads carry events.
struct RankTable {
  std::vector<uint8_t> simulated; ///< by rank
  std::vector<uint16_t> threads;  ///< by rank: bit tid set when thread tid carries an event

  [[nodiscard]] bool has(Rank r) const {
    return r >= 0 && static_cast<size_t>(r) < simulated.size() && simulated[static_cast<size_t>(r)] != 0;
  }
};

RankTable rank_table(const graph::StepProgram& p, const TraceSelection& selection) {
  Rank top = std::max<Rank>(p.grid.size(), 0);
  for (const Rank r : p.simulated_ranks)
    top = std::max(top, r + 1);
  RankTable t;
  t.simulated.assign(static_cast<size_t>(top), 0);
  t.threads.assign(static_cast<size_t>(top), 0);
  for (const Rank r : selection.ranks.empty() ? p.simulated_ranks : selection.ranks)
    if (r >= 0 && r < top)
      t.simulated[static_cast<size_t>(r)] = 1;
  const graph::StepGraph& g = p.graph;
  auto mark = [&t](Rank r, int tid) {
    if (t.has(r))
      t.threads[static_cast<size_t>(r)] |= static_cast<uint16_t>(1u << static_cast<unsigned>(tid));
  };
  for (const Task& task : g.tasks()) {
    if (task.kind == TaskKind::COMPUTE) {
      mark(task.rank, thread_of(task, 0));
    } else {
      const auto parts = g.participants(task);
      for (size_t i = 0; i < parts.size(); ++i)
        mark(parts[i], thread_of(task, i));
    }
  }
  return t;
}

/// The compute task on `dst` that consumes a send (its successor there), if any.
std::optional<TaskId> send_consumer(const graph::StepGraph& g, TaskId send, Rank dst) {
  std::optional<TaskId> best;
  for (const TaskId s : g.successors(send)) {
    const Task& t = g.task(s);
    if (t.kind == TaskKind::COMPUTE && t.rank == dst && (!best || s < *best))
      best = s;
  }
  return best;
}

/// A time strictly inside [start, start + dur] when the slice is long enough, so that flow
/// events bind to that slice and not to a neighbour that ends or starts at the same instant.
int64_t inside(int64_t start_ns, int64_t dur_ns) {
  return dur_ns >= 2 ? start_ns + 1 : start_ns;
}

/// The degraded network a GPU reaches the fabric through, after its process name
/// (docs/degraded.md): its own NIC slower (" [NIC 2 at 100 Gbps]") or down (" [NIC 2 down]"),
/// its fat-tree leaf with uplinks down (" [leaf 1: 4 uplinks down]") or slower (" [leaf 1 at
/// 800 Gbps]"), any graph-fabric link degraded (" [degraded links]").
void put_degraded_network(Sink& out, const ClusterSpec& c, int node, int gpu) {
  if (!c.network_degraded_at(node))
    return;
  char text[64];
  const int nic = gpu * c.nics_per_node / std::max(1, c.gpus_per_node);
  for (const auto& n : c.degraded.nics)
    if (n.node == node && n.nic == nic && n.down) {
      std::snprintf(text, sizeof text, " [NIC %d down]", nic);
      out.put(text);
    } else if (n.node == node && n.nic == nic && n.bandwidth.value() > 0 && n.bandwidth < c.nic.bandwidth) {
      std::snprintf(text, sizeof text, " [NIC %d at %g Gbps]", nic, n.bandwidth.value() * 8 / 1e9);
      out.put(text);
    }
  if (c.fabric.kind == FabricKind::GRAPH) {
    out.put(c.degraded.links.empty() ? "" : " [degraded links]");
    return;
  }
  const int per_leaf = std::max(1, std::min(c.fabric.nodes_per_leaf, c.nodes));
  for (const auto& l : c.degraded.leaves)
    if (l.leaf == node / per_leaf && l.bandwidth.value() > 0) {
      std::snprintf(text, sizeof text, " [leaf %d at %g Gbps]", l.leaf, l.bandwidth.value() * 8 / 1e9);
      out.put(text);
    } else if (l.leaf == node / per_leaf && l.uplinks_down > 0) {
      std::snprintf(text, sizeof text, " [leaf %d: %d uplinks down]", l.leaf, l.uplinks_down);
      out.put(text);
    }
}

void put_metadata_event(Sink& out, std::string_view kind, Rank pid, int tid, bool thread) {
  out.put("{\"ph\":\"M\",\"name\":\"");
  out.put(kind);
  out.put("\",\"pid\":");
  out.put_int(pid);
  if (thread) {
    out.put(",\"tid\":");
    out.put_int(tid);
  }
  out.put(",\"args\":{");
}

/// The trace's events, written one after another with a ",\n" between two: the first event
/// of the list is the only one without a separator.
class Events {
public:
  explicit Events(Sink& out) : out_(out) {}
  [[nodiscard]] Sink& out() { return out_; }
  /// Starts the next event.
  void next() {
    if (!first_)
      out_.put(",\n");
    first_ = false;
  }
  /// A complete ("X") slice of `name` with `args` on thread `tid` of `pid`.
  void slice(Rank pid, int tid, int64_t ts, int64_t dur, std::string_view cat, const Text& name,
             const Text& args) {
    next();
    out_.put("{\"ph\":\"X\",\"pid\":");
    out_.put_int(pid);
    out_.put(",\"tid\":");
    out_.put_int(tid);
    out_.put(",\"ts\":");
    out_.put_us(ts);
    out_.put(",\"dur\":");
    out_.put_us(dur);
    out_.put(",\"name\":\"");
    out_.put(name.view());
    out_.put("\",\"cat\":\"");
    out_.put(cat);
    out_.put("\",\"args\":");
    out_.put(args.view());
    out_.put('}');
  }
  /// One end ('s' start, 'f' finish) of the arrow of pipeline send `id`.
  void flow(char ph, Rank pid, int tid, int64_t ts, TaskId id) {
    next();
    out_.put("{\"ph\":\"");
    out_.put(ph);
    out_.put("\",\"pid\":");
    out_.put_int(pid);
    out_.put(",\"tid\":");
    out_.put_int(tid);
    out_.put(",\"ts\":");
    out_.put_us(ts);
    out_.put(",\"id\":");
    out_.put_int(id);
    out_.put(",\"name\":\"pp send\",\"cat\":\"pp\"");
    if (ph == 'f')
      out_.put(",\"bp\":\"e\"");
    out_.put('}');
  }

private:
  Sink& out_;
  bool first_ = true;
};

/// Process and thread names, in rank order.
void write_names(Events& events, const TraceInput& in, const RankTable& ranks) {
  const graph::StepProgram& program = in.program;
  const graph::RankGrid& grid = program.grid;
  Sink& out = events.out();
  const int per_node = std::max(in.cluster.gpus_per_node, 1);
  const std::vector<int> up = in.cluster.up_nodes(); // ranks fill the nodes that are up
  for (const Rank r : program.simulated_ranks) {
    if (!ranks.has(r))
      continue;
    // Several jobs: the job's name first, the coordinates of the GPU's rank in its job.
    const JobLabel* label = in.jobs ? &in.jobs->at(static_cast<size_t>(r)) : nullptr;
    const graph::RankGrid& g = label ? *label->grid : grid;
    const Rank c = label ? label->rank : r;
    events.next();
    put_metadata_event(out, "process_name", r, 0, false);
    out.put("\"name\":\"");
    if (label) {
      out.put(label->job);
      out.put(": ");
    }
    out.put("node ");
    const int node =
        static_cast<size_t>(r / per_node) < up.size() ? up[static_cast<size_t>(r / per_node)] : r / per_node;
    out.put_int(node);
    out.put(" / GPU ");
    out.put_int(r % per_node);
    out.put(" (dp ");
    out.put_int(g.dp_of(c));
    out.put(", pp ");
    out.put_int(g.pp_of(c));
    out.put(", tp ");
    out.put_int(g.tp_of(c));
    if (g.cp > 1) {
      out.put(", cp ");
      out.put_int(g.cp_of(c));
    }
    if (g.ep > 1) {
      out.put(", ep ");
      out.put_int(g.ep_of(c));
    }
    out.put(")");
    for (const auto& slow : in.cluster.degraded.gpus)
      if (slow.node == node && slow.gpu == r % per_node && slow.speed < 1.0) { // docs/degraded.md
        char text[48];
        std::snprintf(text, sizeof text, " [slow: speed %g]", slow.speed);
        out.put(text);
      }
    // A rank standing for its TP group (the next rank not simulated) runs at the pace of the
    // group's slow GPUs, named here (docs/degraded.md, "Folding").
    if (!label && graph::stands_for_tp_group(program, r))
      for (Rank m = r + 1; m < r + g.tp; ++m) {
        const size_t n = static_cast<size_t>(m / per_node);
        const int member_node = n < up.size() ? up[n] : m / per_node;
        for (const auto& slow : in.cluster.degraded.gpus)
          if (slow.node == member_node && slow.gpu == m % per_node && slow.speed < 1.0) {
            char text[80];
            std::snprintf(text, sizeof text, " [TP group paced by GPU %d at speed %g]", slow.gpu, slow.speed);
            out.put(text);
          }
      }
    put_degraded_network(out, in.cluster, node, r % per_node);
    out.put("\"}}");
    events.next();
    put_metadata_event(out, "process_sort_index", r, 0, false);
    out.put("\"sort_index\":");
    out.put_int(r);
    out.put("}}");
    for (int s = 0; s < THREAD_COUNT; ++s) {
      if ((ranks.threads[static_cast<size_t>(r)] & (1u << static_cast<unsigned>(s))) == 0)
        continue;
      events.next();
      put_metadata_event(out, "thread_name", r, s, true);
      out.put("\"name\":");
      out.put_json_string(thread_name(s));
      out.put("}}");
      events.next();
      put_metadata_event(out, "thread_sort_index", r, s, true);
      out.put("\"sort_index\":");
      out.put_int(thread_sort_index(s));
      out.put("}}");
    }
    out.maybe_flush();
  }
}

/// One slice per task and participant, in task-id order, and the arrows of pipeline sends.
void write_tasks(Events& events, const TraceInput& in, const RankTable& ranks) {
  const graph::StepGraph& g = in.program.graph;
  Text name;
  Text args;
  const TraceSelection& window = in.selection;
  for (TaskId id = 0; id < g.size(); ++id) {
    if (in.end[id] < window.window_start || in.start[id] > window.window_end)
      continue;
    const Task& t = g.task(id);
    const int64_t ts = std::max<int64_t>(to_ns(in.start[id]), 0);
    const int64_t dur = std::max<int64_t>(to_ns(in.end[id]) - ts, 0);
    task_name(t, name);
    task_args(g, t, args);
    const std::string_view cat = category(t);
    if (t.kind == TaskKind::COMPUTE) {
      if (ranks.has(t.rank))
        events.slice(t.rank, thread_of(t, 0), ts, dur, cat, name, args);
    } else {
      const auto parts = g.participants(t);
      for (size_t i = 0; i < parts.size(); ++i)
        if (ranks.has(parts[i]))
          events.slice(parts[i], thread_of(t, i), ts, dur, cat, name, args);
      if (t.op == CollectiveOp::SEND && parts.size() == 2 && ranks.has(parts[0]) && ranks.has(parts[1])) {
        // Arrow from the send on the sender's pp-comm thread to the compute task it feeds on
        // the receiver (or, lacking one, to the send's own slice on the receiver).
        events.flow('s', parts[0], thread_of(t, 0), inside(ts, dur), id);
        if (const auto consumer = send_consumer(g, id, parts[1])) {
          const int64_t cts = std::max<int64_t>(to_ns(in.start[*consumer]), 0);
          const int64_t cdur = std::max<int64_t>(to_ns(in.end[*consumer]) - cts, 0);
          events.flow('f', parts[1], thread_of(g.task(*consumer), 0), inside(cts, cdur), id);
        } else {
          events.flow('f', parts[1], thread_of(t, 1), inside(ts, dur), id);
        }
      }
    }
    events.out().maybe_flush();
  }
}

/// Memory counter tracks (GiB), one per simulated GPU.
void write_memory(Events& events, const TraceInput& in, const RankTable& ranks) {
  if (!in.memory)
    return;
  Sink& out = events.out();
  for (const CounterSeries& series : *in.memory) {
    if (!ranks.has(series.gpu))
      continue;
    for (const auto& [time, bytes] : series.samples) {
      if (Seconds(time) < in.selection.window_start || Seconds(time) > in.selection.window_end)
        continue;
      events.next();
      out.put("{\"ph\":\"C\",\"pid\":");
      out.put_int(series.gpu);
      out.put(",\"ts\":");
      out.put_us(std::max<int64_t>(to_ns(Seconds(time)), 0));
      out.put(",\"name\":\"memory\",\"args\":{\"GiB\":");
      out.put_double(std::round(bytes / (1024.0 * 1024.0 * 1024.0) * 1e6) / 1e6);
      out.put("}}");
    }
    out.maybe_flush();
  }
}

/// One `DIM=VALUE` term of --trace-ranks: the coordinate it reads and the indices it accepts.
struct RankTerm {
  std::string dim;
  int lo = 0, hi = std::numeric_limits<int>::max();
};

[[noreturn]] void bad_rank_spec(const std::string& spec, const std::string& why) {
  throw ConfigError("--trace-ranks '" + spec + "': " + why +
                    " (expected DIM=VALUE,... with DIM dp, pp, tp, cp or ep and VALUE *, N or A-B; e.g. "
                    "pp=*,tp=0,dp=0)");
}

/// A non-negative integer, the whole of `text`, or nullopt.
std::optional<int> index_of(std::string_view text) {
  int v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v < 0)
    return std::nullopt;
  return v;
}

RankTerm parse_rank_term(const std::string& spec, std::string_view term) {
  const size_t eq = term.find('=');
  if (eq == std::string_view::npos)
    bad_rank_spec(spec, "'" + std::string(term) + "' has no '='");
  RankTerm t{.dim = std::string(term.substr(0, eq))};
  if (t.dim != "dp" && t.dim != "pp" && t.dim != "tp" && t.dim != "cp" && t.dim != "ep")
    bad_rank_spec(spec, "unknown dimension '" + t.dim + "'");
  const std::string_view value = term.substr(eq + 1);
  if (value == "*")
    return t;
  const size_t dash = value.find('-');
  const auto lo = index_of(value.substr(0, dash));
  const auto hi = dash == std::string_view::npos ? lo : index_of(value.substr(dash + 1));
  if (!lo || !hi || *hi < *lo)
    bad_rank_spec(spec, "'" + std::string(value) + "' is not *, an index or a range A-B");
  t.lo = *lo;
  t.hi = *hi;
  return t;
}

int coordinate(const graph::RankGrid& g, const std::string& dim, Rank r) {
  if (dim == "dp")
    return g.dp_of(r);
  if (dim == "pp")
    return g.pp_of(r);
  if (dim == "tp")
    return g.tp_of(r);
  if (dim == "cp")
    return g.cp_of(r);
  return g.ep_of(r);
}

} // namespace

std::vector<Rank> select_ranks(const graph::StepProgram& program, const std::string& spec) {
  if (spec.empty() || spec == "all")
    return program.simulated_ranks;
  std::vector<RankTerm> terms;
  for (size_t start = 0; start <= spec.size();) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    terms.push_back(parse_rank_term(spec, std::string_view(spec).substr(start, comma - start)));
    start = comma + 1;
  }
  std::vector<Rank> out;
  for (const Rank r : program.simulated_ranks) {
    const bool match = std::all_of(terms.begin(), terms.end(), [&](const RankTerm& t) {
      const int c = coordinate(program.grid, t.dim, r);
      return c >= t.lo && c <= t.hi;
    });
    if (match)
      out.push_back(r);
  }
  if (out.empty()) {
    // One rank per TP group simulated (docs/engine.md, "Folding TP"): say how to draw the others.
    const bool tp_folded =
        program.grid.tp > 1 && std::none_of(program.simulated_ranks.begin(), program.simulated_ranks.end(),
                                            [&](Rank r) { return program.grid.tp_of(r) > 0; });
    bad_rank_spec(
        spec,
        "selects none of the " + std::to_string(program.simulated_ranks.size()) + " simulated GPUs (" +
            rank_ranges(program.simulated_ranks) + ")" +
            (tp_folded ? "; one rank of each TP group is simulated, --no-fold-tp simulates them all" : ""));
  }
  return out;
}

TraceSelection parse_window(const std::string& spec) {
  TraceSelection s;
  const size_t colon = spec.find(':');
  auto seconds = [&](std::string_view text, Seconds fallback) {
    if (text.empty())
      return fallback;
    double v = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v) || v < 0)
      throw ConfigError("--trace-window '" + spec +
                        "': expected START:END in seconds of the step, e.g. 0.5:1.5 (either may be empty)");
    return Seconds(v);
  };
  if (colon == std::string::npos)
    throw ConfigError("--trace-window '" + spec +
                      "': expected START:END in seconds of the step, e.g. 0.5:1.5");
  s.window_start = seconds(std::string_view(spec).substr(0, colon), s.window_start);
  s.window_end = seconds(std::string_view(spec).substr(colon + 1), s.window_end);
  if (s.window_end < s.window_start)
    throw ConfigError("--trace-window '" + spec + "': END is before START");
  return s;
}

std::string rank_ranges(const std::vector<Rank>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) +
           (j > i ? "-" + std::to_string(ranks[j]) : std::string());
    i = j + 1;
  }
  return out;
}

std::vector<Rank> drawn_ranks(const TraceInput& in) {
  return in.selection.ranks.empty() ? in.program.simulated_ranks : in.selection.ranks;
}

void write_chrome_trace(std::ostream& stream, const TraceInput& in) {
  check_input(in);
  const graph::StepProgram& program = in.program;
  const graph::StepGraph& g = program.graph;
  const RankTable ranks = rank_table(program, in.selection);
  Sink out(stream);

  int64_t step_ns = 0;
  for (size_t i = 0; i < g.size(); ++i)
    step_ns = std::max(step_ns, to_ns(in.end[i]));

  out.put("{\"traceEvents\":[\n");
  Events events(out);
  write_names(events, in, ranks);
  write_tasks(events, in, ranks);
  write_memory(events, in, ranks);

  out.put("\n],\"displayTimeUnit\":\"ms\",\"metadata\":{\"generator\":\"stepsim\",\"workload\":");
  out.put_json_string(in.workload.name);
  out.put(",\"cluster\":");
  out.put_json_string(in.cluster.name);
  out.put(",\"gpus\":");
  out.put_int(in.workload.num_gpus());
  out.put(",\"cluster_gpus\":");
  out.put_int(in.cluster.num_gpus());
  out.put(",\"simulated_gpus\":");
  out.put_int(static_cast<int64_t>(program.simulated_ranks.size()));
  out.put(",\"tasks\":");
  out.put_int(static_cast<int64_t>(g.size()));
  out.put(",\"step_time_s\":");
  out.put_double(static_cast<double>(step_ns) * 1e-9);
  out.put("}}\n");
  out.flush();
}

void write_task_csv(std::ostream& stream, const TraceInput& in) {
  check_input(in);
  const graph::StepGraph& g = in.program.graph;
  Sink out(stream);
  out.put(
      "task,kind,rank,stream,phase,block,group,op,stage,layer,micro_batch,start_s,end_s,bytes,flops,role\n");
  for (TaskId id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    const bool compute = t.kind == TaskKind::COMPUTE;
    out.put_int(id);
    out.put(',');
    out.put(to_string(t.kind));
    out.put(',');
    out.put_int(t.rank);
    out.put(',');
    out.put(to_string(t.stream));
    out.put(',');
    out.put(to_string(t.phase));
    out.put(',');
    out.put(to_string(t.block));
    out.put(',');
    out.put(to_string(t.group));
    out.put(',');
    if (!compute)
      out.put(to_string(t.op));
    out.put(',');
    out.put_int(t.stage);
    out.put(',');
    out.put_int(t.layer);
    out.put(',');
    out.put_int(t.micro_batch);
    out.put(',');
    out.put_double(in.start[id].value());
    out.put(',');
    out.put_double(in.end[id].value());
    out.put(',');
    out.put_double(t.bytes.value());
    out.put(',');
    out.put_double(t.flops.value());
    out.put(',');
    out.put(to_string(t.role)); // empty for the layers' collectives and compute
    out.put('\n');
    out.maybe_flush();
  }
  out.flush();
}

} // namespace stepsim::trace
