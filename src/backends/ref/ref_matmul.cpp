#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"

namespace strata::ref {

namespace {

// out [M, N] = a [M, K] b, with b stored [K, N], or [N, K] when trans_b. Each
// output sums over p in ascending order; the loop order only keeps reads of b
// contiguous.
std::vector<double> gemm(const std::vector<double>& a, const std::vector<double>& b, size_t m, size_t n, size_t k,
                         bool trans_b) {
  std::vector<double> out(m * n, 0.0);
  for (size_t i = 0; i < m; ++i) {
    const double* a_row = a.data() + i * k;
    double* out_row = out.data() + i * n;
    if (trans_b) {
      for (size_t j = 0; j < n; ++j) {
        for (size_t p = 0; p < k; ++p) out_row[j] += a_row[p] * b[j * k + p];
      }
    } else {
      for (size_t p = 0; p < k; ++p) {
        for (size_t j = 0; j < n; ++j) out_row[j] += a_row[p] * b[p * n + j];
      }
    }
  }
  return out;
}

// out [K, N] = sum over rows r of a[r, :]^T b[r, :], a [R, K], b [R, N].
std::vector<double> gemm_trans_a(const std::vector<double>& a, const std::vector<double>& b, size_t rows, size_t k,
                                 size_t n) {
  std::vector<double> out(k * n, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < k; ++i) {
      for (size_t j = 0; j < n; ++j) out[i * n + j] += a[r * k + i] * b[r * n + j];
    }
  }
  return out;
}

// The product of all but the last dim: the row count once leading dims are merged.
size_t leading_rows(const Tensor& tensor) {
  return static_cast<size_t>(shape_numel(Shape(tensor.shape().begin(), tensor.shape().end() - 1)));
}

void matmul(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  std::vector<double> a = load(in[0]);
  std::vector<double> b = load(in[1]);
  size_t a_cols = static_cast<size_t>(in[0].size(-1));
  size_t b_cols = static_cast<size_t>(in[1].size(-1));
  if (attrs.get_bool("trans_a")) {
    store(out[0], gemm_trans_a(a, b, leading_rows(in[0]), a_cols, b_cols));
    return;
  }
  size_t n = static_cast<size_t>(out[0].size(-1));
  store(out[0], gemm(a, b, leading_rows(in[0]), n, a_cols, attrs.get_bool("trans_b")));
}

void linear(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> x = load(in[0]);
  std::vector<double> w = load(in[1]);
  std::vector<double> bias = load(in[2]);
  size_t k = static_cast<size_t>(in[1].size(0));
  size_t n = bias.size();
  std::vector<double> y = gemm(x, w, leading_rows(in[0]), n, k, false);
  for (size_t i = 0; i < y.size(); ++i) y[i] += bias[i % n];
  store(out[0], y);
}

}  // namespace

void register_matmul(Backend& backend) {
  add_float_kernels(backend, "matmul", matmul);
  add_float_kernels(backend, "linear", linear);
}

}  // namespace strata::ref
