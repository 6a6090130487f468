#include "core/exact_square_sum.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace strata {

namespace {

// Four interleaved sets of 64-bit partial bins break the dependency between
// neighbours (which mostly share an exponent); each set takes 2^14 squares
// below 2^48 before it is flushed into the 128-bit bins, far from 2^64.
constexpr int kLanes = 4;
constexpr int64_t kFlushEvery = kLanes * (int64_t{1} << 14);

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

}  // namespace

void ExactSquareSum::add(const float* values, int64_t count) {
  uint64_t partial[kLanes][256];
  for (int64_t begin = 0; begin < count; begin += kFlushEvery) {
    std::memset(partial, 0, sizeof(partial));
    const int64_t end = std::min(count, begin + kFlushEvery);
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t bits = bits_of(values[i]);
      const uint32_t exponent = (bits >> 23) & 0xFFu;
      const uint64_t mantissa = (bits & 0x7FFFFFu) | (exponent != 0 ? 0x800000u : 0u);
      partial[i % kLanes][exponent] += mantissa * mantissa;
    }
    for (int lane = 0; lane < kLanes; ++lane) {
      for (size_t e = 0; e < bins_.size(); ++e) bins_[e] += partial[lane][e];
    }
    if (partial[0][255] | partial[1][255] | partial[2][255] | partial[3][255]) {
      for (int64_t i = begin; i < end; ++i) {
        if (std::isinf(values[i])) ++infinities_;
        if (std::isnan(values[i])) ++nans_;
      }
    }
  }
}

void ExactSquareSum::merge(const ExactSquareSum& other) {
  for (size_t e = 0; e < bins_.size(); ++e) bins_[e] += other.bins_[e];
  infinities_ += other.infinities_;
  nans_ += other.nans_;
}

double ExactSquareSum::value() const {
  if (nans_ > 0) return std::numeric_limits<double>::quiet_NaN();
  if (infinities_ > 0) return std::numeric_limits<double>::infinity();
  // Largest bins first, in a fixed order: the rounding is a function of the bins alone.
  double total = 0.0;
  for (int e = static_cast<int>(bins_.size()) - 1; e >= 0; --e) {
    if (bins_[static_cast<size_t>(e)] == 0) continue;
    total += std::ldexp(static_cast<double>(bins_[static_cast<size_t>(e)]), 2 * std::max(e, 1) - 300);
  }
  return total;
}

std::array<int64_t, ExactSquareSum::kWords> ExactSquareSum::words() const {
  std::array<int64_t, kWords> words{};
  for (size_t e = 0; e < bins_.size(); ++e) {
    words[2 * e] = static_cast<int64_t>(static_cast<uint64_t>(bins_[e]));
    words[2 * e + 1] = static_cast<int64_t>(static_cast<uint64_t>(bins_[e] >> 64));
  }
  words[kWords - 2] = infinities_;
  words[kWords - 1] = nans_;
  return words;
}

ExactSquareSum ExactSquareSum::from_words(const int64_t* words) {
  ExactSquareSum sum;
  for (size_t e = 0; e < sum.bins_.size(); ++e) {
    sum.bins_[e] = (static_cast<unsigned __int128>(static_cast<uint64_t>(words[2 * e + 1])) << 64) |
                   static_cast<uint64_t>(words[2 * e]);
  }
  sum.infinities_ = words[kWords - 2];
  sum.nans_ = words[kWords - 1];
  return sum;
}

}  // namespace strata
