#pragma once
// GPT-2 (model.family = "gpt2"): learned positions, pre-LayerNorm, causal
// self-attention, tanh-GELU MLP, LM head tied to the token embedding, no
// dropout; HuggingFace GPT2LMHeadModel's parameter names and Conv1D layouts.
#include "model/family.h"

namespace strata {

const ModelFamily& gpt2_family();

}  // namespace strata
