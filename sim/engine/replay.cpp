#include "engine/replay.hpp"

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "topology/platform.hpp"

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u/Activity.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Exec.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>
#include <xbt/log.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

namespace sg4 = simgrid::s4u;

namespace stepsim::engine {

namespace {

/// A GPU's running compute tasks within this many seconds of the first one's end when its timer
/// fires end with it (far below a kernel's length).
constexpr double kComputePrecision = 1e-12;

using graph::TaskId;

/// What a SimGrid activity stands for, packed into its data pointer:
/// kind in the low 2 bits, an index above. (Compute tasks run without one: start_compute.)
enum class Tag : uintptr_t { FLOW = 0, TAIL_DELAY = 1, ISSUE_DELAY = 2 };

void* pack(Tag tag, uint64_t index) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>((index << 2) | static_cast<uintptr_t>(tag)));
}

/// The running state of one collective: its flows and how many inputs each still waits for.
struct RunningCollective {
  TaskId task = 0;
  collectives::FlowProgram program;
  std::vector<uint32_t> waiting;                 ///< per flow: unfinished dependencies
  std::vector<std::vector<uint32_t>> successors; ///< per flow (fine form only)
  uint32_t unfinished = 0;
};

class Runner {
public:
  Runner(const graph::StepProgram& program, const ClusterSpec& cluster, const ReplayOptions& options,
         const std::vector<std::function<void(const TaskEvent&)>>& listeners)
      : prog_(program), g_(program.graph), cluster_(cluster), options_(options), listeners_(listeners) {}

  ReplayResult run() {
    xbt_log_control_set("root.thres:critical");
    int argc = 1;
    char arg0[] = "stepsim";
    char* argv[] = {arg0, nullptr};
    sg4::Engine engine(&argc, argv);
    install_interrupt_handlers(); // over SimGrid's SIGINT handler, which exits silently
    engine.set_config("network/model:CM02");
    engine.set_config("network/crosstraffic:0");
    engine.set_config("network/TCP-gamma:0");
    ClusterSpec platform_spec = cluster_;
    platform_spec.gpu.overlap_slowdown = options_.overlap_slowdown; // GPU pstate 1 (setup_overlap)
    // Counting link loads (`stepsim jobs`) needs every link a flow crosses in its route.
    platform_ = topology::build_platform(
        engine, platform_spec,
        {.omit_unbinding_links = options_.omit_unbinding_links && options_.task_job.empty()});
    view_.gpus_per_node = cluster_.gpus_per_node;
    view_.nics_per_node = cluster_.nics_per_node;
    view_.nvls = cluster_.nvls.enabled && cluster_.intra == IntraNodeKind::NVSWITCH;
    view_.nvls_payload_scale =
        cluster_.nvls.enabled ? cluster_.nvswitch.efficiency / cluster_.nvls.efficiency : 1.0;
    view_.nvls_latency = cluster_.nvls.latency;
    view_.rail_optimized = cluster_.fabric.kind == FabricKind::RAIL_OPTIMIZED;
    // Route figures are asked for on every collective: look each GPU pair up once.
    view_.latency = [this](int32_t a, int32_t b) { return route(a, b).first; };
    view_.bandwidth = [this](int32_t a, int32_t b) { return route(a, b).second; };
    view_.route_links = [this](int32_t a, int32_t b) { return route_links(a, b); };
    view_.route_costs = &route_costs_;
    setup_overlap();
    compute_.assign(platform_.gpus.size(), GpuCompute{});

    const size_t n = g_.size();
    check_ranks();
    observed_nodes_.assign(static_cast<size_t>(cluster_.nodes), false);
    observed_gpus_.assign(static_cast<size_t>(cluster_.nodes) * static_cast<size_t>(cluster_.gpus_per_node),
                          false);
    for (graph::Rank r : prog_.simulated_ranks) {
      observed_nodes_[static_cast<size_t>(r / cluster_.gpus_per_node)] = true;
      if (static_cast<size_t>(r) < observed_gpus_.size())
        observed_gpus_[static_cast<size_t>(r)] = true;
    }
    waiting_.resize(n);
    result_.start.assign(n, Seconds(-1.0));
    result_.end.assign(n, Seconds(-1.0));
    result_.algorithm.assign(n, collectives::Algorithm::AUTO);
    for (TaskId id = 0; id < n; ++id)
      waiting_[id] = static_cast<uint32_t>(g_.predecessors(id).size());

    sg4::Activity::on_completion_cb([this](sg4::Activity const& a) { on_activity_done(a); });
    sg4::Engine::on_time_advance_cb([this](double) { release_finished(); });

    for (TaskId id = 0; id < n; ++id)
      if (waiting_[id] == 0)
        ready_.push_back(id);
    log().info("engine: replaying {} tasks of {} simulated ranks on {} GPUs", n, prog_.simulated_ranks.size(),
               platform_.gpus.size());
    progress_every_ = std::max<size_t>(1, n / 10);
    drain_ready();
    engine.run();
    release_finished();
    collect_link_loads();
    log().info("engine: {} of {} tasks done, {} flows, {} activities, simulated time {:.6f} s", finished_, n,
               result_.flows, result_.activities, sg4::Engine::get_clock());

    if (finished_ != n) {
      std::string which;
      int shown = 0;
      for (TaskId id = 0; id < n && shown < 5; ++id) {
        if (result_.end[id].value() < 0) {
          const graph::Task& t = g_.task(id);
          const std::string_view what =
              t.kind == graph::TaskKind::COMPUTE ? to_string(t.kind) : to_string(t.group);
          which +=
              " #" + std::to_string(id) + "(" + std::string(what) + ", rank " + std::to_string(t.rank) + ")";
          ++shown;
        }
      }
      throw SimulationError("engine: " + std::to_string(n - finished_) + " of " + std::to_string(n) +
                            " tasks never ran:" + which);
    }
    return std::move(result_);
  }

private:
  /// Every GPU a task touches (folded DP replicas included) must exist on the platform.
  void check_ranks() const {
    const auto beyond = [&](graph::Rank r) {
      return r < 0 || static_cast<size_t>(r) >= platform_.gpus.size();
    };
    auto fail = [&](graph::TaskId id, graph::Rank r) {
      throw SimulationError("engine: task #" + std::to_string(id) + " uses GPU " + std::to_string(r) +
                            " but the cluster has " + std::to_string(platform_.gpus.size()) + " GPUs");
    };
    for (graph::Rank r : prog_.simulated_ranks)
      if (beyond(r))
        fail(0, r);
    for (TaskId id = 0; id < g_.size(); ++id) {
      const graph::Task& t = g_.task(id);
      if (t.kind == graph::TaskKind::COMPUTE) {
        if (beyond(t.rank))
          fail(id, t.rank);
      } else {
        for (graph::Rank r : g_.participants(t))
          if (beyond(r))
            fail(id, r);
      }
    }
  }

