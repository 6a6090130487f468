// Moving tokens to and from the experts' rows in f32, in parallel over fixed chunks of tokens (each
// token owns its output row and its assignments' rows, so no two iterations write the same place):
// moe_permute, moe_combine and their backwards; and the shared expert's sigmoid_gate, f32 and bf16.
#include <cmath>
#include <cstring>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"

namespace strata::cpu {

namespace {

constexpr int64_t kTokenGrain = 64;

// Checks every row lies in [-1, buffer_rows) and returns how many are kept: they fill the buffer's
// first rows (moe_route's plan), the rest of it is zero.
int64_t kept_rows(const std::string& op, const Tensor& rows, int64_t buffer_rows) {
  const int32_t* row = rows.data<int32_t>();
  int64_t kept = 0;
  for (int64_t a = 0; a < rows.numel(); ++a) {
    if (row[a] < -1 || row[a] >= buffer_rows) {
      fail("op '{}': input 'rows' holds {} at assignment {}, outside [-1, {})", op, row[a], a, buffer_rows);
    }
    kept += row[a] >= 0;
  }
  return kept;
}

void zero_rows_from(float* buffer, int64_t first, int64_t rows, int64_t channels) {
  std::memset(buffer + first * channels, 0, static_cast<size_t>((rows - first) * channels) * sizeof(float));
}

void permute(const Tensors& in, const Tensors& out, const Attrs&) {
  const int64_t channels = in[0].size(-1), k = in[1].size(-1), buffer_rows = out[0].size(0);
  const int64_t kept = kept_rows("moe_permute", in[1], buffer_rows);
  const float* x = in[0].data<float>();
  const int32_t* rows = in[1].data<int32_t>();
  float* xs = out[0].data<float>();
  parallel_chunks(in[1].numel() / k, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t a = begin * k; a < end * k; ++a) {
      if (rows[a] >= 0) std::memcpy(xs + rows[a] * channels, x + a / k * channels, static_cast<size_t>(channels) * 4);
    }
  });
  zero_rows_from(xs, kept, buffer_rows, channels);
}

// y[t] = the sum over token t's kept assignments of weight * ys[row] (unit weights for nullptr).
void combine_rows(const float* ys, const float* weights, const int32_t* rows, int64_t tokens, int64_t k,
                  int64_t channels, float* y) {
  parallel_chunks(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* out = y + t * channels;
      std::fill(out, out + channels, 0.0f);
      for (int64_t a = t * k; a < (t + 1) * k; ++a) {
        if (rows[a] < 0) continue;
        const float weight = weights == nullptr ? 1.0f : weights[a];
        const float* row = ys + rows[a] * channels;
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c) out[c] += weight * row[c];
      }
    }
  });
}

void permute_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  kept_rows("moe_permute_backward", in[1], in[0].size(0));
  const int64_t k = in[1].size(-1);
  combine_rows(in[0].data<float>(), nullptr, in[1].data<int32_t>(), in[1].numel() / k, k, in[0].size(1),
               out[0].data<float>());
}

void combine(const Tensors& in, const Tensors& out, const Attrs&) {
  kept_rows("moe_combine", in[2], in[0].size(0));
  const int64_t k = in[2].size(-1);
  combine_rows(in[0].data<float>(), in[1].data<float>(), in[2].data<int32_t>(), in[2].numel() / k, k, in[0].size(1),
               out[0].data<float>());
}

void combine_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const int64_t channels = in[1].size(1), k = in[3].size(-1), buffer_rows = in[1].size(0);
  const int64_t kept = kept_rows("moe_combine_backward", in[3], buffer_rows);
  const float* dy = in[0].data<float>();
  const float* ys = in[1].data<float>();
  const float* weights = in[2].data<float>();
  const int32_t* rows = in[3].data<int32_t>();
  float* dys = out[0].data<float>();
  float* dweights = out[1].data<float>();
  parallel_chunks(in[3].numel() / k, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t a = begin * k; a < end * k; ++a) {
      dweights[a] = 0.0f;
      if (rows[a] < 0) continue;
      const float* d = dy + a / k * channels;
      const float* y = ys + rows[a] * channels;
      float* dr = dys + rows[a] * channels;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < channels; ++c) {
        dr[c] = weights[a] * d[c];
        dot += d[c] * y[c];
      }
      dweights[a] = dot;
    }
  });
  zero_rows_from(dys, kept, buffer_rows, channels);
}

// sigmoid(gate) rounded to T, as PyTorch's sigmoid returns it in T.
template <typename T>
float rounded_sigmoid(T gate) {
  return to_f32(from_f32<T>(1.0f / (1.0f + std::exp(-to_f32(gate)))));
}

template <typename T>
void sigmoid_gate(const Tensors& in, const Tensors& out, const Attrs&) {
  const int64_t channels = in[0].size(-1);
  const T* x = in[0].data<T>();
  const T* gate = in[1].data<T>();
  T* y = out[0].data<T>();
  parallel_chunks(in[1].numel(), kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float s = rounded_sigmoid(gate[t]);
      for (int64_t c = t * channels; c < (t + 1) * channels; ++c) y[c] = from_f32<T>(s * to_f32(x[c]));
    }
  });
}

template <typename T>
void sigmoid_gate_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const int64_t channels = in[1].size(-1);
  const T* dy = in[0].data<T>();
  const T* x = in[1].data<T>();
  const T* gate = in[2].data<T>();
  T* dx = out[0].data<T>();
  T* dgate = out[1].data<T>();
  parallel_chunks(in[2].numel(), kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float s = rounded_sigmoid(gate[t]);
      float dot = 0.0f;
      for (int64_t c = t * channels; c < (t + 1) * channels; ++c) {
        const float d = to_f32(dy[c]);
        dot += d * to_f32(x[c]);
        dx[c] = from_f32<T>(d * s);
      }
      dgate[t] = from_f32<T>(dot * s * (1.0f - s));
    }
  });
}

}  // namespace

void register_moe_permute(Backend& backend) {
  backend.add_kernel("moe_permute", DType::F32, permute);
  backend.add_kernel("moe_permute_backward", DType::F32, permute_backward);
  backend.add_kernel("moe_combine", DType::F32, combine);
  backend.add_kernel("moe_combine_backward", DType::F32, combine_backward);
  backend.add_kernel("sigmoid_gate", DType::F32, sigmoid_gate<float>);
  backend.add_kernel("sigmoid_gate", DType::BF16, sigmoid_gate<bf16>);
  backend.add_kernel("sigmoid_gate_backward", DType::F32, sigmoid_gate_backward<float>);
  backend.add_kernel("sigmoid_gate_backward", DType::BF16, sigmoid_gate_backward<bf16>);
}

}  // namespace strata::cpu
