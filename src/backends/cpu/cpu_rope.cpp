// rope for f32 and bf16 storage. Each call first finds the cos/sin table of
// its positions (T x D/2: the f32 values of ops/rope_frequencies.h rounded to
// x's dtype) among the tables of the thread's recent calls, or builds it in
// parallel over positions (training rotates q and k at the same positions
// forward and backward, every step: the table's double-precision sines and
// cosines cost more than the rotation), then rotates every (row, head) with
// vector loops over the D/2 pairs, rounding each product and the sum to x's
// dtype as ref and PyTorch do. This file is compiled without FMA contraction
// (CMakeLists.txt), which would round x1*cos - x2*sin once instead of three
// times: results equal ref's bit for bit. y may alias x: each pair is read
// before it is written.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
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

// The same for bf16, whose six roundings a pair would each take the formula's
// ten instructions a vector: heads are taken a group at a time (up to kPairs
// pairs), their four products computed in f32, narrowed and widened back at
// once, then the sums narrowed at once into the output, which lies as the
// input does (convert.h's narrow_to_bf16). Heads wider than kPairs pairs take
// rope_rows.
constexpr int64_t kPairs = 512;

STRATA_CPU_CLONES void rope_rows_grouped(const bf16* x, const float* cos, const float* sin, int64_t seq,
                                         int64_t heads, int64_t dim, int64_t row_begin, int64_t row_end, bf16* y) {
  const int64_t half = dim / 2;
  const int64_t group = std::max<int64_t>(1, kPairs / half);
  alignas(64) float products[4 * kPairs];  // a cos, b sin, b cos, a sin: each n of the group's pairs
  alignas(64) bf16 narrowed[4 * kPairs];
  alignas(64) float sums[2 * kPairs];  // as the output lies: per head, its first halves then its second
  for (int64_t row = row_begin; row < row_end; ++row) {
    const float* c = cos + (row % seq) * half;
    const float* s = sin + (row % seq) * half;
    for (int64_t h0 = 0; h0 < heads; h0 += group) {
      const int64_t count = std::min(group, heads - h0), n = count * half;
      const bf16* x_group = x + (row * heads + h0) * dim;
      for (int64_t k = 0; k < count; ++k) {
        const bf16* x1 = x_group + k * dim;
        const bf16* x2 = x1 + half;
        float* p = products + k * half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          float a = to_f32(x1[i]), b = to_f32(x2[i]);
          p[i] = a * c[i];
          p[n + i] = b * s[i];
          p[2 * n + i] = b * c[i];
          p[3 * n + i] = a * s[i];
        }
      }
      narrow_to_bf16(products, narrowed, 4 * n);
      widen_bf16(narrowed, products, 4 * n);
      for (int64_t k = 0; k < count; ++k) {
        const float* p = products + k * half;
        float* out = sums + k * dim;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          out[i] = p[i] - p[n + i];
          out[half + i] = p[2 * n + i] + p[3 * n + i];
        }
      }
      narrow_to_bf16(sums, y + (row * heads + h0) * dim, 2 * n);
    }
  }
}

// A cos/sin table and what it is a function of.
struct RopeTable {
  std::vector<int32_t> positions;
  std::vector<float> inv_freq;
  bool inverse = false;
  DType dtype = DType::F32;
  std::vector<float> cos, sin;  // [positions][D/2]
};

constexpr size_t kKeptTables = 4;  // forward and inverse, for two position sets

template <typename T>
void build_table(RopeTable& table) {
  const auto seq = static_cast<int64_t>(table.positions.size());
  const auto half = static_cast<int64_t>(table.inv_freq.size());
  table.cos.resize(static_cast<size_t>(seq * half));
  table.sin.resize(static_cast<size_t>(seq * half));
  parallel_chunks(seq, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, half)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        RopeCosSin angle = rope_cos_sin(table.positions[static_cast<size_t>(t)],
                                        table.inv_freq[static_cast<size_t>(i)], table.inverse);
        table.cos[static_cast<size_t>(t * half + i)] = rounded<T>(angle.cos);
        table.sin[static_cast<size_t>(t * half + i)] = rounded<T>(angle.sin);
      }
    }
  });
}

// The calling thread's table for these positions and params, most recently used first.
template <typename T>
const RopeTable& table_for(const RopeParams& params, const int32_t* positions, int64_t seq) {
  thread_local std::vector<RopeTable> kept;
  std::vector<float> inv_freq = rope_inv_freq(params);
  const DType dtype = dtype_of<T>();
  auto same = [&](const RopeTable& table) {
    return table.dtype == dtype && table.inverse == params.inverse && table.inv_freq == inv_freq &&
           static_cast<int64_t>(table.positions.size()) == seq &&
           std::equal(table.positions.begin(), table.positions.end(), positions);
  };
  auto found = std::find_if(kept.begin(), kept.end(), same);
  if (found == kept.end()) {
    if (kept.size() < kKeptTables) kept.emplace_back();
    found = kept.end() - 1;  // the least recently used
    found->positions.assign(positions, positions + seq);
    found->inv_freq = std::move(inv_freq);
    found->inverse = params.inverse;
    found->dtype = dtype;
    build_table<T>(*found);
  }
  std::rotate(kept.begin(), found, found + 1);
  return kept.front();
}

template <typename T>
void rope(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  RopeParams params = rope_params("rope", attrs);
  const int64_t seq = in[1].numel();
  const RopeTable& table = table_for<T>(params, in[1].data<int32_t>(), seq);
  const int64_t heads = in[0].size(2) / params.head_dim, width = in[0].size(2);
  const T* x = in[0].data<T>();
  T* y = out[0].data<T>();
  parallel_chunks(leading_rows(in[0]), std::max<int64_t>(1, kGrain / std::max<int64_t>(1, width)),
                  [&](int64_t begin, int64_t end) {
                    if constexpr (std::is_same_v<T, bf16>) {
                      if (params.head_dim / 2 <= kPairs) {
                        return rope_rows_grouped(x, table.cos.data(), table.sin.data(), seq, heads, params.head_dim,
                                                 begin, end, y);
                      }
                    }
                    rope_rows(x, table.cos.data(), table.sin.data(), seq, heads, params.head_dim, begin, end, y);
                  });
}

}  // namespace

void register_rope(Backend& backend) {
  backend.add_kernel("rope", DType::F32, rope<float>);
  backend.add_kernel("rope", DType::BF16, rope<bf16>);
}

}  // namespace strata::cpu
