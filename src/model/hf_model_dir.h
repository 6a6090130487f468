#pragma once
// A HuggingFace model directory as the start of a model config: its config.json fills the [model]
// keys a config file did not give, and a given one must agree. Shared by the trainer's and the
// planner's config readers.
#include <filesystem>
#include <set>
#include <string>

#include "model/model_config.h"

namespace strata {

// `given`: the model_fields keys ("n_layer", ...) the config file set. `block_size` (the training
// length) may differ: ModelConfig::validate checks it against max_position_embeddings.
void adopt_hf_model_config(ModelConfig& config, const std::set<std::string>& given, const std::filesystem::path& dir);

}  // namespace strata
