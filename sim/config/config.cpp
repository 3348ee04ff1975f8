#include "config/config.hpp"

#include "config/yaml_tree.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

namespace stepsim::config {

namespace {

using detail::Document;
using detail::Field;
using detail::MapReader;

constexpr int64_t INT_MAX_VALUE = std::numeric_limits<int>::max();
constexpr int64_t INT64_MAX_VALUE = std::numeric_limits<int64_t>::max();
constexpr std::string_view CLUSTER_PREFIX = "cluster.";

/// "--set PATH=VALUE", as errors name an override.
std::string shown(const Override& o) {
  return "--set " + o.path + "=" + o.value;
}

// ---- field readers with the schema's ranges ------------------------------------------------

int positive_int(const Field& f) {
  return static_cast<int>(f.integer(1, INT_MAX_VALUE, "a positive integer"));
}

int64_t positive_int64(const Field& f) {
  return f.integer(1, INT64_MAX_VALUE, "a positive integer");
}

double fraction(const Field& f) {
  return f.number("a number in (0, 1]", [](double v) { return v > 0.0 && v <= 1.0; });
}

Bytes nonnegative_bytes(const Field& f) {
  return parse_bytes(f.scalar("a byte size with a unit, e.g. 1GiB"), f.where());
}

Bytes positive_bytes(const Field& f) {
  const std::string text = f.scalar("a byte size with a unit, e.g. 80GiB");
  const Bytes b = parse_bytes(text, f.where());
  if (b.value() <= 0) {
    f.fail("expected a positive byte size, found '" + text + "'");
  }
  return b;
}

BytesPerSec positive_bandwidth(const Field& f) {
  const std::string text = f.scalar("a bandwidth with a unit, e.g. 200Gbps");
  const BytesPerSec bw = parse_bandwidth(text, f.where());
  if (bw.value() <= 0) {
    f.fail("expected a positive bandwidth, found '" + text + "'");
  }
  return bw;
}

Seconds latency(const Field& f) {
  return parse_time(f.scalar("a time with a unit, e.g. 2us"), f.where());
}

FlopsPerSec positive_flops(const Field& f) {
  const std::string text = f.scalar("a FLOP rate with a unit, e.g. 312TFLOPS");
  const FlopsPerSec r = parse_flops_rate(text, f.where());
  if (r.value() <= 0) {
    f.fail("expected a positive FLOP rate, found '" + text + "'");
  }
  return r;
}

LinkSpec read_link(const MapReader& m) {
  LinkSpec link;
  link.bandwidth = positive_bandwidth(m.require("bandwidth"));
  link.latency = latency(m.require("latency"));
  link.efficiency = fraction(m.require("efficiency"));
  return link;
}

// ---- cluster -------------------------------------------------------------------------------

ClusterSpec read_cluster(const Document& doc) {
  const auto top =
      MapReader::root(doc, {"name", "nodes", "gpus_per_node", "gpu", "nvswitch", "pcie", "nics", "fabric"});
  ClusterSpec c;
  c.source = doc.file();
  c.name = top.require("name").string();
  c.nodes = positive_int(top.require("nodes"));
  const Field gpus_per_node = top.require("gpus_per_node");
  c.gpus_per_node = positive_int(gpus_per_node);
  if (static_cast<int64_t>(c.nodes) * c.gpus_per_node > INT_MAX_VALUE) {
    gpus_per_node.fail("nodes * gpus_per_node = " + std::to_string(c.nodes) + "*" +
                       std::to_string(c.gpus_per_node) + " exceeds " + std::to_string(INT_MAX_VALUE) +
                       " GPUs");
  }

  const auto gpu = top.require("gpu").map(
      {"kind", "peak_flops", "hbm_capacity", "hbm_bandwidth", "compute_efficiency", "memory_efficiency",
       "runtime_overhead", "allocator_fragmentation", "profile", "overlap_slowdown"});
  c.gpu.kind = gpu.require("kind").string();
  const auto peak = gpu.require("peak_flops").map({"bf16", "fp16"});
  if (!peak.has("bf16") && !peak.has("fp16")) {
    peak.fail("expected at least one of bf16, fp16, found neither");
  }
  if (auto f = peak.find("bf16")) {
    c.gpu.peak_bf16 = positive_flops(*f);
  }
  if (auto f = peak.find("fp16")) {
    c.gpu.peak_fp16 = positive_flops(*f);
  }
  c.gpu.hbm_capacity = positive_bytes(gpu.require("hbm_capacity"));
  c.gpu.hbm_bandwidth = positive_bandwidth(gpu.require("hbm_bandwidth"));
  c.gpu.compute_efficiency = fraction(gpu.require("compute_efficiency"));
  c.gpu.memory_efficiency = fraction(gpu.require("memory_efficiency"));
  c.gpu.runtime_overhead = Bytes(1024.0 * 1024 * 1024);
  if (auto f = gpu.find("runtime_overhead")) {
    c.gpu.runtime_overhead = nonnegative_bytes(*f);
  }
  c.gpu.allocator_fragmentation = 1.10;
  if (auto f = gpu.find("allocator_fragmentation")) {
    c.gpu.allocator_fragmentation = f->number("a number >= 1", [](double v) { return v >= 1.0; });
  }
  // Kernel profile: relative to the cluster file (to the working directory when given with --set);
  // `none` or absent = the roofline (docs/schema.md).
  if (auto f = gpu.find("profile")) {
    const std::string text = f->string();
    if (text != "none") {
      std::filesystem::path p(text);
      if (p.is_relative() && f->where().rfind("--set ", 0) != 0)
        p = std::filesystem::path(doc.file()).parent_path() / p;
      if (!std::filesystem::is_regular_file(p))
        f->fail("no such kernel profile '" + p.lexically_normal().string() + "' (or `none` for the roofline)");
      c.gpu.profile = p.lexically_normal().string();
    }
  }
  if (auto f = gpu.find("overlap_slowdown")) {
    c.gpu.overlap_slowdown = f->number("a number >= 1", [](double v) { return v >= 1.0; });
  }

  // Inside a node: an NVSwitch (optionally with NVLink SHARP) or PCIe; exactly one of the two.
  if (top.has("pcie")) {
    if (top.has("nvswitch"))
      top.require("pcie").fail("expected either nvswitch or pcie, found both");
    const auto pcie = top.require("pcie").map({"bandwidth", "latency", "efficiency", "host_bandwidth"});
    c.nvswitch = read_link(pcie);
    c.intra = IntraNodeKind::PCIE;
    if (auto f = pcie.find("host_bandwidth"))
      c.pcie_host_bandwidth = positive_bandwidth(*f);
  } else {
    const auto nvs = top.require("nvswitch").map({"bandwidth", "latency", "efficiency", "nvls"});
    c.nvswitch = read_link(nvs);
    if (auto f = nvs.find("nvls")) {
      const auto nvls = f->map({"efficiency", "latency"});
      c.nvls.enabled = true;
      c.nvls.efficiency = fraction(nvls.require("efficiency"));
      c.nvls.latency = latency(nvls.require("latency"));
    }
  }

  const auto nics = top.require("nics").map({"count", "bandwidth", "latency", "efficiency"});
  c.nics_per_node = positive_int(nics.require("count"));
  c.nic = read_link(nics);

  const auto fabric =
      top.require("fabric").map({"kind", "nodes_per_leaf", "oversubscription", "switch_latency"});
  c.fabric.kind = fabric.require("kind").choice<FabricKind>(
      {{"fat_tree", FabricKind::FAT_TREE}, {"rail_optimized", FabricKind::RAIL_OPTIMIZED}});
  c.fabric.nodes_per_leaf = 1;
  if (auto f = fabric.find("nodes_per_leaf")) {
    c.fabric.nodes_per_leaf = positive_int(*f);
  }
  c.fabric.oversubscription = 1.0;
  if (auto f = fabric.find("oversubscription")) {
    c.fabric.oversubscription = f->number("a number >= 1", [](double v) { return v >= 1.0; });
  }
  c.fabric.switch_latency = Seconds(0.5e-6);
  if (auto f = fabric.find("switch_latency")) {
    c.fabric.switch_latency = latency(*f);
  }
  return c;
}

// ---- workload ------------------------------------------------------------------------------

ModelSpec read_model(const MapReader& m, const std::string& workload_name) {
  ModelSpec model;
  model.name = workload_name;
  if (auto f = m.find("name")) {
    model.name = f->string();
  }
  model.layers = positive_int64(m.require("layers"));
  model.hidden = positive_int64(m.require("hidden"));
  const Field heads = m.require("heads");
  model.heads = positive_int64(heads);
  if (model.hidden % model.heads != 0) {
    heads.fail("expected a divisor of model.hidden = " + std::to_string(model.hidden) + ", found " +
               std::to_string(model.heads) +
               " (hidden % heads = " + std::to_string(model.hidden % model.heads) + ")");
  }
  model.kv_heads = model.heads;
  if (auto f = m.find("kv_heads")) {
    model.kv_heads = positive_int64(*f);
    if (model.heads % model.kv_heads != 0) {
      f->fail("expected a divisor of model.heads = " + std::to_string(model.heads) + ", found " +
              std::to_string(model.kv_heads) +
              " (heads % kv_heads = " + std::to_string(model.heads % model.kv_heads) + ")");
    }
  }
  model.ffn_hidden = positive_int64(m.require("ffn_hidden"));
  model.vocab = positive_int64(m.require("vocab"));
  model.seq_len = positive_int64(m.require("seq_len"));
  model.mlp = m.require("mlp").choice<MlpKind>({{"gelu", MlpKind::GELU}, {"swiglu", MlpKind::SWIGLU}});

  // GPT-style (gelu) and Llama-style (swiglu) families differ in these defaults.
  const bool gpt = model.mlp == MlpKind::GELU;
  model.norm = gpt ? NormKind::LAYERNORM : NormKind::RMSNORM;
  model.position = gpt ? PositionEmbedding::LEARNED : PositionEmbedding::ROTARY;
  model.bias = gpt;
  model.tied_embeddings = gpt;
  if (auto f = m.find("norm")) {
    model.norm = f->choice<NormKind>({{"layernorm", NormKind::LAYERNORM}, {"rmsnorm", NormKind::RMSNORM}});
  }
  if (auto f = m.find("position_embedding")) {
    model.position = f->choice<PositionEmbedding>(
        {{"learned", PositionEmbedding::LEARNED}, {"rotary", PositionEmbedding::ROTARY}});
  }
  if (auto f = m.find("bias")) {
    model.bias = f->boolean();
  }
  if (auto f = m.find("tied_embeddings")) {
    model.tied_embeddings = f->boolean();
  }
  return model;
}

ParallelSpec read_parallel(const MapReader& m) {
  ParallelSpec p;
  p.tp = positive_int(m.require("tp"));
  p.pp = positive_int(m.require("pp"));
  p.dp = 0; // omitted: check_layout derives it
  if (auto f = m.find("dp")) {
    p.dp = positive_int(*f);
  }
  p.schedule =
      m.require("schedule").choice<Schedule>({{"gpipe", Schedule::GPIPE}, {"1f1b", Schedule::ONE_F_ONE_B}});
  p.sp = false;
  if (auto f = m.find("sp")) {
    p.sp = f->boolean();
  }
  p.zero_stage = 0;
  if (auto f = m.find("zero_stage")) {
    p.zero_stage = static_cast<int>(f->integer(0, 3, "an integer in 0..3"));
  }
  return p;
}

TrainingSpec read_training(const std::optional<MapReader>& m) {
  TrainingSpec t;
  t.dp_bucket = Bytes(25.0 * 1024 * 1024);
  t.optimizer_bytes_per_param = 12;
  t.recompute = Recompute::NONE;
  if (!m) {
    return t;
  }
  if (auto f = m->find("dp_bucket")) {
    t.dp_bucket = positive_bytes(*f);
  }
  if (auto f = m->find("optimizer_bytes_per_param")) {
    t.optimizer_bytes_per_param = f->number("a number >= 0", [](double v) { return v >= 0.0; });
  }
  if (auto f = m->find("recompute")) {
    t.recompute = f->choice<Recompute>(
        {{"none", Recompute::NONE}, {"selective", Recompute::SELECTIVE}, {"full", Recompute::FULL}});
  }
  if (auto f = m->find("flash_attention")) {
    t.flash_attention = f->boolean();
  }
  if (auto f = m->find("zero3_prefetch")) {
    t.zero3_prefetch = static_cast<int>(f->integer(0, 64, "an integer in 0..64"));
  }
  return t;
}

WorkloadSpec read_workload(const Document& doc) {
  const auto top = MapReader::root(doc, {"name", "model", "batch", "parallel", "precision", "training", "collectives"});
  WorkloadSpec w;
  w.source = doc.file();
  w.name = top.require("name").string();
  w.model = read_model(
      top.require("model").map({"name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab",
                                "seq_len", "mlp", "norm", "position_embedding", "bias", "tied_embeddings"}),
      w.name);
  const auto batch = top.require("batch").map({"global_batch", "micro_batch"});
  w.batch.global_batch = positive_int64(batch.require("global_batch"));
  w.batch.micro_batch = positive_int64(batch.require("micro_batch"));
  w.parallel = read_parallel(top.require("parallel").map({"tp", "pp", "dp", "schedule", "sp", "zero_stage"}));
  w.precision =
      top.require("precision").choice<Precision>({{"bf16", Precision::BF16}, {"fp16", Precision::FP16}});
  std::optional<MapReader> training;
  if (auto f = top.find("training")) {
    training = f->map({"dp_bucket", "optimizer_bytes_per_param", "recompute", "flash_attention", "zero3_prefetch"});
  }
  w.training = read_training(training);
  if (auto f = top.find("collectives")) {
    const auto coll = f->map({"tp", "pp", "dp"});
    const auto algorithm = [](const Field& a) {
      return a.choice<CollectiveAlgorithm>({{"auto", CollectiveAlgorithm::AUTO},
                                            {"ring", CollectiveAlgorithm::RING},
                                            {"tree", CollectiveAlgorithm::TREE},
                                            {"hierarchical", CollectiveAlgorithm::HIERARCHICAL},
                                            {"nvls", CollectiveAlgorithm::NVLS},
                                            {"pairwise", CollectiveAlgorithm::PAIRWISE}});
    };
    if (auto a = coll.find("tp"))
      w.collectives.tp = algorithm(*a);
    if (auto a = coll.find("pp"))
      w.collectives.pp = algorithm(*a);
    if (auto a = coll.find("dp"))
      w.collectives.dp = algorithm(*a);
  }
  return w;
}

// ---- layout --------------------------------------------------------------------------------

/// a*b, or nullopt on overflow.
std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    return std::nullopt;
  }
  return out;
}

