#pragma once
// LlamaConfig's config.json, both spellings of the rotary settings:
// transformers v4's `rope_theta` + `rope_scaling` and v5's `rope_parameters`.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/model_config.h"

namespace strata {

ModelConfig llama_from_hf_config(const nlohmann::json& hf, const std::string& source);
nlohmann::json llama_to_hf_config(const ModelConfig& config);  // v4 spelling, which v5 reads too

}  // namespace strata
