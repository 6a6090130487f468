// swiglu and swiglu_backward: streaming loops over fixed chunks, for f32 and
// bf16 storage (computed in f32, rounded once per output; see convert.h).
// Outputs may alias inputs element for element: each element's inputs are all
// read before its outputs are written.
#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

namespace {

constexpr int64_t kGrain = 16384;

// silu(g) = g s with s = 1 / (1 + e^-g); e^-g saturates (s -> 0) rather than overflowing.
template <typename T>
STRATA_CPU_CLONES void swiglu_range(const T* gate, const T* up, T* y, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float g = to_f32(gate[i]);
    float s = 1.0f / (1.0f + exp_approx(-g));
    y[i] = from_f32<T>(g * s * to_f32(up[i]));
  }
}

// 1 - s is written as e^-g s, which does not cancel where s nears 1.
template <typename T>
STRATA_CPU_CLONES void swiglu_backward_range(const T* dy, const T* gate, const T* up, T* dgate, T* dup, int64_t begin,
                                             int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float d = to_f32(dy[i]), g = to_f32(gate[i]), u = to_f32(up[i]);
    float e = exp_approx(-g);
    float s = 1.0f / (1.0f + e);
    dgate[i] = from_f32<T>(d * u * s * (1.0f + g * (e * s)));
    dup[i] = from_f32<T>(d * g * s);
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
