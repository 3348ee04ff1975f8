#pragma once
// YAML -> validated specs. The only module that includes yaml-cpp.
//
// Every key is consumed or rejected as unknown (with a "did you mean"); the keys of each mapping
// are declared once in config/schema.hpp. Every error of a file is reported at once: one
// ConfigError with a line per error, each naming file:line:col, the dotted key and what was
// expected. Layouts that parse but cannot work are ModelErrors naming the reason.

#include "config/spec.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace stepsim::config {

/// One `--set path=value` from the command line. A path starting with "cluster." addresses the
/// cluster file (prefix stripped); any other path addresses the workload file.
struct Override {
  std::string path;  ///< dotted key, e.g. "parallel.pp" or "cluster.nodes"
  std::string value; ///< YAML scalar text, e.g. "4", "2us", "true"
};

/// Parses "path=value". Throws ConfigError when there is no '=' or the path is empty.
Override parse_override(const std::string& text);

/// Reads and validates a cluster file, applying the overrides whose path starts with "cluster.".
/// `degrade`, when given, is a second file holding only a `degraded` section, whose entries are
/// added to the cluster's own (`--degrade FILE`, docs/degraded.md). Throws ConfigError.
ClusterSpec load_cluster(const std::filesystem::path& file, const std::vector<Override>& overrides = {},
                         const std::filesystem::path& degrade = {});

/// Reads and validates a workload file, applying the overrides without the "cluster." prefix.
/// `parallel.dp` may be omitted; it is then 0 here and derived by `check_layout`.
/// Throws ConfigError.
WorkloadSpec load_workload(const std::filesystem::path& file, const std::vector<Override>& overrides = {});

/// Checks a workload built in code as the loader checks a file after reading it: every size and
/// degree within the range its key accepts, then the checks that combine keys (heads against the
/// hidden size, MoE routing, MLA's head layout, a micro-batch's tokens, the training keys against
/// the precision and the model), with the loader's messages. The keys are named as in the file,
/// the place as `source` (or "workload 'NAME'"). Throws one ConfigError with a line per finding.
void check_workload(const WorkloadSpec& workload);

/// `workload` as a workload file: the keys of schema.cpp's declaration in its order, each written
/// when the file needs it (the required keys) or when its value differs from the loader's default
/// (model.mlp's family defaults included), so that load_workload reads the same spec back
/// (`source` aside). `comment`, when given, heads the file as `#` lines.
std::string workload_yaml(const WorkloadSpec& workload, const std::string& comment = "");

/// Sets `model.mlp` with the defaults that key brings, as the loader does: GPT-style (gelu)
/// layernorm, learned positions, biases and tied embeddings; Llama-style (swiglu) none of them.
void set_mlp(ModelSpec& model, MlpKind mlp);

/// training.recompute_modules from its names (core_attn, layernorm, mlp, moe_act, mla_up_proj,
/// alternate_linears, each at most once): sets `modules` and returns "", or returns the loader's message for
/// the first name it refuses.
std::string recompute_modules_of(const std::vector<std::string>& names, RecomputeModules& modules);

/// A workload that check_layout accepted on a cluster, with what the check derived.
struct Layout {
  WorkloadSpec workload;   ///< the checked workload, parallel.dp derived when it was 0
  bool dp_derived = false; ///< parallel.dp was 0 (omitted) and is GPUs / (tp*cp*pp)
};

/// Checks that the workload can run on the cluster; `workload` is not changed. Throws one
/// ModelError naming every broken rule, one per line (tp*pp*dp != GPUs, heads % tp, layers % pp,
/// ...); a rule that needs an earlier one to hold (a division by a valid degree) is skipped when
/// that one is broken.
[[nodiscard]] Layout check_layout(const ClusterSpec& cluster, const WorkloadSpec& workload);

/// The part of check_layout no layout can mend: the cluster's GPU has a peak for the workload's
/// precision (a V100 has no bf16). Throws ModelError naming both files.
void check_precision(const ClusterSpec& cluster, const WorkloadSpec& workload);

// Unit parsing (exposed for tests and other modules' data files). Each throws ConfigError with
// `where` (e.g. "file.yaml:3:7: key 'gpu.hbm_capacity'") prefixed to the message.
Bytes parse_bytes(const std::string& text, const std::string& where);            ///< "80GiB", "40MB", "1024B"
BytesPerSec parse_bandwidth(const std::string& text, const std::string& where);  ///< "600GBps", "200Gbps"
Seconds parse_time(const std::string& text, const std::string& where);           ///< "2us", "1.5ms", "0s"
FlopsPerSec parse_flops_rate(const std::string& text, const std::string& where); ///< "312TFLOPS"
double parse_power(const std::string& text, const std::string& where);           ///< "500W" -> watts
double parse_frequency(const std::string& text, const std::string& where);       ///< "1.5GHz" -> hertz

/// Closest candidate to `key` by edit distance, or "" when nothing is close.
std::string did_you_mean(const std::string& key, const std::vector<std::string>& candidates);

} // namespace stepsim::config
