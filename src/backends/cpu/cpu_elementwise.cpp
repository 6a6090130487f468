// add, scale, gelu and gelu_backward: streaming loops over fixed chunks, for
// f32 and bf16 storage (computed in f32, rounded once per output; see
// convert.h). Outputs may alias inputs element for element (each element is
// read before it is written), which `omp simd` tells the vectoriser.
#include <algorithm>
#include <cstring>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"
#include "ops/collective_group.h"
#include "ops/expert_exchange.h"

namespace strata::cpu {

namespace {

constexpr int64_t kGrain = 16384;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// out[e] = a[e] + b[e mod b_count] over [begin, end), one contiguous run of b
// (at most a chunk) at a time. (Outputs a chunk at a time in f32: convert.h's chunk_output.)
template <typename T>
STRATA_CPU_CLONES void add_range(const T* a, const T* b, int64_t b_count, T* out, int64_t begin, int64_t end) {
  alignas(64) float buffer[kOutputChunk];
  int64_t column = begin % b_count;
  for (int64_t e = begin; e < end;) {
    int64_t run = std::min({end - e, b_count - column, kOutputChunk});
    const T* a_run = a + e;
    const T* b_run = b + column;
    float* out_run = chunk_output(out + e, buffer);
#pragma omp simd
    for (int64_t i = 0; i < run; ++i) out_run[i] = to_f32(a_run[i]) + to_f32(b_run[i]);
    store_chunk(buffer, out + e, run);
    e += run;
    column = (column + run) % b_count;
  }
}

template <typename T>
STRATA_CPU_CLONES void scale_range(const T* x, float factor, T* out, int64_t begin, int64_t end) {
  alignas(64) float buffer[kOutputChunk];
  for (int64_t chunk = begin; chunk < end; chunk += kOutputChunk) {
    const int64_t count = std::min(kOutputChunk, end - chunk);
    float* values = chunk_output(out + chunk, buffer);
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) values[i] = to_f32(x[chunk + i]) * factor;
    store_chunk(buffer, out + chunk, count);
  }
}

// With u = sqrt(2/pi) (x + 0.044715 x^3), E = e^(-2u) and s = 1 / (1 + E):
// 1 + tanh(u) = 2s and 1 - tanh(u)^2 = 4 s (1 - s) = 4 s E s. Written this
// way nothing cancels in either tail, so the relative error stays a few ulps
// where gelu and its derivative approach 0.
// (Outputs a chunk at a time in f32: convert.h's chunk_output.)
template <typename T>
STRATA_CPU_CLONES void gelu_range(const T* x, T* y, int64_t begin, int64_t end) {
  alignas(64) float buffer[kOutputChunk];
  for (int64_t chunk = begin; chunk < end; chunk += kOutputChunk) {
    const int64_t count = std::min(kOutputChunk, end - chunk);
    float* out = chunk_output(y + chunk, buffer);
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) {
      float v = to_f32(x[chunk + i]);
      float e = exp_approx(-2.0f * kGeluScale * (v + kGeluCubic * v * v * v));
      out[i] = v / (1.0f + e);
    }
    store_chunk(buffer, y + chunk, count);
  }
}

template <typename T>
STRATA_CPU_CLONES void gelu_backward_range(const T* dy, const T* x, T* dx, int64_t begin, int64_t end) {
  alignas(64) float buffer[kOutputChunk];
  for (int64_t chunk = begin; chunk < end; chunk += kOutputChunk) {
    const int64_t count = std::min(kOutputChunk, end - chunk);
    float* out = chunk_output(dx + chunk, buffer);
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) {
      float v = to_f32(x[chunk + i]);
      float e = exp_approx(-2.0f * kGeluScale * (v + kGeluCubic * v * v * v));
      float s = 1.0f / (1.0f + e);
      float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
      float one_minus_s = e * s;  // in (0, 1]: e saturates below the float range
      out[i] = to_f32(dy[chunk + i]) * s * (1.0f + 2.0f * v * du_dx * one_minus_s);
    }
    store_chunk(buffer, dx + chunk, count);
  }
}

template <typename T>
void add(const Tensors& in, const Tensors& out, const Attrs&) {
  const T* a = in[0].data<T>();
  const T* b = in[1].data<T>();
  T* result = out[0].data<T>();
  int64_t b_count = in[1].numel();
  if (b_count == 0) return;  // then a is empty too
  parallel_chunks(in[0].numel(), kGrain,
                  [&](int64_t begin, int64_t end) { add_range(a, b, b_count, result, begin, end); });
}

template <typename T>
void scale(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const T* x = in[0].data<T>();
  T* result = out[0].data<T>();
  auto factor = static_cast<float>(attrs.get_float("factor"));
  parallel_chunks(in[0].numel(), kGrain,
                  [&](int64_t begin, int64_t end) { scale_range(x, factor, result, begin, end); });
}

template <typename T>
void gelu(const Tensors& in, const Tensors& out, const Attrs&) {
  const T* x = in[0].data<T>();
  T* y = out[0].data<T>();
  parallel_chunks(in[0].numel(), kGrain, [&](int64_t begin, int64_t end) { gelu_range(x, y, begin, end); });
}

template <typename T>
void gelu_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const T* dy = in[0].data<T>();
  const T* x = in[1].data<T>();
  T* dx = out[0].data<T>();
  parallel_chunks(in[0].numel(), kGrain,
                  [&](int64_t begin, int64_t end) { gelu_backward_range(dy, x, dx, begin, end); });
}

// The same bytes under another shape: a copy, none when the planner let y take over x.
void reshape(const Tensors& in, const Tensors& out, const Attrs&) {
  if (in[0].raw() != out[0].raw()) std::memcpy(out[0].raw(), in[0].raw(), in[0].nbytes());
}

}  // namespace

void register_elementwise(Backend& backend) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) backend.add_kernel("reshape", dtype, reshape);
  backend.add_kernel("add", DType::F32, add<float>);
  backend.add_kernel("scale", DType::F32, scale<float>);
  backend.add_kernel("gelu", DType::F32, gelu<float>);
  backend.add_kernel("gelu_backward", DType::F32, gelu_backward<float>);
  backend.add_kernel("add", DType::BF16, add<bf16>);
  backend.add_kernel("scale", DType::BF16, scale<bf16>);
  backend.add_kernel("gelu", DType::BF16, gelu<bf16>);
  backend.add_kernel("gelu_backward", DType::BF16, gelu_backward<bf16>);
  // Collectives: the group does the work, the same on every backend.
  for (DType dtype : {DType::F32, DType::BF16}) {
    backend.add_kernel("all_reduce", dtype, all_reduce_kernel);
    backend.add_kernel("copy_to_group", dtype, copy_to_group_kernel);
    backend.add_kernel("all_gather", dtype, all_gather_kernel);
    backend.add_kernel("gather_to_group", dtype, all_gather_kernel);
    backend.add_kernel("reduce_scatter", dtype, reduce_scatter_kernel);
    backend.add_kernel("split_to_group", dtype, split_to_group_kernel);
    backend.add_kernel("all_to_all", dtype, all_to_all_kernel);
    backend.add_kernel("send_to_stage", dtype, send_to_stage_kernel);
    backend.add_kernel("receive_from_stage", dtype, receive_from_stage_kernel);
    backend.add_kernel("moe_dispatch_exchange", dtype, moe_dispatch_exchange_kernel);
    backend.add_kernel("moe_return_exchange", dtype, moe_return_exchange_kernel);
  }
}

}  // namespace strata::cpu
