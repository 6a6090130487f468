#pragma once
// Interchange with HuggingFace weights, for every model family: a
// `*.safetensors` file, or a model directory holding `model.safetensors` or a
// sharded `model.safetensors.index.json` (its weight_map names each tensor's
// file). Names are the family's (GPT2LMHeadModel, LlamaForCausalLM); the bare
// model classes' unprefixed names (GPT2Model, LlamaModel) load too, and the
// buffers some files carry (causal masks, rotary frequencies) are skipped.
#include <filesystem>

#include "model/model_config.h"
#include "model/parameters.h"

namespace strata {

// Fills `params` (built from model_param_specs(config)) from `path`, checking that every parameter
// is present with the shape the config implies, that nothing unknown is there, and that every value
// is finite; f32, f16 and bf16 files are converted to f32. An `lm_head.weight` in a tied model's
// file must equal the embedding.
void load_hf_weights(const std::filesystem::path& path, const ModelConfig& config, ParameterSet& params);

// One `model.safetensors`-style file with `__metadata__ {"format": "pt"}`.
void save_hf_weights(const std::filesystem::path& path, const ParameterSet& params);

}  // namespace strata
