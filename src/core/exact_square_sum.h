#pragma once
// The sum of squares of f32 values, kept exactly. An f32 is m * 2^(e-150)
// with m a 24-bit integer, so its square is the integer m^2 (< 2^48) times
// 2^(2e-300): it is added, as an integer, to the bin of its exponent e. The
// sum therefore does not depend on the order of the values or on how they
// are split among threads or ranks; ZeRO splits gradients at arbitrary
// elements, and the global gradient norm (so clipping and overflow skips)
// must be the same bits as in one unsplit process.
#include <array>
#include <cstddef>
#include <cstdint>

namespace strata {

class ExactSquareSum {
 public:
  // As int64 words: each exponent's 128-bit bin (low, high), then the counts
  // of infinities and NaNs. Sums of words are what merge() computes; words()
  // writes the one canonical form of the sum, so equal sums give equal words
  // however they were added up.
  static constexpr size_t kWords = 2 * 255 + 2;

  void add(const float* values, int64_t count);
  // Adds amount * 2^(2*exponent - 300), a finite part of a sum of squares
  // built elsewhere (a vectorised kernel's fixed-point words). Any exponent:
  // parts below bin 1 must be multiples of 2^-298, as every square is.
  void add_bin(int exponent, uint64_t amount);
  void merge(const ExactSquareSum& other);
  // The exact sum correctly rounded to double (infinite if a value was, NaN
  // if one was NaN).
  double value() const;

  std::array<int64_t, kWords> words() const;
  static ExactSquareSum from_words(const int64_t* words);

 private:
  // The sum as one integer in units of 2^-298 (bin 1's), little-endian limbs.
  static constexpr size_t kLimbs = 11;
  using Magnitude = std::array<uint64_t, kLimbs>;
  Magnitude magnitude() const;

  std::array<unsigned __int128, 255> bins_{};  // biased exponents 0 (subnormals) .. 254
  int64_t infinities_ = 0, nans_ = 0;
};

}  // namespace strata
