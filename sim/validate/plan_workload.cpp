// plan_run's steps from a record to its WorkloadSpec (plan_steps.hpp; docs/validation.md,
// "Mapping"). The spec is built as the loader would read the equivalent file: the loader's
// defaults for what is not set (spec.hpp's initialisers, model.mlp's family defaults).

#include "config/config.hpp"
#include "model/transformer.hpp"
#include "validate/plan_steps.hpp"
#include "validate/record_vocabulary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace stepsim::validate::detail {

namespace {

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
  // The workload's family defaults: GPT-style biases, tied embeddings and learned positions;
  // Llama-style none of them.
  config::set_mlp(s, swiglu ? MlpKind::SWIGLU : MlpKind::GELU);
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

} // namespace

RecordFacts initial_facts(const config::MeasuredRun& run) {
  const auto& m = run.model;
  return RecordFacts{.framework = run.framework,
                     .model = m.name,
                     .year = run.year,
                     .zero_stage = 0,
                     .precision = Precision::BF16,
                     .grouped_query = m.kv_heads && *m.kv_heads != m.heads.value_or(0),
                     .sequence_splits_over_tp = false};
}

void map_layout(Draft& d) {
  const auto& par = d.run.parallelism;
  d.tp = par.tp.value_or(1);
  d.pp = par.pp.value_or(1);
  d.cp = par.cp.value_or(1);
  d.ep = par.ep.value_or(1);
  d.gpus = d.plan.num_gpus;
  const int64_t model_parallel = d.tp * d.pp * d.cp;
  d.dp = (d.gpus > 0 && d.gpus % model_parallel == 0) ? d.gpus / model_parallel : 0;
  // Expert tensor parallelism: the record's `etp` (an extension of the schema), else 1 (expert
  // groups folded over the TP ranks, Megatron-Core's MoE parallel folding) where the experts of a
  // TP > 1 layout are not split like the dense MLP: ep does not divide dp, or a Megatron Bridge
  // recipe, whose MoE recipes set expert_tensor_parallel_size = 1. 0: not written (etp = tp).
  d.etp = par.etp.value_or(0); // the record's own, whatever the layout: the loader judges it
  if (d.run.model.moe_experts.value_or(0) > 1 && d.tp > 1 && !par.etp) {
    if (d.dp > 0 && d.ep > 1 && d.dp % d.ep != 0) {
      d.etp = 1;
      d.etp_why = "etp=1 (ep " + std::to_string(d.ep) + " does not divide dp " + std::to_string(d.dp) +
                  ": expert groups folded over the tensor-parallel ranks)";
    } else {
      const auto rule = first_rule(Mechanism::EXPERT_TENSOR_PARALLEL, d.facts);
      if (rule) {
        d.etp = std::get<int>(rule->value());
        d.etp_why = rule->listed(d.facts);
      }
    }
  }
  std::string l = "tp" + std::to_string(d.tp) + " pp" + std::to_string(d.pp);
  if (d.cp > 1)
    l += " cp" + std::to_string(d.cp);
  l += " dp" + std::to_string(d.dp);
  if (d.ep > 1)
    l += " ep" + std::to_string(d.ep);
  if (d.etp > 0 && d.etp < d.tp)
    l += " etp" + std::to_string(d.etp);
  if (par.virtual_pp.value_or(1) > 1)
    l += " vp" + std::to_string(*par.virtual_pp);
  d.plan.layout = l;
}

