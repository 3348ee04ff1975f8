#pragma once
// Hand-filled cluster and workload specs for tests (no YAML, no config module).

#include "config/spec.hpp"
#include "core/units.hpp"

namespace stepsim::test {

/// A100-like GPU: 312 TFLOP/s bf16, 2 TB/s HBM.
inline GpuSpec a100() {
  GpuSpec g;
  g.kind = "A100";
  g.peak_bf16 = FlopsPerSec(312e12);
  g.peak_fp16 = FlopsPerSec(312e12);
  g.hbm_capacity = Bytes(80.0 * (1 << 30));
  g.hbm_bandwidth = BytesPerSec(2039e9);
  g.compute_efficiency = 0.7;
  g.memory_efficiency = 0.85;
  g.runtime_overhead = Bytes(1024.0 * 1024 * 1024);
  g.allocator_fragmentation = 1.10;
  return g;
}

/// DGX-like cluster: NVSwitch 300 GB/s per direction at 80 %, 3 us; NICs 25 GB/s at 96 %, 4 us;
/// leaf switch 0.5 us.
inline ClusterSpec dgx_cluster(int nodes, int gpus_per_node, int nics_per_node) {
  ClusterSpec c;
  c.name = "test";
  c.nodes = nodes;
  c.gpus_per_node = gpus_per_node;
  c.gpu = a100();
  c.nvswitch = LinkSpec{BytesPerSec(300e9), Seconds(3e-6), 0.8};
  c.nics_per_node = nics_per_node;
  c.nic = LinkSpec{BytesPerSec(25e9), Seconds(4e-6), 0.96};
  c.fabric.nodes_per_leaf = 16;
  c.fabric.oversubscription = 1.0;
  c.fabric.switch_latency = Seconds(0.5e-6);
  return c;
}

/// A cluster on which communication is (almost) free: enormous bandwidths, zero latencies.
inline ClusterSpec free_comm_cluster(int nodes, int gpus_per_node) {
  ClusterSpec c = dgx_cluster(nodes, gpus_per_node, gpus_per_node);
  c.nvswitch = LinkSpec{BytesPerSec(1e15), Seconds(0.0), 1.0};
  c.nic = LinkSpec{BytesPerSec(1e15), Seconds(0.0), 1.0};
  c.fabric.switch_latency = Seconds(0.0);
  return c;
}

/// GPT-3 175B (Brown et al. 2020).
inline ModelSpec gpt3_175b() {
  ModelSpec m;
  m.name = "gpt3-175b";
  m.layers = 96;
  m.hidden = 12288;
  m.heads = 96;
  m.kv_heads = 96;
  m.ffn_hidden = 4 * 12288;
  m.vocab = 51200;
  m.seq_len = 2048;
  m.mlp = MlpKind::GELU;
  m.norm = NormKind::LAYERNORM;
  m.position = PositionEmbedding::LEARNED;
  m.bias = true;
  m.tied_embeddings = true;
  return m;
}

/// DeepSeek-V3's multi-head latent attention (DeepSeek-AI 2024): query latent 1536, key/value
/// latent 512, per-head widths 128 without and 64 with rotary embedding, value 128.
inline MlaSpec deepseek_v3_mla() {
  return MlaSpec{.q_lora_rank = 1536,
                 .kv_lora_rank = 512,
                 .qk_nope_head_dim = 128,
                 .qk_rope_head_dim = 64,
                 .v_head_dim = 128};
}

/// Llama-2-70B (Touvron et al. 2023).
inline ModelSpec llama2_70b() {
  ModelSpec m;
  m.name = "llama2-70b";
  m.layers = 80;
  m.hidden = 8192;
  m.heads = 64;
  m.kv_heads = 8;
  m.ffn_hidden = 28672;
  m.vocab = 32000;
  m.seq_len = 4096;
  m.mlp = MlpKind::SWIGLU;
  m.norm = NormKind::RMSNORM;
  m.position = PositionEmbedding::ROTARY;
  m.bias = false;
  m.tied_embeddings = false;
  return m;
}

/// A small GPT-style model for graph and engine tests.
inline ModelSpec small_gpt(int64_t layers, int64_t hidden = 1024, int64_t seq = 512) {
  ModelSpec m;
  m.name = "small";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 4 * hidden;
  m.vocab = 32000;
  m.seq_len = seq;
  return m;
}

inline WorkloadSpec workload(const ModelSpec& m, int tp, int pp, int dp, int64_t micro_batches,
                             int64_t micro_batch = 1, Schedule schedule = Schedule::ONE_F_ONE_B) {
  WorkloadSpec w;
  w.name = "test";
  w.model = m;
  w.parallel.tp = tp;
  w.parallel.pp = pp;
  w.parallel.dp = dp;
  w.parallel.schedule = schedule;
  w.batch.micro_batch = micro_batch;
  w.batch.global_batch = micro_batches * micro_batch * dp;
  return w;
}

} // namespace stepsim::test
