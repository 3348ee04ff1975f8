#include "validate/plan.hpp"

#include "core/error.hpp"
#include "model/memory.hpp"
#include "validate/plan_steps.hpp"
#include "validate/rules.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <regex>
#include <utility>

namespace stepsim::validate {

namespace {

constexpr double GIB = 1024.0 * 1024.0 * 1024.0;

} // namespace

std::string calibration_kind(const std::string& family) {
  const GpuRule* r = gpu_rule_of(family);
  return r != nullptr ? std::string(r->kind) : "";
}

const char* to_string(Metric m) {
  switch (m) {
  case Metric::ITERATION_TIME:
    return "iteration_time_s";
  case Metric::TFLOPS_PER_GPU:
    return "tflops_per_gpu";
  case Metric::MFU:
    return "mfu_pct";
  case Metric::TOKENS_PER_S:
    return "tokens_per_s_per_gpu";
  case Metric::HFU:
    return "hfu_pct";
  }
  return "?";
}

std::string gpu_family(const config::MeasuredHardware& hw) {
  const GpuRule* r = gpu_rule(hw.gpu, hw.gpu_mem_gb);
  return r != nullptr ? std::string(r->family) : "";
}

std::string bundled_topology(const std::string& family, int64_t nodes, int64_t gpus_per_node) {
  const GpuRule* r = gpu_rule_of(family);
  if (r == nullptr)
    return "";
  if (!r->wide_topology.empty() && gpus_per_node == r->wide_gpus_per_node)
    return std::string(r->wide_topology);
  if (!r->large_topology.empty() && nodes > r->large_above_nodes)
    return std::string(r->large_topology);
  return std::string(r->topology);
}

/// Picks the measured figure a run is compared on (`p.metric`, `p.measured`); a skip reason, or "".
std::string compared_figure(const config::MeasuredFigures& f, int64_t gpus, RunPlan& p) {
  if (f.iteration_time_s) {
    p.metric = Metric::ITERATION_TIME;
    p.measured = *f.iteration_time_s;
  } else if (f.tflops_per_gpu) {
    p.metric = Metric::TFLOPS_PER_GPU;
    p.measured = *f.tflops_per_gpu;
    p.basis = tflops_basis(f.tflops_basis);
  } else if (f.mfu_pct) {
    p.metric = Metric::MFU;
    p.measured = *f.mfu_pct;
  } else if (f.tokens_per_s_per_gpu) {
    p.metric = Metric::TOKENS_PER_S;
    p.measured = *f.tokens_per_s_per_gpu;
  } else if (f.tokens_per_s_total && gpus > 0) {
    p.metric = Metric::TOKENS_PER_S;
    p.measured = *f.tokens_per_s_total / static_cast<double>(gpus);
  } else if (f.aggregate_pflops && gpus > 0) {
    // The whole job's sustained PFLOP/s: TFLOP/s per GPU under the source's basis.
    p.metric = Metric::TFLOPS_PER_GPU;
    p.measured = *f.aggregate_pflops * 1000.0 / static_cast<double>(gpus);
    p.basis = tflops_basis(f.tflops_basis);
    char shown[32];
    std::snprintf(shown, sizeof shown, "%.4g", p.measured);
    p.defaults.emplace_back(std::string("tflops_per_gpu=") + shown + " (measured.aggregate_pflops over " +
                            std::to_string(gpus) + " GPUs)");
  } else if (f.hfu_pct) {
    p.metric = Metric::HFU;
    p.measured = *f.hfu_pct;
  } else {
    return std::string(
        "no measured figure (iteration_time_s, tflops_per_gpu, mfu_pct, tokens/s, aggregate_pflops or "
        "hfu_pct)");
  }
  // An error relative to zero, or to a denormal, would be infinite or meaningless.
  if (!(p.measured >= 1e-6) || !std::isfinite(p.measured)) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", p.measured);
    return std::string("the measured " + std::string(to_string(p.metric)) + " is " + shown +
                       ", not a positive figure (at least 1e-6)");
  }
  return "";
}

