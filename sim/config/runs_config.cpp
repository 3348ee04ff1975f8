#include "config/runs_config.hpp"

#include "config/yaml_tree.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <string_view>

namespace stepsim::config {

namespace {

using detail::Document;
using detail::Field;
using detail::MapReader;

bool is_null(const Field& f) {
  return !f.value().IsDefined() || f.value().IsNull();
}

/// An optional integer of at least `min` (null or absent: nullopt).
std::optional<int64_t> opt_integer(const MapReader& m, std::string_view key, int64_t min, const char* what) {
  const auto f = m.find(key);
  if (!f || is_null(*f))
    return std::nullopt;
  return f->integer(min, std::numeric_limits<int64_t>::max(), what);
}

/// An optional number that `ok` accepts (null or absent: nullopt).
std::optional<double> opt_figure(const MapReader& m, std::string_view key, const char* what,
                                 bool (*ok)(double)) {
  const auto f = m.find(key);
  if (!f || is_null(*f))
    return std::nullopt;
  return f->number(what, ok);
}

std::optional<int64_t> opt_int(const MapReader& m, std::string_view key) {
  return opt_integer(m, key, 0, "a non-negative integer or null");
}

/// A count that must be at least 1 when given (layers, GPUs, parallel degrees, batch sizes).
std::optional<int64_t> opt_count(const MapReader& m, std::string_view key) {
  return opt_integer(m, key, 1, "an integer >= 1 or null");
}

/// A figure that must be > 0 when given (a peak, a memory size). Measured figures may be 0: such
/// a run is skipped with its reason (validate), not refused.
std::optional<double> opt_positive(const MapReader& m, std::string_view key) {
  return opt_figure(m, key, "a number > 0 or null", [](double v) { return v > 0.0; });
}

/// A utilisation in percent: 0..100 when given.
std::optional<double> opt_percent(const MapReader& m, std::string_view key) {
  return opt_figure(m, key, "a percentage in [0, 100] or null",
                    [](double v) { return v >= 0.0 && v <= 100.0; });
}

std::optional<double> opt_number(const MapReader& m, std::string_view key) {
  return opt_figure(m, key, "a non-negative number or null", [](double v) { return v >= 0.0; });
}

std::string opt_text(const MapReader& m, std::string_view key) {
  const auto f = m.find(key);
  if (!f || is_null(*f))
    return "";
  return f->scalar("a text or null");
}

/// The sub-mapping `key`, or nullopt when absent or null; unknown keys in it go to `ignored`.
std::optional<MapReader> opt_map(const MapReader& m, std::string_view key, std::vector<std::string_view> keys,
                                 std::vector<std::string>& ignored) {
  const auto f = m.find(key);
  if (!f || is_null(*f))
    return std::nullopt;
  return f->map(std::move(keys), &ignored);
}

/// The run's id. It names the run's folder under --out, so it must be a plain file name.
std::string read_run_id(const MapReader& m) {
  std::string id = m.require("id").string();
  const bool plain =
      !id.empty() && id.size() <= 200 && id != "." && id != ".." &&
      std::all_of(id.begin(), id.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
      });
  if (!plain)
    m.require("id").fail(
        "expected 1 to 200 letters, digits, '.', '_' or '-' (it names the run's output folder), "
        "found '" +
        id.substr(0, 80) + (id.size() > 80 ? "...'" : "'"));
  return id;
}

/// The recipe's recomputation and memory settings (recompute .. optimizer_bytes_per_param).
void read_memory_settings(const MapReader& m, MeasuredRun& r) {
  r.recompute = opt_text(m, "recompute");
  if (auto f = m.find("recompute_modules"); f && !is_null(*f)) {
    if (!f->value().IsSequence() || f->value().size() == 0)
      f->fail("expected a non-empty list of module names");
    for (const YAML::Node& item : f->value()) {
      if (!item.IsScalar())
        f->fail("expected module names");
      r.recompute_modules.push_back(item.Scalar());
    }
  }
  if (auto f = m.find("fp8_params"); f && !is_null(*f))
    r.fp8_params = f->boolean();
  if (auto f = m.find("offload_layers"); f && !is_null(*f))
    r.offload_layers = f->integer(0, 1 << 20, "an integer >= 0");
  if (auto f = m.find("recompute_layers"); f && !is_null(*f))
    r.recompute_layers = f->integer(0, 1 << 20, "an integer >= 0");
  if (auto f = m.find("optimizer_bytes_per_param"); f && !is_null(*f))
    r.optimizer_bytes_per_param =
        f->number("a number in [0, 1024]", [](double v) { return v >= 0.0 && v <= 1024.0; });
  if (auto f = m.find("expandable_segments"); f && !is_null(*f))
    r.expandable_segments = f->boolean();
}

/// source.year when the source is a mapping with an integer year; the rest of it is not read.
std::optional<int> read_source_year(const YAML::Node& node) {
  // A missing key reads as an undefined node, which must be tested before it is asked anything.
  if (const YAML::Node source = node["source"]; source && source.IsMap()) {
    const YAML::Node y = source["year"];
    int year = 0;
    if (y && y.IsScalar() && YAML::convert<int>::decode(y, year))
      return year;
  }
  return std::nullopt;
}

/// model.mla: kv_lora_rank, qk_nope_head_dim and v_head_dim are required and > 0.
void read_mla(const MapReader& s, std::vector<std::string>& ignored, MeasuredModel& model) {
  auto a =
      opt_map(s, "mla", {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"},
              ignored);
  if (!a)
    return;
  const auto kv = opt_int(*a, "kv_lora_rank"), nope = opt_int(*a, "qk_nope_head_dim"),
             v = opt_int(*a, "v_head_dim");
  if (!kv || !nope || !v || *kv == 0 || *nope == 0 || *v == 0)
    s.require("mla").fail("expected kv_lora_rank, qk_nope_head_dim and v_head_dim, each > 0 "
                          "(q_lora_rank and qk_rope_head_dim are optional)");
  model.mla = MlaSpec{.q_lora_rank = opt_int(*a, "q_lora_rank").value_or(0),
                      .kv_lora_rank = *kv,
                      .qk_nope_head_dim = *nope,
                      .qk_rope_head_dim = opt_int(*a, "qk_rope_head_dim").value_or(0),
                      .v_head_dim = *v};
}

void read_model(const MapReader& m, std::vector<std::string>& ignored, MeasuredModel& model) {
  auto s = opt_map(m, "model", {"name",           "params_b",
                                "layers",         "hidden",
                                "ffn_hidden",     "attn_heads",
                                "kv_heads",       "vocab",
                                "seq_len",        "moe_experts",
                                "moe_topk",       "moe_shared_experts",
                                "head_dim",       "mla",
                                "sliding_window", "full_attention_every",
                                "moe_ffn_hidden", "moe_first_dense",
                                "mtp_layers",     "moe_groups",
                                "moe_group_topk", "notes"},
                   ignored);
  if (!s)
    return;
  model.name = opt_text(*s, "name");
  model.layers = opt_count(*s, "layers");
  model.hidden = opt_count(*s, "hidden");
  model.ffn_hidden = opt_count(*s, "ffn_hidden");
  model.heads = opt_count(*s, "attn_heads");
  model.kv_heads = opt_count(*s, "kv_heads");
  model.vocab = opt_count(*s, "vocab");
  model.seq_len = opt_count(*s, "seq_len");
  model.moe_experts = opt_count(*s, "moe_experts");
  model.moe_topk = opt_count(*s, "moe_topk");
  model.moe_shared_experts = opt_int(*s, "moe_shared_experts");
  model.head_dim = opt_count(*s, "head_dim");
  read_mla(*s, ignored, model);
  model.sliding_window = opt_count(*s, "sliding_window");
  model.full_attention_every = opt_count(*s, "full_attention_every");
  model.moe_ffn_hidden = opt_count(*s, "moe_ffn_hidden");
  model.moe_first_dense = opt_int(*s, "moe_first_dense");
  model.mtp_layers = opt_int(*s, "mtp_layers");
  model.moe_groups = opt_count(*s, "moe_groups");
  model.moe_group_topk = opt_count(*s, "moe_group_topk");
  model.notes = opt_text(*s, "notes");
  model.params_b = opt_positive(*s, "params_b");
}

void read_hardware(const MapReader& m, std::vector<std::string>& ignored, MeasuredHardware& hw) {
  auto s = opt_map(m, "hardware",
                   {"gpu", "gpu_mem_gb", "num_gpus", "gpus_per_node", "intra_node", "inter_node",
                    "peak_tflops_assumed", "system"},
                   ignored);
  if (!s)
    return;
  hw.gpu = opt_text(*s, "gpu");
  hw.num_gpus = opt_count(*s, "num_gpus");
  hw.gpus_per_node = opt_count(*s, "gpus_per_node");
  hw.peak_tflops = opt_positive(*s, "peak_tflops_assumed");
  hw.system = opt_text(*s, "system");
  hw.gpu_mem_gb = opt_positive(*s, "gpu_mem_gb");
  hw.inter_node = opt_text(*s, "inter_node");
}

/// parallelism.sp: a degree (1 = off, the TP size = on), or a boolean (true: on, read as degree 2).
void read_sp(const MapReader& s, MeasuredParallelism& p) {
  if (auto f = s.find("sp"); f && !is_null(*f)) {
    const std::string t = f->scalar("an integer, a boolean or null");
    if (t == "true" || t == "True" || t == "false" || t == "False")
      p.sp = f->boolean() ? 2 : 1;
    else
      p.sp = opt_int(s, "sp");
  }
}

/// parallelism.chunk_layers: non-negative layer counts, one per model chunk.
void read_chunk_layers(const MapReader& s, MeasuredParallelism& p) {
  if (auto f = s.find("chunk_layers"); f && !is_null(*f)) {
    if (!f->value().IsSequence())
      f->fail("expected a list of layer counts, one per model chunk");
    for (const YAML::Node& item : f->value()) {
      int64_t n = -1;
      if (!item.IsScalar() || !YAML::convert<int64_t>::decode(item, n) || n < 0)
        f->fail("expected non-negative layer counts");
      p.chunk_layers.push_back(n);
    }
  }
}

/// A stage is 0..3, optionally followed by a note ("1 (distributed optimizer)"); a name
/// ("ZeRO-3", "fsdp") is mapped later or skipped with its reason.
void check_zero_stage(const MapReader& s, const std::string& stage) {
  const bool signed_number = stage.size() > 1 && (stage[0] == '-' || stage[0] == '+') &&
                             std::isdigit(static_cast<unsigned char>(stage[1])) != 0;
  if (signed_number || (!stage.empty() && std::isdigit(static_cast<unsigned char>(stage[0])) != 0)) {
    const char next = stage.size() > 1 ? stage[1] : ' ';
    if (signed_number || stage[0] > '3' || !(next == ' ' || next == '('))
      s.require("zero_stage")
          .fail("expected 0, 1, 2 or 3 (optionally followed by a note), found '" + stage + "'");
  }
}

/// fsdp: a boolean, or the sharding strategy's name: FULL_SHARD / HYBRID_SHARD shard the
/// parameters (ZeRO-3); SHARD_GRAD_OP shards gradients and optimizer states (ZeRO-2); a
/// strategy is taken as the zero_stage text when that is empty (the mapping reads the name);
/// NO_SHARD is plain data parallelism.
void read_fsdp(const MapReader& s, MeasuredParallelism& p) {
  if (auto f = s.find("fsdp"); f && !is_null(*f)) {
    const std::string t =
        f->scalar("a boolean, a sharding strategy (FULL_SHARD, HYBRID_SHARD, SHARD_GRAD_OP, "
                  "NO_SHARD) or null");
    std::string u;
    for (char c : t)
      u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (u.find("SHARD_GRAD_OP") != std::string::npos) {
      p.fsdp = false;
      if (p.zero_stage.empty())
        p.zero_stage = "2 (" + t + ")";
    } else if (u.find("SHARD") != std::string::npos) {
      p.fsdp = u.find("NO_SHARD") == std::string::npos;
      if (*p.fsdp && p.zero_stage.empty()) // the strategy kept for the mapping (HYBRID_SHARD's groups)
        p.zero_stage = "3 (" + t + ")";
    } else if (u == "TRUE" || u == "FALSE") {
      p.fsdp = f->boolean();
    } else {
      f->fail(
          "expected a boolean or a sharding strategy (FULL_SHARD, HYBRID_SHARD, SHARD_GRAD_OP, NO_SHARD), "
          "found '" +
          t + "'");
    }
  }
}

void read_parallelism(const MapReader& m, std::vector<std::string>& ignored, MeasuredParallelism& p) {
  auto s = opt_map(m, "parallelism",
                   {"tp", "pp", "dp", "cp", "ep", "etp", "ep_overlap", "ep_dispatch", "tp_comm_overlap",
                    "chunk_layers", "sp", "zero_stage", "fsdp", "virtual_pp", "schedule"},
                   ignored);
  if (!s)
    return;
  p.tp = opt_count(*s, "tp");
  p.pp = opt_count(*s, "pp");
  p.dp = opt_count(*s, "dp");
  p.cp = opt_count(*s, "cp");
  p.ep = opt_count(*s, "ep");
  p.etp = opt_count(*s, "etp");
  read_sp(*s, p);
  p.virtual_pp = opt_count(*s, "virtual_pp");
  if (auto f = s->find("ep_overlap"); f && !is_null(*f))
    p.ep_overlap = f->boolean();
  if (auto f = s->find("tp_comm_overlap"); f && !is_null(*f))
    p.tp_comm_overlap = f->boolean();
  read_chunk_layers(*s, p);
  if (auto f = s->find("ep_dispatch"); f && !is_null(*f)) {
    p.ep_dispatch = f->scalar("all_to_all or deduplicated");
    if (p.ep_dispatch != "all_to_all" && p.ep_dispatch != "deduplicated")
      f->fail("expected all_to_all or deduplicated, found '" + p.ep_dispatch + "'");
  }
  p.zero_stage = opt_text(*s, "zero_stage");
  check_zero_stage(*s, p.zero_stage);
  read_fsdp(*s, p);
  p.schedule = opt_text(*s, "schedule");
}

void read_batch(const MapReader& m, std::vector<std::string>& ignored, MeasuredBatch& b) {
  auto s =
      opt_map(m, "batch", {"micro_batch", "global_batch_seqs", "global_batch_tokens", "grad_accum"}, ignored);
  if (!s)
    return;
  b.micro_batch = opt_count(*s, "micro_batch");
  b.global_batch_seqs = opt_count(*s, "global_batch_seqs");
  b.global_batch_tokens = opt_count(*s, "global_batch_tokens");
  b.grad_accum = opt_count(*s, "grad_accum");
}

void read_figures(const MapReader& m, std::vector<std::string>& ignored, MeasuredFigures& f) {
  auto s = opt_map(m, "measured",
                   {"tflops_per_gpu", "tflops_basis", "mfu_pct", "hfu_pct", "iteration_time_s",
                    "tokens_per_s_per_gpu", "tokens_per_s_total", "aggregate_pflops", "other"},
                   ignored);
  if (!s)
    return;
  f.tflops_per_gpu = opt_number(*s, "tflops_per_gpu");
  f.tflops_basis = opt_text(*s, "tflops_basis");
  f.mfu_pct = opt_percent(*s, "mfu_pct");
  f.hfu_pct = opt_percent(*s, "hfu_pct");
  f.iteration_time_s = opt_number(*s, "iteration_time_s");
  f.tokens_per_s_per_gpu = opt_number(*s, "tokens_per_s_per_gpu");
  f.tokens_per_s_total = opt_number(*s, "tokens_per_s_total");
  f.aggregate_pflops = opt_number(*s, "aggregate_pflops");
}

MeasuredRun read_run(const Document& doc, const std::string& path, const YAML::Node& node,
                     std::vector<std::string>& ignored) {
  const Field entry(doc, path, node, node);
  const MapReader m = entry.map({"id",
                                 "group",
                                 "confidence",
                                 "source",
                                 "model",
                                 "hardware",
                                 "parallelism",
                                 "batch",
                                 "recompute",
                                 "recompute_modules",
                                 "fp8_params",
                                 "offload_layers",
                                 "recompute_layers",
                                 "optimizer_bytes_per_param",
                                 "expandable_segments",
                                 "precision",
                                 "framework",
                                 "measured",
                                 "derived",
                                 "notes"},
                                &ignored);
  MeasuredRun r;
  r.where = doc.location(path, node);
  r.id = read_run_id(m);
  r.group = opt_text(m, "group");
  read_memory_settings(m, r);
  r.precision = opt_text(m, "precision");
  r.framework = opt_text(m, "framework");
  r.year = read_source_year(node);
  read_model(m, ignored, r.model);
  read_hardware(m, ignored, r.hardware);
  read_parallelism(m, ignored, r.parallelism);
  read_batch(m, ignored, r.batch);
  read_figures(m, ignored, r.measured);
  return r;
}

} // namespace

RunsFile load_runs(const std::filesystem::path& file) {
  Document doc(file);
  RunsFile out;
  const auto top =
      MapReader::root(doc, {"meta", "runs", "collective_measurements", "gemm_measurements"}, &out.ignored);
  out.source = doc.file();
  const Field runs = top.require("runs");
  if (!runs.value().IsSequence())
    runs.fail("expected a list of runs, found " + detail::describe(runs.value()));
  std::set<std::string> seen;
  std::size_t i = 0;
  for (const YAML::Node& node : runs.value()) {
    const std::string path = "runs[" + std::to_string(i++) + "]";
    MeasuredRun r = read_run(doc, path, node, out.ignored);
    if (!seen.insert(r.id).second)
      doc.fail(path + ".id", node, "key '" + path + ".id': run id '" + r.id + "' is given twice");
    out.runs.push_back(std::move(r));
  }
  return out;
}

RunsFile load_runs(const std::vector<std::filesystem::path>& files) {
  RunsFile out;
  std::map<std::string, std::string> origin; // run id -> file
  for (const std::filesystem::path& file : files) {
    RunsFile one = load_runs(file);
    for (MeasuredRun& r : one.runs) {
      if (auto [it, fresh] = origin.emplace(r.id, one.source); !fresh)
        throw ConfigError(one.source + ": run id '" + r.id + "' is also in " + it->second);
      out.runs.push_back(std::move(r));
    }
    out.ignored.insert(out.ignored.end(), one.ignored.begin(), one.ignored.end());
    out.source += (out.source.empty() ? "" : " + ") + file.filename().string();
  }
  return out;
}

namespace {

/// A key of the calibration file's `knobs`, as a record names it ("gpu.gemm_efficiency"):
/// returns its path "cluster.KEY"; fails at `name` when `knobs` does not set it.
std::string knob_path(const Field& name, const std::vector<Override>& knobs) {
  const std::string path = "cluster." + name.string();
  if (std::none_of(knobs.begin(), knobs.end(), [&](const Override& o) { return o.path == path; }))
    name.fail("'" + name.string() + "' is not a key of knobs");
  return path;
}

/// A record's list of knob keys (`knobs`), each a key of the file's `knobs`.
std::vector<std::string> record_knobs(const Document& doc, const Field& list, const std::string& where,
                                      const std::vector<Override>& knobs) {
  if (!list.value().IsSequence() || list.value().size() == 0)
    list.fail("expected a list of the keys of knobs this fit set, found " + detail::describe(list.value()));
  std::vector<std::string> out;
  std::size_t k = 0;
  for (const YAML::Node& key : list.value())
    out.push_back(knob_path(Field(doc, where + ".knobs[" + std::to_string(k++) + "]", key, key), knobs));
  return out;
}

/// A fit record: its runs, objective and the objective's value (the RMS error or the mean
/// |error|; older files: the median), and how it searched.
void read_fit_record(const Document& doc, const Field& at, const MapReader& fit, const std::string& where,
                     const std::vector<Override>& knobs, std::vector<std::string>& runs,
                     std::string& objective, std::optional<double>& error, CalibrationFile::Search& search) {
  if (auto r = fit.find("runs")) {
    if (!r->value().IsSequence())
      r->fail("expected a list of run ids, found " + detail::describe(r->value()));
    std::size_t i = 0;
    for (const YAML::Node& id : r->value())
      runs.push_back(Field(doc, where + ".runs[" + std::to_string(i++) + "]", id, id).string());
  }
  objective = opt_text(fit, "objective");
  const std::optional<double> median = opt_number(fit, "median_abs_error_pct");
  const std::optional<double> rms = opt_number(fit, "rms_error_pct");
  error = opt_number(fit, "mean_abs_error_pct");
  if (objective == "rms_error_pct")
    error = rms;
  if (!error)
    error = median;
  (void)opt_text(fit, "search");
  (void)opt_text(fit, "note");
  search.where = at.where();
  if (auto r = fit.find("ranges"); r && !is_null(*r)) {
    if (!r->value().IsMap())
      r->fail("expected a mapping of knob keys to LO:HI[:UNIT] ranges, found " +
              detail::describe(r->value()));
    for (auto it = r->value().begin(); it != r->value().end(); ++it) {
      const Field name(doc, where + ".ranges." + it->first.Scalar(), it->first, it->first);
      const Field range(doc, where + ".ranges." + it->first.Scalar(), it->first, it->second);
      search.ranges.emplace_back(knob_path(name, knobs), range.scalar("a range LO:HI[:UNIT]"));
    }
  }
  search.rounds = opt_count(fit, "rounds");
  search.tolerance = opt_positive(fit, "tolerance");
}

} // namespace

CalibrationFile load_calibration(const std::filesystem::path& file) {
  Document doc(file);
  const auto top = MapReader::root(doc, {"gpu_kind", "knobs", "fit", "then"});
  CalibrationFile out;
  out.source = doc.file();
  out.gpu_kind = top.require("gpu_kind").string();
  const Field knobs = top.require("knobs");
  if (!knobs.value().IsMap())
    knobs.fail("expected a mapping of cluster keys to values, found " + detail::describe(knobs.value()));
  for (auto it = knobs.value().begin(); it != knobs.value().end(); ++it) {
    const std::string key = it->first.Scalar();
    const Field value(doc, "knobs." + key, it->first, it->second);
    out.knobs.push_back(Override{"cluster." + key, value.scalar("a scalar value")});
  }
  std::vector<std::string_view> record_keys = {"runs",
                                               "objective",
                                               "mean_abs_error_pct",
                                               "median_abs_error_pct",
                                               "rms_error_pct",
                                               "search",
                                               "note",
                                               "knobs",
                                               "ranges",
                                               "rounds",
                                               "tolerance"};
  std::optional<Field> fit_knobs;
  if (auto f = top.find("fit"); f && !is_null(*f)) {
    const MapReader fit = f->map(record_keys);
    read_fit_record(doc, *f, fit, "fit", out.knobs, out.fit_runs, out.objective, out.fit_error_pct,
                    out.fit_search);
    if (auto k = fit.find("knobs"); k && !is_null(*k)) {
      out.fit_knobs = record_knobs(doc, *k, "fit", out.knobs);
      fit_knobs = k;
    }
  }
  if (auto f = top.find("then"); f && !is_null(*f)) {
    if (!f->value().IsSequence())
      f->fail("expected a list of later fits, found " + detail::describe(f->value()));
    std::size_t i = 0;
    for (const YAML::Node& node : f->value()) {
      const std::string where = "then[" + std::to_string(i++) + "]";
      const Field at(doc, where, node, node);
      const MapReader stage = at.map(record_keys);
      CalibrationFile::Stage s;
      s.knobs = record_knobs(doc, stage.require("knobs"), where, out.knobs);
      for (const std::string& k : s.knobs)
        if (std::find(out.fit_knobs.begin(), out.fit_knobs.end(), k) != out.fit_knobs.end())
          fit_knobs->fail("'" + k.substr(8) + "' is fitted again by " + where + ": a knob is fitted once");
      read_fit_record(doc, at, stage, where, out.knobs, s.runs, s.objective, s.error_pct, s.search);
      out.then.push_back(std::move(s));
    }
  }
  return out;
}

} // namespace stepsim::config