std::string map_model_family(Draft& d) {
  const auto& m = d.run.model;
  RunPlan& p = d.plan;
  // The MLP by model family: gated (SwiGLU) or two GEMMs (GELU, squared ReLU: the same GEMMs);
  // an unknown family with grouped-query attention is taken as gated.
  d.mlp = *first_rule(Mechanism::MLP, d.facts); // the table ends in a catch-all row
  d.swiglu = std::get<MlpKind>(d.mlp->value()) == MlpKind::SWIGLU;
  // A two-GEMM MLP without its width is the GPT convention's 4h.
  std::optional<int64_t> ffn = m.ffn_hidden;
  if (!ffn && !d.swiglu && m.hidden) {
    ffn = 4 * *m.hidden;
    p.defaults.emplace_back("ffn_hidden=4*hidden (" + d.mlp->note(d.facts) + ")"); // "llama", ...
  }
  // The global batch in sequences, or in tokens over the sequence length.
  std::optional<int64_t> global_batch = d.run.batch.global_batch_seqs;
  if (!global_batch && d.run.batch.global_batch_tokens && m.seq_len && *m.seq_len > 0 &&
      *d.run.batch.global_batch_tokens % *m.seq_len == 0) {
    global_batch = *d.run.batch.global_batch_tokens / *m.seq_len;
    p.defaults.emplace_back("global_batch_seqs=" + std::to_string(*global_batch) +
                            " (global_batch_tokens / seq_len)");
  }
  // Required fields.
  std::string missing;
  const auto need = [&missing](bool given, const char* name) {
    if (!given)
      missing += (missing.empty() ? "missing " : ", ") + std::string(name);
  };
  need(m.layers.has_value(), "model.layers");
  need(m.hidden.has_value(), "model.hidden");
  need(m.heads.has_value(), "model.attn_heads");
  need(ffn.has_value(), "model.ffn_hidden");
  need(m.vocab.has_value(), "model.vocab");
  need(m.seq_len.has_value(), "model.seq_len");
  need(d.run.hardware.num_gpus.has_value(), "hardware.num_gpus");
  need(global_batch.has_value(), "batch.global_batch_seqs (or global_batch_tokens, a multiple of seq_len)");
  if (!missing.empty())
    return missing;
  if (d.gpus <= 0)
    return "hardware.num_gpus is 0";
  d.ffn = *ffn;
  d.global_batch = *global_batch;
  p.shape = FlopsShape{.global_batch = static_cast<double>(*global_batch),
                       .seq_len = static_cast<double>(*m.seq_len),
                       .layers = static_cast<double>(*m.layers),
                       .hidden = static_cast<double>(*m.hidden),
                       .vocab = static_cast<double>(*m.vocab)};
  return "";
}

namespace {

/// Layers per model chunk of the interleaved layouts the bundled sources publish with their virtual
/// stages: the median of 30 layouts, each counted once per source table (9 of one layer per chunk,
/// 12 of about two, 3 of three, 5 of about four, one of eight; docs/validation.md, "Mapping a run").
constexpr int64_t PUBLISHED_LAYERS_PER_CHUNK = 2;

/// The model chunks per GPU (at least 2) whose chunks come closest to PUBLISHED_LAYERS_PER_CHUNK
/// layers, among those the layers split into (evenly, or with the embedding and the loss counted as
/// layers, map_chunks below); the fewer chunks on a tie; 0 when none does.
int64_t interleaving_of(int64_t layers, int64_t pp) {
  int64_t best = 0;
  double best_gap = 0;
  for (int64_t v = 2; pp * v <= layers + 2; ++v) {
    const int64_t chunks = pp * v;
    double per_chunk = 0;
    if (layers % chunks == 0)
      per_chunk = static_cast<double>(layers / chunks);
    else if ((layers + 2) % chunks == 0 && (layers + 2) / chunks >= 2)
      per_chunk = static_cast<double>(layers + 2) / static_cast<double>(chunks);
    else
      continue;
    const double gap = std::abs(per_chunk - static_cast<double>(PUBLISHED_LAYERS_PER_CHUNK));
    if (best == 0 || gap < best_gap) {
      best = v;
      best_gap = gap;
    }
  }
  return best;
}

} // namespace

