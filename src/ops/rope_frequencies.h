#pragma once
// The rotary position embedding's attributes and angles, computed here once
// so that every backend rotates by the same f32 cos and sin: the values
// HuggingFace transformers computes for LLaMA (modeling_rope_utils.py and
// LlamaRotaryEmbedding), with each f32 operation PyTorch performs.
#include <cstdint>
#include <string>
#include <vector>

#include "ops/attrs.h"

namespace strata {

struct RopeParams {
  int64_t head_dim = 0;  // D, even
  double theta = 0;      // rope_theta
  std::string scaling;   // "none", "linear" or "llama3"
  double factor = 1;
  double low_freq_factor = 1, high_freq_factor = 1;  // llama3
  int64_t original_max_positions = 0;                // llama3
  bool inverse = false;  // rotate by the negated angle (the gradient)
};

// Reads and validates op `op`'s attrs; errors name the op and the attribute.
RopeParams rope_params(const std::string& op, const Attrs& attrs);

// inv_freq[j] for j < D/2, in f32: 1 / theta^(2j/D), then the scaling's adjustment.
std::vector<float> rope_inv_freq(const RopeParams& params);

// cos and sin of the f32 angle float(position) * inv_freq, each rounded to f32
// from the exact value (PyTorch's f32 cos and sin aim at the same; the
// backends then round them to the activations' dtype). sin is negated for
// the inverse rotation.
struct RopeCosSin {
  float cos, sin;
};
RopeCosSin rope_cos_sin(int64_t position, float inv_freq, bool inverse);

}  // namespace strata
