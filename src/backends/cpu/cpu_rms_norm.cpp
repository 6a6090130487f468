// rms_norm and rms_norm_backward over the last dim, and their residual-fused
// forms add_rms_norm and rms_norm_backward_add (graph/fusion.h), for f32 and
// bf16 storage (add_rms_norm's y may be narrower: a cast it absorbed). Rows
// are normalised in f32 as LlamaRMSNorm does (the sum of squares in f32,
// h = x * rstd rounded to x's dtype before the weight multiplies it). The
// fused kernels run the unfused ones' row routines on the stored sum, or with
// dx starting from dres. The backward recomputes rstd and runs fixed blocks
// of kRowGrain rows; dweight is summed per block, then over blocks in block
// order (f64), so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cpu/block_sums.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int64_t kRowGrain = 16;

// 1 / sqrt(mean(row^2) + eps). Inlined into the calling clone so it vectorises for its ISA.
template <typename V>
__attribute__((always_inline)) inline float row_rstd(const V* row, int64_t width, float eps) {
  float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < width; ++c) {
    float v = to_f32(row[c]);
    squares += v * v;
  }
  return 1.0f / std::sqrt(squares / static_cast<float>(width) + eps);
}

// y = weight * round_X(row * rstd), rounded to X, then to Y (add_rms_norm's
// y_dtype; rounding to f32 is none, so an f32 X rounds once).
// In bf16 (y then bf16 too) both roundings narrow a chunk at a time (convert.h).
template <typename V, typename X, typename Y = X>
__attribute__((always_inline)) inline void normalize_row(const V* row, const X* weight, int64_t width, float eps,
                                                         Y* y_row) {
  float rstd = row_rstd(row, width, eps);
  if constexpr (std::is_same_v<X, bf16>) {
    static_assert(std::is_same_v<Y, bf16>, "y is no wider than x");
    alignas(64) float values[kOutputChunk];
    alignas(64) bf16 h[kOutputChunk];
    for (int64_t chunk = 0; chunk < width; chunk += kOutputChunk) {
      const int64_t count = std::min(kOutputChunk, width - chunk);
#pragma omp simd
      for (int64_t j = 0; j < count; ++j) values[j] = to_f32(row[chunk + j]) * rstd;
      narrow_to_bf16(values, h, count);
#pragma omp simd
      for (int64_t j = 0; j < count; ++j) values[j] = to_f32(weight[chunk + j]) * to_f32(h[j]);
      narrow_to_bf16(values, y_row + chunk, count);
    }
  } else {
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) {
      const X y = from_f32<X>(to_f32(weight[c]) * to_f32(from_f32<X>(to_f32(row[c]) * rstd)));
      y_row[c] = from_f32<Y>(to_f32(y));
    }
  }
}

template <typename X>
STRATA_CPU_CLONES void rms_norm_rows(const X* x, const X* weight, int64_t width, float eps, int64_t row_begin,
                                     int64_t row_end, X* y) {
  for (int64_t r = row_begin; r < row_end; ++r) normalize_row(x + r * width, weight, width, eps, y + r * width);
}

// Rows [row_begin, row_end) of add_rms_norm; r row `row mod r_rows` pairs with
// x row `row`. `rounded` (width floats) holds the stored sum of the current row.
template <typename X, typename R, typename Y>
STRATA_CPU_CLONES void add_rms_norm_rows(const X* x, const R* r, int64_t r_rows, const X* weight, int64_t width,
                                         float eps, int64_t row_begin, int64_t row_end, X* sum, Y* y,
                                         float* rounded) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const X* x_row = x + row * width;
    const R* r_row = r + (row % r_rows) * width;
    store_residual_sum(x_row, r_row, width, sum + row * width, rounded);
    normalize_row(rounded, weight, width, eps, y + row * width);
  }
}