/// A power cap the record's GPU text states ("500W", "power-capped to 450 W") below the family's
/// own limit: the gpu.variant overrides that run it (docs/kernels.md, "GPU variants"); a skip
/// reason when the text names a cap without a wattage, or "".
std::string map_power_cap(const config::MeasuredHardware& hw, const GpuRule& gpu, RunPlan& p) {
  static const std::regex watts_re(R"((\d{2,4}(?:\.\d+)?)\s*W(?![A-Za-z]))", std::regex::icase);
  std::smatch m;
  const bool stated = std::regex_search(hw.gpu, m, watts_re);
  if (!stated) {
    if (has_word(lowered(hw.gpu), "power cap|power-cap|power limit|power-limit|capped"))
      return "hardware.gpu '" + hw.gpu + "' names a power cap without its wattage";
    return "";
  }
  const double watts = std::stod(m[1].str());
  if (watts >= gpu.power_limit_w)
    return ""; // the part at its own limit
  char w[32], base[32];
  std::snprintf(w, sizeof w, "%gW", watts);
  std::snprintf(base, sizeof base, "%gW", gpu.power_limit_w);
  p.overrides.push_back({"cluster.gpu.power_limit", base});
  p.overrides.push_back({"cluster.gpu.variant.name", std::string(gpu.kind) + "-" + w});
  p.overrides.push_back({"cluster.gpu.variant.power_limit", w});
  char note[160];
  std::snprintf(note, sizeof note,
                "gpu.variant.power_limit=%s (hardware.gpu; compute x (%g/%g)^(1/3) = %.3f)", w, watts,
                gpu.power_limit_w, std::cbrt(watts / gpu.power_limit_w));
  p.defaults.emplace_back(note);
  return "";
}

/// An SXM part whose record states its own HBM: a bandwidth in the GPU text ("96GB HBM2e
/// (2.4 TB/s)", Meta's Grand Teton H100s) and a capacity by gpu_mem_gb other than the profile's:
/// the gpu.variant's hbm_bandwidth and hbm_capacity (memory-bound kernels scale with the
/// bandwidth, docs/kernels.md "GPU variants"). Named after the power cap when there is one.
void map_memory_variant(const config::MeasuredHardware& hw, const GpuRule& gpu, RunPlan& p) {
  static const std::regex rate_re(R"((\d+(?:\.\d+)?)\s*TB/s)", std::regex::icase);
  std::smatch m;
  const bool rate = std::regex_search(hw.gpu, m, rate_re);
  const double profile_gb = std::string_view(gpu.kind).find("80GB") != std::string_view::npos ? 80.0 : 0.0;
  const bool capacity = hw.gpu_mem_gb && profile_gb > 0 && *hw.gpu_mem_gb > profile_gb;
  if (!rate && !capacity)
    return;
  const bool named = std::any_of(p.overrides.begin(), p.overrides.end(), [](const config::Override& o) {
    return o.path == "cluster.gpu.variant.name";
  });
  if (!named)
    p.overrides.push_back({"cluster.gpu.variant.name", std::string(gpu.kind) + "-HBM"});
  char text[96];
  if (rate) {
    const double tbps = std::stod(m[1].str());
    std::snprintf(text, sizeof text, "%gGBps", tbps * 1000.0);
    p.overrides.push_back({"cluster.gpu.variant.hbm_bandwidth", text});
    std::snprintf(text, sizeof text, "gpu.variant.hbm_bandwidth=%gGBps (hardware.gpu)", tbps * 1000.0);
    p.defaults.emplace_back(text);
  }
  if (capacity) {
    std::snprintf(text, sizeof text, "%gGB", *hw.gpu_mem_gb);
    p.overrides.push_back({"cluster.gpu.variant.hbm_capacity", text});
    p.defaults.emplace_back(std::string("gpu.variant.hbm_capacity=") + text + " (hardware.gpu_mem_gb)");
  }
}

