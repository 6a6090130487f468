#pragma once
// LLaMA (model.family = "llama"), as HuggingFace transformers' LlamaForCausalLM
// computes it: RMSNorm (normalised in fp32, cast back, times the weight),
// rotary position embeddings (rotate-half pairing, fp32 angles, `linear` and
// `llama3` frequency scaling), grouped-query attention, SwiGLU MLP, optional
// biases, tied or untied LM head; its parameter names and nn.Linear [out, in]
// layouts.
#include "model/family.h"

namespace strata {

const ModelFamily& llama_family();

}  // namespace strata
