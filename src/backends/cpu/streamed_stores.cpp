#include "backends/cpu/streamed_stores.h"

#include <immintrin.h>

#include <cstring>

#include "backends/cpu/convert.h"
#include "core/streamed_copy.h"

namespace strata::cpu {

bool streams(size_t bytes) {
  static const bool has_stores = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has_stores && bytes >= size_t{1} << 20;
}

__attribute__((target("avx512f"))) void zero_streamed(float* target, int64_t count) {
  const auto bytes = count * static_cast<int64_t>(sizeof(float));
  auto* y = reinterpret_cast<std::byte*>(target);
  auto i = static_cast<int64_t>(unaligned_head(y, static_cast<size_t>(bytes)));
  std::memset(y, 0, static_cast<size_t>(i));
  for (; i + 64 <= bytes; i += 64) _mm512_stream_si512(reinterpret_cast<__m512i*>(y + i), _mm512_setzero_si512());
  std::memset(y + i, 0, static_cast<size_t>(bytes - i));
  _mm_sfence();
}

__attribute__((target("avx512f,avx512bw"))) void widen_bf16_streamed(const bf16* x, float* y, int64_t count) {
  constexpr int64_t kLanes = 16;
  const auto head_bytes = static_cast<int64_t>(unaligned_head(y, static_cast<size_t>(count) * sizeof(float)));
  // A float array 64-byte aligned nowhere (its address not a multiple of 4) takes plain stores throughout.
  int64_t i = head_bytes % int64_t{sizeof(float)} != 0 ? count : head_bytes / int64_t{sizeof(float)};
  widen_bf16(x, y, i);
  using Narrow = uint16_t __attribute__((vector_size(2 * kLanes)));
  using Wide = uint32_t __attribute__((vector_size(4 * kLanes)));
  for (; i + kLanes <= count; i += kLanes) {
    Narrow narrow;
    std::memcpy(&narrow, x + i, sizeof(narrow));
    const Wide wide = __builtin_convertvector(narrow, Wide) << 16;
    _mm512_stream_si512(reinterpret_cast<__m512i*>(y + i), reinterpret_cast<const __m512i&>(wide));
  }
  widen_bf16(x + i, y + i, count - i);
  _mm_sfence();
}

}  // namespace strata::cpu