void map_chunks(Draft& d) {
  const auto& m = d.run.model;
  const auto& par = d.run.parallelism;
  RunPlan& p = d.plan;
  // A record that names the interleaved schedule without its virtual stages runs model chunks of
  // about two layers (the embedding and the loss counted as layers where that splits them), the
  // median depth of the interleaved layouts the bundled sources publish with their virtual stages
  // (docs/validation.md, "Mapping a run"), where the layers and micro-batches allow it (Megatron's
  // rule: micro-batches per pipeline a multiple of pp); else plain 1F1B. Either way it is listed.
  // "1F1B / interleaved not stated" names no schedule.
  d.vp = std::max<int64_t>(1, par.virtual_pp.value_or(1));
  if (d.pp > 1 && d.vp == 1 && parse_schedule(par.schedule).interleaved) {
    std::string ignored;
    const int64_t per_step = micro_batch_of(d.run, d.global_batch, d.dp, ignored) * d.dp;
    const int64_t m_count = per_step > 0 ? d.global_batch / per_step : 0;
    const int64_t vp =
        m_count > 0 && m_count % d.pp == 0 && par.chunk_layers.empty() ? interleaving_of(*m.layers, d.pp) : 0;
    if (vp > 1) {
      d.vp = vp;
      p.layout += " vp" + std::to_string(vp);
    }
    p.defaults.emplace_back(vp > 1 ? "vp=" + std::to_string(vp) + " (chunks of about " +
                                         std::to_string(PUBLISHED_LAYERS_PER_CHUNK) +
                                         " layers; the record's schedule '" + par.schedule +
                                         "' gives no virtual_pp)"
                                   : "schedule=1f1b (the record's '" + par.schedule +
                                         "' gives no virtual_pp, and no interleaving fits its layers or "
                                         "micro-batches)");
  }
  // Layers per model chunk when they do not split evenly: the record's `chunk_layers` (an
  // extension of the schema, e.g. a Megatron pipeline layout); else, when layers + 2 do, the
  // embedding and the loss counted as one layer each (DeepSpeed's `type:transformer|embedding`
  // partitioning of BLOOM; Megatron-Core's account_for_embedding/loss_in_pipeline_split, as NeMo
  // splits Llama 3.1 405B's 126 layers over 64 chunks): the first and last chunks one layer
  // short; else padded to a multiple.
  int64_t layers = *m.layers;
  const int64_t chunks = d.pp * d.vp;
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
                              (chunks > d.pp ? " (equal model chunks)" : " (equal pipeline stages)"));
    }
  }
  d.workload().model.layers = layers;
  d.workload().parallel.chunk_layers = chunk_layers;
}

void map_model_shape(Draft& d) {
  const auto& m = d.run.model;
  RunPlan& p = d.plan;
  ModelSpec& s = d.workload().model;
  s.name = d.run.id;
  s.hidden = *m.hidden;
  s.heads = *m.heads;
  s.sliding_window = m.sliding_window.value_or(0);
  s.full_attention_every = m.full_attention_every.value_or(0);
  if (m.mla) {
    s.mla = MlaSpec{.q_lora_rank = m.mla->q_lora_rank,
                    .kv_lora_rank = m.mla->kv_lora_rank,
                    .qk_nope_head_dim = m.mla->qk_nope_head_dim,
                    .qk_rope_head_dim = m.mla->qk_rope_head_dim,
                    .v_head_dim = m.mla->v_head_dim};
  } else if (m.head_dim) {
    s.head_dim_set = *m.head_dim;
  } else if (const int64_t dim = head_dim_from_params(m, d.swiglu, d.ffn); dim > 0) {
    s.head_dim_set = dim;
    char note[160];
    std::snprintf(note, sizeof note,
                  "head_dim=%lld (hidden/heads does not give params_b %g B; this width does)",
                  static_cast<long long>(dim), *m.params_b);
    p.defaults.emplace_back(note);
  }
  s.kv_heads = m.kv_heads.value_or(*m.heads);
  if (!m.kv_heads)
    p.defaults.emplace_back("kv_heads=heads");
  s.ffn_hidden = d.ffn;
  s.vocab = *m.vocab;
  s.seq_len = *m.seq_len;
  config::set_mlp(s, d.swiglu ? MlpKind::SWIGLU : MlpKind::GELU);
  p.defaults.push_back(d.mlp->listed(d.facts));
  // Families published and trained without dropout (their configurations set the hidden and
  // attention dropout to 0): no dropout masks among the stored activations (docs/model.md).
  const auto dropout = first_rule(Mechanism::DROPOUT, d.facts);
  if (dropout) {
    s.dropout = std::get<bool>(dropout->value());
    p.defaults.push_back(dropout->listed(d.facts));
  }
  if (m.moe_experts.value_or(0) > 1) {
    p.moe = true;
    s.moe.experts = *m.moe_experts;
    s.moe.top_k = m.moe_topk.value_or(s.moe.top_k);
    s.moe.shared_experts = m.moe_shared_experts.value_or(0);
    s.moe.expert_ffn_hidden = m.moe_ffn_hidden.value_or(s.ffn_hidden); // the loader's default
    s.moe.first_dense_layers = m.moe_first_dense.value_or(0);
    if (m.moe_groups && m.moe_group_topk) {
      s.moe.routing.groups = *m.moe_groups;
      s.moe.routing.group_top_k = *m.moe_group_topk;
    }
  }
  s.mtp_layers = m.mtp_layers.value_or(0);
}

