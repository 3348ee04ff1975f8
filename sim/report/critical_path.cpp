#include "report/critical_path.hpp"

#include "core/error.hpp"

#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/dag_shortest_paths.hpp>
#include <boost/property_map/function_property_map.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

namespace stepsim::report {

namespace {

// Vertices are task ids, plus one source (id = number of tasks) feeding every task without
// inputs. 32-bit indices: the step graph's own are 32-bit.
using Csr = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, boost::no_property,
                                               boost::no_property, uint32_t, uint32_t>;

Csr csr_with_source(const graph::StepGraph& g) {
  const auto n = static_cast<uint32_t>(g.size());
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  edges.reserve(g.size());
  for (uint32_t id = 0; id < n; ++id)
    for (const graph::TaskId s : g.successors(id))
      edges.emplace_back(id, s);
  for (uint32_t id = 0; id < n; ++id)
    if (g.predecessors(id).empty())
      edges.emplace_back(n, id);
  return Csr(boost::edges_are_sorted, edges.begin(), edges.end(), n + 1);
}

} // namespace

CriticalPath critical_path(const graph::StepGraph& g, const std::vector<Seconds>& start,
                           const std::vector<Seconds>& end, Seconds step_time) {
  if (start.size() != g.size() || end.size() != g.size())
    throw SimulationError("critical path: a start and an end per task are needed");
  CriticalPath cp;
  cp.length = step_time;
  const size_t n = g.size();
  if (n == 0) {
    cp.wait = step_time;
    return cp;
  }
  const Csr csr = csr_with_source(g);
  using Edge = boost::graph_traits<Csr>::edge_descriptor;
  // An edge weighs its target's busy time: a path's length is the busy time of its tasks.
  const auto weight = boost::make_function_property_map<Edge, double>(
      [&](const Edge& e) { return (end[boost::target(e, csr)] - start[boost::target(e, csr)]).value(); });
  std::vector<double> heaviest(n + 1);
  std::vector<uint32_t> previous(n + 1);
  for (uint32_t v = 0; v <= n; ++v)
    previous[v] = v;
  boost::dag_shortest_paths(csr, static_cast<uint32_t>(n),
                            boost::weight_map(weight)
                                .distance_map(heaviest.data())
                                .predecessor_map(previous.data())
                                .distance_compare(std::greater<double>())
                                .distance_inf(-std::numeric_limits<double>::infinity())
                                .distance_zero(0.0));
  uint32_t last = 0;
  for (uint32_t v = 1; v < n; ++v)
    if (heaviest[v] > heaviest[last])
      last = v;
  for (uint32_t v = last; v != n; v = previous[v])
    cp.tasks.push_back(v);
  std::reverse(cp.tasks.begin(), cp.tasks.end());

  // Waits term by term (each is exactly 0 where a task starts at its input's end).
  Seconds ready(0.0);
  for (const graph::TaskId id : cp.tasks) {
    const graph::Task& t = g.task(id);
    const Seconds busy = end[id] - start[id];
    cp.wait += start[id] - ready;
    ready = end[id];
    if (t.kind == graph::TaskKind::COMPUTE)
      cp.compute[t.block] += busy;
    else if (t.op == graph::CollectiveOp::SEND)
      cp.p2p[t.group] += busy;
    else
      cp.collectives[t.group] += busy;
  }
  cp.wait += step_time - ready;
  return cp;
}

} // namespace stepsim::report