  // --- overlap slowdown ----------------------------------------------------------------------
  /// The platform gave every GPU a pstate 1 at speed / overlap_slowdown. Running compute keeps
  /// its remaining work across pstate switches (set_pstate), so it progresses at the reduced
  /// speed exactly while flows of its GPU are in flight.
  void setup_overlap() {
    const double factor = options_.overlap_slowdown;
    if (!(factor >= 1.0))
      throw SimulationError("engine: overlap_slowdown must be >= 1, got " + std::to_string(factor));
    overlap_ = factor > 1.0;
    if (!overlap_)
      return;
    flows_in_flight_.assign(platform_.gpus.size(), 0);
    computes_.assign(platform_.gpus.size(), 0);
    for (TaskId id = 0; id < g_.size(); ++id) {
      const graph::Task& t = g_.task(id);
      if (t.kind == graph::TaskKind::COMPUTE && t.rank >= 0 && static_cast<size_t>(t.rank) < computes_.size())
        computes_[static_cast<size_t>(t.rank)] = 1;
    }
  }

  /// Counts a flow starting (or ending) at both of its GPU endpoints.
  void overlap_flow(const collectives::Flow& fl, bool starts) {
    if (!overlap_)
      return;
    for (const int32_t end : {fl.src, fl.dst}) {
      if (end < 0 || !computes_[static_cast<size_t>(end)])
        continue; // a switch endpoint, or a GPU without compute (folded replica)
      uint32_t& n = flows_in_flight_[static_cast<size_t>(end)];
      if (starts && n++ == 0)
        set_pstate(static_cast<size_t>(end), 1);
      else if (!starts && --n == 0)
        set_pstate(static_cast<size_t>(end), 0);
    }
  }