void map_batch(Draft& d) {
  RunPlan& p = d.plan;
  std::string micro_default;
  const int64_t micro = micro_batch_of(d.run, d.global_batch, d.dp, micro_default);
  if (!micro_default.empty())
    p.defaults.push_back(micro_default);
  WorkloadSpec& w = d.workload();
  w.batch.global_batch = d.global_batch;
  w.batch.micro_batch = micro;
  w.parallel.tp = static_cast<int>(d.tp);
  w.parallel.pp = static_cast<int>(d.pp);
  if (d.cp > 1)
    w.parallel.cp = static_cast<int>(d.cp);
  if (d.ep > 1)
    w.parallel.ep = static_cast<int>(d.ep);
  if (!d.run.parallelism.tp)
    p.defaults.emplace_back("tp=1");
  if (!d.run.parallelism.pp)
    p.defaults.emplace_back("pp=1");
}

std::string map_schedule(Draft& d) {
  const std::string& text = d.run.parallelism.schedule;
  const ScheduleText named = parse_schedule(text);
  ParallelSpec& par = d.workload().parallel;
  // DualPipe (DeepSeek-V3) overlaps one micro-batch's forward with another's backward, all-to-alls
  // included: a different step, not a 1F1B variant (docs/schedules.md).
  if (d.pp > 1 && named.bidirectional)
    return "schedule '" + text + "' is not modelled (bidirectional pipeline with forward/backward overlap)";
  if (d.vp > 1) {
    par.schedule = Schedule::INTERLEAVED;
    par.vp = static_cast<int>(d.vp);
    if (!text.empty() && !named.one_f_one_b_family)
      d.plan.defaults.emplace_back("schedule=interleaved (virtual_pp " + std::to_string(d.vp) +
                                   "; the record's '" + text + "' runs one chunk per stage)");
  } else if (named.named && *named.named != Schedule::ONE_F_ONE_B) {
    par.schedule = *named.named; // zb-h2, zb-h1 or gpipe
  } else {
    par.schedule = Schedule::ONE_F_ONE_B;
    if (!named.named && !named.interleaved)
      d.plan.defaults.emplace_back("schedule=1f1b");
  }
  return "";
}

