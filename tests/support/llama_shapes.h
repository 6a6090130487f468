#pragma once
// LLaMA configs for the tests, each spelled as one call, as gpt2_shapes.h does for GPT-2.
#include <cstdint>

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

}  // namespace strata::testing