std::string str(int64_t v) {
  return std::to_string(v);
}

const char* precision_name(Precision p) {
  return p == Precision::BF16 ? "bf16" : "fp16";
}

int64_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: insertions, deletions, substitutions, adjacent transpositions.
  const std::size_t n = a.size();
  const std::size_t m = b.size();
  std::vector<std::vector<int64_t>> d(n + 1, std::vector<int64_t>(m + 1, 0));
  for (std::size_t i = 0; i <= n; ++i) {
    d[i][0] = static_cast<int64_t>(i);
  }
  for (std::size_t j = 0; j <= m; ++j) {
    d[0][j] = static_cast<int64_t>(j);
  }
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const int64_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

} // namespace

// ---- public API ----------------------------------------------------------------------------

Override parse_override(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    throw ConfigError("--set " + text + ": expected PATH=VALUE, e.g. parallel.pp=4");
  }
  std::string path = text.substr(0, eq);
  while (!path.empty() && std::isspace(static_cast<unsigned char>(path.back())) != 0) {
    path.pop_back();
  }
  while (!path.empty() && std::isspace(static_cast<unsigned char>(path.front())) != 0) {
    path.erase(path.begin());
  }
  if (path.empty()) {
    throw ConfigError("--set " + text + ": expected PATH=VALUE with a non-empty PATH, e.g. parallel.pp=4");
  }
  if (path.front() == '.' || path.back() == '.' || path.find("..") != std::string::npos) {
    throw ConfigError("--set " + text + ": empty key in path '" + path + "'");
  }
  return Override{path, text.substr(eq + 1)};
}

