// Causal attention golden loops for every attention op: `attention` (q, k, v
// side by side in a packed qkv), `grouped_attention` (separate q, k, v, with
// n_head / n_kv_head query heads per kv head) and `attention_cached`. Query
// head h reads kv head h / (H / KV); nothing is repeated per query head.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"

namespace strata::ref {

namespace {

// One head's slice of a row-major [rows, row_width] matrix: row r starts at
// data + r * row_width + column.
template <typename T>
struct HeadView {
  T* data;
  size_t row_width;
  size_t column;
  T* row(size_t r) const { return data + r * row_width + column; }
};

// Heads side by side along the rows of a loaded [batch, rows, width] tensor,
// the first starting at column `column`.
template <typename T>
struct Heads {
  T* data;
  size_t rows, width, column, head_dim;
  HeadView<T> head(size_t b, size_t h) const { return {data + b * rows * width, width, column + h * head_dim}; }
};

template <typename T>
Heads<T> heads_in(T* data, size_t rows, size_t width, size_t head_dim, size_t column = 0) {
  return {data, rows, width, column, head_dim};
}

struct Grouping {
  size_t batch, heads, kv_heads, head_dim;
  size_t kv_head(size_t head) const { return head / (heads / kv_heads); }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }
};

double dot(const double* x, const double* y, size_t n) {
  double sum = 0.0;
  for (size_t d = 0; d < n; ++d) sum += x[d] * y[d];
  return sum;
}

// Softmax attention of one query over keys 0..count-1: writes the weighted sum
// of values to out (dim elements) and returns the log-sum-exp of the scores.
double attend(const double* query, const HeadView<const double>& keys, const HeadView<const double>& values,
              size_t count, size_t dim, double scale, double* out) {
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

// Query i (of `queries` per batch entry) sees keys 0..position + i; lse is
// [batch, heads, queries], or null.
void causal_forward(const Grouping& g, size_t queries, size_t position, const Heads<const double>& q,
                    const Heads<const double>& k, const Heads<const double>& v, const Heads<double>& out,
                    double* lse) {
  for (size_t b = 0; b < g.batch; ++b) {
    for (size_t h = 0; h < g.heads; ++h) {
      HeadView<const double> q_h = q.head(b, h), keys = k.head(b, g.kv_head(h)), values = v.head(b, g.kv_head(h));
      HeadView<double> out_h = out.head(b, h);
      for (size_t i = 0; i < queries; ++i) {
        double row_lse = attend(q_h.row(i), keys, values, position + i + 1, g.head_dim, g.scale(), out_h.row(i));
        if (lse != nullptr) lse[(b * g.heads + h) * queries + i] = row_lse;
      }
    }
  }
}

// Probabilities are recomputed from lse: p_ij = exp(s_ij - lse_i). With
// dP_ij = dout_i . v_j and D_i = dout_i . out_i, dS_ij = p_ij (dP_ij - D_i);
// dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i, dv_j = sum_i p_ij dout_i,
// dk and dv summed over the query heads of each kv head. dq, dk and dv start at zero.
void causal_backward(const Grouping& g, size_t seq, const Heads<const double>& dout, const Heads<const double>& q,
                     const Heads<const double>& k, const Heads<const double>& v, const Heads<const double>& out,
                     const double* lse, const Heads<double>& dq, const Heads<double>& dk, const Heads<double>& dv) {
  const double scale = g.scale();
  for (size_t b = 0; b < g.batch; ++b) {
    for (size_t h = 0; h < g.heads; ++h) {
      const size_t kv = g.kv_head(h);
      HeadView<const double> q_h = q.head(b, h), k_h = k.head(b, kv), v_h = v.head(b, kv);
      HeadView<const double> dout_h = dout.head(b, h), out_h = out.head(b, h);
      HeadView<double> dq_h = dq.head(b, h), dk_h = dk.head(b, kv), dv_h = dv.head(b, kv);
      for (size_t i = 0; i < seq; ++i) {
        const double* dout_i = dout_h.row(i);
        double row_lse = lse[(b * g.heads + h) * seq + i];
        double delta = dot(dout_i, out_h.row(i), g.head_dim);
        double* dq_i = dq_h.row(i);
        for (size_t j = 0; j <= i; ++j) {
          double p = std::exp(scale * dot(q_h.row(i), k_h.row(j), g.head_dim) - row_lse);
          double dscore = p * (dot(dout_i, v_h.row(j), g.head_dim) - delta);
          double* dk_j = dk_h.row(j);
          double* dv_j = dv_h.row(j);
          for (size_t e = 0; e < g.head_dim; ++e) {
            dq_i[e] += scale * dscore * k_h.row(j)[e];
            dk_j[e] += scale * dscore * q_h.row(i)[e];
            dv_j[e] += p * dout_i[e];
          }
        }
      }
    }
  }
}

size_t size_of(const Tensor& tensor, int dim) { return static_cast<size_t>(tensor.size(dim)); }

// attention: qkv [B, T, 3C], every query head its own kv head.
Grouping packed_grouping(const Tensor& qkv, const Attrs& attrs) {
  size_t heads = static_cast<size_t>(attrs.get_int("n_head"));
  return {size_of(qkv, 0), heads, heads, size_of(qkv, 2) / 3 / heads};
}

// grouped_attention: q [B, T, H*D].
Grouping grouped_grouping(const Tensor& q, const Attrs& attrs) {
  size_t heads = static_cast<size_t>(attrs.get_int("n_head"));
  return {size_of(q, 0), heads, static_cast<size_t>(attrs.get_int("n_kv_head")), size_of(q, 2) / heads};
}

void attention(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  Grouping g = packed_grouping(in[0], attrs);
  size_t seq = size_of(in[0], 1), width = g.heads * g.head_dim, dim = g.head_dim;
  std::vector<double> qkv = load(in[0]);
  std::vector<double> result(g.batch * seq * width);
  std::vector<double> lse(g.batch * g.heads * seq);
  causal_forward(g, seq, 0, heads_in<const double>(qkv.data(), seq, 3 * width, dim),
                 heads_in<const double>(qkv.data(), seq, 3 * width, dim, width),
                 heads_in<const double>(qkv.data(), seq, 3 * width, dim, 2 * width),
                 heads_in(result.data(), seq, width, dim), lse.data());
  store(out[0], result);
  store(out[1], lse);
}

void attention_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  Grouping g = packed_grouping(in[1], attrs);
  size_t seq = size_of(in[1], 1), width = g.heads * g.head_dim, dim = g.head_dim;
  std::vector<double> dout = load(in[0]);
  std::vector<double> qkv = load(in[1]);
  std::vector<double> result = load(in[2]);
  std::vector<double> lse = load(in[3]);
  std::vector<double> dqkv(qkv.size(), 0.0);
  causal_backward(g, seq, heads_in<const double>(dout.data(), seq, width, dim),
                  heads_in<const double>(qkv.data(), seq, 3 * width, dim),
                  heads_in<const double>(qkv.data(), seq, 3 * width, dim, width),
                  heads_in<const double>(qkv.data(), seq, 3 * width, dim, 2 * width),
                  heads_in<const double>(result.data(), seq, width, dim), lse.data(),
                  heads_in(dqkv.data(), seq, 3 * width, dim), heads_in(dqkv.data(), seq, 3 * width, dim, width),
                  heads_in(dqkv.data(), seq, 3 * width, dim, 2 * width));
  store(out[0], dqkv);
}

void grouped_attention(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  Grouping g = grouped_grouping(in[0], attrs);
  size_t seq = size_of(in[0], 1), width = g.heads * g.head_dim, kv_width = g.kv_heads * g.head_dim;
  std::vector<double> q = load(in[0]), k = load(in[1]), v = load(in[2]);
  std::vector<double> result(q.size());
  std::vector<double> lse(g.batch * g.heads * seq);
  causal_forward(g, seq, 0, heads_in<const double>(q.data(), seq, width, g.head_dim),
                 heads_in<const double>(k.data(), seq, kv_width, g.head_dim),
                 heads_in<const double>(v.data(), seq, kv_width, g.head_dim),
                 heads_in(result.data(), seq, width, g.head_dim), lse.data());
  store(out[0], result);
  store(out[1], lse);
}

void grouped_attention_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  Grouping g = grouped_grouping(in[1], attrs);
  size_t seq = size_of(in[1], 1), width = g.heads * g.head_dim, kv_width = g.kv_heads * g.head_dim;
  std::vector<double> dout = load(in[0]), q = load(in[1]), k = load(in[2]), v = load(in[3]);
  std::vector<double> result = load(in[4]), lse = load(in[5]);
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
  causal_backward(g, seq, heads_in<const double>(dout.data(), seq, width, g.head_dim),
                  heads_in<const double>(q.data(), seq, width, g.head_dim),
                  heads_in<const double>(k.data(), seq, kv_width, g.head_dim),
                  heads_in<const double>(v.data(), seq, kv_width, g.head_dim),
                  heads_in<const double>(result.data(), seq, width, g.head_dim), lse.data(),
                  heads_in(dq.data(), seq, width, g.head_dim), heads_in(dk.data(), seq, kv_width, g.head_dim),
                  heads_in(dv.data(), seq, kv_width, g.head_dim));
  store(out[0], dq);
  store(out[1], dk);
  store(out[2], dv);
}

