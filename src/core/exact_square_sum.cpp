#include "core/exact_square_sum.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

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

void ExactSquareSum::add_bin(int exponent, uint64_t amount) {
  if (amount == 0) return;
  if (exponent > 254) {
    const int shift = 2 * (exponent - 254);
    STRATA_CHECK(shift < 64, "square-sum part at exponent {} is beyond the f32 squares' range", exponent);
    bins_[254] += static_cast<unsigned __int128>(amount) << shift;
  } else if (exponent < 1) {
    const int shift = 2 * (1 - exponent);
    const uint64_t kept = shift < 64 ? amount >> shift : 0;
    STRATA_CHECK(shift < 64 && kept << shift == amount,
                 "square-sum part {} at exponent {} is not a multiple of 2^-298", amount, exponent);
    bins_[1] += kept;
  } else {
    bins_[static_cast<size_t>(exponent)] += amount;
  }
}

void ExactSquareSum::merge(const ExactSquareSum& other) {
  for (size_t e = 0; e < bins_.size(); ++e) bins_[e] += other.bins_[e];
  infinities_ += other.infinities_;
  nans_ += other.nans_;
}

ExactSquareSum::Magnitude ExactSquareSum::magnitude() const {
  Magnitude limbs{};
  for (size_t e = 0; e < bins_.size(); ++e) {
    if (bins_[e] == 0) continue;
    // Bin e weighs 4^(e-1) units; subnormals (bin 0) weigh what bin 1 does.
    const size_t shift = 2 * (std::max<size_t>(e, 1) - 1), limb = shift / 64, offset = shift % 64;
    const auto low = static_cast<uint64_t>(bins_[e]), high = static_cast<uint64_t>(bins_[e] >> 64);
    const std::array<uint64_t, 3> parts{low << offset, offset ? (low >> (64 - offset)) | (high << offset) : high,
                                        offset ? high >> (64 - offset) : 0};
    unsigned __int128 carry = 0;
    for (size_t i = limb; i < kLimbs; ++i) {
      const size_t part = i - limb;
      if (part >= parts.size() && carry == 0) break;
      carry += static_cast<unsigned __int128>(limbs[i]) + (part < parts.size() ? parts[part] : 0);
      limbs[i] = static_cast<uint64_t>(carry);
      carry >>= 64;
    }
    STRATA_CHECK(carry == 0, "square sum overflows {} bits", 64 * kLimbs);
  }
  return limbs;
}

double ExactSquareSum::value() const {
  if (nans_ > 0) return std::numeric_limits<double>::quiet_NaN();
  if (infinities_ > 0) return std::numeric_limits<double>::infinity();
  const Magnitude limbs = magnitude();
  size_t top = kLimbs;
  while (top > 0 && limbs[top - 1] == 0) --top;
  if (top == 0) return 0.0;
  // The highest 64 bits, with a sticky bit for anything below them: converting
  // that to double rounds to nearest as the whole integer would.
  const size_t high = top - 1;
  const int leading = std::countl_zero(limbs[high]);
  uint64_t window = limbs[high] << leading;
  bool sticky = false;
  if (high > 0) {
    if (leading > 0) window |= limbs[high - 1] >> (64 - leading);
    sticky = (limbs[high - 1] << leading) != 0;
    for (size_t i = 0; i + 1 < high; ++i) sticky = sticky || limbs[i] != 0;
  }
  const int window_shift = static_cast<int>(64 * high) - leading;  // bits below the window
  if (sticky) window |= 1;
  return std::ldexp(static_cast<double>(window), window_shift - 298);
}

std::array<int64_t, ExactSquareSum::kWords> ExactSquareSum::words() const {
  // Canonical: base-4 digits in bins 1..253 and the rest in bin 254.
  const Magnitude limbs = magnitude();
  std::array<int64_t, kWords> words{};
  for (size_t e = 1; e < 254; ++e) {
    const size_t bit = 2 * (e - 1);
    words[2 * e] = static_cast<int64_t>((limbs[bit / 64] >> (bit % 64)) & 3);
  }
  constexpr size_t kTopBit = 2 * 253;  // bin 254's lowest bit
  STRATA_CHECK(limbs[10] == 0 && (limbs[9] >> (kTopBit + 128 - 9 * 64)) == 0,
               "square sum does not fit its top bin");
  const size_t offset = kTopBit % 64;
  const uint64_t low = (limbs[7] >> offset) | (limbs[8] << (64 - offset));
  const uint64_t high = (limbs[8] >> offset) | (limbs[9] << (64 - offset));
  words[2 * 254] = static_cast<int64_t>(low);
  words[2 * 254 + 1] = static_cast<int64_t>(high);
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
