#include "ops/rope_frequencies.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace strata {

RopeParams rope_params(const std::string& op, const Attrs& attrs) {
  RopeParams p;
  p.head_dim = attrs.get_int("head_dim");
  p.theta = attrs.get_float("theta");
  p.scaling = attrs.get_string("scaling");
  p.factor = attrs.get_float("factor");
  p.low_freq_factor = attrs.get_float("low_freq_factor");
  p.high_freq_factor = attrs.get_float("high_freq_factor");
  p.original_max_positions = attrs.get_int("original_max_positions");
  p.inverse = attrs.get_bool("inverse");
  if (p.head_dim <= 0 || p.head_dim % 2 != 0) {
    fail("op '{}': attribute 'head_dim' must be positive and even, got {}", op, p.head_dim);
  }
  if (!(p.theta > 0)) fail("op '{}': attribute 'theta' must be positive, got {}", op, p.theta);
  if (p.scaling != "none" && p.scaling != "linear" && p.scaling != "llama3") {
    fail("op '{}': attribute 'scaling' must be \"none\", \"linear\" or \"llama3\", got \"{}\"", op, p.scaling);
  }
  if (p.scaling != "none" && !(p.factor > 0)) {
    fail("op '{}': attribute 'factor' must be positive for scaling \"{}\", got {}", op, p.scaling, p.factor);
  }
  if (p.scaling == "llama3") {
    if (!(p.low_freq_factor > 0) || !(p.high_freq_factor > p.low_freq_factor)) {
      fail("op '{}': attributes 'low_freq_factor' ({}) and 'high_freq_factor' ({}) must satisfy 0 < low < high", op,
           p.low_freq_factor, p.high_freq_factor);
    }
    if (p.original_max_positions <= 0) {
      fail("op '{}': attribute 'original_max_positions' must be positive, got {}", op, p.original_max_positions);
    }
  }
  return p;
}

// Python scalars meet f32 tensors as f32 (PyTorch's type promotion), so each
// constant below is rounded to f32 first. `a / tensor` is PyTorch's
// reciprocal(tensor) * a; `tensor / scalar` is an f32 division (on the CPU,
// where HF builds inv_freq).
std::vector<float> rope_inv_freq(const RopeParams& p) {
  const int64_t half = p.head_dim / 2;
  const auto base = static_cast<float>(p.theta);
  const auto dim = static_cast<float>(p.head_dim);
  const auto factor = static_cast<float>(p.factor);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j) {
    float exponent = static_cast<float>(2 * j) / dim;
    // base ** exponent in f32, correctly rounded (PyTorch's powf is within an ulp of it).
    auto power = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
    float inv = 1.0f / power;
    if (p.scaling == "linear") {
      inv = inv / factor;
    } else if (p.scaling == "llama3") {
      const auto original = static_cast<double>(p.original_max_positions);
      const auto low_wavelen = static_cast<float>(original / p.low_freq_factor);
      const auto high_wavelen = static_cast<float>(original / p.high_freq_factor);
      float wavelen = (1.0f / inv) * static_cast<float>(2 * std::numbers::pi);
      float scaled = wavelen > low_wavelen ? inv / factor : inv;
      float smooth = ((1.0f / wavelen) * static_cast<float>(original) - static_cast<float>(p.low_freq_factor)) /
                     static_cast<float>(p.high_freq_factor - p.low_freq_factor);
      float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
      bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      inv = medium ? smoothed : scaled;
    }
    inv_freq[static_cast<size_t>(j)] = inv;
  }
  return inv_freq;
}

RopeCosSin rope_cos_sin(int64_t position, float inv_freq, bool inverse) {
  const double angle = static_cast<double>(static_cast<float>(position) * inv_freq);
  const auto sin = static_cast<float>(std::sin(angle));
  return {static_cast<float>(std::cos(angle)), inverse ? -sin : sin};
}

}  // namespace strata