std::string map_parallel(Draft& d) {
  const auto& par = d.run.parallelism;
  RunPlan& p = d.plan;
  ParallelSpec& out = d.workload().parallel;
  // NeMo's recipes turn sequence parallelism on whenever tp > 1 (`sequence_parallel: true`, e.g.
  // the GPT-3 175B recipe's configuration); the records leave it empty. From 2023 on it goes with
  // tensor parallelism in every stack that has it (Megatron-Core, NeMo, torchtitan's TP plan,
  // Llama 3's 4D parallelism): a record of a source from then that leaves `sp` empty gets it too,
  // unless its framework is DeepSpeed's, whose "sequence parallelism" (Ulysses) is another scheme
  // and which never had Megatron's; and where the sequence splits evenly over the TP ranks.
  d.facts.sequence_splits_over_tp = *d.run.model.seq_len % d.tp == 0;
  const auto sp_rule = d.tp > 1 && !par.sp ? first_rule(Mechanism::SEQUENCE_PARALLEL, d.facts) : std::nullopt;
  d.sp = d.tp > 1 && (par.sp ? *par.sp > 1 : sp_rule && std::get<bool>(sp_rule->value()));
  out.sp = d.sp;
  if (d.sp && sp_rule)
    p.defaults.push_back(sp_rule->listed(d.facts));
  out.etp = static_cast<int>(d.etp);
  if (d.etp > 0 && !d.etp_why.empty())
    p.defaults.emplace_back(d.etp_why);
  out.ep_overlap = par.ep_overlap.value_or(false); // the record's (an extension of the schema)
  if (par.ep_dispatch == "deduplicated") // the record's, all_to_all or deduplicated (runs_config.cpp)
    out.ep_dispatch = EpDispatch::DEDUPLICATED;
  // Megatron-LM (2021-22) splits pipeline messages across the TP ranks and all-gathers them on
  // the receiving stage (Narayanan et al. 2021, sec. 4.1; on by default there). DeepSpeed's
  // pipeline engine sends whole activations: Megatron-DeepSpeed, and Megatron-LM's layers under
  // DeepSpeed's pipeline ("DeepSpeed + Megatron-LM", MT-NLG).
  const auto scatter =
      d.pp > 1 && d.tp > 1 && !d.sp ? first_rule(Mechanism::PP_SCATTER_GATHER, d.facts) : std::nullopt;
  if (scatter) {
    out.pp_scatter_gather = std::get<bool>(scatter->value());
    p.defaults.push_back(scatter->listed(d.facts));
  }
  // The backward's TP all-reduce (with SP reduce-scatter) of a column-parallel linear's input
  // gradient runs beside its weight-gradient GEMM in Megatron-LM from 2022 (its asynchronous TP
  // all-reduce, then sequence parallelism's overlapped collectives), Megatron-Core, NeMo and
  // Transformer Engine; Megatron-LM of 2021 and the stacks built on it under DeepSpeed
  // (Megatron-DeepSpeed, "DeepSpeed + Megatron-LM") issue it after the block's backward.
  const auto overlap = d.tp > 1 ? first_rule(Mechanism::TP_GRAD_OVERLAP, d.facts) : std::nullopt;
  if (overlap) {
    out.tp_grad_overlap = std::get<bool>(overlap->value());
    p.defaults.push_back(overlap->listed(d.facts));
  }
  const Parsed<int> zero = parse_zero_stage(par.zero_stage, par.fsdp.value_or(false));
  if (!zero.error.empty())
    return zero.error;
  if (zero.value) {
    out.zero_stage = *zero.value;
  } else {
    const Applied rule = *first_rule(Mechanism::ZERO_STAGE, d.facts); // the table ends in a catch-all row
    out.zero_stage = std::get<int>(rule.value());
    p.defaults.push_back(rule.listed(d.facts));
    p.zero_stage_open = out.zero_stage == 0;
  }
  // FSDP's SHARD_GRAD_OP keeps the parameters gathered from the forward to the backward and
  // reshards them after it: ZeRO-3 with reshard_after_forward false, where that is modelled (one
  // pipeline stage, a dense model); elsewhere ZeRO-2, the stage whose step holds them whole.
  if (out.zero_stage == 2 && has_word(lowered(par.zero_stage), "shard_grad_op") && d.pp == 1 &&
      !d.workload().model.moe.enabled()) {
    out.zero_stage = 3;
    d.workload().training.reshard_after_forward = false;
    p.defaults.emplace_back("zero_stage=3, reshard_after_forward=false (FSDP's SHARD_GRAD_OP: parameters "
                            "sharded between steps, kept gathered from the forward to the backward)");
  }
  // FSDP's HYBRID_SHARD shards within a node and replicates across nodes (PyTorch's
  // ShardingStrategy.HYBRID_SHARD): shard groups of the DP replicas one node holds, for a dense
  // model whose TP and CP groups fill whole parts of a node.
  const int64_t node = p.cluster.gpus_per_node.value_or(8);
  if (out.zero_stage == 3 && has_word(lowered(par.zero_stage), "hybrid_shard") &&
      !d.workload().model.moe.enabled() && node % (d.tp * d.cp) == 0 && node / (d.tp * d.cp) < d.dp &&
      d.dp % (node / (d.tp * d.cp)) == 0) {
    out.dp_shard = static_cast<int>(node / (d.tp * d.cp));
    p.defaults.emplace_back("dp_shard=" + std::to_string(out.dp_shard) +
                            " (FSDP's HYBRID_SHARD: full shard within a node of " + std::to_string(node) +
                            " GPUs, replicated across nodes)");
  }
  d.facts.zero_stage = out.zero_stage;
  if (d.dp == 0)
    return "num_gpus " + std::to_string(d.gpus) +
           " is not divisible by tp*pp*cp = " + std::to_string(d.tp * d.pp * d.cp);
  if (par.dp && *par.dp != d.dp)
    p.defaults.emplace_back("dp=" + std::to_string(d.dp) + " (derived; the record says " +
                            std::to_string(*par.dp) + ")");
  return "";
}

