#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"

namespace strata::ref {

namespace {

// One head's slice of a row-major [rows, row_width] matrix: row r starts at
// data + r * row_width + column.
struct HeadView {
  const double* data;
  size_t row_width;
  size_t column;
  const double* row(size_t r) const { return data + r * row_width + column; }
};

double dot(const double* x, const double* y, size_t n) {
  double sum = 0.0;
  for (size_t d = 0; d < n; ++d) sum += x[d] * y[d];
  return sum;
}

// Softmax attention of one query over keys 0..count-1: writes the weighted sum
// of values to out (dim elements) and returns the log-sum-exp of the scores.
double attend(const double* query, const HeadView& keys, const HeadView& values, size_t count, size_t dim,
              double scale, double* out) {
  std::vector<double> scores(count);
  double max_score = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < count; ++j) {
    scores[j] = scale * dot(query, keys.row(j), dim);
    max_score = std::max(max_score, scores[j]);
  }
  double total = 0.0;
  for (size_t j = 0; j < count; ++j) total += std::exp(scores[j] - max_score);
  double lse = max_score + std::log(total);
  for (size_t d = 0; d < dim; ++d) out[d] = 0.0;
  for (size_t j = 0; j < count; ++j) {
    double p = std::exp(scores[j] - lse);
    for (size_t d = 0; d < dim; ++d) out[d] += p * values.row(j)[d];
  }
  return lse;
}

struct QkvDims {
  size_t batch, seq, width, heads, head_dim;
  double scale;
};

QkvDims qkv_dims(const Tensor& qkv, const Attrs& attrs) {
  QkvDims d;
  d.batch = static_cast<size_t>(qkv.size(0));
  d.seq = static_cast<size_t>(qkv.size(1));
  d.width = static_cast<size_t>(qkv.size(2) / 3);
  d.heads = static_cast<size_t>(attrs.get_int("n_head"));
  d.head_dim = d.width / d.heads;
  d.scale = 1.0 / std::sqrt(static_cast<double>(d.head_dim));
  return d;
}

void attention(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  QkvDims d = qkv_dims(in[0], attrs);
  std::vector<double> qkv = load(in[0]);
  std::vector<double> result(d.batch * d.seq * d.width);
  std::vector<double> lse(d.batch * d.heads * d.seq);
  for (size_t b = 0; b < d.batch; ++b) {
    const double* base = qkv.data() + b * d.seq * 3 * d.width;
    for (size_t h = 0; h < d.heads; ++h) {
      size_t column = h * d.head_dim;
      HeadView q{base, 3 * d.width, column}, k{base, 3 * d.width, d.width + column},
          v{base, 3 * d.width, 2 * d.width + column};
      for (size_t i = 0; i < d.seq; ++i) {
        double* out_row = result.data() + (b * d.seq + i) * d.width + column;
        lse[(b * d.heads + h) * d.seq + i] = attend(q.row(i), k, v, i + 1, d.head_dim, d.scale, out_row);
      }
    }
  }
  store(out[0], result);
  store(out[1], lse);
}

// Probabilities are recomputed from lse: p_ij = exp(s_ij - lse_i). With
// dP_ij = dout_i . v_j and D_i = dout_i . out_i, dS_ij = p_ij (dP_ij - D_i);
// dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i, dv_j = sum_i p_ij dout_i.
void attention_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  QkvDims d = qkv_dims(in[1], attrs);
  std::vector<double> dout = load(in[0]);
  std::vector<double> qkv = load(in[1]);
  std::vector<double> result = load(in[2]);
  std::vector<double> lse = load(in[3]);
  std::vector<double> dqkv(qkv.size(), 0.0);
  size_t qkv_width = 3 * d.width;
  for (size_t b = 0; b < d.batch; ++b) {
    const double* base = qkv.data() + b * d.seq * qkv_width;
    double* dbase = dqkv.data() + b * d.seq * qkv_width;
    for (size_t h = 0; h < d.heads; ++h) {
      size_t column = h * d.head_dim;
      HeadView q{base, qkv_width, column}, k{base, qkv_width, d.width + column},
          v{base, qkv_width, 2 * d.width + column};
      HeadView dout_view{dout.data() + b * d.seq * d.width, d.width, column};
      HeadView out_view{result.data() + b * d.seq * d.width, d.width, column};
      for (size_t i = 0; i < d.seq; ++i) {
        const double* dout_i = dout_view.row(i);
        double row_lse = lse[(b * d.heads + h) * d.seq + i];
        double delta = dot(dout_i, out_view.row(i), d.head_dim);
        double* dq_i = dbase + i * qkv_width + column;
        for (size_t j = 0; j <= i; ++j) {
          double p = std::exp(d.scale * dot(q.row(i), k.row(j), d.head_dim) - row_lse);
          double dscore = p * (dot(dout_i, v.row(j), d.head_dim) - delta);
          double* dk_j = dbase + j * qkv_width + d.width + column;
          double* dv_j = dbase + j * qkv_width + 2 * d.width + column;
          for (size_t e = 0; e < d.head_dim; ++e) {
            dq_i[e] += d.scale * dscore * k.row(j)[e];
            dk_j[e] += d.scale * dscore * q.row(i)[e];
            dv_j[e] += p * dout_i[e];
          }
        }
      }
    }
  }
  store(out[0], dqkv);
}

void attention_cached(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  size_t batch = static_cast<size_t>(in[0].size(0));
  size_t queries = static_cast<size_t>(in[0].size(1));
  size_t width = static_cast<size_t>(in[0].size(2));
  size_t cache_len = static_cast<size_t>(in[1].size(1));
  size_t heads = static_cast<size_t>(attrs.get_int("n_head"));
  size_t position = static_cast<size_t>(attrs.get_int("position"));
  size_t head_dim = width / heads;
  double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> q = load(in[0]);
  std::vector<double> k_cache = load(in[1]);
  std::vector<double> v_cache = load(in[2]);
  std::vector<double> result(q.size());
  for (size_t b = 0; b < batch; ++b) {
    for (size_t h = 0; h < heads; ++h) {
      size_t column = h * head_dim;
      HeadView keys{k_cache.data() + b * cache_len * width, width, column};
      HeadView values{v_cache.data() + b * cache_len * width, width, column};
      for (size_t i = 0; i < queries; ++i) {
        size_t row = (b * queries + i) * width + column;
        attend(q.data() + row, keys, values, position + i + 1, head_dim, scale, result.data() + row);
      }
    }
  }
  store(out[0], result);
}

}  // namespace

void register_attention(Backend& backend) {
  add_float_kernels(backend, "attention", attention);
  add_float_kernels(backend, "attention_backward", attention_backward);
  add_float_kernels(backend, "attention_cached", attention_cached);
}

}  // namespace strata::ref