ClusterSpec load_cluster(const std::filesystem::path& file, const std::vector<Override>& overrides) {
  Document doc(file);
  for (const auto& o : overrides) {
    if (o.path.starts_with(CLUSTER_PREFIX)) {
      doc.apply(o.path.substr(CLUSTER_PREFIX.size()), o.value, shown(o));
    }
  }
  return read_cluster(doc);
}

WorkloadSpec load_workload(const std::filesystem::path& file, const std::vector<Override>& overrides) {
  Document doc(file);
  for (const auto& o : overrides) {
    if (!o.path.starts_with(CLUSTER_PREFIX)) {
      doc.apply(o.path, o.value, shown(o));
    }
  }
  return read_workload(doc);
}

void check_layout(const ClusterSpec& cluster, WorkloadSpec& workload) {
  const std::string prefix = (workload.source.empty() ? std::string("workload") : workload.source) + ": ";
  const std::string cluster_name = cluster.source.empty() ? cluster.name : cluster.source;
  const auto fail = [&](const std::string& why) { throw ModelError(prefix + why); };
  const ModelSpec& m = workload.model;
  const ParallelSpec& p = workload.parallel;
  const int64_t tp = p.tp;
  const int64_t pp = p.pp;

  if (p.tp < 1 || p.pp < 1 || p.dp < 0) {
    fail("parallel: tp and pp must be >= 1 and dp >= 1 (or 0 to derive it), found tp = " + str(tp) +
         ", pp = " + str(pp) + ", dp = " + str(p.dp));
  }
  if (p.zero_stage < 0 || p.zero_stage > 3) {
    fail("parallel.zero_stage = " + str(p.zero_stage) + " but only stages 0, 1, 2 and 3 exist");
  }
  if (workload.batch.micro_batch < 1 || workload.batch.global_batch < 1) {
    fail("batch: global_batch and micro_batch must be >= 1, found " + str(workload.batch.global_batch) +
         " and " + str(workload.batch.micro_batch));
  }
  if (peak_flops(cluster.gpu, workload.precision).value() <= 0) {
    fail(std::string("precision: ") + precision_name(workload.precision) + " needs gpu.peak_flops." +
         precision_name(workload.precision) + ", which " + cluster_name + " does not give for " +
         cluster.gpu.kind);
  }

  const int64_t gpus = static_cast<int64_t>(cluster.nodes) * cluster.gpus_per_node;
  const std::string gpus_text = str(gpus) + " GPUs (" + cluster_name + ": " + str(cluster.nodes) +
                                " nodes * " + str(cluster.gpus_per_node) + " GPUs)";
  const int64_t tp_pp = tp * pp; // both fit in int, so the product fits in int64
  int64_t dp = p.dp;
  if (dp == 0) {
    if (gpus % tp_pp != 0) {
      fail("parallel: dp is omitted, but the cluster's " + gpus_text +
           " are not divisible by tp*pp = " + str(tp) + "*" + str(pp) + " = " + str(tp_pp));
    }
    dp = gpus / tp_pp;
  } else {
    const auto total = checked_mul(tp_pp, dp);
    if (!total || *total != gpus) {
      fail("parallel: tp*pp*dp = " + str(tp) + "*" + str(pp) + "*" + str(dp) + " = " +
           (total ? str(*total) : std::string("(overflow)")) + " but the cluster has " + gpus_text);
    }
  }

  const auto divides = [&](const char* degree_name, int64_t degree, const char* dim_name, int64_t dim,
                           const char* why) {
    if (dim % degree != 0) {
      fail(std::string(degree_name) + " = " + str(degree) + " does not divide " + dim_name + " = " +
           str(dim) + " (" + why + ")");
    }
  };
  divides("parallel.tp", tp, "model.heads", m.heads, "attention heads are split across TP ranks");
  divides("parallel.tp", tp, "model.kv_heads", m.kv_heads, "key/value heads are split across TP ranks");
  divides("parallel.tp", tp, "model.ffn_hidden", m.ffn_hidden, "the MLP is split across TP ranks");
  divides("parallel.tp", tp, "model.vocab", m.vocab, "the embedding and logits are split across TP ranks");
  divides("parallel.pp", pp, "model.layers", m.layers,
          "every pipeline stage holds the same number of layers");

  const auto per_step = checked_mul(workload.batch.micro_batch, dp);
  if (!per_step || workload.batch.global_batch % *per_step != 0) {
    fail("batch.global_batch = " + str(workload.batch.global_batch) +
         " is not divisible by batch.micro_batch*parallel.dp = " + str(workload.batch.micro_batch) + "*" +
         str(dp) + (p.dp == 0 ? " (dp derived)" : "") + " = " +
         (per_step ? str(*per_step) : std::string("(overflow)")));
  }
  if (p.sp && tp == 1) {
    fail("parallel.sp = true needs parallel.tp > 1, found tp = 1 (sequence parallelism splits along TP)");
  }
  if (p.sp && m.seq_len % tp != 0) {
    fail("parallel.sp = true needs model.seq_len = " + str(m.seq_len) +
         " divisible by parallel.tp = " + str(tp) + " (seq_len % tp = " + str(m.seq_len % tp) + ")");
  }
  workload.parallel.dp = static_cast<int>(dp);
}

std::string did_you_mean(const std::string& key, const std::vector<std::string>& candidates) {
  const std::string wanted = lowercase(key);
  const int64_t limit = std::max<int64_t>(1, static_cast<int64_t>(key.size()) / 3);
  std::string best;
  int64_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    const int64_t d = edit_distance(wanted, lowercase(candidate));
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

} // namespace stepsim::config
