#include "validate/plan.hpp"

#include "core/error.hpp"
#include "model/transformer.hpp"
#include "validate/rules.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <regex>
#include <sstream>

namespace stepsim::validate {

namespace {

constexpr double GIB = 1024.0 * 1024.0 * 1024.0;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool has(const std::string& text, const char* word) {
  return lower(text).find(word) != std::string::npos;
}

/// The attention head width of a dense record whose parameter count says it is not hidden /
/// heads (Qwen3-32B: 64 heads of 128 on a hidden size of 5120; the record has no head width).
/// 0 when the record gives no params_b, is MoE, or hidden / heads already counts within 3 % of
/// it; otherwise the common width (64 .. 256) whose count is within 1.5 %, if one is.
int64_t head_dim_from_params(const config::MeasuredModel& m, bool swiglu, int64_t ffn) {
  if (!m.params_b || *m.params_b <= 0 || m.moe_experts.value_or(0) > 1 || !m.layers || !m.hidden ||
      !m.heads || !m.vocab || !m.seq_len || *m.heads <= 0)
    return 0;
  ModelSpec s;
  s.layers = *m.layers;
  s.hidden = *m.hidden;
  s.heads = *m.heads;
  s.kv_heads = m.kv_heads.value_or(*m.heads);
  s.ffn_hidden = ffn;
  s.vocab = *m.vocab;
  s.seq_len = *m.seq_len;
  // The generated workload's family defaults (config.cpp): GPT-style biases, tied embeddings
  // and learned positions; Llama-style none of them.
  s.mlp = swiglu ? MlpKind::SWIGLU : MlpKind::GELU;
  s.norm = swiglu ? NormKind::RMSNORM : NormKind::LAYERNORM;
  s.position = swiglu ? PositionEmbedding::ROTARY : PositionEmbedding::LEARNED;
  s.bias = !swiglu;
  s.tied_embeddings = !swiglu;
  const double want = *m.params_b * 1e9;
  const auto off = [&](int64_t d) {
    s.head_dim_set = d;
    return std::abs(model::total_params(s) / want - 1.0);
  };
  if (*m.hidden % *m.heads == 0 && off(0) <= 0.03)
    return 0;
  int64_t best = 0;
  double best_off = 0.015;
  for (const int64_t d : {64, 80, 96, 112, 128, 160, 192, 256})
    if (const double o = off(d); o < best_off) {
      best = d;
      best_off = o;
    }
  return best;
}

/// The micro-batch size of a run: the record's, else global_batch / (dp * grad_accum) when that
/// divides, else 1; `why` says which default it took ("" for the record's own).
int64_t micro_batch_of(const config::MeasuredRun& run, int64_t global_batch, int64_t dp, std::string& why) {
  int64_t micro = run.batch.micro_batch.value_or(0);
  const int64_t accum = run.batch.grad_accum.value_or(0);
  why.clear();
  if (micro == 0 && accum > 0 && dp > 0 && global_batch % (dp * accum) == 0) {
    // Micro-batches per replica = gradient-accumulation steps.
    micro = global_batch / (dp * accum);
    why = "micro_batch=" + std::to_string(micro) + " (global_batch / (dp * grad_accum))";
  } else if (micro == 0) {
    micro = 1;
    why = "micro_batch=1";
  }
  return micro;
}

/// A YAML flow sequence: "[a, b, c]".
template <class T> std::string flow_list(const std::vector<T>& items) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < items.size(); ++i)
    out << (i ? ", " : "") << items[i];
  out << ']';
  return out.str();
}

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

