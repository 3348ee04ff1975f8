#include "config/jobs_config.hpp"

#include "config/config.hpp"
#include "config/yaml_tree.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <utility>

namespace stepsim::config {

namespace {

using detail::describe;
using detail::Document;
using detail::Field;
using detail::MapReader;

enum class NodeChoice { GIVEN, PACKED, SPREAD };

/// A job as read, before placement.
struct JobEntry {
  JobPlacement placed;
  NodeChoice choice = NodeChoice::GIVEN;
  std::optional<Field> nodes_field; ///< locates the job's `nodes` in messages
};

/// A job name is a folder name of the output: letters, digits, '_', '-', '.', not "." or "..".
bool usable_name(const std::string& name) {
  return name != "." && name != ".." && std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
         });
}

/// A node number written as a YAML scalar: digits only.
std::optional<int> node_number(const std::string& text) {
  if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      }))
    return std::nullopt;
  return std::stoi(text);
}

/// `nodes`: "A-B", N, a list of node numbers, `packed` or `spread`.
void read_nodes(const Field& f, JobEntry& job) {
  constexpr const char* expected = "expected a range such as 0-7, a list of node numbers, packed or spread";
  const YAML::Node& v = f.value();
  if (v.IsSequence()) {
    if (v.size() == 0)
      f.fail(std::string(expected) + ", found an empty list");
    for (const YAML::Node& n : v) {
      const std::optional<int> node = n.IsScalar() ? node_number(n.Scalar()) : std::nullopt;
      if (!node)
        f.fail(std::string(expected) + ", found " + describe(n) + " in the list");
      job.placed.nodes.push_back(*node);
    }
    return;
  }
  const std::string text = f.scalar(expected);
  if (text == "packed" || text == "spread") {
    job.choice = text == "packed" ? NodeChoice::PACKED : NodeChoice::SPREAD;
    return;
  }
  if (const std::optional<int> node = node_number(text)) {
    job.placed.nodes.push_back(*node);
    return;
  }
  const size_t dash = text.find('-');
  const std::optional<int> lo = dash == std::string::npos ? std::nullopt : node_number(text.substr(0, dash));
  const std::optional<int> hi = dash == std::string::npos ? std::nullopt : node_number(text.substr(dash + 1));
  if (!lo || !hi || *hi < *lo)
    f.fail(std::string(expected) + ", found '" + text + "'");
  for (int n = *lo; n <= *hi; ++n)
    job.placed.nodes.push_back(n);
}

JobEntry read_job(const Document& doc, const std::string& path, const YAML::Node& node,
                  const std::filesystem::path& base) {
  if (!node.IsMap())
    doc.fail(path, node,
             "key '" + path + "': expected a mapping {name, workload, nodes, set}, found " + describe(node));
  const MapReader m(doc, path, node, node, {"name", "workload", "nodes", "set"});
  JobEntry job;
  job.placed.name = m.require("name").string();
  if (!usable_name(job.placed.name))
    m.require("name").fail("expected a name of letters, digits, '_', '-' and '.' (it names the job's output "
                           "folder), found '" +
                           job.placed.name + "'");
  const Field workload = m.require("workload");
  const std::filesystem::path file = base / workload.string();
  if (const std::string why = input_file_problem(file); !why.empty())
    workload.fail("'" + file.lexically_normal().string() + "': " + why);
  std::vector<Override> overrides;
  if (auto f = m.find("set")) {
    overrides = detail::read_overrides(doc, path + ".set", f->value(), f->value());
    for (const Override& o : overrides)
      if (o.path.rfind("cluster.", 0) == 0)
        f->fail("'" + o.path + "': the cluster is shared by every job; set it in the cluster file");
  }
  try {
    job.placed.workload = load_workload(file, overrides);
  } catch (const ConfigError& e) {
    throw ConfigError(m.require("name").where() + ": job '" + job.placed.name + "': " + e.what());
  }
  job.nodes_field = m.require("nodes");
  read_nodes(*job.nodes_field, job);
  return job;
}

