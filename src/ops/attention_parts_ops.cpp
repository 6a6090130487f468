// The unfused pieces of causal attention and the decompositions of
// `attention`, `grouped_attention` and their backwards into them: what a
// backend without the fused kernels runs. The T x T score matrix is
// materialised, one batch row at a time, in scratch tensors the decomposition
// allocates. Grouped keys and values are never repeated per query head: the
// query heads that share a kv head are stacked along the rows of one bmm
// operand ([KV, G*T, D] for G = H / KV query heads per kv head), so one bmm
// per kv head multiplies all of them by its keys, and causal_softmax reads
// the stacked scores [KV, G*T, T] as [H, T, T].
#include <cmath>

#include "ops/dispatcher.h"
#include "ops/schema_checks.h"
#include "ops/standard_ops.h"

namespace strata {

namespace {

using namespace schema_checks;

void expect_rank(const std::string& op, const std::string& input, const TensorMeta& meta, size_t rank,
                 const std::string& layout) {
  if (meta.shape.size() != rank) fail("op '{}': input '{}' must be {}, got {}", op, input, layout, shape_str(meta.shape));
}

// A [..., T, T] score matrix (any leading dims).
void expect_square_scores(const std::string& op, const std::string& input, const TensorMeta& meta) {
  expect_floating(op, input, meta);
  size_t rank = meta.shape.size();
  if (rank < 2 || meta.shape[rank - 1] != meta.shape[rank - 2]) {
    fail("op '{}': input '{}' must be [..., T, T], got {}", op, input, shape_str(meta.shape));
  }
}

struct BmmDims {
  int64_t batch, m, p, k;
};

BmmDims bmm_dims(const Metas& in, const Attrs& attrs) {
  const TensorMeta& a = in[0];
  const TensorMeta& b = in[1];
  if (a.shape.size() < 2) fail("op 'bmm': input 'a' must be [..., M, K], got {}", shape_str(a.shape));
  if (b.shape.size() < 2) fail("op 'bmm': input 'b' must be [..., K, P], got {}", shape_str(b.shape));
  Shape a_lead(a.shape.begin(), a.shape.end() - 2);
  Shape b_lead(b.shape.begin(), b.shape.end() - 2);
  if (a_lead != b_lead) {
    fail("op 'bmm': inputs 'a' {} and 'b' {} must have the same leading dims", shape_str(a.shape), shape_str(b.shape));
  }
  bool trans_a = attrs.get_bool("trans_a");
  bool trans_b = attrs.get_bool("trans_b");
  int64_t a_rows = a.shape[a.shape.size() - 2], a_cols = a.shape.back();
  int64_t b_rows = b.shape[b.shape.size() - 2], b_cols = b.shape.back();
  BmmDims dims{shape_numel(a_lead), trans_a ? a_cols : a_rows, trans_b ? b_rows : b_cols, trans_a ? a_rows : a_cols};
  int64_t b_inner = trans_b ? b_cols : b_rows;
  if (b_inner != dims.k) {
    fail("op 'bmm': inner sizes differ: a is {}{}, b is {}{}", shape_str(a.shape), trans_a ? " (transposed)" : "",
         shape_str(b.shape), trans_b ? " (transposed)" : "");
  }
  return dims;
}

void add_head_layout_ops(OpRegistry& registry) {
  registry.add({
      .name = "split_heads",
      .summary = "x [B, T, H*D] -> out [B, H, T, D], out[b, h, t, :] = x[b, t, h*D:(h+1)*D] with H = attr n_head "
                 "(qkv [B, T, 3C] with n_head = 3 * heads gives the q heads, then the k heads, then the v heads)",
      .inputs = {"x"},
      .outputs = {"out"},
      .attrs = {"n_head"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            expect_floating("split_heads", "x", in[0]);
            expect_rank("split_heads", "x", in[0], 3, "[B, T, H*D]");
            int64_t heads = attrs.get_int("n_head");
            int64_t width = in[0].shape[2];
            if (heads <= 0 || width % heads != 0) {
              fail("op 'split_heads': n_head {} does not divide the width {} of input 'x'", heads, width);
            }
            return {{{in[0].shape[0], heads, in[0].shape[1], width / heads}, in[0].dtype}};
          },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "merge_heads",
      .summary = "x [B, H, T, D] -> out [B, T, H*D], out[b, t, h*D:(h+1)*D] = x[b, h, t, :] (the inverse of "
                 "split_heads)",
      .inputs = {"x"},
      .outputs = {"out"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_floating("merge_heads", "x", in[0]);
            expect_rank("merge_heads", "x", in[0], 4, "[B, H, T, D]");
            const Shape& s = in[0].shape;
            return {{{s[0], s[2], s[1] * s[3]}, in[0].dtype}};
          },
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_bmm(OpRegistry& registry) {
  registry.add({
      .name = "bmm",
      .summary = "batched GEMM: out[..., M, P] = A B for every leading index, A = a [..., M, K] (or a^T with "
                 "trans_a, a stored [..., K, M]), B = b [..., K, P] (or b^T with trans_b, b stored [..., P, K]); "
                 "a and b have the same leading dims (possibly none)",
      .inputs = {"a", "b"},
      .outputs = {"out"},
      .attrs = {"trans_a", "trans_b"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            expect_floating("bmm", "a", in[0]);
            if (in[1].dtype != in[0].dtype) {
              fail("op 'bmm': input 'b' must be {}, got {}", dtype_name(in[0].dtype), dtype_name(in[1].dtype));
            }
            BmmDims dims = bmm_dims(in, attrs);
            Shape out(in[0].shape.begin(), in[0].shape.end() - 2);
            out.push_back(dims.m);
            out.push_back(dims.p);
            return {{out, in[0].dtype}};
          },
      .flops =
          [](const Metas& in, const Metas&, const Attrs& attrs) {
            BmmDims d = bmm_dims(in, attrs);
            return 2.0 * static_cast<double>(d.batch) * static_cast<double>(d.m) * static_cast<double>(d.p) *
                   static_cast<double>(d.k);
          },
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_causal_softmax(OpRegistry& registry) {
  registry.add({
      .name = "causal_softmax",
      .summary = "row softmax of scale * s under a causal mask, s [..., T, T]: p[..., i, j] = exp(scale s[..., i, j] "
                 "- lse[..., i]) for j <= i and 0 for j > i, where lse[..., i] = log of the sum over j <= i of "
                 "exp(scale s[..., i, j]); lse is f32, or f64 for f64 s",
      .inputs = {"s"},
      .outputs = {"p", "lse"},
      .attrs = {"scale"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_square_scores("causal_softmax", "s", in[0]);
            Shape rows(in[0].shape.begin(), in[0].shape.end() - 1);
            return {in[0], {rows, stats_dtype(in[0].dtype)}};
          },
      // max, subtract, exp (counted as one), sum, divide per element
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 5.0 * count(in[0]); },
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
  registry.add({
      .name = "causal_softmax_backward",
      .summary = "ds = gradient of causal_softmax w.r.t. s, from dp (the gradient w.r.t. p) and the forward's p: "
                 "ds[..., i, j] = scale p[..., i, j] (dp[..., i, j] - sum over k <= i of dp[..., i, k] p[..., i, k]) "
                 "for j <= i and 0 for j > i",
      .inputs = {"dp", "p"},
      .outputs = {"ds"},
      .attrs = {"scale"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            expect_square_scores("causal_softmax_backward", "dp", in[0]);
            if (!(in[1] == in[0])) {
              fail("op 'causal_softmax_backward': input 'p' must be {} {}, got {} {}", shape_str(in[0].shape),
                   dtype_name(in[0].dtype), shape_str(in[1].shape), dtype_name(in[1].dtype));
            }
            return {in[0]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 4.0 * count(in[0]); },
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

// ---- the decompositions ---------------------------------------------------

const Attrs kPlain{{"trans_a", false}, {"trans_b", false}};
const Attrs kTransA{{"trans_a", true}, {"trans_b", false}};
const Attrs kTransB{{"trans_a", false}, {"trans_b", true}};

// Entry `index` of a tensor's leading dim, as a contiguous view.
Tensor entry(const Tensor& tensor, int64_t index) {
  Shape rest(tensor.shape().begin() + 1, tensor.shape().end());
  return tensor.narrow(0, index, 1).reshape(rest);
}

struct HeadLayout {
  int64_t batch, seq, heads, kv_heads, head_dim;
  double scale;
  // [KV, G*T, columns]: a kv head's query heads stacked along the rows.
  Shape stacked(int64_t columns) const { return {kv_heads, heads / kv_heads * seq, columns}; }
  Shape square() const { return {heads, seq, seq}; }
};

HeadLayout head_layout(int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  return {batch, seq, heads, kv_heads, head_dim, 1.0 / std::sqrt(static_cast<double>(head_dim))};
}

// attention: qkv [B, T, 3C], every query head its own kv head.
HeadLayout packed_layout(const Tensor& qkv, const Attrs& attrs) {
  int64_t heads = attrs.get_int("n_head");
  return head_layout(qkv.size(0), qkv.size(1), heads, heads, qkv.size(2) / 3 / heads);
}

// grouped_attention: q [B, T, H*D].
HeadLayout grouped_layout(const Tensor& q, const Attrs& attrs) {
  int64_t heads = attrs.get_int("n_head");
  return head_layout(q.size(0), q.size(1), heads, attrs.get_int("n_kv_head"), q.size(2) / heads);
}

// One batch row's q [H, T, D], k and v [KV, T, D], or their gradients.
struct Heads {
  Tensor q, k, v;
};

// Batch row b of split_heads(qkv, 3H), or of its gradient.
Heads heads_of(const Tensor& qkv_heads, int64_t b, int64_t heads) {
  Tensor row = entry(qkv_heads, b);
  return {row.narrow(0, 0, heads), row.narrow(0, heads, heads), row.narrow(0, 2 * heads, heads)};
}

// [B, heads, T, D] heads of x [B, T, heads*D].
Tensor split(Dispatcher& dispatcher, const Tensor& x, int64_t heads) {
  Tensor out = Tensor::empty({x.size(0), heads, x.size(1), x.size(2) / heads}, x.dtype());
  dispatcher.run("split_heads", {x}, {out}, {{"n_head", heads}});
  return out;
}

// The score-sized scratch of one batch row, [KV, G*T, T] each.
struct Scores {
  Tensor scores, probs, dprobs, dscores;
};

Scores scores_for(const HeadLayout& l, DType dtype, bool backward) {
  Shape shape = l.stacked(l.seq);
  Scores s{Tensor::empty(shape, dtype), Tensor::empty(shape, dtype), {}, {}};
  if (backward) {
    s.dprobs = Tensor::empty(shape, dtype);
    s.dscores = Tensor::empty(shape, dtype);
  }
  return s;
}

// One batch row (out [H, T, D], lse [H, T]):
// S = Q K^T, (P, lse) = causal_softmax(S, 1/sqrt(D)), O = P V.
void attend_row(Dispatcher& dispatcher, const HeadLayout& l, const Heads& in, const Scores& s, const Tensor& out,
                const Tensor& lse) {
  dispatcher.run("bmm", {in.q.reshape(l.stacked(l.head_dim)), in.k}, {s.scores}, kTransB);
  dispatcher.run("causal_softmax", {s.scores.reshape(l.square())}, {s.probs.reshape(l.square()), lse},
                 {{"scale", l.scale}});
  dispatcher.run("bmm", {s.probs, in.v}, {out.reshape(l.stacked(l.head_dim))}, kPlain);
}

// One batch row's gradients (shapes as attend_row's): recomputes P, then
// dV = P^T dO, dP = dO V^T, dS = causal_softmax_backward (scale included),
// dQ = dS K, dK = dS^T Q. The row term sum_k dP_ik P_ik equals dO_i . O_i, so
// the forward's out and lse are not needed. With stacked query heads, the
// products dV and dK sum over a kv head's query heads.
void backprop_row(Dispatcher& dispatcher, const HeadLayout& l, const Tensor& dout, const Heads& in, const Heads& grad,
                  const Scores& s, const Tensor& lse) {
  Shape stacked = l.stacked(l.head_dim);
  Attrs softmax_attrs{{"scale", l.scale}};
  Tensor q = in.q.reshape(stacked);
  Tensor dout_stacked = dout.reshape(stacked);
  dispatcher.run("bmm", {q, in.k}, {s.scores}, kTransB);
  dispatcher.run("causal_softmax", {s.scores.reshape(l.square())}, {s.probs.reshape(l.square()), lse}, softmax_attrs);
  dispatcher.run("bmm", {s.probs, dout_stacked}, {grad.v}, kTransA);
  dispatcher.run("bmm", {dout_stacked, in.v}, {s.dprobs}, kTransB);
  dispatcher.run("causal_softmax_backward", {s.dprobs.reshape(l.square()), s.probs.reshape(l.square())},
                 {s.dscores.reshape(l.square())}, softmax_attrs);
  dispatcher.run("bmm", {s.dscores, in.k}, {grad.q.reshape(stacked)}, kPlain);
  dispatcher.run("bmm", {s.dscores, q}, {grad.k}, kTransA);
}

}  // namespace

void decompose_attention(Dispatcher& dispatcher, const Tensors& in, const Tensors& out, const Attrs& attrs) {
  HeadLayout l = packed_layout(in[0], attrs);
  Tensor qkv_heads = split(dispatcher, in[0], 3 * l.heads);
  Tensor out_heads = Tensor::empty({l.batch, l.heads, l.seq, l.head_dim}, in[0].dtype());
  Scores s = scores_for(l, in[0].dtype(), false);
  for (int64_t b = 0; b < l.batch; ++b) {
    attend_row(dispatcher, l, heads_of(qkv_heads, b, l.heads), s, entry(out_heads, b), entry(out[1], b));
  }
  dispatcher.run("merge_heads", {out_heads}, {out[0]});
}

void decompose_attention_backward(Dispatcher& dispatcher, const Tensors& in, const Tensors& out,
                                  const Attrs& attrs) {
  HeadLayout l = packed_layout(in[1], attrs);
  Tensor qkv_heads = split(dispatcher, in[1], 3 * l.heads);
  Tensor dout_heads = split(dispatcher, in[0], l.heads);
  Tensor dqkv_heads = Tensor::empty(qkv_heads.shape(), in[1].dtype());
  Tensor lse = Tensor::empty({l.heads, l.seq}, in[3].dtype());
  Scores s = scores_for(l, in[1].dtype(), true);
  for (int64_t b = 0; b < l.batch; ++b) {
    backprop_row(dispatcher, l, entry(dout_heads, b), heads_of(qkv_heads, b, l.heads),
                 heads_of(dqkv_heads, b, l.heads), s, lse);
  }
  dispatcher.run("merge_heads", {dqkv_heads}, {out[0]});
}

void decompose_grouped_attention(Dispatcher& dispatcher, const Tensors& in, const Tensors& out,
                                 const Attrs& attrs) {
  HeadLayout l = grouped_layout(in[0], attrs);
  Tensor q_heads = split(dispatcher, in[0], l.heads);
  Tensor k_heads = split(dispatcher, in[1], l.kv_heads);
  Tensor v_heads = split(dispatcher, in[2], l.kv_heads);
  Tensor out_heads = Tensor::empty(q_heads.shape(), in[0].dtype());
  Scores s = scores_for(l, in[0].dtype(), false);
  for (int64_t b = 0; b < l.batch; ++b) {
    attend_row(dispatcher, l, {entry(q_heads, b), entry(k_heads, b), entry(v_heads, b)}, s, entry(out_heads, b),
               entry(out[1], b));
  }
  dispatcher.run("merge_heads", {out_heads}, {out[0]});
}

void decompose_grouped_attention_backward(Dispatcher& dispatcher, const Tensors& in, const Tensors& out,
                                          const Attrs& attrs) {
  HeadLayout l = grouped_layout(in[1], attrs);
  Tensor dout_heads = split(dispatcher, in[0], l.heads);
  Tensor q_heads = split(dispatcher, in[1], l.heads);
  Tensor k_heads = split(dispatcher, in[2], l.kv_heads);
  Tensor v_heads = split(dispatcher, in[3], l.kv_heads);
  Heads grads{Tensor::empty(q_heads.shape(), in[1].dtype()), Tensor::empty(k_heads.shape(), in[1].dtype()),
              Tensor::empty(v_heads.shape(), in[1].dtype())};
  Tensor lse = Tensor::empty({l.heads, l.seq}, in[5].dtype());
  Scores s = scores_for(l, in[1].dtype(), true);
  for (int64_t b = 0; b < l.batch; ++b) {
    backprop_row(dispatcher, l, entry(dout_heads, b), {entry(q_heads, b), entry(k_heads, b), entry(v_heads, b)},
                 {entry(grads.q, b), entry(grads.k, b), entry(grads.v, b)}, s, lse);
  }
  dispatcher.run("merge_heads", {grads.q}, {out[0]});
  dispatcher.run("merge_heads", {grads.k}, {out[1]});
  dispatcher.run("merge_heads", {grads.v}, {out[2]});
}

void add_attention_parts_ops(OpRegistry& registry) {
  add_head_layout_ops(registry);
  add_bmm(registry);
  add_causal_softmax(registry);
}

}  // namespace strata
