#pragma once
#include <cstdint>

namespace strata {

// The GPT-2 family: learned positions, pre-LayerNorm, causal self-attention,
// tanh-GELU MLP of 4x width, LM head tied to the token embedding, no dropout.
struct GPT2Config {
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  int64_t vocab_size = 4096;
  int64_t block_size = 256;  // maximum sequence length (positions)
  double layer_norm_eps = 1e-5;

  // Throws naming the `model.*` config key that is impossible.
  void validate() const;
  int64_t head_size() const { return n_embd / n_head; }
  int64_t num_parameters() const;  // with the LM head counted once (tied)
  bool operator==(const GPT2Config&) const = default;
};

}  // namespace strata