  // --- compute: each GPU's running tasks share its speed -------------------------------------
  // A GPU's compute runs without a SimGrid activity: SimGrid 3.32 keeps every activity the
  // engine starts on one list and walks it at each completion, so an activity per compute task
  // cost most of a large replay (docs/performance.md). Each GPU host's current speed (its pstate:
  // degraded.gpus, overlap slowdown) is shared equally by its running tasks, as SimGrid shares a
  // one-core host between Execs; the earliest end is a kernel timer, rescheduled when the tasks
  // or the speed change.
  struct Running {
    TaskId id;
    double flops; ///< left
  };
  struct GpuCompute {
    std::vector<Running> running;
    double since = 0;                               ///< when `flops` were last brought up to date
    simgrid::kernel::timer::Timer* timer = nullptr; ///< the earliest end
  };

  /// The least work any of the GPU's running tasks has left. Precondition: one runs.
  static double least_left(const GpuCompute& c) {
    double least = c.running.front().flops;
    for (const Running& r : c.running)
      least = std::min(least, r.flops);
    return least;
  }

  /// Brings the GPU's running tasks' remaining work up to now.
  void progress(size_t gpu) {
    GpuCompute& c = compute_[gpu];
    const double now = sg4::Engine::get_clock();
    if (!c.running.empty() && now > c.since) {
      const double done =
          (now - c.since) * platform_.gpus[gpu]->get_speed() / static_cast<double>(c.running.size());
      for (Running& r : c.running)
        r.flops -= done;
    }
    c.since = now;
  }

  /// Sets the timer at the GPU's earliest end (none when idle).
  void reschedule(size_t gpu) {
    GpuCompute& c = compute_[gpu];
    if (c.timer != nullptr) {
      c.timer->remove();
      c.timer = nullptr;
    }
    if (c.running.empty())
      return;
    const double rate = platform_.gpus[gpu]->get_speed() / static_cast<double>(c.running.size());
    c.timer = simgrid::kernel::timer::Timer::set(c.since + std::max(0.0, least_left(c)) / rate,
                                                 [this, gpu] { compute_ends(gpu); });
  }

  void start_compute(size_t gpu, TaskId id, double flops) {
    progress(gpu);
    compute_[gpu].running.push_back({id, flops});
    reschedule(gpu);
  }

  void set_pstate(size_t gpu, unsigned long pstate) {
    progress(gpu);
    platform_.gpus[gpu]->set_pstate(pstate);
    reschedule(gpu);
  }

  /// The timer: the task with the least work left ends, and with it those within
  /// kComputePrecision of it (whatever the rounding of the clock left), in the order they started.
  void compute_ends(size_t gpu) {
    GpuCompute& c = compute_[gpu];
    c.timer = nullptr; // the engine deletes a timer once it has run
    progress(gpu);
    const double rate = platform_.gpus[gpu]->get_speed() / static_cast<double>(c.running.size());
    const double least = least_left(c);
    ended_.clear(); // finishing a task starts others but never ends one: nothing refills it below
    std::erase_if(c.running, [&](const Running& r) {
      if (r.flops > least + kComputePrecision * rate)
        return false;
      ended_.push_back(r.id);
      return true;
    });
    reschedule(gpu);
    for (TaskId id : ended_)
      finish_task(id);
    drain_ready();
  }

  // --- task lifecycle ----------------------------------------------------------------------
  void drain_ready() {
    while (!ready_.empty()) {
      const TaskId id = ready_.back();
      ready_.pop_back();
      start_task(id);
    }
  }

