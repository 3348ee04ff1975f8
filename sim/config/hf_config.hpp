#pragma once
// Hugging Face `config.json` -> ModelSpec (docs/moe.md, "Models from Hugging Face"). Reads the
// architecture fields of llama, mistral, mixtral, qwen2 and deepseek_v3 style configs; the
// workload file's `model.from_hf` names the file and keys given next to it override its values.

#include "config/spec.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace stepsim::config {

/// The `model_type` values read_hf_config accepts, in the order error messages list them.
const std::vector<std::string>& supported_hf_model_types();

/// Reads the architecture in `file` into a ModelSpec: hidden_size, num_hidden_layers,
/// num_attention_heads, num_key_value_heads (default: the heads), intermediate_size, vocab_size,
/// max_position_embeddings (as seq_len, a default the workload usually overrides),
/// tie_word_embeddings (default false) and the MoE fields (mixtral: num_local_experts,
/// num_experts_per_tok; deepseek_v3: n_routed_experts, num_experts_per_tok, n_shared_experts,
/// moe_intermediate_size, first_k_dense_replace, moe_layer_freq). Every supported family is
/// Llama-like: SwiGLU, RMSNorm, rotary positions, no biases. DeepSeek's multi-head latent
/// attention is approximated by GQA with num_key_value_heads KV heads and head dim h/a.
/// Throws ConfigError naming the file and the key: unreadable file, invalid JSON (with its
/// line:col), unsupported model_type (listing the supported ones), a missing or mistyped field.
ModelSpec read_hf_config(const std::filesystem::path& file);

} // namespace stepsim::config
