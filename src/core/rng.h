#pragma once
// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11): the value
// at (seed, stream, index) is a pure function, so results never depend on how
// work is split across threads or ranks, and the state is just a counter.
#include <array>
#include <cstdint>
#include <string_view>

namespace strata {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Stable 64-bit stream id for a name (FNV-1a), e.g. one stream per parameter.
uint64_t stream_id(std::string_view name);

class CounterRng {
 public:
  explicit CounterRng(uint64_t seed) : seed_(seed) {}
  uint64_t seed() const { return seed_; }

  // Uniform in (0, 1], and standard normal, for element `index` of `stream`.
  float uniform(uint64_t stream, uint64_t index) const;
  float normal(uint64_t stream, uint64_t index) const;

 private:
  uint64_t seed_;
};

// Fills `count` floats with normal(mean, stddev) from one stream.
void fill_normal(float* out, int64_t count, const CounterRng& rng, uint64_t stream, float mean,
                 float stddev);

}  // namespace strata