  void start_task(TaskId id) {
    const double now = sg4::Engine::get_clock();
    result_.start[id] = Seconds(now);
    const graph::Task& t = g_.task(id);
    log().trace("engine: t={:.9f} s start #{} {} rank {}", now, id,
                t.kind == graph::TaskKind::COMPUTE ? std::string_view("compute") : graph::to_string(t.group),
                t.rank);
    if (t.kind == graph::TaskKind::COMPUTE) {
      if (t.duration.value() <= 0) {
        finish_task(id);
        return;
      }
      start_compute(static_cast<size_t>(t.rank), id, t.duration.value() * platform_.gpu_speed);
      return;
    }
    if (t.duration.value() > 0) {
      // The host's part first (a tensor-list collective's per-rank views and copies), on the
      // timer host: nothing moves meanwhile.
      sg4::ExecPtr delay = sg4::Exec::init();
      delay->set_host(platform_.timer);
      delay->set_flops_amount(t.duration.value() * platform_.gpu_speed);
      delay->set_data(pack(Tag::ISSUE_DELAY, id));
      keep(delay);
      delay->start();
      return;
    }
    start_collective(id, t);
  }

  void finish_task(TaskId id) {
    result_.end[id] = Seconds(sg4::Engine::get_clock());
    ++finished_;
    log().trace("engine: t={:.9f} s done #{}", result_.end[id].value(), id);
    if (finished_ % progress_every_ == 0)
      log().debug("engine: {}/{} tasks done, {} flows started, simulated time {:.6f} s", finished_, g_.size(),
                  result_.flows, result_.end[id].value());
    const TaskEvent ev{id, result_.start[id], result_.end[id]};
    for (const auto& l : listeners_)
      l(ev);
    for (TaskId s : g_.successors(id))
      if (--waiting_[s] == 0)
        ready_.push_back(s);
  }

  // --- collectives ---------------------------------------------------------------------------
  void start_collective(TaskId id, const graph::Task& t) {
    const auto ranks = g_.participants(t);
    const CollectiveOp op = t.op;
    const CollectiveForm form = collectives::resolve_form(options_.collective_form, ranks.size());
    collectives::Algorithm algorithm = collectives::Algorithm::AUTO;
    switch (t.group) {
    case graph::CommGroup::TP:
      algorithm = options_.algorithms.tp;
      break;
    case graph::CommGroup::PP:
      algorithm = options_.algorithms.pp;
      break;
    case graph::CommGroup::DP:
      algorithm = options_.algorithms.dp;
      break;
    case graph::CommGroup::EP:
      algorithm = options_.algorithms.ep;
      break;
    case graph::CommGroup::CP:
      algorithm = options_.algorithms.cp;
      break;
    case graph::CommGroup::NONE:
      break;
    }

    size_t slot;
    if (!free_collectives_.empty()) {
      slot = free_collectives_.back();
      free_collectives_.pop_back();
    } else {
      slot = collectives_.size();
      collectives_.emplace_back();
    }
    RunningCollective& rc = collectives_[slot];
    rc.task = id;
    if (algorithm == collectives::Algorithm::AUTO && op != CollectiveOp::SEND)
      algorithm = collectives::choose(op, ranks, t.bytes, view_);
    else if (op != CollectiveOp::SEND && !collectives::applicable(op, algorithm, ranks, view_))
      throw AlgorithmNotApplicable(t.group, algorithm, op, ranks.size());
    result_.algorithm[id] = algorithm;
    log().trace("engine: #{} {} {} over {} GPUs, {} bytes: {}", id, graph::to_string(t.group), to_string(op),
                ranks.size(), t.bytes.value(), collectives::to_string(algorithm));
    const bool gpu_sampled = (options_.sample_ep && t.group == graph::CommGroup::EP) ||
                             (options_.sample_tp && t.group == graph::CommGroup::TP);
    const bool sample = (options_.sample_above_ranks > 0 &&
                         ranks.size() > static_cast<size_t>(options_.sample_above_ranks)) ||
                        gpu_sampled;
    // Trees sample themselves while they are built (collectives::TopologyView::observed_nodes).
    view_.observed_nodes = sample ? &observed_nodes_ : nullptr;
    rc.program = collectives::expand(op, ranks, t.bytes, algorithm, form, view_,
                                     t.group == graph::CommGroup::EP && op == CollectiveOp::ALL_TO_ALL
                                         ? options_.ep_dedup
                                         : collectives::NodeDeduplication{});
    view_.observed_nodes = nullptr;
    if (sample)
      sample_flows(rc.program, gpu_sampled, options_.sample_tp_sends && t.group == graph::CommGroup::TP);
    const size_t nf = rc.program.flows.size();
    rc.unfinished = static_cast<uint32_t>(nf);
    rc.waiting.assign(nf, 0);
    rc.successors.assign(nf, {});
    for (size_t f = 0; f < nf; ++f) {
      const auto deps = rc.program.deps_of(f);
      rc.waiting[f] = static_cast<uint32_t>(deps.size());
      for (uint32_t d : deps)
        rc.successors[d].push_back(static_cast<uint32_t>(f));
    }
    if (nf == 0) {
      finish_collective(slot);
      return;
    }
    for (size_t f = 0; f < nf; ++f)
      if (rc.waiting[f] == 0)
        start_flow(slot, static_cast<uint32_t>(f));
  }

