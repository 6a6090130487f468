#include "core/exact_square_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"

namespace strata {
namespace {

// An independent reference: Shewchuk's exact floating-point expansion (what
// Python's math.fsum does). Every f32 square is exact in double, so the
// expansion holds the exact sum; its largest component is the sum rounded.
double shewchuk_sum_of_squares(const std::vector<float>& values) {
  std::vector<double> partials;
  for (float v : values) {
    double x = static_cast<double>(v) * static_cast<double>(v);
    size_t kept = 0;
    for (double y : partials) {
      if (std::fabs(x) < std::fabs(y)) std::swap(x, y);
      double high = x + y;
      double low = y - (high - x);
      if (low != 0.0) partials[kept++] = low;
      x = high;
    }
    partials.resize(kept);
    partials.push_back(x);
  }
  double total = 0.0;
  for (auto it = partials.rbegin(); it != partials.rend(); ++it) total += *it;
  return total;
}

std::vector<float> gradient_like(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-40, 10);
  std::vector<float> values(count);
  for (float& v : values) v = std::ldexp(normal(rng), scale(rng));  // magnitudes over ~15 decades
  return values;
}

ExactSquareSum sum_of(const std::vector<float>& values, size_t begin, size_t end) {
  ExactSquareSum sum;
  sum.add(values.data() + begin, static_cast<int64_t>(end - begin));
  return sum;
}

TEST(ExactSquareSum, MatchesAnExactExpansionSumToTheLastBits) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::vector<float> values = gradient_like(300000, seed);  // several flushes of the 64-bit partials
    double want = shewchuk_sum_of_squares(values);
    double got = sum_of(values, 0, values.size()).value();
    EXPECT_LE(std::fabs(got - want), 2 * std::numeric_limits<double>::epsilon() * want) << seed;
  }
}

TEST(ExactSquareSum, IsTheSameBitsForAnyOrderAndAnySplit) {
  std::vector<float> values = gradient_like(100003, 7);
  ExactSquareSum whole = sum_of(values, 0, values.size());

  std::vector<float> shuffled = values;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(11));
  ExactSquareSum reordered = sum_of(shuffled, 0, shuffled.size());
  EXPECT_EQ(whole.words(), reordered.words());

  ExactSquareSum pieces;  // uneven pieces merged in reverse order, through their words
  std::vector<size_t> cuts{0, 1, 33, 4096, 65537, 99999, values.size()};
  for (size_t i = cuts.size() - 1; i > 0; --i) {
    std::array<int64_t, ExactSquareSum::kWords> words = sum_of(values, cuts[i - 1], cuts[i]).words();
    pieces.merge(ExactSquareSum::from_words(words.data()));
  }
  EXPECT_EQ(whole.words(), pieces.words());
  EXPECT_EQ(std::bit_cast<uint64_t>(whole.value()), std::bit_cast<uint64_t>(pieces.value()));

  double forward = 0.0, backward = 0.0;  // what an order-dependent sum would have done
  for (float v : values) forward += static_cast<double>(v) * v;
  for (auto it = shuffled.rbegin(); it != shuffled.rend(); ++it) backward += static_cast<double>(*it) * *it;
  EXPECT_NE(forward, backward) << "the example should defeat plain summation";
}

TEST(ExactSquareSum, HandlesSubnormalsExtremesInfinityAndNan) {
  const float smallest = std::numeric_limits<float>::denorm_min();
  const float largest = std::numeric_limits<float>::max();
  std::vector<float> values{smallest, -smallest, 0.0f, -0.0f, largest, std::numeric_limits<float>::min()};
  double want = 2.0 * std::ldexp(1.0, -298) + static_cast<double>(largest) * largest + std::ldexp(1.0, -252);
  EXPECT_EQ(sum_of(values, 0, values.size()).value(), want);
  EXPECT_EQ(sum_of({}, 0, 0).value(), 0.0);

  values.push_back(-std::numeric_limits<float>::infinity());
  EXPECT_EQ(sum_of(values, 0, values.size()).value(), std::numeric_limits<double>::infinity());
  values.push_back(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(sum_of(values, 0, values.size()).value()));
}

TEST(ExactSquareSum, PartsAddedByExponentGiveTheWordsOfTheSameSquares) {
  // 1.0f is 2^23 * 2^(127 - 150): its square is 2^46 in bin 127, or 2^48 in bin 126.
  const float one = 1.0f;
  ExactSquareSum squares, parts;
  squares.add(&one, 1);
  parts.add_bin(126, uint64_t{1} << 48);
  EXPECT_EQ(squares.words(), parts.words());
  EXPECT_EQ(parts.value(), 1.0);

  // Beyond the bins: above bin 254 the part is shifted into it, below bin 1 it must be a multiple of 2^-298.
  ExactSquareSum high, high_there;
  high.add_bin(256, 3);
  high_there.add_bin(254, 3 * 16);
  EXPECT_EQ(high.words(), high_there.words());
  ExactSquareSum low, low_there;
  low.add_bin(-1, 5 * 16);
  low_there.add_bin(1, 5);
  EXPECT_EQ(low.words(), low_there.words());
  EXPECT_EQ(low.value(), 5 * std::ldexp(1.0, -298));
  EXPECT_THROW(ExactSquareSum().add_bin(-1, 3), Error);
}

TEST(ExactSquareSum, RoundsTheWholeSumOnceToNearest) {
  // 1 + 2^-53 + 2^-80: adding the largest parts first would tie 1 + 2^-53 down to 1 and lose the rest;
  // the sum rounded once is 1 + 2^-52.
  ExactSquareSum sum;
  sum.add_bin(150, 1);   // 2^(300 - 300)
  sum.add_bin(123, 2);   // 2 * 2^(246 - 300)
  sum.add_bin(110, 1);   // 2^(220 - 300)
  EXPECT_EQ(sum.value(), 1.0 + std::ldexp(1.0, -52));
  ExactSquareSum tie;  // exactly halfway: to even
  tie.add_bin(150, 1);
  tie.add_bin(123, 2);
  EXPECT_EQ(tie.value(), 1.0);
}

}  // namespace
}  // namespace strata
