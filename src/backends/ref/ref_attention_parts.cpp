// split_heads, merge_heads, bmm, causal_softmax and causal_softmax_backward:
// the pieces of the unfused attention decomposition, as plain loops in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"

namespace strata::ref {

namespace {

size_t dim(const Tensor& tensor, int64_t axis) { return static_cast<size_t>(tensor.size(axis)); }

// Moves x between the packed [B, T, H*D] and split [B, H, T, D] layouts:
// packed to split when `to_split`, else back.
std::vector<double> move_heads(const std::vector<double>& x, size_t batch, size_t heads, size_t seq,
                               size_t head_dim, bool to_split) {
  std::vector<double> result(x.size());
  for (size_t b = 0; b < batch; ++b) {
    for (size_t h = 0; h < heads; ++h) {
      for (size_t t = 0; t < seq; ++t) {
        for (size_t d = 0; d < head_dim; ++d) {
          size_t packed = (b * seq + t) * heads * head_dim + h * head_dim + d;
          size_t split = ((b * heads + h) * seq + t) * head_dim + d;
          if (to_split) {
            result[split] = x[packed];
          } else {
            result[packed] = x[split];
          }
        }
      }
    }
  }
  return result;
}

// x [B, T, H*D] -> out [B, H, T, D].
void split_heads(const Tensors& in, const Tensors& out, const Attrs&) {
  store(out[0], move_heads(load(in[0]), dim(out[0], 0), dim(out[0], 1), dim(out[0], 2), dim(out[0], 3),
                           /*to_split=*/true));
}

// x [B, H, T, D] -> out [B, T, H*D].
void merge_heads(const Tensors& in, const Tensors& out, const Attrs&) {
  store(out[0], move_heads(load(in[0]), dim(in[0], 0), dim(in[0], 1), dim(in[0], 2), dim(in[0], 3),
                           /*to_split=*/false));
}

void bmm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  bool trans_a = attrs.get_bool("trans_a");
  bool trans_b = attrs.get_bool("trans_b");
  size_t a_cols = dim(in[0], -1), b_cols = dim(in[1], -1);
  size_t m = dim(out[0], -2), p = dim(out[0], -1);
  size_t k = trans_a ? dim(in[0], -2) : a_cols;
  size_t batch = m * p == 0 ? 0 : static_cast<size_t>(out[0].numel()) / (m * p);
  std::vector<double> a = load(in[0]);
  std::vector<double> b = load(in[1]);
  std::vector<double> result(static_cast<size_t>(out[0].numel()));
  for (size_t n = 0; n < batch; ++n) {
    const double* a_n = a.data() + n * m * k;
    const double* b_n = b.data() + n * k * p;
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < p; ++j) {
        double sum = 0.0;
        for (size_t e = 0; e < k; ++e) {
          double a_ie = trans_a ? a_n[e * a_cols + i] : a_n[i * a_cols + e];
          double b_ej = trans_b ? b_n[j * b_cols + e] : b_n[e * b_cols + j];
          sum += a_ie * b_ej;
        }
        result[(n * m + i) * p + j] = sum;
      }
    }
  }
  store(out[0], result);
}

void causal_softmax(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  double scale = attrs.get_float("scale");
  size_t seq = dim(in[0], -1);
  std::vector<double> s = load(in[0]);
  std::vector<double> p(s.size(), 0.0);
  size_t rows = seq == 0 ? 0 : s.size() / seq;
  std::vector<double> lse(rows);
  for (size_t row = 0; row < rows; ++row) {
    size_t valid = row % seq + 1;
    const double* s_row = s.data() + row * seq;
    double* p_row = p.data() + row * seq;
    double max_score = -std::numeric_limits<double>::infinity();
    for (size_t j = 0; j < valid; ++j) max_score = std::max(max_score, scale * s_row[j]);
    double total = 0.0;
    for (size_t j = 0; j < valid; ++j) total += std::exp(scale * s_row[j] - max_score);
    lse[row] = max_score + std::log(total);
    for (size_t j = 0; j < valid; ++j) p_row[j] = std::exp(scale * s_row[j] - lse[row]);
  }
  store(out[0], p);
  store(out[1], lse);
}

void causal_softmax_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  double scale = attrs.get_float("scale");
  size_t seq = dim(in[0], -1);
  std::vector<double> dp = load(in[0]);
  std::vector<double> p = load(in[1]);
  std::vector<double> ds(dp.size(), 0.0);
  size_t rows = seq == 0 ? 0 : dp.size() / seq;
  for (size_t row = 0; row < rows; ++row) {
    size_t valid = row % seq + 1;
    size_t base = row * seq;
    double weighted = 0.0;
    for (size_t j = 0; j < valid; ++j) weighted += dp[base + j] * p[base + j];
    for (size_t j = 0; j < valid; ++j) ds[base + j] = scale * p[base + j] * (dp[base + j] - weighted);
  }
  store(out[0], ds);
}

}  // namespace

void register_attention_parts(Backend& backend) {
  add_float_kernels(backend, "split_heads", split_heads);
  add_float_kernels(backend, "merge_heads", merge_heads);
  add_float_kernels(backend, "bmm", bmm);
  add_float_kernels(backend, "causal_softmax", causal_softmax);
  add_float_kernels(backend, "causal_softmax_backward", causal_softmax_backward);
}

}  // namespace strata::ref