  /// Keeps only the flows touching an observed node (one hosting a simulated rank), when the
  /// program's flows are independent of each other; a program with intra-program dependencies is
  /// left whole (its critical path may run through unobserved nodes). An expert all-to-all or a
  /// TP collective of a folded TP group (`by_gpu`) inside one node keeps only the flows of the
  /// observed GPUs: GPUs meet at the node's switch through their own ports, so under the
  /// collective's symmetric load each of an observed GPU's flows is held to the same share of its
  /// own ports either way (docs/engine.md).
  /// `sends_only` (ReplayOptions::sample_tp_sends): of an in-node program, only the flows an
  /// observed GPU sends.
  void sample_flows(collectives::FlowProgram& program, bool by_gpu, bool sends_only) const {
    if (!program.deps.empty() || program.flows.empty())
      return;
    const auto same_node = [&](const collectives::Flow& f) {
      return f.src >= 0 && f.dst >= 0 && f.src / cluster_.gpus_per_node == f.dst / cluster_.gpus_per_node;
    };
    const bool in_node = by_gpu && std::all_of(program.flows.begin(), program.flows.end(), same_node);
    const auto gpu_observed = [&](int32_t gpu) {
      return static_cast<size_t>(gpu) < observed_gpus_.size() && observed_gpus_[static_cast<size_t>(gpu)];
    };
    std::vector<collectives::Flow> kept;
    for (const collectives::Flow& f : program.flows)
      if (in_node ? gpu_observed(f.src) || (!sends_only && gpu_observed(f.dst))
                  : observed(f.src) || observed(f.dst))
        kept.push_back(f);
    if (kept.empty() || kept.size() == program.flows.size())
      return;
    program.flows = std::move(kept);
    program.dep_begin.assign(program.flows.size() + 1, 0);
  }

  /// Whether an endpoint (a GPU, or a node's switch as a negative id) is on an observed node.
  bool observed(int32_t endpoint) const {
    const int node =
        endpoint >= 0 ? endpoint / cluster_.gpus_per_node : collectives::node_of_switch_endpoint(endpoint);
    return node >= 0 && static_cast<size_t>(node) < observed_nodes_.size() &&
           observed_nodes_[static_cast<size_t>(node)];
  }

  void start_flow(size_t slot, uint32_t f) {
    const collectives::Flow& fl = collectives_[slot].program.flows[f];
    sg4::CommPtr comm = sg4::Comm::sendto_init(topology::endpoint_host(platform_, fl.src),
                                               topology::endpoint_host(platform_, fl.dst));
    comm->set_payload_size(static_cast<uint64_t>(std::llround(fl.bytes)));
    const uint64_t index = (static_cast<uint64_t>(slot) << 24) | f;
    if (f >= (1u << 24))
      throw SimulationError("engine: a collective with more than 16M flows");
    comm->set_data(pack(Tag::FLOW, index));
    keep(comm);
    ++result_.flows;
    comm->start();
    overlap_flow(fl, true);
    if (!options_.task_job.empty())
      count_link_bytes(collectives_[slot].task, fl);
  }