// dx for rows [row_begin, row_end) (plus dres when kAddResidual), and that
// block's sums of dy * round_X(h) into partial[0..width). f32 dy is read in
// place; other dtypes are widened once per row into `dy_scratch` (width
// floats; convert.h's f32_row).
template <typename DY, typename X, bool kAddResidual>
STRATA_CPU_CLONES void rms_norm_backward_rows(const DY* dy, const X* x, const X* weight, const X* dres, int64_t width,
                                              float eps, int64_t row_begin, int64_t row_end, X* dx, float* partial,
                                              float* dy_scratch) {
  alignas(64) float buffer[kOutputChunk];
  for (int64_t c = 0; c < width; ++c) partial[c] = 0.0f;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* dy_row = f32_row(dy + r * width, width, dy_scratch);
    const X* x_row = x + r * width;
    float rstd = row_rstd(x_row, width, eps);
    float mean_gh = 0.0f;  // of weight * dy * h
#pragma omp simd reduction(+ : mean_gh)
    for (int64_t c = 0; c < width; ++c) {
      float h = to_f32(x_row[c]) * rstd;
      mean_gh += to_f32(weight[c]) * dy_row[c] * h;
      partial[c] += dy_row[c] * to_f32(from_f32<X>(h));
    }
    mean_gh /= static_cast<float>(width);
    X* dx_row = dx + r * width;
    for (int64_t chunk = 0; chunk < width; chunk += kOutputChunk) {  // convert.h's chunk_output
      const int64_t count = std::min(kOutputChunk, width - chunk);
      float* out = chunk_output(dx_row + chunk, buffer);
#pragma omp simd
      for (int64_t j = 0; j < count; ++j) {
        const int64_t c = chunk + j;
        float h = to_f32(x_row[c]) * rstd;
        float local = rstd * (to_f32(weight[c]) * dy_row[c] - h * mean_gh);
        if constexpr (kAddResidual) {
          out[j] = to_f32(dres[r * width + c]) + local;
        } else {
          out[j] = local;
        }
      }
      store_chunk(buffer, dx_row + chunk, count);
    }
  }
}

template <typename DY, typename X, bool kAddResidual>
void rms_norm_backward_blocks(const Tensors& in, const X* dres, const Tensors& out, const Attrs& attrs) {
  const DY* dy = in[0].data<DY>();
  const X* x = in[1].data<X>();
  const X* weight = in[2].data<X>();
  X* dx = out[0].data<X>();
  int64_t rows = leading_rows(in[1]), width = in[1].size(-1);
  auto eps = static_cast<float>(attrs.get_float("eps"));
  int64_t blocks = std::max<int64_t>(1, (rows + kRowGrain - 1) / kRowGrain);
  float* partials = call_scratch<float>(0, static_cast<size_t>(blocks * width));
  parallel_chunks(blocks, 1, [&](int64_t block, int64_t) {
    float* dy_scratch = std::is_same_v<DY, float> ? nullptr : thread_scratch<float>(0, static_cast<size_t>(width));
    rms_norm_backward_rows<DY, X, kAddResidual>(dy, x, weight, dres, width, eps, block * kRowGrain,
                                                std::min(rows, (block + 1) * kRowGrain), dx, partials + block * width,
                                                dy_scratch);
  });
  X* dweight = out[1].data<X>();
  parallel_chunks(width, kPartialColumns,
                  [&](int64_t begin, int64_t end) { sum_block_partials(partials, blocks, width, begin, end, dweight); });
}

template <typename X>
void rms_norm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  int64_t width = in[0].size(-1);
  auto eps = static_cast<float>(attrs.get_float("eps"));
  const X* x = in[0].data<X>();
  const X* weight = in[1].data<X>();
  X* y = out[0].data<X>();
  parallel_chunks(leading_rows(in[0]), kRowGrain,
                  [&](int64_t begin, int64_t end) { rms_norm_rows(x, weight, width, eps, begin, end, y); });
}

