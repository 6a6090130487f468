// narrow_to_bf16 (convert.h). AVX512_BF16's vcvtneps2bf16 rounds to nearest
// even and quiets NaNs as from_f32<bf16> does, but treats subnormal inputs as
// zero; vectors holding one are redone by the formula, so the bits are the
// formula's (and ref's) everywhere. About 1.8x the formula's rate alone on
// this project's Xeon (bench/README.md, issue 40).
#include <immintrin.h>

#include "backends/cpu/bf16_dot.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int kFpClassSubnormal = 0x20;  // vfpclassps's "denormal" category

STRATA_CPU_CLONES void narrow_by_formula(const float* x, bf16* y, int64_t count) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) y[i] = from_f32<bf16>(x[i]);
}

// The instruction set is the bf16 dot product's (has_bf16_dot).
STRATA_BF16_DOT void narrow_by_instruction(const float* x, bf16* y, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 values = _mm512_loadu_ps(x + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(values)));
    if (_mm512_fpclass_ps_mask(values, kFpClassSubnormal) != 0) [[unlikely]] {
      narrow_by_formula(x + i, y + i, 16);
    }
  }
  narrow_by_formula(x + i, y + i, count - i);
}

}  // namespace

void narrow_to_bf16(const float* x, bf16* y, int64_t count) {
  if (has_bf16_dot()) return narrow_by_instruction(x, y, count);
  narrow_by_formula(x, y, count);
}

}  // namespace strata::cpu
