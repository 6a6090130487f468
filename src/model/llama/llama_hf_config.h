#pragma once
// LlamaConfig's config.json, both spellings of the rotary settings:
// transformers v4's `rope_theta` + `rope_scaling` and v5's `rope_parameters`.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/model_config.h"

namespace strata {

class HfConfigReader;

ModelConfig llama_from_hf_config(const nlohmann::json& hf, const std::string& source);
nlohmann::json llama_to_hf_config(const ModelConfig& config);  // v4 spelling, which v5 reads too

// The keys LLaMA shares with the families built on its attention (moe/): layers, heads, widths,
// positions, the norm's epsilon, the rotary settings, attention_bias, tie_word_embeddings, hidden_act
// (SwiGLU's "silu"); `rope_theta_default` where config.json has none (LlamaConfig's 10000).
void read_llama_attention_keys(const HfConfigReader& read, ModelConfig& config, double rope_theta_default);
nlohmann::json llama_attention_hf_keys(const ModelConfig& config);

}  // namespace strata