  // --- link loads of several jobs (ReplayOptions::task_job) ----------------------------------
  /// Adds a flow's bytes to each link of its route, under the job of its task.
  void count_link_bytes(TaskId task, const collectives::Flow& fl) {
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(fl.src)) << 32) | static_cast<uint32_t>(fl.dst);
    auto it = route_links_.find(key);
    if (it == route_links_.end()) {
      std::vector<sg4::Link*> links;
      topology::endpoint_host(platform_, fl.src)
          ->route_to(topology::endpoint_host(platform_, fl.dst), links, nullptr);
      std::vector<uint32_t> indices;
      for (const sg4::Link* l : links) {
        auto [at, added] = link_index_.emplace(l, static_cast<uint32_t>(link_bytes_.size()));
        if (added)
          link_bytes_.emplace_back(std::string(l->get_name()), std::vector<double>());
        indices.push_back(at->second);
      }
      it = route_links_.emplace(key, std::move(indices)).first;
    }
    const uint32_t job = options_.task_job.at(task);
    for (const uint32_t l : it->second) {
      std::vector<double>& bytes = link_bytes_[l].second;
      if (bytes.size() <= job)
        bytes.resize(job + 1, 0.0);
      bytes[job] += fl.bytes;
    }
  }

  /// The counted links by name (the result's order does not depend on the order flows ran).
  void collect_link_loads() {
    if (options_.task_job.empty())
      return;
    const uint32_t jobs = *std::max_element(options_.task_job.begin(), options_.task_job.end()) + 1;
    for (auto& [name, bytes] : link_bytes_) {
      bytes.resize(jobs, 0.0);
      result_.link_loads.push_back(LinkLoad{name, std::move(bytes)});
    }
    std::sort(result_.link_loads.begin(), result_.link_loads.end(),
              [](const LinkLoad& a, const LinkLoad& b) { return a.link < b.link; });
  }

  void flow_done(uint64_t index) {
    const size_t slot = static_cast<size_t>(index >> 24);
    const uint32_t f = static_cast<uint32_t>(index & ((1u << 24) - 1));
    RunningCollective& rc = collectives_[slot];
    overlap_flow(rc.program.flows[f], false);
    for (uint32_t s : rc.successors[f])
      if (--rc.waiting[s] == 0)
        start_flow(slot, s);
    if (--rc.unfinished == 0) {
      const Seconds tail = rc.program.tail_delay;
      if (tail.value() > 0) {
        sg4::ExecPtr delay = sg4::Exec::init();
        delay->set_host(platform_.timer);
        delay->set_flops_amount(tail.value() * platform_.gpu_speed);
        delay->set_data(pack(Tag::TAIL_DELAY, slot));
        keep(delay);
        delay->start();
      } else {
        finish_collective(slot);
      }
    }
  }

  void finish_collective(size_t slot) {
    const TaskId id = collectives_[slot].task;
    collectives_[slot].program = {};
    collectives_[slot].successors.clear();
    free_collectives_.push_back(slot);
    finish_task(id);
  }

  // --- SimGrid plumbing --------------------------------------------------------------------
  void on_activity_done(sg4::Activity const& a) {
    const auto packed = reinterpret_cast<uintptr_t>(a.get_data<void>());
    const auto tag = static_cast<Tag>(packed & 3u);
    const uint64_t index = packed >> 2;
    done_.push_back(&a);
    switch (tag) {
    case Tag::FLOW:
      flow_done(index);
      break;
    case Tag::TAIL_DELAY:
      finish_collective(static_cast<size_t>(index));
      break;
    case Tag::ISSUE_DELAY:
      start_collective(static_cast<TaskId>(index), g_.task(static_cast<TaskId>(index)));
      break;
    }
    drain_ready();
  }

  /// Holds a reference until the activity has completed (SIMGRID_NOTES trap 2).
  void keep(const sg4::ActivityPtr& a) {
    ++result_.activities;
    live_.emplace(a.get(), a);
  }

  /// Drops references of completed activities, outside their own completion callbacks.
  void release_finished() {
    for (const sg4::Activity* a : done_)
      live_.erase(a);
    done_.clear();
  }

  const graph::StepProgram& prog_;
  const graph::StepGraph& g_;
  const ClusterSpec& cluster_;
  const ReplayOptions& options_;
  const std::vector<std::function<void(const TaskEvent&)>>& listeners_;
  topology::Platform platform_;
  collectives::TopologyView view_;
  std::vector<bool> observed_nodes_; ///< nodes hosting a simulated rank
  std::vector<bool> observed_gpus_;  ///< GPUs of simulated ranks
  std::unordered_map<uint64_t, std::pair<Seconds, BytesPerSec>> routes_;
  // Link loads (ReplayOptions::task_job): each endpoint pair's route as link indices, and per
  // link its name and bytes per job.
  std::unordered_map<uint64_t, std::vector<uint32_t>> route_links_;
  std::unordered_map<const sg4::Link*, uint32_t> link_index_;
  std::vector<std::pair<std::string, std::vector<double>>> link_bytes_;

  /// Latency and bottleneck bandwidth of the route between two endpoints, cached.
  const std::pair<Seconds, BytesPerSec>& route(int32_t a, int32_t b) {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    auto it = routes_.find(key);
    if (it == routes_.end())
      it = routes_
               .emplace(key, std::make_pair(topology::route_latency(platform_, a, b),
                                            topology::route_bandwidth(platform_, a, b)))
               .first;
    return it->second;
  }
  /// The links of the route between two GPUs with their bandwidths (the algorithm choice), cached.
  std::span<const collectives::RouteLink> route_links(int32_t a, int32_t b) {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    auto it = route_link_figures_.find(key);
    if (it == route_link_figures_.end()) {
      std::vector<sg4::Link*> links;
      topology::endpoint_host(platform_, a)->route_to(topology::endpoint_host(platform_, b), links, nullptr);
      std::vector<collectives::RouteLink> figures;
      for (const sg4::Link* l : links) {
        const auto [at, added] = link_ids_.emplace(l, static_cast<uint32_t>(link_ids_.size()));
        figures.push_back({at->second, BytesPerSec(l->get_bandwidth())});
      }
      it = route_link_figures_.emplace(key, std::move(figures)).first;
    }
    return it->second;
  }
  std::unordered_map<uint64_t, std::vector<collectives::RouteLink>> route_link_figures_;
  std::unordered_map<const sg4::Link*, uint32_t> link_ids_;
  collectives::RouteCostCache route_costs_;
  // Overlap slowdown (ReplayOptions::overlap_slowdown): flows in flight per GPU; a GPU's host
  // runs at pstate 1 (speed / factor) while its count is non-zero. Only GPUs that compute.
  std::vector<uint32_t> flows_in_flight_;
  std::vector<GpuCompute> compute_; ///< per GPU (start_compute)
  std::vector<TaskId> ended_;       ///< compute_ends' tasks ending now (kept to spare an allocation)
  std::vector<char> computes_;
  bool overlap_ = false;
  std::vector<uint32_t> waiting_;
  std::vector<TaskId> ready_;
  std::vector<RunningCollective> collectives_;
  std::vector<size_t> free_collectives_;
  std::unordered_map<const sg4::Activity*, sg4::ActivityPtr> live_;
  std::vector<const sg4::Activity*> done_;
  ReplayResult result_;
  size_t finished_ = 0;
  size_t progress_every_ = 1; ///< tasks between debug progress lines (a tenth of the step)
};

} // namespace

