// swiglu and swiglu_backward: streaming loops over fixed chunks, for f32 and
// bf16 storage (computed in f32, rounded once per output; see convert.h).
// Outputs may alias inputs element for element: each element's inputs are all
// read before its outputs are written.
#include <algorithm>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int64_t kGrain = 16384;

// Outputs are computed a chunk at a time in f32 (convert.h's chunk_output).
// silu(g) = g s with s = 1 / (1 + e^-g); e^-g saturates (s -> 0) rather than overflowing.
template <typename T>
STRATA_CPU_CLONES void swiglu_range(const T* gate, const T* up, T* y, int64_t begin, int64_t end) {
  alignas(64) float buffer[kOutputChunk];
  for (int64_t chunk = begin; chunk < end; chunk += kOutputChunk) {
    const int64_t count = std::min(kOutputChunk, end - chunk);
    float* out = chunk_output(y + chunk, buffer);
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) {
      float g = to_f32(gate[chunk + j]);
      float s = 1.0f / (1.0f + exp_approx(-g));
      out[j] = g * s * to_f32(up[chunk + j]);
    }
    store_chunk(buffer, y + chunk, count);
  }
}

// 1 - s is written as e^-g s, which does not cancel where s nears 1.
template <typename T>
STRATA_CPU_CLONES void swiglu_backward_range(const T* dy, const T* gate, const T* up, T* dgate, T* dup, int64_t begin,
                                             int64_t end) {
  alignas(64) float gate_buffer[kOutputChunk];
  alignas(64) float up_buffer[kOutputChunk];
  for (int64_t chunk = begin; chunk < end; chunk += kOutputChunk) {
    const int64_t count = std::min(kOutputChunk, end - chunk);
    float* gate_out = chunk_output(dgate + chunk, gate_buffer);
    float* up_out = chunk_output(dup + chunk, up_buffer);
#pragma omp simd
    for (int64_t j = 0; j < count; ++j) {
      float d = to_f32(dy[chunk + j]), g = to_f32(gate[chunk + j]), u = to_f32(up[chunk + j]);
      float e = exp_approx(-g);
      float s = 1.0f / (1.0f + e);
      gate_out[j] = d * u * s * (1.0f + g * (e * s));
      up_out[j] = d * g * s;
    }
    store_chunk(gate_buffer, dgate + chunk, count);
    store_chunk(up_buffer, dup + chunk, count);
  }
}

template <typename T>
void swiglu(const Tensors& in, const Tensors& out, const Attrs&) {
  const T* gate = in[0].data<T>();
  const T* up = in[1].data<T>();
  T* y = out[0].data<T>();
  parallel_chunks(in[0].numel(), kGrain, [&](int64_t begin, int64_t end) { swiglu_range(gate, up, y, begin, end); });
}

template <typename T>
void swiglu_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const T* dy = in[0].data<T>();
  const T* gate = in[1].data<T>();
  const T* up = in[2].data<T>();
  T* dgate = out[0].data<T>();
  T* dup = out[1].data<T>();
  parallel_chunks(in[0].numel(), kGrain,
                  [&](int64_t begin, int64_t end) { swiglu_backward_range(dy, gate, up, dgate, dup, begin, end); });
}

}  // namespace

void register_swiglu(Backend& backend) {
  backend.add_kernel("swiglu", DType::F32, swiglu<float>);
  backend.add_kernel("swiglu", DType::BF16, swiglu<bf16>);
  backend.add_kernel("swiglu_backward", DType::F32, swiglu_backward<float>);
  backend.add_kernel("swiglu_backward", DType::BF16, swiglu_backward<bf16>);
}

}  // namespace strata::cpu
