// rope for f32 and bf16 storage. Each call first builds the cos/sin table of
// its positions (T x D/2: the f32 values of ops/rope_frequencies.h rounded to
// x's dtype), in parallel over positions, then rotates every (row, head) with
// vector loops over the D/2 pairs, rounding each product and the sum to x's
// dtype as ref and PyTorch do. This file is compiled without FMA contraction
// (CMakeLists.txt), which would round x1*cos - x2*sin once instead of three
// times: results equal ref's bit for bit. y may alias x: each pair is read
// before it is written.
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"
#include "ops/rope_frequencies.h"

namespace strata::cpu {

namespace {

constexpr int64_t kGrain = 16384;  // elements per parallel chunk

// An f32 value rounded to T, held as f32.
template <typename T>
__attribute__((always_inline)) inline float rounded(float value) {
  return to_f32(from_f32<T>(value));
}

// Rows [row_begin, row_end) of x viewed as [B*T, heads, dim]; row r is at position r mod seq.
template <typename T>
STRATA_CPU_CLONES void rope_rows(const T* x, const float* cos, const float* sin, int64_t seq, int64_t heads,
                                 int64_t dim, int64_t row_begin, int64_t row_end, T* y) {
  const int64_t half = dim / 2;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const float* c = cos + (row % seq) * half;
    const float* s = sin + (row % seq) * half;
    for (int64_t h = 0; h < heads; ++h) {
      const T* x1 = x + (row * heads + h) * dim;
      const T* x2 = x1 + half;
      T* y1 = y + (row * heads + h) * dim;
      T* y2 = y1 + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        float a = to_f32(x1[i]), b = to_f32(x2[i]);
        float first = rounded<T>(a * c[i]) - rounded<T>(b * s[i]);
        float second = rounded<T>(b * c[i]) + rounded<T>(a * s[i]);
        y1[i] = from_f32<T>(first);
        y2[i] = from_f32<T>(second);
      }
    }
  }
}

template <typename T>
void rope(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  RopeParams params = rope_params("rope", attrs);
  std::vector<float> inv_freq = rope_inv_freq(params);
  const int64_t seq = in[1].numel(), half = params.head_dim / 2;
  const int32_t* positions = in[1].data<int32_t>();
  float* cos = call_scratch<float>(0, static_cast<size_t>(seq * half));
  float* sin = call_scratch<float>(1, static_cast<size_t>(seq * half));
  parallel_chunks(seq, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, half)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        RopeCosSin angle = rope_cos_sin(positions[t], inv_freq[static_cast<size_t>(i)], params.inverse);
        cos[t * half + i] = rounded<T>(angle.cos);
        sin[t * half + i] = rounded<T>(angle.sin);
      }
    }
  });
  const int64_t heads = in[0].size(2) / params.head_dim, width = in[0].size(2);
  const T* x = in[0].data<T>();
  T* y = out[0].data<T>();
  parallel_chunks(leading_rows(in[0]), std::max<int64_t>(1, kGrain / std::max<int64_t>(1, width)),
                  [&](int64_t begin, int64_t end) {
                    rope_rows(x, cos, sin, seq, heads, params.head_dim, begin, end, y);
                  });
}

}  // namespace

void register_rope(Backend& backend) {
  backend.add_kernel("rope", DType::F32, rope<float>);
  backend.add_kernel("rope", DType::BF16, rope<bf16>);
}

}  // namespace strata::cpu
