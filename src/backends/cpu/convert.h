#pragma once
// Element loads and stores for kernels templated on their storage type
// (float or bf16): they compute in f32 and round once on store. The bf16
// conversions are the bit operations of core/dtype.h written branch-free, so
// loops over them vectorise inside STRATA_CPU_CLONES functions and give the
// same bits as the ref backend (round to nearest even, NaN stays NaN, no
// flushing of subnormals).
#include <bit>
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/tensor.h"

namespace strata::cpu {

inline float to_f32(float value) { return value; }
inline float to_f32(bf16 value) { return std::bit_cast<float>(static_cast<uint32_t>(value.bits) << 16); }
// f16 operands (fp16 mixed precision) convert through core/dtype.h's scalar
// code: correct, not fast.
inline float to_f32(fp16 value) { return fp16_to_float(value); }

template <typename T>
T from_f32(float value);

template <>
inline float from_f32<float>(float value) {
  return value;
}

template <>
inline bf16 from_f32<bf16>(float value) {
  uint32_t word = std::bit_cast<uint32_t>(value);
  uint32_t rounded = (word + 0x7fffu + ((word >> 16) & 1u)) >> 16;
  uint32_t quiet_nan = (word >> 16) | 0x40u;
  bool nan = (word & 0x7fffffffu) > 0x7f800000u;
  return bf16{static_cast<uint16_t>(nan ? quiet_nan : rounded)};
}

// y[i] = x[i] as f32 for i < count: a vectorised pass (cpu_cast.cpp).
void widen_bf16(const bf16* x, float* y, int64_t count);

// y[i] = from_f32<bf16>(x[i]) for i < count, bit for bit, with the CPU's
// conversion instruction where it has one (bf16_narrow.cpp).
void narrow_to_bf16(const float* x, bf16* y, int64_t count);

// Kernels that compute a chunk of outputs in f32 (kOutputChunk at a time)
// write them where chunk_output says (f32 storage itself, else `buffer`) and
// then call store_chunk, which narrows a buffer into bf16 storage: one
// vectorised conversion instead of the formula on every store (about 10
// instructions a vector of 16). Each kernel writes its own chunk loop: a loop
// body passed as a lambda would not be compiled for its STRATA_CPU_CLONES
// caller's instruction set.
constexpr int64_t kOutputChunk = 512;

template <typename T>
float* chunk_output(T* y, float* buffer) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16>, "chunked outputs are f32 or bf16");
  if constexpr (std::is_same_v<T, float>) {
    return y;
  } else {
    return buffer;
  }
}

template <typename T>
void store_chunk(const float* buffer, T* y, int64_t count) {
  if constexpr (std::is_same_v<T, bf16>) narrow_to_bf16(buffer, y, count);
}

// A row as f32: f32 storage read in place, any other dtype widened into
// `scratch` (width floats) in a pass of its own. A kernel that reduces over the
// row then runs one loop for every input dtype, so a narrow input gives the
// bits of a cast followed by the f32 kernel (an AVX2 clone had vectorised a
// reducing loop that also widened in another order). Inlined into the calling
// clone so it vectorises for its ISA.
template <typename T>
__attribute__((always_inline)) inline const float* f32_row(const T* row, int64_t width, float* scratch) {
  if constexpr (std::is_same_v<T, float>) {
    return row;
  } else {
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) scratch[c] = to_f32(row[c]);
    return scratch;
  }
}

// A fused norm's residual sum: x + r rounded to X into `stored`, and as
// stored into f32 `rounded` for the norm to read (bf16: narrowed at once, then
// read back). Inlined into the calling clone so it vectorises for its ISA.
template <typename X, typename R>
__attribute__((always_inline)) inline void store_residual_sum(const X* x, const R* r, int64_t width, X* stored,
                                                              float* rounded) {
  if constexpr (std::is_same_v<X, bf16>) {
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) rounded[c] = to_f32(x[c]) + to_f32(r[c]);
    narrow_to_bf16(rounded, stored, width);
    widen_bf16(stored, rounded, width);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) {
      const X sum = from_f32<X>(to_f32(x[c]) + to_f32(r[c]));
      stored[c] = sum;
      rounded[c] = to_f32(sum);
    }
  }
}

// Whole bf16 or f16 tensors to and from f32, in parallel, rounding to
// nearest even (cpu_cast.cpp).
void widen_to_f32(const Tensor& x, float* y);
void narrow_from_f32(const float* x, const Tensor& y);

}  // namespace strata::cpu
