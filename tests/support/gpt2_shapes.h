#pragma once
// GPT-2 configs for the tests, each spelled as one call: tests pick small
// shapes (odd widths and vocabularies) to stay fast and catch edge cases.
#include <cstdint>

#include "model/model_config.h"

namespace strata::testing {

// The given shape; layer_norm_eps keeps its default.
inline ModelConfig gpt2_config(int64_t layers, int64_t heads, int64_t width, int64_t vocab, int64_t block_size) {
  ModelConfig config;
  config.n_layer = layers;
  config.n_head = heads;
  config.n_embd = width;
  config.vocab_size = vocab;
  config.block_size = block_size;
  return config;
}

}  // namespace strata::testing
