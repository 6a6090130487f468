// square_sum_exact, vectorised. A block's squares are scaled by the power of
// two that puts its largest below 2^80 (or 2^120) and cut into two (or three)
// fixed-point words, each rounded to nearest (units 2^40 and 1, or 2^80, 2^40
// and 1; all but the first signed). Every step is exact in double and each
// word's magnitude is at most 2^40 units, so a block's 4096 words sum exactly
// in a double. Two words hold every square exactly when the block's nonzero
// values span at most 16 binades (the usual case: two thirds of the work of
// three words); otherwise three words are cut, and a square with bits below
// the third word (a value more than 2^36 times smaller than its block's
// largest, or a subnormal) goes to ExactSquareSum::add, as does a block
// holding an infinity or NaN. The result is exact, so threads merge in any
// order and the canonical words are the ones ref's scalar bins give. Blocks
// of bf16 values (bf16 inputs, and f32 ones that came from bf16) take two
// words up to 32 binades; bf16 inputs are read as they are on that path
// (no widened copy, their exponents found on the 16-bit words).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"
#include "core/exact_square_sum.h"

namespace strata::cpu {

namespace {

constexpr int64_t kBlock = 4096;                // a block's words sum below 2^52 in magnitude
constexpr int64_t kThreadRange = 8 * kBlock;    // the parallel loop's unit
constexpr int kWordBits = 40;                   // the scaled largest square is below 2^40
constexpr double kWordScale = 0x1p40;           // 2^kWordBits: one word's unit over the next's
static_assert(kWordScale == static_cast<double>(int64_t{1} << kWordBits));
constexpr int kNanOrInfinity = 255;

// Four lanes, one AVX2 register: GCC does not vectorise the split written per
// element, and lowers 64-byte vectors' compares and lane loads to scalar code
// on AVX2 (4x slower there). The sums are exact, so the width moves no bits.
constexpr int64_t kLanes = 4;
constexpr int64_t kBlockUnit = 2 * kLanes;  // blocks are padded to this many values
using f64x4 = double __attribute__((vector_size(32)));
using i64x4 = int64_t __attribute__((vector_size(32)));
using f32x4 = float __attribute__((vector_size(16)));
using u16x4 = uint16_t __attribute__((vector_size(8)));
using u32x4 = uint32_t __attribute__((vector_size(16)));

// Four values from x, as f32.
inline void load_lanes(const float* x, f32x4& values) { std::memcpy(&values, x, sizeof values); }
inline void load_lanes(const bf16* x, f32x4& values) {
  u16x4 words;
  std::memcpy(&words, x, sizeof words);
  values = std::bit_cast<f32x4>(__builtin_convertvector(words, u32x4) << 16);
}

struct SquareWords {
  f64x4 integer, fraction, tail;  // multiples of 2^80, 2^40 and 1: the words in units 1, 2^-40, 2^-80, times 2^80
};

// Vectors travel by reference: a 32-byte vector by value has another ABI in the baseline clone.

// y rounded to the nearest multiple of 2^k, for |y| < 2^(k+51): adding 1.5 * 2^(k+52), whose ulp is
// 2^k, leaves no bits below it (ties to even, as the round-to-nearest mode does everything here).
inline void round_to_unit(const f64x4& y, double magic, f64x4& rounded) { rounded = (y + magic) - magic; }
constexpr double kTailMagic = 0x1.8p52;                                 // rounds to integers
constexpr double kFractionMagic = kTailMagic * kWordScale;               // to multiples of 2^40
constexpr double kIntegerMagic = kFractionMagic * kWordScale;            // to multiples of 2^80

// Splits four squares into words; `exact` is -1 in the lanes whose square
// the three words hold exactly, 0 where it has bits below them. The squares
// are scaled straight to the tail's unit (`scale` is 2^80 times the block's),
// so each word is one rounding and one exact subtraction: no rescaling.
inline void split_squares(const float* x, double scale, SquareWords& words, i64x4& exact) {
  f32x4 values;
  load_lanes(x, values);
  const f64x4 wide = __builtin_convertvector(values, f64x4);
  const f64x4 scaled = wide * wide * scale;  // a 48-bit square times a power of two: exact
  round_to_unit(scaled, kIntegerMagic, words.integer);
  const f64x4 rest = scaled - words.integer;
  round_to_unit(rest, kFractionMagic, words.fraction);
  const f64x4 tail = rest - words.fraction;
  round_to_unit(tail, kTailMagic, words.tail);
  exact = tail == words.tail;
}

inline void add_kept(f64x4& sum, const f64x4& words, const i64x4& exact) {
  sum = exact ? sum + words : sum;  // a masked add
}

// The largest exponent field of a block's values, the smallest of its
// nonzero ones (kNanOrInfinity when all are zero), and whether every value
// is a bf16 one (its low 16 bits zero).
struct ExponentRange {
  int top, bottom;
  bool narrow;
};

STRATA_CPU_CLONES ExponentRange exponent_range(const float* x, int64_t count) {
  uint32_t top = 0, bottom = kNanOrInfinity, low_bits = 0;
#pragma omp simd reduction(max : top) reduction(min : bottom) reduction(| : low_bits)
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(x[i]);
    const uint32_t exponent = (bits >> 23) & 0xFFu;
    const uint32_t nonzero_exponent = (bits & 0x7FFFFFFFu) != 0 ? exponent : kNanOrInfinity;
    top = exponent > top ? exponent : top;
    bottom = nonzero_exponent < bottom ? nonzero_exponent : bottom;
    low_bits |= bits;
  }
  return {static_cast<int>(top), static_cast<int>(bottom), (low_bits & 0xFFFFu) == 0};
}

// The same for bf16 values, read as their 16-bit words (twice the lanes).
STRATA_CPU_CLONES ExponentRange exponent_range(const bf16* x, int64_t count) {
  const auto* words = reinterpret_cast<const uint16_t*>(x);
  uint16_t top = 0, bottom = kNanOrInfinity;
#pragma omp simd reduction(max : top) reduction(min : bottom)
  for (int64_t i = 0; i < count; ++i) {
    const auto exponent = static_cast<uint16_t>((words[i] >> 7) & 0xFFu);
    const auto nonzero_exponent = static_cast<uint16_t>((words[i] & 0x7FFFu) != 0 ? exponent : kNanOrInfinity);
    top = exponent > top ? exponent : top;
    bottom = nonzero_exponent < bottom ? nonzero_exponent : bottom;
  }
  return {top, bottom, true};
}

// A block whose nonzero values are normal and span at most this many binades
// scales to squares that are integers below 2^80 (48 significant bits moved
// at most 2 * 16 places): two words hold each exactly. A bf16 value's square
// has 16 significant bits, 32 fewer, so a block of them may span 16 binades
// more (the weight gradients of bf16 training, whose blocks span 13 to 22
// binades, with no three-word block left).
constexpr int kTwoWordSpan = 16;
constexpr int kTwoWordSpanOfBf16 = kTwoWordSpan + 16;
// sum_two_words scales the values by the square root of 2^(292 + kWordBits -
// 2 top), an f32 power of two only for tops from this one up (values below
// 2^-87 take the three words' path, which scales in double).
constexpr int kTwoWordRootScaleOfTopZero = (292 + kWordBits) / 2;
constexpr int kTwoWordLowestTop = kTwoWordRootScaleOfTopZero - 127;

// Sums of the two words of a block's squares (count a multiple of kBlockUnit), as
// sum_words gives them: sums[0] in units of 2^80, sums[1] of 2^40 (the
// squares are scaled by root_scale^2, 2^40 times less than sum_words's).
// The values are scaled in f32 (by a power of two that keeps them normal and
// below 2^40: exact) and squared in double (48 bits: exact). Each square
// joins an accumulator biased into [2^92, 2^93), whose ulp is 2^40: the add
// rounds it to the high word's grid, the accumulator's change is that word
// (exact: a difference of multiples of 2^40) and the square minus it the low
// word (an integer below 2^39 in magnitude). No square lies halfway between
// two multiples of 2^40 (its lowest bit is an even power of two), so the words
// are the ones rounding each square gives. Two sets of accumulators keep the
// adds' latency off the loop's path.
constexpr double kHighBias = 0x1.8p92;  // ulp 2^40 while the sum of the high words stays below 2^91

template <typename T>
STRATA_CPU_CLONES void sum_two_words(const T* x, int64_t count, float root_scale, double* sums) {
  f64x4 high[2], low[2]{};
  for (auto& biased : high) biased = f64x4{} + kHighBias;
  for (int64_t i = 0; i < count; i += kBlockUnit) {
    for (int half = 0; half < 2; ++half) {
      f32x4 values;
      load_lanes(x + i + half * kLanes, values);
      const f64x4 wide = __builtin_convertvector(values * root_scale, f64x4);
      const f64x4 square = wide * wide;  // an integer below 2^80: exact
      const f64x4 before = high[half];
      high[half] += square;
      low[half] += square - (high[half] - before);
    }
  }
  sums[0] = sums[1] = sums[2] = 0.0;
  for (int lane = 0; lane < kLanes; ++lane) {
    sums[0] += (high[0][lane] - kHighBias) + (high[1][lane] - kHighBias);
    sums[1] += low[0][lane] + low[1][lane];
  }
  sums[0] /= kWordScale;  // exact: back to the word's own unit
}

// Sums the words of the squares that split exactly (count a multiple of kLanes);
// returns how many did not.
STRATA_CPU_CLONES int64_t sum_words(const float* x, int64_t count, double scale, double* sums) {
  f64x4 integer{}, fraction{}, tail{};
  i64x4 kept{};
  for (int64_t i = 0; i < count; i += kLanes) {
    SquareWords words;
    i64x4 exact;
    split_squares(x + i, scale, words, exact);
    add_kept(integer, words.integer, exact);
    add_kept(fraction, words.fraction, exact);
    add_kept(tail, words.tail, exact);
    kept = exact ? kept + 1 : kept;
  }
  sums[0] = sums[1] = sums[2] = 0.0;
  int64_t left = count;
  for (int lane = 0; lane < kLanes; ++lane) {
    sums[0] += integer[lane];
    sums[1] += fraction[lane];
    sums[2] += tail[lane];
    left -= kept[lane];
  }
  sums[0] /= kWordScale * kWordScale;  // exact: back to the words' own units
  sums[1] /= kWordScale;
  return left;
}

// The squares that do not split exactly, gathered and added to the bins.
void add_left_out(const float* x, int64_t count, double scale, ExactSquareSum& sum) {
  float left_out[kBlock];
  int64_t left = 0;
  for (int64_t i = 0; i < count; i += kLanes) {
    SquareWords words;
    i64x4 exact;
    split_squares(x + i, scale, words, exact);
    for (int lane = 0; lane < kLanes; ++lane) {
      if (!exact[lane]) left_out[left++] = x[i + lane];
    }
  }
  sum.add(left_out, left);
}

// Whether a block of values from `range` takes the two words' path.
bool takes_two_words(const ExponentRange& range) {
  return range.bottom > 0 && range.top != kNanOrInfinity && range.top >= kTwoWordLowestTop &&
         range.top - range.bottom <= (range.narrow ? kTwoWordSpanOfBf16 : kTwoWordSpan);
}

// The block's word sums (sums[2] the tail's, 0 with two words), carried into
// non-negative words (the block's sum is not negative) and added to the bins.
void add_words(int top, const double* sums, ExactSquareSum& sum) {
  const auto tail = static_cast<int64_t>(sums[2]);
  const int64_t fraction = static_cast<int64_t>(sums[1]) + (tail >> kWordBits);
  const int64_t integer = static_cast<int64_t>(sums[0]) + (fraction >> kWordBits);
  constexpr int64_t kWordMask = (int64_t{1} << kWordBits) - 1;
  const int integer_bin = top + 4;
  sum.add_bin(integer_bin, static_cast<uint64_t>(integer));
  sum.add_bin(integer_bin - kWordBits / 2, static_cast<uint64_t>(fraction & kWordMask));
  sum.add_bin(integer_bin - kWordBits, static_cast<uint64_t>(tail & kWordMask));
}

// A block of at most kBlock values, zero-padded to a multiple of kBlockUnit.
// |x| < 2^(top - 126), so x^2 * 2^(292 - 2 top) < 2^40; the unit 2^(2 top - 292) is bin top + 4's.
// The squares are scaled 2^80 further, to the tail word's unit (below 2^120: 4096 of them sum exactly);
// with two words, 2^40 further (below 2^80), whose unit is then the fraction word's.
void add_block(const float* x, int64_t count, ExactSquareSum& sum) {
  const ExponentRange range = exponent_range(x, count);
  if (range.top == kNanOrInfinity) {
    sum.add(x, count);
    return;
  }
  const int64_t padded = round_up(count, kBlockUnit);
  double sums[3];
  if (takes_two_words(range)) {
    sum_two_words(x, padded, std::ldexp(1.0f, kTwoWordRootScaleOfTopZero - range.top), sums);
  } else {
    const double scale = std::ldexp(1.0, 292 + 2 * kWordBits - 2 * range.top);
    if (sum_words(x, padded, scale, sums) > 0) add_left_out(x, padded, scale, sum);
  }
  add_words(range.top, sums, sum);
}

// A block of bf16 values (count a multiple of kBlockUnit): the two words' path reads
// them as they are; any other widens them into `widened` first.
void add_block(const bf16* x, int64_t count, ExactSquareSum& sum, float* widened) {
  const ExponentRange range = exponent_range(x, count);
  if (!takes_two_words(range)) {
    widen_bf16(x, widened, count);
    return add_block(widened, count, sum);
  }
  double sums[3];
  sum_two_words(x, count, std::ldexp(1.0f, kTwoWordRootScaleOfTopZero - range.top), sums);
  add_words(range.top, sums, sum);
}

template <typename T>
void square_sum_exact(const Tensors& in, const Tensors& out, const Attrs&) {
  const T* x = in[0].data<T>();
  const int64_t count = in[0].numel();
  ExactSquareSum total;
#pragma omp parallel if (count > kThreadRange)
  {
    ExactSquareSum mine;
    alignas(64) float block[kBlock];
#pragma omp for schedule(static)
    for (int64_t range = 0; range < count; range += kThreadRange) {
      const int64_t range_end = std::min(count, range + kThreadRange);
      for (int64_t begin = range; begin < range_end; begin += kBlock) {
        const int64_t n = std::min(kBlock, range_end - begin);
        if (n % kBlockUnit == 0) {
          if constexpr (std::is_same_v<T, float>) {
            add_block(x + begin, n, mine);
          } else {
            add_block(x + begin, n, mine, block);
          }
          continue;
        }
        if constexpr (std::is_same_v<T, float>) {
          std::copy(x + begin, x + begin + n, block);
        } else {
          widen_bf16(x + begin, block, n);
        }
        std::fill(block + n, block + round_up(n, kBlockUnit), 0.0f);
        add_block(block, n, mine);
      }
    }
#pragma omp critical(strata_square_sum_exact)
    total.merge(mine);
  }
  std::array<int64_t, ExactSquareSum::kWords> words = total.words();
  std::copy(words.begin(), words.end(), out[0].data<int64_t>());
}

}  // namespace

void register_square_sum_exact(Backend& backend) {
  backend.add_kernel("square_sum_exact", DType::F32, square_sum_exact<float>);
  backend.add_kernel("square_sum_exact", DType::BF16, square_sum_exact<bf16>);
}

}  // namespace strata::cpu
