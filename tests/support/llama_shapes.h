#pragma once
// LLaMA (and mixture-of-experts) configs for the tests, each spelled as one call, as gpt2_shapes.h does for GPT-2.
#include <cstdint>
#include <string>

#include "model/model_config.h"

namespace strata::testing {

// The given shape with grouped-query attention; the other keys keep their defaults.
inline ModelConfig llama_config(int64_t layers, int64_t heads, int64_t kv_heads, int64_t width, int64_t intermediate,
                                int64_t vocab, int64_t block, bool tied) {
  ModelConfig c;
  c.family = "llama";
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = kv_heads;
  c.n_embd = width;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.block_size = block;
  c.tie_word_embeddings = tied;
  return c;
}

// A mixture-of-experts family (LLaMA's attention, untied) of the given shape: `experts` experts of
// `expert_width`, `top_k` per token.
inline ModelConfig moe_config(const std::string& family, int64_t layers, int64_t heads, int64_t kv_heads,
                              int64_t width, int64_t expert_width, int64_t vocab, int64_t experts, int64_t top_k) {
  ModelConfig c = llama_config(layers, heads, kv_heads, width, 0, vocab, 16, false);
  c.family = family;
  c.num_experts = experts;
  c.num_experts_per_tok = top_k;
  c.moe_intermediate_size = expert_width;
  return c;
}

}  // namespace strata::testing