/// The bundled topology, node shape and typed cluster settings for the record's hardware
/// (rules.cpp's GPU families); a skip reason, or "".
std::string map_hardware(const config::MeasuredRun& run, const PlanOptions& options, RunPlan& p) {
  const int64_t gpus = p.num_gpus;
  p.gpu_kind = gpu_family(run.hardware);
  if (p.gpu_kind.empty())
    return std::string("no bundled topology for GPU '" + run.hardware.gpu + "'");
  // PCIe cards other than the H100 PCIe's variant row (A100 PCIe, H100 NVL) run lower clocks and
  // join by NVLink bridges or PCIe, not an NVSwitch: no bundled topology stands for them.
  const GpuRule& gpu = *gpu_rule(run.hardware.gpu, run.hardware.gpu_mem_gb);
  const bool card =
      gpu.form_words.empty() && std::any_of(card_rules().begin(), card_rules().end(), [&](const CardRule& c) {
        return (c.family.empty() || c.family == p.gpu_kind) && has_word(lowered(run.hardware.gpu), c.words);
      });
  if (card)
    return std::string("no bundled topology for the PCIe card '" + run.hardware.gpu +
                       "' (the bundled ones are SXM parts on NVSwitch, and the H100 PCIe)");
  if (gpu.variant)
    p.defaults.emplace_back(gpu.note);
  if (gpu.power_limit_w > 0)
    if (std::string why = map_power_cap(run.hardware, gpu, p); !why.empty())
      return why;
  if (gpu.power_limit_w > 0)
    map_memory_variant(run.hardware, gpu, p);
  if (gpu.hbm_from_record) {
    p.defaults.emplace_back(std::string(gpu.note) +
                            std::string(run.hardware.gpu_mem_gb ? ", hbm_capacity from gpu_mem_gb" : ""));
    if (run.hardware.gpu_mem_gb)
      p.cluster.hbm_capacity = Bytes(*run.hardware.gpu_mem_gb * 1e9);
  }
  int64_t per_node = run.hardware.gpus_per_node.value_or(0);
  if (p.gpu_kind == "GB200") {
    // The simulator's node is the NVLink domain: a GB200 NVL72 rack, whatever the record counts
    // (4 GPUs per compute tray, 72 per rack). A job of a multiple of 64 GPUs (not of 72) uses 64
    // per rack, 16 of its 18 compute trays, as NVIDIA's GB200 recipes (128, 256, 512 GPUs) do.
    const int64_t rack = gpus % 72 != 0 && gpus % 64 == 0 ? 64 : 72;
    if (per_node != rack)
      p.defaults.emplace_back("gpus_per_node=" + std::to_string(rack) + " (" +
                              (rack == 72 ? "the NVL72 rack's NVLink domain"
                                          : "64 GPUs of each NVL72 rack, the job not filling whole racks") +
                              " instead of the record's " +
                              (per_node ? std::to_string(per_node) : std::string("none")) + ")");
    per_node = rack;
  } else if (per_node == 0) {
    per_node = 8;
    p.defaults.emplace_back("gpus_per_node=8");
  }
  const int64_t node_size = per_node; // the record's machine, before a small job narrows it
  if (gpus < per_node) {
    p.cluster.gpus_per_node = gpus;
    p.defaults.emplace_back("gpus_per_node=" + std::to_string(gpus) + " (the job's " + std::to_string(gpus) +
                            " GPUs, fewer than the node's " + std::to_string(per_node) + ")");
    per_node = gpus;
  } else if (per_node != 8) {
    p.cluster.gpus_per_node = per_node;
  }
  if (gpus % per_node != 0)
    return "num_gpus " + std::to_string(gpus) + " is not a multiple of gpus_per_node " +
           std::to_string(per_node);
  const int64_t nodes = gpus / per_node;
  p.cluster.nodes = nodes;
  const std::string topo = bundled_topology(p.gpu_kind, nodes, node_size);
  p.cluster_file = options.topologies / topo;
  if (nodes > 1) {
    // The node's NICs as the record states them (the fabric's kind, latency and efficiency stay
    // the bundled topology's): BLOOM's Jean Zay nodes have 4 Omni-Path ports, not DGX's 8 HDR.
    std::optional<NodeNics> nics = parse_inter_node(run.hardware.inter_node, per_node);
    // A GB200 record's count is per compute tray or per GPU, not per rack: only a per-GPU rate
    // (one NIC per GPU) is taken.
    if (nics && p.gpu_kind == "GB200" && nics->count != per_node)
      nics.reset();
    if (nics) {
      char rate[32];
      std::snprintf(rate, sizeof rate, "%gGbps", nics->gbps);
      p.cluster.nics_per_node = nics->count;
      p.cluster.nic_gbps = nics->gbps;
      p.defaults.emplace_back("nics=" + std::to_string(nics->count) + "x" + rate + " (hardware.inter_node)");
    } else {
      p.defaults.emplace_back("nics of " + topo + " (hardware.inter_node " +
                              (run.hardware.inter_node.empty() ? "not given" : "states no rate") + ")");
    }
  }
  if (gpu.max_gb > 0 && run.hardware.gpu_mem_gb && *run.hardware.gpu_mem_gb > gpu.max_gb)
    return std::string("hardware.gpu_mem_gb " +
                       std::to_string(static_cast<int64_t>(*run.hardware.gpu_mem_gb)) +
                       " does not match a V100 (16 or 32 GB)");
  if (gpu.hbm_gib > 0) {
    p.cluster.hbm_capacity = Bytes(gpu.hbm_gib * GIB);
    p.defaults.emplace_back(gpu.note);
  }
  if (gpu.nvswitch_gbytes_per_s > 0) {
    p.cluster.nvswitch_gbytes_per_s = gpu.nvswitch_gbytes_per_s;
    p.defaults.emplace_back(gpu.note);
  }
  p.peak_tflops = run.hardware.peak_tflops.value_or(0);
  return "";
}