std::optional<NodeNics> parse_inter_node(const std::string& text, int64_t gpus_per_node) {
  // A rate: a number and a unit not followed by a letter; bits unless the B is a capital.
  static const std::regex rate_re(
      R"((\d{1,6}(?:\.\d{1,6})?)\s*(Gb/s|Gbps|Gbit/s|Tb/s|Tbps|GB/s|GBps|Gb)(?![A-Za-z]))",
      std::regex::icase);
  // A count: "8x", "8 x", "8×" before a space or a digit ("8x200").
  static const std::regex count_re(R"((?:^|[^\w.])(\d{1,3})\s*(?:x|X|\xC3\x97)(?=[\s\d]))");
  // The first rate in bits, or in bytes per second ("80GB" is a capacity, not a rate).
  double gbps = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), rate_re); it != std::sregex_iterator();
       ++it) {
    const std::string unit = (*it)[2].str();
    const double value = std::stod((*it)[1].str());
    if (unit[1] == 'b')
      gbps = (unit[0] == 'T' || unit[0] == 't') ? value * 1000 : value;
    else if (unit == "GB/s" || unit == "GBps")
      gbps = value * 8;
    else
      continue;
    break;
  }
  if (!(gbps > 0))
    return std::nullopt;
  NodeNics n;
  std::smatch count;
  if (std::regex_search(text, count, count_re) && std::stoll(count[1].str()) > 0 &&
      std::stoll(count[1].str()) <= 128) {
    n.count = std::stoll(count[1].str());
    n.gbps = gbps;
    return n;
  }
  const std::string t = lower(text);
  const bool per_port = has(t, "per nic") || has(t, "per port") || has(t, "per hca") || has(t, "per gpu");
  n.count = std::max<int64_t>(1, gpus_per_node);
  n.gbps = per_port ? gbps : gbps / static_cast<double>(n.count);
  return n;
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

