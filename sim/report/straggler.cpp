#include "report/straggler.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>

namespace stepsim::report {

namespace {

/// The index of a group in StragglerReport::wait_s, -1 for none.
int group_index(graph::CommGroup g) {
  switch (g) {
  case graph::CommGroup::TP:
    return 0;
  case graph::CommGroup::PP:
    return 1;
  case graph::CommGroup::DP:
    return 2;
  case graph::CommGroup::EP:
    return 3;
  case graph::CommGroup::CP:
    return 4;
  default:
    return -1;
  }
}

using Spans = std::vector<std::pair<double, double>>; ///< (start, end), by start

/// The union of a stream's busy spans as disjoint intervals, with the busy time before each.
class BusyUnion {
public:
  explicit BusyUnion(const Spans& sorted) {
    for (const auto& [a, b] : sorted) {
      if (!to_.empty() && a <= to_.back()) {
        to_.back() = std::max(to_.back(), b);
        continue;
      }
      before_.push_back(before_.empty() ? 0.0 : before_.back() + (to_.back() - from_.back()));
      from_.push_back(a);
      to_.push_back(b);
    }
  }
  /// The idle time within [a, b).
  [[nodiscard]] double idle(double a, double b) const { return (b - a) - (busy_until(b) - busy_until(a)); }

private:
  /// The busy time before x.
  [[nodiscard]] double busy_until(double x) const {
    const auto it = std::upper_bound(from_.begin(), from_.end(), x);
    if (it == from_.begin())
      return 0;
    const size_t i = static_cast<size_t>(it - from_.begin()) - 1;
    return before_[i] + std::min(x, to_[i]) - from_[i];
  }
  std::vector<double> from_, to_, before_;
};

struct LinkInputs {
  int per_node = 1;
  const std::vector<bool>& slow_network; ///< by a rank's node index among the up nodes
  const std::map<graph::Rank, Spans>& busy;
};

/// StragglerReport::link_exposed_s: per simulated rank and group, the union of the spans of the
/// collectives and sends crossing a degraded node's network, less its compute; the longest.
std::vector<double> link_exposed(const graph::StepProgram& program, const std::vector<Seconds>& start,
                                 const std::vector<Seconds>& end, const LinkInputs& in) {
  const graph::StepGraph& g = program.graph;
  const auto node_of = [&](graph::Rank r) { return static_cast<size_t>(r / in.per_node); };
  std::map<graph::Rank, std::vector<Spans>> spans; // per rank, per group
  for (graph::TaskId id = 0; id < g.size(); ++id) {
    const graph::Task& t = g.task(id);
    const int k = t.kind == graph::TaskKind::COMPUTE ? -1 : group_index(t.group);
    if (k < 0 || end[id].value() <= start[id].value())
      continue;
    const std::span<const graph::Rank> ranks = g.participants(t);
    bool across = false, degraded = false;
    for (const graph::Rank r : ranks) {
      across = across || node_of(r) != node_of(ranks.front());
      degraded = degraded || (node_of(r) < in.slow_network.size() && in.slow_network[node_of(r)]);
    }
    if (!across || !degraded)
      continue;
    for (const graph::Rank r : ranks)
      if (std::binary_search(program.simulated_ranks.begin(), program.simulated_ranks.end(), r)) {
        auto& by_group = spans[r];
        by_group.resize(5);
        by_group[static_cast<size_t>(k)].emplace_back(start[id].value(), end[id].value());
      }
  }
  std::vector<double> out(5, 0.0);
  for (auto& [rank, by_group] : spans) {
    const auto it = in.busy.find(rank);
    const BusyUnion busy(it == in.busy.end() ? Spans{} : it->second);
    for (size_t k = 0; k < by_group.size(); ++k) {
      Spans& s = by_group[k];
      std::sort(s.begin(), s.end());
      double total = 0, reach = -1;
      for (const auto& [a, b] : s) { // the union of the group's spans, each part once
        const double from = std::max(a, reach);
        if (b > from) {
          total += busy.idle(from, b);
          reach = b;
        }
      }
      out[k] = std::max(out[k], total);
    }
  }
  return out;
}

/// The compute tasks of each given rank (by start) and the TP collectives each of them feeds.
struct RankTasks {
  std::vector<graph::TaskId> compute, tp_collectives;
};

std::map<graph::Rank, RankTasks> tasks_of(const graph::StepProgram& program,
                                          const std::vector<Seconds>& start,
                                          const std::set<graph::Rank>& ranks) {
  const graph::StepGraph& g = program.graph;
  std::map<graph::Rank, RankTasks> out;
  for (graph::TaskId id = 0; id < g.size(); ++id) {
    const graph::Task& t = g.task(id);
    if (t.kind == graph::TaskKind::COMPUTE) {
      if (ranks.contains(t.rank))
        out[t.rank].compute.push_back(id);
      continue;
    }
    if (t.group != graph::CommGroup::TP)
      continue;
    for (graph::TaskId p : g.predecessors(id))
      if (g.task(p).kind == graph::TaskKind::COMPUTE && ranks.contains(g.task(p).rank)) {
        out[g.task(p).rank].tp_collectives.push_back(id);
        break;
      }
  }
  for (auto& [rank, tasks] : out)
    std::sort(tasks.compute.begin(), tasks.compute.end(), [&](graph::TaskId a, graph::TaskId b) {
      return std::make_pair(start[a].value(), a) < std::make_pair(start[b].value(), b);
    });
  return out;
}

/// A healthy member of a TP group folded at a slow member's pace (docs/degraded.md, "Folding"):
/// the simulated rank `r` ran every compute task at `pace`; the healthy member runs each in
/// `pace` of that time, from when its inputs are done (its own earlier tasks as replayed here,
/// the collectives and sends as simulated). Its compute spans, and the starts of the TP
/// collectives it reached before the slow member (where it waited), by start.
struct HealthyMember {
  Spans busy;
  std::vector<double> held;
};

HealthyMember healthy_member(const graph::StepProgram& program, const std::vector<Seconds>& start,
                             const std::vector<Seconds>& end, const RankTasks& tasks, double pace) {
  const graph::StepGraph& g = program.graph;
  std::unordered_map<graph::TaskId, double> own_end; // as replayed for the healthy member
  const auto input_end = [&](graph::TaskId p) {
    const auto it = own_end.find(p);
    return it != own_end.end() ? it->second : end[p].value();
  };
  HealthyMember out;
  double free_at = 0;
  for (graph::TaskId id : tasks.compute) {
    double at = free_at;
    for (graph::TaskId p : g.predecessors(id))
      at = std::max(at, input_end(p));
    free_at = at + (end[id].value() - start[id].value()) * pace;
    own_end[id] = free_at;
    out.busy.emplace_back(at, free_at);
  }
  for (graph::TaskId id : tasks.tp_collectives) {
    double slow_ready = -1, healthy_ready = -1;
    for (graph::TaskId p : g.predecessors(id))
      if (const auto it = own_end.find(p); it != own_end.end()) {
        slow_ready = std::max(slow_ready, end[p].value());
        healthy_ready = std::max(healthy_ready, it->second);
      }
    if (slow_ready > healthy_ready)
      out.held.push_back(start[id].value());
  }
  std::sort(out.held.begin(), out.held.end());
  return out;
}

} // namespace

std::optional<StragglerReport> straggler_report(const graph::StepProgram& program,
                                                const std::vector<Seconds>& start,
                                                const std::vector<Seconds>& end, const ClusterSpec& cluster) {
  const std::vector<int> up = cluster.up_nodes();
  const int per_node = std::max(1, cluster.gpus_per_node);
  StragglerReport out;
  out.wait_s.assign(5, 0.0);
  // A simulated rank's speed: its GPU's, or standing for a folded TP group, the group's pace (its
  // slowest member's), the slow members listed as simulated.
  std::map<graph::Rank, double> speed;
  std::map<graph::Rank, bool> has_healthy; // folded slow TP groups: whether a member is healthy
  for (graph::Rank r : program.simulated_ranks) {
    const int members = graph::stands_for_tp_group(program, r) ? program.grid.tp : 1;
    int slow = 0;
    for (graph::Rank m = r; m < r + members; ++m) {
      const size_t n = static_cast<size_t>(m / per_node);
      if (n >= up.size())
        continue;
      for (const auto& g : cluster.degraded.gpus)
        if (g.node == up[n] && g.gpu == m % per_node && g.speed < 1.0) {
          out.slow_gpus.push_back({.rank = m, .node = g.node, .gpu = g.gpu, .speed = g.speed});
          speed[r] = std::min(speed.contains(r) ? speed[r] : 1.0, g.speed);
          ++slow;
        }
    }
    if (members > 1 && slow > 0) {
      has_healthy[r] = slow < members;
      ++out.paced_tp_groups;
    }
  }
  std::sort(out.slow_gpus.begin(), out.slow_gpus.end(),
            [](const SlowGpu& a, const SlowGpu& b) { return a.rank < b.rank; });
  const int used_nodes = static_cast<int>(
      std::min<size_t>(up.size(), static_cast<size_t>((program.grid.size() + per_node - 1) / per_node)));
  for (const auto& nic : cluster.degraded.nics) {
    const auto it = std::find(up.begin(), up.begin() + used_nodes, nic.node);
    if (it != up.begin() + used_nodes && (nic.down || nic.bandwidth.value() < cluster.nic.bandwidth.value()))
      ++out.degraded_nics;
  }
  std::vector<bool> slow_network(up.size(), false); // by the rank's node's place among the up nodes
  for (int n = 0; n < used_nodes; ++n)
    slow_network[static_cast<size_t>(n)] = cluster.network_degraded_at(up[static_cast<size_t>(n)]);
  if (out.slow_gpus.empty() &&
      std::none_of(slow_network.begin(), slow_network.end(), [](bool b) { return b; }))
    return std::nullopt;
  // Per healthy rank and group: at each collective whose last-ready participant is slow, the
  // time this rank's compute stream stood idle before the collective started (since the end of
  // its last compute task that started earlier; none when that one still runs).
  std::map<graph::Rank, std::vector<double>> waits;
  std::map<graph::Rank, std::vector<std::pair<double, int>>> held; // (collective start, group)
  const graph::StepGraph& g = program.graph;
  std::map<graph::Rank, std::vector<std::pair<double, double>>> busy; // (start, end), by start
  for (graph::TaskId id = 0; id < g.size(); ++id)
    if (g.task(id).kind == graph::TaskKind::COMPUTE)
      busy[g.task(id).rank].emplace_back(start[id].value(), end[id].value());
  for (auto& [rank, spans] : busy)
    std::sort(spans.begin(), spans.end());
  const auto idle_before = [&](graph::Rank r, double at) {
    const auto& spans = busy[r];
    auto it = std::lower_bound(spans.begin(), spans.end(), std::make_pair(at, -1.0));
    if (it == spans.begin())
      return at;
    --it;
    return std::max(0.0, at - it->second);
  };
  for (graph::TaskId id = 0; id < g.size(); ++id) {
    const graph::Task& t = g.task(id);
    const int k = t.kind == graph::TaskKind::COMPUTE ? -1 : group_index(t.group);
    if (k < 0 || speed.empty())
      continue;
    std::map<graph::Rank, double> ready;
    for (graph::TaskId p : g.predecessors(id)) {
      if (g.task(p).kind != graph::TaskKind::COMPUTE)
        continue; // a participant is ready when its own compute is
      double& r = ready[g.task(p).rank];
      r = std::max(r, end[p].value());
    }
    if (ready.size() < 2)
      continue;
    const auto last = std::max_element(ready.begin(), ready.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    if (!speed.contains(last->first))
      continue;
    for (const auto& [rank, at] : ready)
      if (!speed.contains(rank))
        held[rank].emplace_back(start[id].value(), k);
  }
  // A stretch of idle time counts once, for the first collective that ends it.
  for (auto& [rank, events] : held) {
    std::sort(events.begin(), events.end());
    auto& w = waits[rank];
    w.assign(5, 0.0);
    double counted = 0;
    for (const auto& [at, k] : events) {
      w[static_cast<size_t>(k)] += std::max(0.0, std::min(idle_before(rank, at), at - counted));
      counted = at;
    }
  }
  // The healthy members of folded slow TP groups, replayed from their simulated rank.
  std::set<graph::Rank> paced;
  for (const auto& [rank, healthy] : has_healthy)
    if (healthy)
      paced.insert(rank);
  for (const auto& [rank, tasks] : tasks_of(program, start, paced)) {
    const HealthyMember m = healthy_member(program, start, end, tasks, speed[rank]);
    double wait = 0, counted = 0;
    for (const double at : m.held) {
      const auto it = std::lower_bound(m.busy.begin(), m.busy.end(), std::make_pair(at, -1.0));
      const double idle = it == m.busy.begin() ? at : std::max(0.0, at - std::prev(it)->second);
      wait += std::max(0.0, std::min(idle, at - counted));
      counted = at;
    }
    out.wait_s[0] = std::max(out.wait_s[0], wait);
  }
  for (const auto& [rank, w] : waits)
    for (size_t k = 0; k < w.size(); ++k)
      out.wait_s[k] = std::max(out.wait_s[k], w[k]);
  out.link_exposed_s =
      link_exposed(program, start, end, {.per_node = per_node, .slow_network = slow_network, .busy = busy});
  return out;
}

} // namespace stepsim::report
