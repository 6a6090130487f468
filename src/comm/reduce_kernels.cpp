#include "comm/reduce_kernels.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace strata::comm {
namespace {

// fmaxf is order independent for NaN operands (it drops them), so every
// algorithm agrees bit for bit.
struct SumOp {
  static float apply(float a, float b) { return a + b; }
};
struct MaxOp {
  static float apply(float a, float b) { return std::fmax(a, b); }
};

template <typename Op>
void combine_loop(float* dst, const float* a, const float* b, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = Op::apply(a[i], b[i]);
}

template <typename Op>
void combine_divide_loop(float* dst, const float* a, const float* b, size_t count, float divisor) {
  for (size_t i = 0; i < count; ++i) dst[i] = Op::apply(a[i], b[i]) / divisor;
}

template <typename Op>
void combine_bf16_loop(bf16* dst, const float* a, const float* b, size_t count, float divisor) {
  for (size_t i = 0; i < count; ++i) dst[i] = float_to_bf16(Op::apply(a[i], b[i]) / divisor);
}

template <typename Op>
void combine_final_as(void* dst, DType out_dtype, const float* a, const float* b, size_t count, float divisor) {
  if (out_dtype == DType::BF16) {
    combine_bf16_loop<Op>(static_cast<bf16*>(dst), a, b, count, divisor);
  } else if (divisor == 1.0f) {
    combine_loop<Op>(static_cast<float*>(dst), a, b, count);
  } else {
    combine_divide_loop<Op>(static_cast<float*>(dst), a, b, count, divisor);
  }
}

// The last sum of an f32 result with non-temporal stores (AVX2).
__attribute__((target("avx2"))) void sum_streaming_avx2(float* dst, const float* a, const float* b, size_t count,
                                                          float divisor) {
  size_t i = 0;
  for (; i < count && reinterpret_cast<uintptr_t>(dst + i) % 32 != 0; ++i) dst[i] = (a[i] + b[i]) / divisor;
  const __m256 scale = _mm256_set1_ps(divisor);
  for (; i + 8 <= count; i += 8) {
    __m256 x = _mm256_loadu_ps(a + i), y = _mm256_loadu_ps(b + i);
    _mm256_stream_ps(dst + i, _mm256_div_ps(_mm256_add_ps(x, y), scale));
  }
  for (; i < count; ++i) dst[i] = (a[i] + b[i]) / divisor;
  _mm_sfence();
}

bool has_avx2() {
  static const bool supported = __builtin_cpu_supports("avx2");
  return supported;
}

}  // namespace

void combine(float* dst, const float* a, const float* b, size_t count, ReduceOp op) {
  if (op == ReduceOp::Max) {
    combine_loop<MaxOp>(dst, a, b, count);
  } else {
    combine_loop<SumOp>(dst, a, b, count);
  }
}

void combine_final(void* dst, DType out_dtype, const float* a, const float* b, size_t count, ReduceOp op,
                   float divisor) {
  STRATA_CHECK(out_dtype == DType::F32 || out_dtype == DType::BF16, "reduction into {}", dtype_name(out_dtype));
  if (op == ReduceOp::Max) {
    combine_final_as<MaxOp>(dst, out_dtype, a, b, count, divisor);
  } else {
    combine_final_as<SumOp>(dst, out_dtype, a, b, count, divisor);
  }
}

void store_final(void* dst, DType out_dtype, const float* src, size_t count, float divisor) {
  if (out_dtype == DType::BF16) {
    bf16* out = static_cast<bf16*>(dst);
    for (size_t i = 0; i < count; ++i) out[i] = float_to_bf16(src[i] / divisor);
    return;
  }
  STRATA_CHECK(out_dtype == DType::F32, "reduction into {}", dtype_name(out_dtype));
  float* out = static_cast<float*>(dst);
  if (divisor != 1.0f) {
    for (size_t i = 0; i < count; ++i) out[i] = src[i] / divisor;
  } else if (out != src && count > 0) {
    std::memcpy(out, src, count * sizeof(float));
  }
}

void combine_all_final(void* dst, DType out_dtype, const float* const* sources, int source_count, size_t count,
                       ReduceOp op, float divisor, bool streaming) {
  if (source_count == 1) {
    store_final(dst, out_dtype, sources[0], count, divisor);
    return;
  }
  if (source_count == 2) {
    if (streaming && out_dtype == DType::F32 && op != ReduceOp::Max && has_avx2()) {
      sum_streaming_avx2(static_cast<float*>(dst), sources[0], sources[1], count, divisor);
    } else {
      combine_final(dst, out_dtype, sources[0], sources[1], count, op, divisor);
    }
    return;
  }
  // Blocks small enough for the running sum to stay in L1.
  constexpr size_t kBlock = 2048;
  float running[kBlock];
  size_t width = dtype_size(out_dtype);
  for (size_t start = 0; start < count; start += kBlock) {
    size_t length = std::min(kBlock, count - start);
    combine(running, sources[0] + start, sources[1] + start, length, op);
    for (int source = 2; source + 1 < source_count; ++source) {
      combine(running, running, sources[source] + start, length, op);
    }
    combine_final(static_cast<std::byte*>(dst) + start * width, out_dtype, running, sources[source_count - 1] + start,
                  length, op, divisor);
  }
}

void widen(float* dst, const void* src, DType dtype, size_t count) {
  if (dtype == DType::BF16) {
    const bf16* in = static_cast<const bf16*>(src);
    for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_float(in[i]);
    return;
  }
  STRATA_CHECK(dtype == DType::F32, "widening {}", dtype_name(dtype));
  if (dst != src && count > 0) std::memcpy(dst, src, count * sizeof(float));
}

}  // namespace strata::comm