/// The bundled topology, node shape and typed cluster settings for the record's hardware
/// (rules.cpp's GPU families); a skip reason, or "".
std::string map_hardware(const config::MeasuredRun& run, const PlanOptions& options, RunPlan& p) {
  const int64_t gpus = p.num_gpus;
  p.gpu_kind = gpu_family(run.hardware);
  if (p.gpu_kind.empty())
    return std::string("no bundled topology for GPU '" + run.hardware.gpu + "'");
  // PCIe cards (A100 PCIe, H100 PCIe or NVL) run lower clocks and join by NVLink bridges or PCIe,
  // not an NVSwitch: no bundled topology stands for them.
  const GpuRule& gpu = *gpu_rule(run.hardware.gpu, run.hardware.gpu_mem_gb);
  const bool card = std::any_of(card_rules().begin(), card_rules().end(), [&](const CardRule& c) {
    return (c.family.empty() || c.family == p.gpu_kind) && has_word(lowered(run.hardware.gpu), c.words);
  });
  if (card)
    return std::string("no bundled topology for the PCIe card '" + run.hardware.gpu +
                       "' (the bundled ones are SXM parts on NVSwitch)");
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

RunPlan plan_run(const config::MeasuredRun& run, const PlanOptions& options) {
  RunPlan p;
  p.id = run.id;
  p.num_gpus = run.hardware.num_gpus.value_or(0);
  const auto skip = [&](const std::string& why) {
    p.skip_reason = why;
    return p;
  };
  const auto& m = run.model;
  const auto& par = run.parallelism;
  const auto& f = run.measured;
  // What the rules match on (rules.cpp); the ZeRO stage and precision once mapped.
  RecordFacts facts{.framework = run.framework,
                    .model = m.name,
                    .year = run.year,
                    .zero_stage = 0,
                    .precision = Precision::BF16,
                    .grouped_query = m.kv_heads && *m.kv_heads != m.heads.value_or(0),
                    .sequence_splits_over_tp = false};

  // Layout text first, so that skipped runs still show it.
  const int64_t tp = par.tp.value_or(1);
  const int64_t pp = par.pp.value_or(1);
  const int64_t cp = par.cp.value_or(1);
  const int64_t ep = par.ep.value_or(1);
  const int64_t gpus = p.num_gpus;
  const int64_t dp = (gpus > 0 && gpus % (tp * pp * cp) == 0) ? gpus / (tp * pp * cp) : 0;
  // Expert tensor parallelism: the record's `etp` (an extension of the schema), else 1 (expert
  // groups folded over the TP ranks, Megatron-Core's MoE parallel folding) where the experts of a
  // TP > 1 layout are not split like the dense MLP: ep does not divide dp, or a Megatron Bridge
  // recipe, whose MoE recipes set expert_tensor_parallel_size = 1. 0: not written (etp = tp).
  int64_t etp = par.etp.value_or(0); // the record's own, whatever the layout: the loader judges it
  std::string etp_why;
  if (m.moe_experts.value_or(0) > 1 && tp > 1 && !par.etp) {
    if (dp > 0 && ep > 1 && dp % ep != 0) {
      etp = 1;
      etp_why = "etp=1 (ep " + std::to_string(ep) + " does not divide dp " + std::to_string(dp) +
                ": expert groups folded over the tensor-parallel ranks)";
    } else if (const auto rule = first_rule(Mechanism::EXPERT_TENSOR_PARALLEL, facts)) {
      etp = std::get<int>(rule->value());
      etp_why = rule->listed(facts);
    }
  }
  {
    std::ostringstream l;
    l << "tp" << tp << " pp" << pp;
    if (cp > 1)
      l << " cp" << cp;
    l << " dp" << dp;
    if (ep > 1)
      l << " ep" << ep;
    if (etp > 0 && etp < tp)
      l << " etp" << etp;
    if (par.virtual_pp.value_or(1) > 1)
      l << " vp" << *par.virtual_pp;
    p.layout = l.str();
  }

  // What is compared.
  if (std::string why = compared_figure(f, gpus, p); !why.empty())
    return skip(why);

  // The MLP by model family: gated (SwiGLU) or two GEMMs (GELU, squared ReLU: the same GEMMs);
  // an unknown family with grouped-query attention is taken as gated.
  const Applied mlp_rule = *first_rule(Mechanism::MLP, facts); // the table ends in a catch-all row
  const bool swiglu = std::get<MlpKind>(mlp_rule.value()) == MlpKind::SWIGLU;
  const std::string why = mlp_rule.note(facts); // "llama", "grouped-query attention"
  // A two-GEMM MLP without its width is the GPT convention's 4h.
  std::optional<int64_t> ffn = m.ffn_hidden;
  if (!ffn && !swiglu && m.hidden) {
    ffn = 4 * *m.hidden;
    p.defaults.emplace_back("ffn_hidden=4*hidden (" + why + ")");
  }
  // The global batch in sequences, or in tokens over the sequence length.
  std::optional<int64_t> global_batch = run.batch.global_batch_seqs;
  if (!global_batch && run.batch.global_batch_tokens && m.seq_len && *m.seq_len > 0 &&
      *run.batch.global_batch_tokens % *m.seq_len == 0) {
    global_batch = *run.batch.global_batch_tokens / *m.seq_len;
    p.defaults.emplace_back("global_batch_seqs=" + std::to_string(*global_batch) +
                            " (global_batch_tokens / seq_len)");
  }
  // Required fields.
  std::vector<std::string> missing;
  const auto need = [&](const auto& v, const char* name) {
    if (!v)
      missing.emplace_back(name);
  };
  need(m.layers, "model.layers");
  need(m.hidden, "model.hidden");
  need(m.heads, "model.attn_heads");
  need(ffn, "model.ffn_hidden");
  need(m.vocab, "model.vocab");
  need(m.seq_len, "model.seq_len");
  need(run.hardware.num_gpus, "hardware.num_gpus");
  need(global_batch, "batch.global_batch_seqs (or global_batch_tokens, a multiple of seq_len)");
  if (!missing.empty()) {
    std::string text = "missing ";
    for (const auto& s : missing)
      text += (s == missing.front() ? "" : ", ") + s;
    return skip(text);
  }
  if (gpus <= 0)
    return skip("hardware.num_gpus is 0");

  p.shape = FlopsShape{.global_batch = static_cast<double>(*global_batch),
                       .seq_len = static_cast<double>(*m.seq_len),
                       .layers = static_cast<double>(*m.layers),
                       .hidden = static_cast<double>(*m.hidden),
                       .vocab = static_cast<double>(*m.vocab)};

  if (std::string why = map_hardware(run, options, p); !why.empty())
    return skip(why);

  // Workload.
  std::ostringstream w;
  w << "# generated by stepsim validate from " << run.where << " (run " << run.id << ")\n";
  w << "name: " << run.id << "\n";
  // Layers per model chunk when they do not split evenly: the record's `chunk_layers` (an
  // extension of the schema, e.g. a Megatron pipeline layout); else, when layers + 2 do, the
  // embedding and the loss counted as one layer each (DeepSpeed's `type:transformer|embedding`
  // partitioning of BLOOM; Megatron-Core's account_for_embedding/loss_in_pipeline_split, as NeMo
  // splits Llama 3.1 405B's 126 layers over 64 chunks): the first and last chunks one layer
  // short; else padded to a multiple.
  // A record that names the interleaved schedule without its virtual stages runs the smallest
  // interleaving, two model chunks per GPU, where the layers and micro-batches allow it (Megatron's
  // rule: micro-batches per pipeline a multiple of pp); else plain 1F1B. Either way it is listed.
  // "1F1B / interleaved not stated" names no schedule.
  const std::string sched = lower(par.schedule);
  const bool interleaved_named =
      has(sched, "interleav") && !has(sched, "not stated") && !has(sched, "/") && !has(sched, " or ");
  int64_t vp = std::max<int64_t>(1, par.virtual_pp.value_or(1));
  if (pp > 1 && vp == 1 && interleaved_named) {
    std::string ignored;
    const int64_t per_step = micro_batch_of(run, *global_batch, dp, ignored) * dp;
    const int64_t m_count = per_step > 0 ? *global_batch / per_step : 0;
    const bool fits = m_count > 0 && m_count % pp == 0 && par.chunk_layers.empty() &&
                      (*m.layers % (2 * pp) == 0 || (*m.layers + 2) % (2 * pp) == 0);
    if (fits) {
      vp = 2;
      p.layout += " vp2";
    }
    p.defaults.emplace_back(fits ? "vp=2 (the record's schedule '" + par.schedule + "' gives no virtual_pp)"
                                 : "schedule=1f1b (the record's '" + par.schedule +
                                       "' gives no virtual_pp, and two model chunks per GPU do not fit its "
                                       "layers or micro-batches)");
  }
  int64_t layers = *m.layers;
  const int64_t chunks = pp * vp;
  std::vector<int64_t> chunk_layers = par.chunk_layers;
  if (chunk_layers.empty() && chunks > 1 && layers % chunks != 0) {
    const int64_t n = (layers + 2) / chunks;
    if ((layers + 2) % chunks == 0 && n >= 2) {
      chunk_layers.assign(static_cast<size_t>(chunks), n);
      chunk_layers.front() = n - 1;
      chunk_layers.back() = n - 1;
      p.defaults.emplace_back("chunk_layers " + std::to_string(n - 1) + "," + std::to_string(n) + "...," +
                              std::to_string(n - 1) + " (the embedding and the loss counted as layers)");
    } else {
      layers = (layers + chunks - 1) / chunks * chunks;
      p.defaults.emplace_back("layers padded " + std::to_string(*m.layers) + "->" + std::to_string(layers) +
                              (chunks > pp ? " (equal model chunks)" : " (equal pipeline stages)"));
    }
  }
  w << "model:\n";
  w << "  layers: " << layers << "\n  hidden: " << *m.hidden << "\n  heads: " << *m.heads << "\n";
  if (m.sliding_window)
    w << "  sliding_window: " << *m.sliding_window << "\n";
  if (m.full_attention_every)
    w << "  full_attention_every: " << *m.full_attention_every << "\n";
  if (m.mla) {
    w << "  mla: {q_lora_rank: " << m.mla->q_lora_rank << ", kv_lora_rank: " << m.mla->kv_lora_rank
      << ", qk_nope_head_dim: " << m.mla->qk_nope_head_dim
      << ", qk_rope_head_dim: " << m.mla->qk_rope_head_dim << ", v_head_dim: " << m.mla->v_head_dim << "}\n";
  } else if (m.head_dim) {
    w << "  head_dim: " << *m.head_dim << "\n";
  } else if (const int64_t d = head_dim_from_params(m, swiglu, *ffn); d > 0) {
    w << "  head_dim: " << d << "\n";
    char note[160];
    std::snprintf(note, sizeof note,
                  "head_dim=%lld (hidden/heads does not give params_b %g B; this width does)",
                  static_cast<long long>(d), *m.params_b);
    p.defaults.emplace_back(note);
  }
  if (m.kv_heads)
    w << "  kv_heads: " << *m.kv_heads << "\n";
  else
    p.defaults.emplace_back("kv_heads=heads");
  w << "  ffn_hidden: " << *ffn << "\n  vocab: " << *m.vocab << "\n  seq_len: " << *m.seq_len << "\n";
  w << "  mlp: " << (swiglu ? "swiglu" : "gelu") << "\n";
  p.defaults.push_back(mlp_rule.listed(facts));
  // Families published and trained without dropout (their configurations set the hidden and
  // attention dropout to 0): no dropout masks among the stored activations (docs/model.md).
  if (const auto rule = first_rule(Mechanism::DROPOUT, facts)) {
    w << "  dropout: " << to_string(rule->value()) << "\n";
    p.defaults.push_back(rule->listed(facts));
  }
  if (m.moe_experts.value_or(0) > 1) {
    p.moe = true;
    w << "  moe:\n    experts: " << *m.moe_experts << "\n";
    if (m.moe_topk)
      w << "    top_k: " << *m.moe_topk << "\n";
    if (m.moe_shared_experts)
      w << "    shared_experts: " << *m.moe_shared_experts << "\n";
    if (m.moe_ffn_hidden)
      w << "    expert_ffn_hidden: " << *m.moe_ffn_hidden << "\n";
    if (m.moe_first_dense)
      w << "    first_dense_layers: " << *m.moe_first_dense << "\n";
    if (m.moe_groups && m.moe_group_topk)
      w << "    routing: {groups: " << *m.moe_groups << ", group_top_k: " << *m.moe_group_topk << "}\n";
  }
  if (m.mtp_layers)
    w << "  mtp_layers: " << *m.mtp_layers << "\n";
  std::string micro_default;
  const int64_t micro = micro_batch_of(run, *global_batch, dp, micro_default);
  if (!micro_default.empty())
    p.defaults.push_back(micro_default);
  w << "batch:\n  global_batch: " << *global_batch << "\n  micro_batch: " << micro << "\n";
  w << "parallel:\n  tp: " << tp << "\n  pp: " << pp << "\n";
  if (!par.tp)
    p.defaults.emplace_back("tp=1");
  if (!par.pp)
    p.defaults.emplace_back("pp=1");
  if (cp > 1)
    w << "  cp: " << cp << "\n";
  if (ep > 1)
    w << "  ep: " << ep << "\n";
  // DualPipe (DeepSeek-V3) overlaps one micro-batch's forward with another's backward, all-to-alls
  // included: a different step, not a 1F1B variant (docs/schedules.md).
  if (pp > 1 && (has(sched, "dualpipe") || has(sched, "dual pipe")))
    return skip("schedule '" + par.schedule +
                "' is not modelled (bidirectional pipeline with forward/backward overlap)");
  if (vp > 1) {
    w << "  schedule: interleaved\n";
    if (!sched.empty() && !has(sched, "interleav") && !has(sched, "1f1b"))
      p.defaults.emplace_back("schedule=interleaved (virtual_pp " + std::to_string(vp) + "; the record's '" +
                              par.schedule + "' runs one chunk per stage)");
  } else if (has(sched, "zb-h2")) {
    w << "  schedule: zb-h2\n";
  } else if (has(sched, "zb-h1")) {
    w << "  schedule: zb-h1\n";
  } else if (has(sched, "gpipe")) {
    w << "  schedule: gpipe\n";
  } else {
    w << "  schedule: 1f1b\n";
    if (!has(sched, "1f1b") && !interleaved_named)
      p.defaults.emplace_back("schedule=1f1b");
  }
  if (vp > 1)
    w << "  vp: " << vp << "\n";
  if (!chunk_layers.empty())
    w << "  chunk_layers: " << flow_list(chunk_layers) << "\n";
  // A record that leaves `sp` empty gets its stack's (rules.cpp, docs/stacks.md: NeMo's and
  // Megatron-Bridge's recipes set sequence_parallel with tp > 1, torchtitan's TP plan too; not
  // Megatron-LM, nor DeepSpeed's stacks, whose "sequence parallelism", Ulysses, is another
  // scheme), or for a stack no row recognises the era's (from 2023 on); only where the sequence
  // splits evenly over the TP ranks.
  facts.sequence_splits_over_tp = *m.seq_len % tp == 0;
  const auto sp_rule = tp > 1 && !par.sp ? first_rule(Mechanism::SEQUENCE_PARALLEL, facts) : std::nullopt;
  const bool sp = tp > 1 && (par.sp ? *par.sp > 1 : sp_rule && std::get<bool>(sp_rule->value()));
  if (sp)
    w << "  sp: true\n";
  else if (tp > 1 && par.sp)
    w << "  sp: false\n"; // the record's, over its stack's preset
  if (sp && sp_rule)
    p.defaults.push_back(sp_rule->listed(facts));
  if (etp > 0) {
    w << "  etp: " << etp << "\n";
    if (!etp_why.empty())
      p.defaults.emplace_back(etp_why);
  }
  if (par.ep_overlap.value_or(false))
    w << "  ep_overlap: true\n"; // the record's (an extension of the schema)
  if (!par.ep_dispatch.empty())
    w << "  ep_dispatch: " << par.ep_dispatch << "\n"; // the record's (an extension of the schema)
  // Megatron-LM (2021-22) splits pipeline messages across the TP ranks and all-gathers them on
  // the receiving stage (Narayanan et al. 2021, sec. 4.1; on by default there). DeepSpeed's
  // pipeline engine sends whole activations: Megatron-DeepSpeed, and Megatron-LM's layers under
  // DeepSpeed's pipeline ("DeepSpeed + Megatron-LM", MT-NLG).
  if (const auto rule =
          pp > 1 && tp > 1 && !sp ? first_rule(Mechanism::PP_SCATTER_GATHER, facts) : std::nullopt) {
    w << "  pp_scatter_gather: " << to_string(rule->value()) << "\n";
    p.defaults.push_back(rule->listed(facts));
  }
  // The backward's TP all-reduce (with SP reduce-scatter) of a column-parallel linear's input
  // gradient runs beside its weight-gradient GEMM in Megatron-LM from 2022 (its asynchronous TP
  // all-reduce, then sequence parallelism's overlapped collectives), Megatron-Core, NeMo and
  // Transformer Engine; Megatron-LM of 2021 and the stacks built on it under DeepSpeed
  // (Megatron-DeepSpeed, "DeepSpeed + Megatron-LM") issue it after the block's backward.
  if (const auto rule = tp > 1 ? first_rule(Mechanism::TP_GRAD_OVERLAP, facts) : std::nullopt) {
    w << "  tp_grad_overlap: " << to_string(rule->value()) << "\n";
    p.defaults.push_back(rule->listed(facts));
  }
  int zero = 0;
  const std::string z = lower(par.zero_stage);
  if (has(z, "shard_grad_op")) {
    zero = 2; // FSDP sharding gradients and optimizer states only
  } else if (par.fsdp.value_or(false) || has(z, "fsdp") || has(z, "full_shard") || has(z, "hybrid_shard")) {
    zero = 3;
  } else if (!z.empty() && std::isdigit(static_cast<unsigned char>(z[0])) != 0) {
    zero = z[0] - '0';
  } else if (z.empty()) {
    const Applied rule = *first_rule(Mechanism::ZERO_STAGE, facts); // the table ends in a catch-all row
    zero = std::get<int>(rule.value());
    p.defaults.push_back(rule.listed(facts));
  } else {
    return skip("unrecognised zero_stage '" + par.zero_stage + "'");
  }
  if (zero > 3)
    return skip("zero_stage " + std::to_string(zero) + " does not exist");
  w << "  zero_stage: " << zero << "\n";
  facts.zero_stage = zero;
  if (dp == 0)
    return skip("num_gpus " + std::to_string(gpus) +
                " is not divisible by tp*pp*cp = " + std::to_string(tp * pp * cp));
  if (par.dp && *par.dp != dp)
    p.defaults.emplace_back("dp=" + std::to_string(dp) + " (derived; the record says " +
                            std::to_string(*par.dp) + ")");

  // fp8 first: fp8 records often also name their 16-bit precision ("fp8, bf16 master weights").
  // PyTorch's dtype names count too (torch.bfloat16, float8_e4m3fn, torch.float16 / half).
  std::string precision = "bf16";
  const std::string& pr = run.precision;
  if (has(pr, "fp8") || has(pr, "float8") || has(pr, "e4m3") || has(pr, "e5m2"))
    precision = "fp8";
  else if (has(pr, "bf16") || has(pr, "bfloat16"))
    precision = "bf16";
  else if (has(pr, "fp16") || has(pr, "float16") || has(pr, "half"))
    precision = "fp16";
  else if (!run.precision.empty() && lower(run.precision) != "null")
    return skip("precision '" + run.precision + "' is not modelled (bf16, fp16 or fp8 training)");
  else
    p.defaults.emplace_back("precision=bf16");
  w << "precision: " << precision << "\n";
  facts.precision =
      precision == "fp8" ? Precision::FP8 : (precision == "fp16" ? Precision::FP16 : Precision::BF16);

  const std::string rc = lower(run.recompute);
  std::string recompute;
  if (rc.empty() && !run.recompute_modules.empty()) {
    recompute = "selective"; // the modules a selective recomputation repeats
  } else if (rc.empty()) {
    recompute = "none";
    p.defaults.emplace_back("recompute=none");
  } else if (has(rc, "selective")) {
    recompute = "selective";
  } else if (has(rc, "full")) {
    recompute = "full";
  } else if (rc == "none" || rc == "no" || rc == "false" || has(rc, "no recompute") || has(rc, "disabled")) {
    recompute = "none";
  } else if (rc == "true" || rc == "yes" || has(rc, "checkpoint") || has(rc, "recompute")) {
    // Activation checkpointing named without a kind checkpoints whole layers (Megatron-LM's
    // --checkpoint-activations, Hugging Face's gradient_checkpointing): full recomputation.
    recompute = "full";
    p.defaults.emplace_back("recompute=full (from '" + run.recompute + "')");
  } else {
    return skip("unrecognised recompute '" + run.recompute + "'");
  }
  // Framework defaults (rules.cpp): fused attention, then the recipes' memory and overlap settings.
  const Applied flash = *first_rule(Mechanism::FLASH_ATTENTION, facts); // the table ends in a catch-all row
  p.defaults.push_back(flash.listed(facts));
  w << "training:\n  recompute: " << recompute << "\n  flash_attention: " << to_string(flash.value()) << "\n";
  // The stack the framework text names: a rerun of the workload gets its mechanisms from the
  // preset; the keys written here are the record's and the mapping's, and win over it.
  if (const auto stack = recognise_stack(facts))
    w << "  stack: {name: " << stack->preset->name << ", version: \"" << stack->version->version << "\"}\n";
  if (!run.recompute_modules.empty())
    w << "  recompute_modules: " << flow_list(run.recompute_modules) << "\n";
  // A record's own fp8_params wins over its framework's.
  bool fp8_params = run.fp8_params.value_or(false);
  if (const auto rule = !run.fp8_params ? first_rule(Mechanism::FP8_PARAMS, facts) : std::nullopt) {
    fp8_params = std::get<bool>(rule->value());
    p.defaults.push_back(rule->listed(facts));
  }
  if (fp8_params || run.fp8_params)
    w << "  fp8_params: " << (fp8_params ? "true" : "false") << "\n";
  if (const auto rule = dp > 1 ? first_rule(Mechanism::OVERLAP_PARAM_GATHER, facts) : std::nullopt) {
    w << "  overlap_param_gather: " << to_string(rule->value()) << "\n";
    p.defaults.push_back(rule->listed(facts));
  }
  if (const auto rule = first_rule(Mechanism::GRAD_REDUCE_IN_FP32, facts)) {
    w << "  grad_reduce_in_fp32: " << to_string(rule->value()) << "\n";
    p.defaults.push_back(rule->listed(facts));
  }
  if (const auto rule = first_rule(Mechanism::ZERO3_FETCH, facts)) {
    w << "  zero3_fetch: " << to_string(rule->value()) << "\n";
    p.defaults.push_back(rule->listed(facts));
  }
  if (run.offload_layers.value_or(0) > 0)
    w << "  offload_layers: " << *run.offload_layers << "\n";
  if (run.recompute_layers.value_or(0) > 0)
    w << "  recompute_layers: " << *run.recompute_layers << "\n";
  if (run.optimizer_bytes_per_param)
    w << "  optimizer_bytes_per_param: " << *run.optimizer_bytes_per_param << "\n";
  p.workload_yaml = w.str();

  // Calibration knobs, then the caller's trial values.
  if (options.calibration) {
    const std::filesystem::path cal =
        options.topologies / "calibration" / (calibration_kind(p.gpu_kind) + ".yaml");
    if (std::filesystem::exists(cal)) {
      const config::CalibrationFile c = config::load_calibration(cal);
      p.overrides.insert(p.overrides.end(), c.knobs.begin(), c.knobs.end());
    }
  }
  p.overrides.insert(p.overrides.end(), options.extra.begin(), options.extra.end());
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

double check_plan(RunPlan& plan, const std::filesystem::path& workload_file) {
  if (!plan.skip_reason.empty())
    return 0;
  try {
    const ClusterSpec cluster = plan_cluster(plan);
    WorkloadSpec workload = config::load_workload(workload_file, plan.overrides);
    workload = config::check_layout(cluster, workload).workload;
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