namespace {

/// Sets the plan's skip reason to `why`; true when there is one.
bool skipped(RunPlan& p, std::string why) {
  p.skip_reason = std::move(why);
  return !p.skip_reason.empty();
}

/// The calibration knobs of the run's GPU kind, then the caller's trial values.
void add_knobs(const PlanOptions& options, RunPlan& p) {
  if (options.calibration) {
    const std::filesystem::path cal =
        options.topologies / "calibration" / (calibration_kind(p.gpu_kind) + ".yaml");
    if (std::filesystem::exists(cal)) {
      const config::CalibrationFile c = config::load_calibration(cal);
      p.overrides.insert(p.overrides.end(), c.knobs.begin(), c.knobs.end());
    }
  }
  for (const config::Override& o : options.extra)
    if (!o.path.starts_with("cluster."))
      throw ConfigError(
          "--set " + o.path + "=" + o.value +
          ": a validation plan takes cluster keys only (cluster.*); its workload is the record's");
  p.overrides.insert(p.overrides.end(), options.extra.begin(), options.extra.end());
}

} // namespace

RunPlan plan_run(const config::MeasuredRun& run, const PlanOptions& options) {
  RunPlan p;
  p.id = run.id;
  p.num_gpus = run.hardware.num_gpus.value_or(0);
  p.workload.name = run.id;
  detail::Draft d(run, p);
  detail::map_layout(d); // first, so that skipped runs still show the layout
  if (skipped(p, compared_figure(run.measured, d.gpus, p)) || skipped(p, detail::map_model_family(d)) ||
      skipped(p, map_hardware(run, options, p)))
    return p;
  detail::map_chunks(d);
  detail::map_model_shape(d);
  detail::map_batch(d);
  if (skipped(p, detail::map_schedule(d)) || skipped(p, detail::map_parallel(d)) ||
      skipped(p, detail::map_precision_recompute(d)))
    return p;
  detail::map_training(d);
  add_knobs(options, p);
  return p;
}