/// The nodes a `packed` or `spread` job takes from the free ones (ascending; `spread`: one node
/// of each leaf in turn). Fails at its `nodes` key when too few are free.
std::vector<int> choose_nodes(const JobEntry& job, const ClusterSpec& cluster,
                              const std::vector<bool>& taken) {
  const WorkloadSpec& w = job.placed.workload;
  const Field& f = *job.nodes_field;
  if (w.parallel.dp <= 0)
    f.fail("packed and spread need the job's GPU count: give parallel.dp (in its workload or its set)");
  const int per_node = cluster.gpus_per_node;
  const int count = (w.num_gpus() + per_node - 1) / per_node;
  const int per_leaf = std::max(1, std::min(cluster.fabric.nodes_per_leaf, cluster.nodes));
  const int leaves = (cluster.nodes + per_leaf - 1) / per_leaf;
  std::vector<std::vector<int>> free(static_cast<size_t>(job.choice == NodeChoice::SPREAD ? leaves : 1));
  for (int n = 0; n < cluster.nodes; ++n)
    if (!taken[static_cast<size_t>(n)])
      free[job.choice == NodeChoice::SPREAD ? static_cast<size_t>(n / per_leaf) : 0].push_back(n);
  std::vector<int> nodes;
  for (size_t round = 0; static_cast<int>(nodes.size()) < count; ++round) {
    bool any = false;
    for (const std::vector<int>& leaf : free)
      if (round < leaf.size() && static_cast<int>(nodes.size()) < count) {
        nodes.push_back(leaf[round]);
        any = true;
      }
    if (!any)
      f.fail("the job needs " + std::to_string(count) + " nodes (" + std::to_string(w.num_gpus()) +
             " GPUs), only " + std::to_string(nodes.size()) + " are free");
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

} // namespace

JobsSpec load_jobs(const std::filesystem::path& file, const std::vector<Override>& cluster_overrides) {
  for (const Override& o : cluster_overrides)
    if (o.path.rfind("cluster.", 0) != 0)
      throw ConfigError(
          "--set " + o.path + "=" + o.value +
          ": `stepsim jobs` takes cluster keys only (cluster.KEY); a job's keys go in its `set`");
  const Document doc(file);
  const auto top = MapReader::root(doc, {"cluster", "background", "jobs"});
  JobsSpec spec;
  spec.source = doc.file();
  const std::filesystem::path base = file.parent_path();
  const Field cluster_field = top.require("cluster");
  const std::filesystem::path cluster_file = base / cluster_field.string();
  if (const std::string why = input_file_problem(cluster_file); !why.empty())
    cluster_field.fail("'" + cluster_file.lexically_normal().string() + "': " + why);
  spec.cluster = load_cluster(cluster_file, cluster_overrides);
  if (auto f = top.find("background")) {
    const MapReader background = f->map({"share"});
    spec.background_share = background.require("share").number("a share of the bandwidth in [0, 1)",
                                                               [](double x) { return x >= 0.0 && x < 1.0; });
  }
  const Field jobs_field = top.require("jobs");
  const YAML::Node& list = jobs_field.value();
  if (!list.IsSequence() || list.size() == 0)
    jobs_field.fail("expected a non-empty list of jobs {name, workload, nodes, set}, found " +
                    (list.IsSequence() ? std::string("an empty list") : describe(list)));
  std::vector<JobEntry> jobs;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "jobs[" + std::to_string(i) + "]";
    JobEntry job = read_job(doc, path, list[i], base);
    for (const JobEntry& other : jobs)
      if (other.placed.name == job.placed.name)
        doc.fail(path, list[i], "key '" + path + ".name': job '" + job.placed.name + "' is named twice");
    jobs.push_back(std::move(job));
  }

  // Given nodes first, then packed and spread jobs on what is left, in file order; a node the
  // cluster's degraded section marks down is given to no job.
  std::vector<int> owner(static_cast<size_t>(spec.cluster.nodes), -1);
  std::vector<bool> taken(static_cast<size_t>(spec.cluster.nodes), false);
  for (const DegradedSpec::Node& down : spec.cluster.degraded.nodes)
    taken[static_cast<size_t>(down.node)] = true;
  const auto take = [&](size_t j) {
    for (const int n : jobs[j].placed.nodes) {
      if (n >= spec.cluster.nodes)
        jobs[j].nodes_field->fail("node " + std::to_string(n) + " does not exist: the cluster has " +
                                  std::to_string(spec.cluster.nodes) + " nodes (0-" +
                                  std::to_string(spec.cluster.nodes - 1) + ")");
      for (const DegradedSpec::Node& down : spec.cluster.degraded.nodes)
        if (down.node == n)
          jobs[j].nodes_field->fail("node " + std::to_string(n) + " is down (degraded.nodes at " +
                                    down.where + "): give the job nodes that are up");
      const int o = owner[static_cast<size_t>(n)];
      if (o >= 0)
        jobs[j].nodes_field->fail(
            "node " + std::to_string(n) + " is already given to job '" +
            jobs[static_cast<size_t>(o)].placed.name + "'" +
            (o == static_cast<int>(j) ? std::string(" (listed twice)") : std::string()));
      owner[static_cast<size_t>(n)] = static_cast<int>(j);
      taken[static_cast<size_t>(n)] = true;
    }
  };
  for (size_t j = 0; j < jobs.size(); ++j)
    if (jobs[j].choice == NodeChoice::GIVEN)
      take(j);
  for (size_t j = 0; j < jobs.size(); ++j)
    if (jobs[j].choice != NodeChoice::GIVEN) {
      jobs[j].placed.nodes = choose_nodes(jobs[j], spec.cluster, taken);
      take(j);
    }

  for (JobEntry& job : jobs) {
    JobPlacement& p = job.placed;
    p.cluster = job_view(spec.cluster, p.nodes);
    try {
      p.workload = check_layout(p.cluster, p.workload).workload;
    } catch (const ModelError& e) {
      job.nodes_field->fail("job '" + p.name + "' on " + std::to_string(p.nodes.size()) + " nodes (" +
                            std::to_string(p.cluster.num_gpus()) + " GPUs): " + e.what());
    }
    spec.jobs.push_back(std::move(p));
  }
  return spec;
}

} // namespace stepsim::config
