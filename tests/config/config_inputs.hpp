#pragma once
// The valid cluster and workload files the config tests load and edit (config_test.cpp,
// schema_test.cpp): 2 nodes x 8 A100s, and a tiny GPT of tp 2 x pp 2 (dp derived: 4).

#include <string>

namespace config_inputs {

inline const std::string CLUSTER = R"(name: test-cluster
nodes: 2
gpus_per_node: 8
gpu:
  kind: A100-SXM4-80GB
  peak_flops: {bf16: 312TFLOPS, fp16: 312TFLOPS}
  hbm_capacity: 80GiB
  hbm_bandwidth: 2039GBps
  compute_efficiency: 0.70
  memory_efficiency: 0.85
nvswitch:
  bandwidth: 300GBps
  latency: 3us
  efficiency: 0.80
nics:
  count: 8
  bandwidth: 200Gbps
  latency: 2us
  efficiency: 0.96
fabric:
  kind: fat_tree
)";

inline const std::string WORKLOAD = R"(name: test-gpt
model:
  layers: 4
  hidden: 256
  heads: 8
  ffn_hidden: 1024
  vocab: 1024
  seq_len: 256
  mlp: gelu
batch:
  global_batch: 16
  micro_batch: 2
parallel:
  tp: 2
  pp: 2
  schedule: 1f1b
precision: bf16
)";

} // namespace config_inputs