std::string map_precision_recompute(Draft& d) {
  const config::MeasuredRun& run = d.run;
  WorkloadSpec& w = d.workload();
  const Parsed<Precision> precision = parse_precision(run.precision);
  if (!precision.error.empty())
    return precision.error;
  w.precision = precision.value.value_or(Precision::BF16);
  if (!precision.value)
    d.plan.defaults.emplace_back("precision=bf16");
  d.facts.precision = w.precision;
  const Parsed<Recompute> recompute = parse_recompute(run.recompute, !run.recompute_modules.empty());
  if (!recompute.error.empty())
    return recompute.error;
  w.training.recompute = *recompute.value;
  if (!recompute.note.empty())
    d.plan.defaults.push_back(recompute.note);
  const Parsed<RecomputeModules> modules = parse_recompute_modules(run.recompute_modules);
  if (!modules.error.empty())
    return modules.error;
  if (modules.value && w.training.recompute != Recompute::SELECTIVE)
    return "recompute_modules need a selective recompute, not '" + run.recompute + "'";
  if (modules.value) {
    w.training.recompute_modules = *modules.value;
  } else if (w.training.recompute == Recompute::SELECTIVE && names_per_op_policy(run.recompute) &&
             !w.model.moe.enabled() && !w.model.mla.enabled()) {
    w.training.recompute_modules = {.core_attn = false, .alternate_linears = true};
    d.plan.defaults.emplace_back(
        "recompute_modules=[alternate_linears] (the per-op policy the record names)");
  }
  return "";
}

