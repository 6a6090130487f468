#include "core/streamed_copy.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace strata {
namespace {

__attribute__((target("avx512f"))) size_t stream_avx512(const std::byte* x, std::byte* y, size_t i, size_t bytes) {
  for (; i + 64 <= bytes; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(y + i), _mm512_loadu_si512(x + i));
  }
  return i;
}

__attribute__((target("avx2"))) size_t stream_avx2(const std::byte* x, std::byte* y, size_t i, size_t bytes) {
  for (; i + 64 <= bytes; i += 64) {
    const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(y + i), low);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(y + i + 32), high);
  }
  return i;
}

}  // namespace

size_t unaligned_head(const void* target, size_t bytes) {
  const size_t misalignment = reinterpret_cast<uintptr_t>(target) % 64;
  return std::min(bytes, misalignment == 0 ? 0 : 64 - misalignment);
}

void copy_streamed(const void* source, void* target, size_t bytes) {
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  const auto* x = static_cast<const std::byte*>(source);
  auto* y = static_cast<std::byte*>(target);
  if (!has_avx512 && !has_avx2) {
    std::memcpy(y, x, bytes);
    return;
  }
  size_t i = unaligned_head(y, bytes);
  std::memcpy(y, x, i);
  i = has_avx512 ? stream_avx512(x, y, i, bytes) : stream_avx2(x, y, i, bytes);
  std::memcpy(y + i, x + i, bytes - i);
  _mm_sfence();
}

}  // namespace strata