ClusterSpec plan_cluster(const RunPlan& plan, const std::vector<config::Override>& more) {
  std::vector<config::Override> knobs = plan.overrides;
  knobs.insert(knobs.end(), more.begin(), more.end());
  ClusterSpec c = config::load_cluster(plan.cluster_file, knobs);
  // A knob of the same key comes later, as a later --set would: it wins.
  const auto free = [&](const char* key) {
    return std::none_of(knobs.begin(), knobs.end(), [&](const config::Override& o) { return o.path == key; });
  };
  const ClusterSettings& s = plan.cluster;
  if (c.fabric.kind == FabricKind::GRAPH && s.nodes > 0 && s.nodes != c.nodes && free("cluster.nodes"))
    throw ConfigError(plan.cluster_file.string() + ": a graph fabric attaches its " +
                      std::to_string(c.nodes) + " nodes by name; the run needs " + std::to_string(s.nodes));
  if (s.gpus_per_node && free("cluster.gpus_per_node"))
    c.gpus_per_node = static_cast<int>(*s.gpus_per_node);
  if (s.nodes > 0 && free("cluster.nodes"))
    c.nodes = static_cast<int>(s.nodes);
  if (s.nics_per_node && free("cluster.nics.count"))
    c.nics_per_node = static_cast<int>(*s.nics_per_node);
  if (s.nic_gbps && free("cluster.nics.bandwidth"))
    c.nic.bandwidth = BytesPerSec(*s.nic_gbps * (1e9 / 8)); // Gb/s in bytes per second
  if (s.hbm_capacity && free("cluster.gpu.hbm_capacity"))
    c.gpu.hbm_capacity = *s.hbm_capacity;
  if (s.nvswitch_gbytes_per_s && free("cluster.nvswitch.bandwidth"))
    c.nvswitch.bandwidth = BytesPerSec(*s.nvswitch_gbytes_per_s * 1e9);
  return c;
}

std::vector<config::Override> set_options(const RunPlan& plan) {
  const ClusterSettings& s = plan.cluster;
  std::vector<config::Override> out;
  const auto number = [](const char* format, double v) {
    char text[48];
    std::snprintf(text, sizeof text, format, v);
    return std::string(text);
  };
  if (s.gpus_per_node)
    out.push_back({"cluster.gpus_per_node", std::to_string(*s.gpus_per_node)});
  if (s.nodes > 0)
    out.push_back({"cluster.nodes", std::to_string(s.nodes)});
  if (s.nics_per_node)
    out.push_back({"cluster.nics.count", std::to_string(*s.nics_per_node)});
  if (s.nic_gbps)
    out.push_back({"cluster.nics.bandwidth", number("%gGbps", *s.nic_gbps)});
  if (s.hbm_capacity) {
    const double gib = s.hbm_capacity->value() / GIB;
    out.push_back({"cluster.gpu.hbm_capacity", gib == std::floor(gib)
                                                   ? number("%gGiB", gib)
                                                   : number("%gGB", s.hbm_capacity->value() / 1e9)});
  }
  if (s.nvswitch_gbytes_per_s)
    out.push_back({"cluster.nvswitch.bandwidth", number("%gGBps", *s.nvswitch_gbytes_per_s)});
  out.insert(out.end(), plan.overrides.begin(), plan.overrides.end());
  return out;
}