/// How the pointwise kernels run and whether TP communication is pipelined: as the record's
/// framework text states (parse_stated_options), else the recognised stack's preset value, else
/// the built-in default. The pipelined TP communication needs sp with tp > 1.
namespace {

/// The stack's value of `key` where the workload's layout has what it needs, else null.
const config::StackDefault* applicable(const config::StackVersion* version, StackKey key, Draft& d) {
  const config::StackDefault* value = version != nullptr ? config::stack_default(*version, key) : nullptr;
  return value != nullptr && config::stack_applies(value->when, d.workload(), d.dp) ? value : nullptr;
}

/// Lists a preset value the mapping took: "grad_accumulation=fp32_pass (the stack's preset)".
void list_preset(Draft& d, const char* key, const config::StackDefault& value) {
  d.plan.defaults.push_back(std::string(key) + "=" + config::to_string(value.value) +
                            " (the stack's preset)");
}

void map_stated_options(Draft& d, const config::StackVersion* version) {
  const StatedOptions stated = parse_stated_options(d.run.framework);
  WorkloadSpec& w = d.workload();
  const config::StackDefault* preset =
      version != nullptr ? config::stack_default(*version, StackKey::POINTWISE) : nullptr;
  if (stated.pointwise) {
    w.training.pointwise = *stated.pointwise;
    d.plan.defaults.push_back(std::string("pointwise=") +
                              (w.training.pointwise == Pointwise::EAGER ? "eager" : "fused") +
                              " (as the framework text states)");
  } else if (preset != nullptr) {
    w.training.pointwise = std::get<Pointwise>(preset->value);
    d.plan.defaults.push_back("pointwise=" + config::to_string(preset->value) + " (the stack's preset)");
  }
  // The fused attention kernel: the stack's (the records do not name one).
  const config::StackDefault* kernel =
      version != nullptr ? config::stack_default(*version, StackKey::ATTENTION_KERNEL) : nullptr;
  if (kernel != nullptr && w.training.flash_attention) {
    w.training.attention_kernel = std::get<AttentionKernel>(kernel->value);
    d.plan.defaults.push_back("attention_kernel=" + config::to_string(kernel->value) +
                              " (the stack's preset)");
  }
  // PyTorch FSDP's fp32 shards: the stack's, under ZeRO-3.
  const config::StackDefault* shards =
      version != nullptr ? config::stack_default(*version, StackKey::FP32_SHARDS) : nullptr;
  if (shards != nullptr && w.parallel.zero_stage == 3) {
    w.training.fp32_shards = std::get<bool>(shards->value);
    d.plan.defaults.push_back("fp32_shards=" + config::to_string(shards->value) + " (the stack's preset)");
  }
  // Whether fp8 weight casts are kept for the step (Transformer Engine) or cast per use (torchao):
  // the stack's, in fp8 training.
  if (const config::StackDefault* cache = applicable(version, StackKey::FP8_WEIGHT_CACHE, d)) {
    w.training.fp8_weight_cache = std::get<bool>(cache->value);
    list_preset(d, "fp8_weight_cache", *cache);
  }
  // Q, K, V (and gate, up) as one GEMM each or a linear each: the stack's model code.
  if (const config::StackDefault* fused = applicable(version, StackKey::FUSED_PROJECTIONS, d)) {
    w.training.fused_projections = std::get<bool>(fused->value);
    list_preset(d, "fused_projections", *fused);
  }
  // Where each micro-batch's gradients are accumulated (DeepSpeed's bf16 optimizer: an fp32 pass
  // after every backward pass) and whether pipeline sends block in the instruction order: the
  // stack's, where its layout condition holds.
  if (const config::StackDefault* accumulation = applicable(version, StackKey::GRAD_ACCUMULATION, d)) {
    w.training.grad_accumulation = std::get<GradAccumulation>(accumulation->value);
    list_preset(d, "grad_accumulation", *accumulation);
  }
  if (const config::StackDefault* blocking = applicable(version, StackKey::PP_P2P_BLOCKING, d)) {
    w.parallel.pp_p2p_blocking = std::get<bool>(blocking->value);
    list_preset(d, "pp_p2p_blocking", *blocking);
  }
  // Pipelined TP communication needs sequence parallelism (Megatron asserts it with
  // --tp-comm-overlap; PyTorch's async TP runs on the SP-sharded activations): stated, it implies sp.
  // The record's parallelism.tp_comm_overlap (the recipe's setting) wins over the framework text.
  const std::optional<bool> recorded = d.run.parallelism.tp_comm_overlap;
  const bool overlap = recorded.value_or(stated.tp_comm_overlap);
  if (overlap && w.parallel.tp > 1 && w.model.seq_len % w.parallel.tp == 0) {
    if (!w.parallel.sp)
      d.plan.defaults.emplace_back("sp=true (TP communication overlap needs it)");
    w.parallel.sp = true;
    w.parallel.tp_comm_overlap = true;
    if (!recorded)
      d.plan.defaults.emplace_back("tp_comm_overlap=true (the framework text names it)");
  }
}

} // namespace