template <typename X>
void rms_norm_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  rms_norm_backward_blocks<X, X, /*kAddResidual=*/false>(in, /*dres=*/nullptr, out, attrs);
}

template <typename X, typename R, typename Y>
void add_rms_norm_typed(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  int64_t width = in[0].size(-1);
  int64_t r_rows = in[1].numel() / width;
  auto eps = static_cast<float>(attrs.get_float("eps"));
  const X* x = in[0].data<X>();
  const R* r = in[1].data<R>();
  const X* weight = in[2].data<X>();
  X* sum = out[0].data<X>();
  Y* y = out[1].data<Y>();
  parallel_chunks(leading_rows(in[0]), kRowGrain, [&](int64_t begin, int64_t end) {
    float* rounded = thread_scratch<float>(0, static_cast<size_t>(width));
    add_rms_norm_rows(x, r, r_rows, weight, width, eps, begin, end, sum, y, rounded);
  });
}

// y may be narrower than x (a narrowing cast the fusion pass absorbed).
template <typename X, typename R>
void add_rms_norm_with_r(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  switch (out[1].dtype()) {
    case DType::F32:
      if constexpr (std::is_same_v<X, float>) return add_rms_norm_typed<X, R, float>(in, out, attrs);
      break;
    case DType::BF16: return add_rms_norm_typed<X, R, bf16>(in, out, attrs);
    default: break;
  }
  STRATA_CHECK(false, "add_rms_norm: y is {} for x {}", dtype_name(out[1].dtype()), dtype_name(in[0].dtype()));
}

// r may be narrower than x (a widening cast the fusion pass absorbed).
template <typename X>
void add_rms_norm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  switch (in[1].dtype()) {
    case DType::F32:
      if constexpr (std::is_same_v<X, float>) return add_rms_norm_with_r<X, float>(in, out, attrs);
      break;
    case DType::BF16: return add_rms_norm_with_r<X, bf16>(in, out, attrs);
    case DType::F16:
      if constexpr (std::is_same_v<X, float>) return add_rms_norm_with_r<X, fp16>(in, out, attrs);
      break;
    default: break;
  }
  STRATA_CHECK(false, "add_rms_norm: r is {} for x {}", dtype_name(in[1].dtype()), dtype_name(in[0].dtype()));
}

// dy may be narrower than x, likewise.
template <typename X>
void rms_norm_backward_add(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const X* dres = in[3].data<X>();
  switch (in[0].dtype()) {
    case DType::F32:
      if constexpr (std::is_same_v<X, float>) return rms_norm_backward_blocks<float, X, true>(in, dres, out, attrs);
      break;
    case DType::BF16: return rms_norm_backward_blocks<bf16, X, true>(in, dres, out, attrs);
    case DType::F16:
      if constexpr (std::is_same_v<X, float>) return rms_norm_backward_blocks<fp16, X, true>(in, dres, out, attrs);
      break;
    default: break;
  }
  STRATA_CHECK(false, "rms_norm_backward_add: dy is {} for x {}", dtype_name(in[0].dtype()),
               dtype_name(in[1].dtype()));
}

}  // namespace

void register_rms_norm(Backend& backend) {
  backend.add_kernel("rms_norm", DType::F32, rms_norm<float>);
  backend.add_kernel("rms_norm", DType::BF16, rms_norm<bf16>);
  backend.add_kernel("rms_norm_backward", DType::F32, rms_norm_backward<float>);
  backend.add_kernel("rms_norm_backward", DType::BF16, rms_norm_backward<bf16>);
  backend.add_kernel("add_rms_norm", DType::F32, add_rms_norm<float>);
  backend.add_kernel("add_rms_norm", DType::BF16, add_rms_norm<bf16>);
  backend.add_kernel("rms_norm_backward_add", DType::F32, rms_norm_backward_add<float>);
  backend.add_kernel("rms_norm_backward_add", DType::BF16, rms_norm_backward_add<bf16>);
}

}  // namespace strata::cpu
