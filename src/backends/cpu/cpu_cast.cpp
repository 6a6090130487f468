// cast between f32, bf16 and f16 (and to f64), in fixed chunks. Every
// conversion goes through f32, which holds bf16 and f16 exactly, so each
// element is rounded once, as the op requires.
//
// bf16 is rounded with integer operations (convert.h) rather than AVX-512
// BF16's vcvtneps2bf16, which flushes subnormals to zero: both run at memory
// speed, and this way the result is bit-identical to the ref backend. f16
// uses the F16C instructions where the CPU has them (vcvtps2ph rounds to
// nearest even, keeps subnormals and NaN), else core/dtype.h's scalar code.
// Large bf16 -> f32 outputs and same-dtype copies are written with streaming
// stores (streamed_stores.h).
#include <cpuid.h>
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/streamed_stores.h"
#include "core/streamed_copy.h"

namespace strata::cpu {

namespace {

constexpr int64_t kGrain = 16384;

STRATA_CPU_CLONES void f32_to_f64(const float* x, double* y, int64_t count) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) y[i] = static_cast<double>(x[i]);
}

// F16C converts 8 values per instruction; the tail goes through a padded
// block so that every element takes the same instruction.
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const fp16* x, float* y, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(half));
  }
  if (i < count) {
    alignas(16) uint16_t half[8] = {};
    alignas(32) float full[8];
    std::memcpy(half, x + i, static_cast<size_t>(count - i) * sizeof(fp16));
    _mm256_store_ps(full, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(half))));
    std::memcpy(y + i, full, static_cast<size_t>(count - i) * sizeof(float));
  }
}

__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* x, fp16* y, int64_t count) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), kNearest));
  }
  if (i < count) {
    alignas(32) float full[8] = {};
    alignas(16) uint16_t half[8];
    std::memcpy(full, x + i, static_cast<size_t>(count - i) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(half), _mm256_cvtps_ph(_mm256_load_ps(full), kNearest));
    std::memcpy(y + i, half, static_cast<size_t>(count - i) * sizeof(fp16));
  }
}

// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}
const bool kHasF16c = __builtin_cpu_supports("avx") && cpu_has_f16c();

void f16_to_f32(const fp16* x, float* y, int64_t count) {
  if (kHasF16c) return f16_to_f32_f16c(x, y, count);
  for (int64_t i = 0; i < count; ++i) y[i] = fp16_to_float(x[i]);
}

void f32_to_f16(const float* x, fp16* y, int64_t count) {
  if (kHasF16c) return f32_to_f16_f16c(x, y, count);
  for (int64_t i = 0; i < count; ++i) y[i] = float_to_fp16(x[i]);
}

// Elements [begin, begin + count) of `tensor` as f32 into `y`.
void decode(const Tensor& tensor, int64_t begin, int64_t count, float* y) {
  switch (tensor.dtype()) {
    case DType::BF16: return widen_bf16(tensor.data<bf16>() + begin, y, count);
    case DType::F16: return f16_to_f32(tensor.data<fp16>() + begin, y, count);
    default: STRATA_CHECK(false, "cpu cast cannot read {}", dtype_name(tensor.dtype()));
  }
}

void encode(const float* x, int64_t begin, int64_t count, const Tensor& tensor) {
  switch (tensor.dtype()) {
    case DType::BF16: return narrow_to_bf16(x, tensor.data<bf16>() + begin, count);
    case DType::F16: return f32_to_f16(x, tensor.data<fp16>() + begin, count);
    case DType::F64: return f32_to_f64(x, tensor.data<double>() + begin, count);
    default: STRATA_CHECK(false, "cpu cast cannot write {}", dtype_name(tensor.dtype()));
  }
}

void cast(const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& x = in[0];
  const Tensor& y = out[0];
  const bool streamed = streams(y.nbytes());
  if (x.dtype() == y.dtype()) {
    auto* source = static_cast<const std::byte*>(x.raw());
    auto* target = static_cast<std::byte*>(y.raw());
    size_t size = dtype_size(x.dtype());
    parallel_chunks(x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      const auto bytes = static_cast<int64_t>(end - begin) * static_cast<int64_t>(size);
      if (streamed) return copy_streamed(source + begin * size, target + begin * size, static_cast<size_t>(bytes));
      std::memcpy(target + begin * size, source + begin * size, static_cast<size_t>(bytes));
    });
    return;
  }
  parallel_chunks(x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    int64_t count = end - begin;
    if (x.dtype() == DType::F32) return encode(x.data<float>() + begin, begin, count, y);
    if (y.dtype() == DType::F32) {
      if (x.dtype() == DType::BF16 && streamed) {
        return widen_bf16_streamed(x.data<bf16>() + begin, y.data<float>() + begin, count);
      }
      return decode(x, begin, count, y.data<float>() + begin);
    }
    float* staged = thread_scratch<float>(0, static_cast<size_t>(kGrain));
    decode(x, begin, count, staged);
    encode(staged, begin, count, y);
  });
}

}  // namespace

STRATA_CPU_CLONES void widen_bf16(const bf16* x, float* y, int64_t count) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) y[i] = to_f32(x[i]);
}

void widen_to_f32(const Tensor& x, float* y) {
  parallel_chunks(x.numel(), kGrain, [&](int64_t begin, int64_t end) { decode(x, begin, end - begin, y + begin); });
}

void narrow_from_f32(const float* x, const Tensor& y) {
  parallel_chunks(y.numel(), kGrain, [&](int64_t begin, int64_t end) { encode(x + begin, begin, end - begin, y); });
}

void register_cast(Backend& backend) {
  for (DType input : {DType::F32, DType::BF16, DType::F16}) backend.add_kernel("cast", input, cast);
}

}  // namespace strata::cpu