void attention_cached(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  size_t heads = static_cast<size_t>(attrs.get_int("n_head"));
  size_t kv_heads = attrs.has("n_kv_head") ? static_cast<size_t>(attrs.get_int("n_kv_head")) : heads;
  Grouping g{size_of(in[0], 0), heads, kv_heads, size_of(in[0], 2) / heads};
  size_t queries = size_of(in[0], 1), width = size_of(in[0], 2);
  size_t cache_len = size_of(in[1], 1), kv_width = size_of(in[1], 2);
  std::vector<double> q = load(in[0]), k_cache = load(in[1]), v_cache = load(in[2]);
  std::vector<double> result(q.size());
  causal_forward(g, queries, static_cast<size_t>(attrs.get_int("position")),
                 heads_in<const double>(q.data(), queries, width, g.head_dim),
                 heads_in<const double>(k_cache.data(), cache_len, kv_width, g.head_dim),
                 heads_in<const double>(v_cache.data(), cache_len, kv_width, g.head_dim),
                 heads_in(result.data(), queries, width, g.head_dim), nullptr);
  store(out[0], result);
}

}  // namespace

void register_attention(Backend& backend) {
  add_float_kernels(backend, "attention", attention);
  add_float_kernels(backend, "attention_backward", attention_backward);
  add_float_kernels(backend, "grouped_attention", grouped_attention);
  add_float_kernels(backend, "grouped_attention_backward", grouped_attention_backward);
  add_float_kernels(backend, "attention_cached", attention_cached);
}

}  // namespace strata::ref
