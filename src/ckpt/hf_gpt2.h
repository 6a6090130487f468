#pragma once
// Interchange with HuggingFace GPT-2 weights. Strata saves GPT2LMHeadModel
// names (`transformer.` prefix, lm_head tied so not stored); it loads those as
// well as GPT2Model files (no prefix, e.g. HuggingFace's own gpt2
// model.safetensors) and ignores their `attn.bias` / `attn.masked_bias` mask
// buffers and a tied `lm_head.weight`.
#include <filesystem>

#include "model/gpt2_config.h"
#include "model/parameters.h"

namespace strata {

// Fills `params` (built from gpt2_param_specs(config)) from `path`, checking
// that every parameter is present with the shape the config implies. f16 and
// bf16 files are widened to f32.
void load_gpt2_weights(const std::filesystem::path& path, ParameterSet& params);

void save_gpt2_weights(const std::filesystem::path& path, const ParameterSet& params);

}  // namespace strata