AlgorithmNotApplicable::AlgorithmNotApplicable(graph::CommGroup group, collectives::Algorithm algorithm,
                                               CollectiveOp op, size_t ranks)
    : ModelError("engine: the " + std::string(graph::to_string(group)) + " group's algorithm " +
                 std::string(collectives::to_string(algorithm)) + " cannot run " +
                 std::string(to_string(op)) + " over its " + std::to_string(ranks) + " GPUs"),
      group_(group), algorithm_(algorithm), op_(op), ranks_(ranks) {}

Replay::Replay(const graph::StepProgram& program, const ClusterSpec& cluster, ReplayOptions options)
    : program_(program), cluster_(cluster), options_(options) {}

void Replay::subscribe(std::function<void(const TaskEvent&)> listener) {
  listeners_.push_back(std::move(listener));
}

ReplayResult Replay::run() {
  if (!program_.graph.finalized())
    throw SimulationError("engine: the step graph is not finalized");
  // A failed run (tasks that never ran: a flow that cannot progress, an unknown rank) leaves
  // SimGrid with live activities, and destroying them crashes inside SimGrid. The runner is then
  // abandoned, not destroyed: the error reaches the caller, and the CLI ends the process.
  auto runner = std::make_unique<Runner>(program_, cluster_, options_, listeners_);
  ReplayResult r;
  try {
    r = runner->run();
  } catch (...) {
    (void)runner.release(); // NOLINT: deliberate leak, see above
    throw;
  }
  for (const Seconds& e : r.end)
    r.step_time = std::max(r.step_time, e);
  return r;
}

} // namespace stepsim::engine
