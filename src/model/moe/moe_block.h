#pragma once
// The sparse MoE block that takes the MLP's place in the MoE families' layers, and its parameters:
// the router (`<block>gate.weight` [E, C]) and each expert projection stacked over the experts
// (`<block>experts.<proj>.weight`: gate and up [E, F, C], down [E, C, F]; the Hub's experts.{e}.<proj>
// are its slices); with a shared expert (Qwen2-MoE) also `<block>shared_expert.{gate,up,down}_proj.weight`
// and `<block>shared_expert_gate.weight` [1, C].
#include <string>
#include <vector>

#include "model/family.h"
#include "model/moe/moe_flavour.h"

namespace strata {

// The block's output on the normed residual h (the residual add is the caller's).
int sparse_moe_block(ModelEmitter& e, const ModelConfig& config, const MoeFlavour& flavour, int h,
                     const std::string& prefix);

void add_sparse_moe_specs(std::vector<ParamSpec>& specs, const ModelConfig& config, const MoeFlavour& flavour,
                          const std::string& prefix);

// The stacked parameter that expert projection `proj` of `prefix`'s block is: "<prefix><block>experts.<proj>.weight".
std::string stacked_expert_name(const MoeFlavour& flavour, const std::string& prefix, const std::string& proj);

}  // namespace strata
