// matmul and linear: f32 on oneDNN's sgemm (see gemm.h), bf16 on oneDNN's
// matmul primitive (see bf16_gemm.h).
#include <cstring>

#include "backends/cpu/bf16_gemm.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/parallel.h"

namespace strata::cpu {

namespace {

void matmul(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  int64_t a_last = a.size(-1);
  int64_t a_rows = leading_rows(a);
  if (attrs.get_bool("trans_a")) {
    // out [K, N] = a^T b, summing over the rows both share.
    int64_t n = b.size(-1);
    sgemm(true, false, a_last, n, a_rows, a.data<float>(), b.data<float>(), 0.0f, out[0].data<float>());
    return;
  }
  bool trans_b = attrs.get_bool("trans_b");
  int64_t n = trans_b ? b.size(0) : b.size(1);
  sgemm(false, trans_b, a_rows, n, a_last, a.data<float>(), b.data<float>(), 0.0f, out[0].data<float>());
}

// The bias is copied into every output row and the GEMM accumulates onto it
// (beta = 1): measured as fast as oneDNN's fused-bias matmul.
void linear(const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& x = in[0];
  int64_t k = x.size(-1);
  int64_t n = in[1].size(1);
  int64_t m = leading_rows(x);
  const float* bias = in[2].data<float>();
  float* y = out[0].data<float>();
  size_t row_bytes = static_cast<size_t>(n) * sizeof(float);
  parallel_chunks(m, 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) std::memcpy(y + row * n, bias, row_bytes);
  });
  sgemm(false, false, m, n, k, x.data<float>(), in[1].data<float>(), 1.0f, y);
}

void matmul_bf16(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  int64_t a_last = a.size(-1);
  int64_t a_rows = leading_rows(a);
  if (attrs.get_bool("trans_a")) {
    gemm_bf16(true, false, a_last, b.size(-1), a_rows, a.data<bf16>(), b.data<bf16>(), nullptr, out[0].data<bf16>());
    return;
  }
  bool trans_b = attrs.get_bool("trans_b");
  int64_t n = trans_b ? b.size(0) : b.size(1);
  gemm_bf16(false, trans_b, a_rows, n, a_last, a.data<bf16>(), b.data<bf16>(), nullptr, out[0].data<bf16>());
}

// The bias is the primitive's own, added to the f32 sum before the one
// rounding to bf16.
void linear_bf16(const Tensors& in, const Tensors& out, const Attrs&) {
  const Tensor& x = in[0];
  gemm_bf16(false, false, leading_rows(x), in[1].size(1), x.size(-1), x.data<bf16>(), in[1].data<bf16>(),
            in[2].data<bf16>(), out[0].data<bf16>());
}

}  // namespace

void register_matmul(Backend& backend) {
  backend.add_kernel("matmul", DType::F32, matmul);
  backend.add_kernel("linear", DType::F32, linear);
  backend.add_kernel("matmul", DType::BF16, matmul_bf16);
  backend.add_kernel("linear", DType::BF16, linear_bf16);
}

}  // namespace strata::cpu