void map_training(Draft& d) {
  const config::MeasuredRun& run = d.run;
  RunPlan& p = d.plan;
  TrainingSpec& t = d.workload().training;
  // Framework defaults (rules.cpp): fused attention, then the recipes' memory and overlap settings.
  const Applied flash = *first_rule(Mechanism::FLASH_ATTENTION, d.facts); // the table ends in a catch-all row
  t.flash_attention = std::get<bool>(flash.value());
  p.defaults.push_back(flash.listed(d.facts));
  // The stack the framework text names: a rerun of the written workload gets its mechanisms
  // from the preset where the mapping leaves them; every mechanism the mapping sets is its own.
  const auto stack = recognise_stack(d.facts);
  if (stack) {
    StackSpec& named = d.workload().stack;
    named.name = std::string(stack->preset->name);
    named.version = std::string(stack->version->version);
    for (std::size_t i = 0; i < STACK_KEYS; ++i)
      named.set_by_caller(static_cast<StackKey>(i));
  }
  map_stated_options(d, stack ? stack->version : nullptr);
  // A record's own fp8_params wins over its framework's.
  t.fp8_params = run.fp8_params.value_or(false);
  const auto fp8_params = !run.fp8_params ? first_rule(Mechanism::FP8_PARAMS, d.facts) : std::nullopt;
  if (fp8_params) {
    t.fp8_params = std::get<bool>(fp8_params->value());
    p.defaults.push_back(fp8_params->listed(d.facts));
  }
  // ZeRO-3's gathers as fp8 casts (torchao's enable_fsdp_float8_all_gather), as the framework or
  // precision text names them.
  if (d.workload().precision == Precision::FP8 && d.workload().parallel.zero_stage == 3 &&
      (parse_stated_options(run.framework).fp8_all_gather ||
       parse_stated_options(run.precision).fp8_all_gather)) {
    t.fp8_all_gather = true;
    p.defaults.emplace_back("fp8_all_gather=true (the record names the float8 all-gather)");
  }
  // fp8 with row-wise scales (torchao's rowwise recipe), as the precision text names it: each
  // weight cast per use, none kept.
  if (d.workload().precision == Precision::FP8 && names_rowwise_scaling(run.precision)) {
    t.fp8_scaling = Fp8Scaling::ROWWISE;
    p.defaults.emplace_back("fp8_scaling=rowwise (the precision text names it)");
    if (t.fp8_weight_cache) {
      t.fp8_weight_cache = false;
      p.defaults.emplace_back("fp8_weight_cache=false (rowwise scaling keeps no fp8 weights)");
    }
  }
  const auto gather = d.dp > 1 ? first_rule(Mechanism::OVERLAP_PARAM_GATHER, d.facts) : std::nullopt;
  if (gather) {
    t.overlap_param_gather = std::get<bool>(gather->value());
    p.defaults.push_back(gather->listed(d.facts));
  }
  // The framework text naming the overlap (Megatron's --overlap-param-gather) states it, over the
  // stack's preset, where there is a distributed optimizer's gather to overlap.
  const int zero = d.workload().parallel.zero_stage;
  if (!t.overlap_param_gather && d.dp > 1 && (zero == 1 || zero == 2) &&
      parse_stated_options(run.framework).overlap_param_gather) {
    t.overlap_param_gather = true;
    p.defaults.emplace_back("overlap_param_gather=true (the framework text names it)");
  }
  const auto fp32_grads = first_rule(Mechanism::GRAD_REDUCE_IN_FP32, d.facts);
  if (fp32_grads) {
    t.grad_reduce_in_fp32 = std::get<bool>(fp32_grads->value());
    p.defaults.push_back(fp32_grads->listed(d.facts));
  }
  const auto fetch = first_rule(Mechanism::ZERO3_FETCH, d.facts);
  if (fetch) {
    t.zero3_fetch = std::get<Zero3Fetch>(fetch->value());
    p.defaults.push_back(fetch->listed(d.facts));
  }
  // ZeRO-3 under a pipeline: the gathers held for the step where the stack says so (torchtitan)
  // and its layout condition holds (after the fetch, which the condition reads).
  const config::StackDefault* held = stack && t.reshard_after_forward
                                         ? applicable(stack->version, StackKey::RESHARD_AFTER_FORWARD, d)
                                         : nullptr;
  if (held != nullptr) {
    t.reshard_after_forward = std::get<bool>(held->value);
    list_preset(d, "reshard_after_forward", *held);
  }
  t.offload_layers = std::max<int64_t>(0, run.offload_layers.value_or(0));
  t.recompute_layers = std::max<int64_t>(0, run.recompute_layers.value_or(0));
  if (run.optimizer_bytes_per_param)
    t.optimizer_bytes_per_param = *run.optimizer_bytes_per_param;
  // The caching allocator: the record's launch environment, else the stack's preset.
  const config::StackDefault* segments = stack && !run.expandable_segments
                                             ? applicable(stack->version, StackKey::EXPANDABLE_SEGMENTS, d)
                                             : nullptr;
  t.expandable_segments = run.expandable_segments.value_or(false);
  if (segments != nullptr) {
    t.expandable_segments = std::get<bool>(segments->value);
    list_preset(d, "expandable_segments", *segments);
  }
}

} // namespace stepsim::validate::detail
