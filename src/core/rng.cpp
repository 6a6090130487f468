#include "core/rng.h"

#include <cmath>

namespace strata {

namespace {
constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

std::array<uint32_t, 4> philox_round(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * c[0];
  uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * c[2];
  return {static_cast<uint32_t>(product1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(product1),
          static_cast<uint32_t>(product0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(product0)};
}

float to_unit_interval(uint32_t bits) {
  // (bits + 1) / 2^32 in (0, 1]; the 24 high bits keep it exact in float.
  return (static_cast<float>(bits >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

std::array<uint32_t, 4> draw(uint64_t seed, uint64_t stream, uint64_t index) {
  std::array<uint32_t, 4> counter{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                                  static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  return philox4x32(counter, {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  for (int round = 0; round < 10; ++round) {
    counter = philox_round(counter, key);
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

uint64_t stream_id(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char ch : name) {
    hash ^= static_cast<unsigned char>(ch);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

float CounterRng::uniform(uint64_t stream, uint64_t index) const {
  return to_unit_interval(draw(seed_, stream, index)[0]);
}

float CounterRng::normal(uint64_t stream, uint64_t index) const {
  // Box-Muller on two words of one draw.
  auto words = draw(seed_, stream, index);
  float u1 = to_unit_interval(words[0]);
  float u2 = to_unit_interval(words[1]);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.283185307179586f * u2);
}

void fill_normal(float* out, int64_t count, const CounterRng& rng, uint64_t stream, float mean,
                 float stddev) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    out[i] = mean + stddev * rng.normal(stream, static_cast<uint64_t>(i));
  }
}

}  // namespace strata