namespace {

/// A record silent on the ZeRO stage whose layout cannot hold unsharded optimizer states, yet ran:
/// the distributed optimizer (ZeRO-1, Megatron's --use-distributed-optimizer) is the least
/// sharding under which it fits, so the plan takes it and lists why (docs/validation.md).
void take_distributed_optimizer_to_fit(RunPlan& plan, const ClusterSpec& cluster, WorkloadSpec& workload) {
  const ParallelSpec& par = workload.parallel;
  const Bytes capacity = cluster.gpu.hbm_capacity;
  if (par.zero_stage != 0 || par.dp * par.cp < 2 || capacity.value() <= 0)
    return;
  const Bytes unsharded = model::worst_static_peak(workload, cluster.gpu);
  if (unsharded <= capacity)
    return;
  WorkloadSpec sharded = plan.workload;
  sharded.parallel.zero_stage = 1;
  sharded = config::check_layout(cluster, sharded).workload;
  const Bytes with_it = model::worst_static_peak(sharded, cluster.gpu);
  if (with_it > capacity)
    return;
  plan.workload.parallel.zero_stage = 1;
  workload = sharded;
  char text[240];
  std::snprintf(text, sizeof text,
                "zero_stage=1 (not given: without the distributed optimizer the layout needs %.1f GiB of "
                "the GPU's %.1f, with it over dp %d %.1f, and the run ran)",
                unsharded.value() / GIB, capacity.value() / GIB, par.dp * par.cp, with_it.value() / GIB);
  const auto listed = std::find_if(plan.defaults.begin(), plan.defaults.end(),
                                   [](const std::string& d) { return d.starts_with("zero_stage="); });
  if (listed != plan.defaults.end())
    *listed = text;
  else
    plan.defaults.emplace_back(text);
}

} // namespace

double check_plan(RunPlan& plan) {
  if (!plan.skip_reason.empty())
    return 0;
  try {
    const ClusterSpec cluster = plan_cluster(plan);
    config::check_workload(plan.workload);
    WorkloadSpec workload = config::check_layout(cluster, plan.workload).workload;
    if (plan.zero_stage_open)
      take_distributed_optimizer_to_fit(plan, cluster, workload);
    const double peak = peak_flops(cluster.gpu, workload.precision).value() / 1e12;
    if (plan.peak_tflops <= 0) {
      plan.peak_tflops = peak;
      // Sources differ on the peak of an fp8 run's utilisation (fp8's, or bf16's): say which.
      if (plan.metric == Metric::MFU || plan.metric == Metric::HFU) {
        char text[160];
        std::snprintf(text, sizeof text,
                      "peak_tflops=%g (the GPU's %s peak; the record gives no peak_tflops_assumed)", peak,
                      precision_name(workload.precision));
        plan.defaults.emplace_back(text);
      }
    }
    return peak;
  } catch (const ConfigError& e) {
    plan.skip_reason = std::string("not accepted by the loader: ") + e.what();
  } catch (const ModelError& e) {
    plan.skip_reason = std::string("layout rejected: ") + e.what();
  }
  return 0;
}

double predicted_metric(const RunPlan& plan, Seconds step_time, StepFlops flops) {
  const Flops model = flops.model > 0 ? Flops(flops.model) : model_flops(plan.shape);
  switch (plan.metric) {
  case Metric::ITERATION_TIME:
    return step_time.value();
  case Metric::TFLOPS_PER_GPU:
    return tflops_per_gpu(plan.basis == TflopsBasis::MEGATRON_RECOMPUTE ? megatron_recompute_flops(plan.shape)
                                                                        : model,
                          step_time, plan.num_gpus);
  case Metric::MFU:
    return 100.0 * tflops_per_gpu(model, step_time, plan.num_gpus) / plan.peak_tflops;
  case Metric::HFU: {
    const Flops hardware = flops.hardware > 0 ? Flops(flops.hardware) : model;
    return 100.0 * tflops_per_gpu(hardware, step_time, plan.num_gpus) / plan.peak_tflops;
  }
  case Metric::TOKENS_PER_S:
    return plan.shape.global_batch * plan.shape.seq_len / step_time.value() /
           static_cast<double>(plan.num_gpus);
  }
  return 0;
}

} // namespace stepsim::validate
