#pragma once
// The MoE families' config.json (MixtralConfig, Qwen3MoeConfig) both ways, and the checks of their
// model.* keys.
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/model_config.h"
#include "model/moe/moe_flavour.h"

namespace strata {

// Throws naming the model.* key a `flavour` model cannot take.
void validate_moe_keys(const ModelConfig& config, const MoeFlavour& flavour);

// transformers adds the load-balancing loss to the training loss only with output_router_logits: its
// router_aux_loss_coef becomes model.router_aux_loss_coef then, 0 otherwise (and back).
ModelConfig moe_from_hf_config(const nlohmann::json& hf, const std::string& source, const MoeFlavour& flavour);
nlohmann::json moe_to_hf_config(const ModelConfig& config, const MoeFlavour& flavour);

}  // namespace strata
