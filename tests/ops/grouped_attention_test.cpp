// grouped_attention and grouped_attention_backward on `ref` in f64: the
// forward against the textbook formula written out here on keys and values
// repeated per query head (HuggingFace's repeat_kv, then softmax attention),
// the gradients against finite differences, the KV == H case against
// `attention` on the packed equivalent, and the shape errors (attention_cached's
// n_kv_head too).
#include <algorithm>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

struct GroupedCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
};

// One kv head for all, pairs of query heads per kv head, and one kv head per query head.
const GroupedCase kCases[] = {{2, 5, 4, 1, 3}, {2, 6, 4, 2, 3}, {1, 4, 6, 2, 2}, {2, 3, 3, 3, 4}};

std::string label(const GroupedCase& c) {
  return "B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) + " H=" + std::to_string(c.heads) +
         " KV=" + std::to_string(c.kv_heads) + " D=" + std::to_string(c.head_dim);
}

Attrs grouped_attrs(const GroupedCase& c) { return {{"n_head", c.heads}, {"n_kv_head", c.kv_heads}}; }

struct Inputs {
  Tensor q, k, v;
};

Inputs random_inputs(const GroupedCase& c, uint64_t seed) {
  return {random_tensor({c.batch, c.seq, c.heads * c.head_dim}, seed),
          random_tensor({c.batch, c.seq, c.kv_heads * c.head_dim}, seed + 1),
          random_tensor({c.batch, c.seq, c.kv_heads * c.head_dim}, seed + 2)};
}

// x [B, T, KV*D] with every kv head repeated for its H/KV query heads: [B, T, H*D].
std::vector<double> repeat_kv(const std::vector<double>& x, const GroupedCase& c) {
  std::vector<double> repeated;
  for (int64_t row = 0; row < c.batch * c.seq; ++row) {
    for (int64_t h = 0; h < c.heads; ++h) {
      auto head = x.begin() + (row * c.kv_heads + h / (c.heads / c.kv_heads)) * c.head_dim;
      repeated.insert(repeated.end(), head, head + c.head_dim);
    }
  }
  return repeated;
}

struct Expected {
  std::vector<double> out, lse;
};

// softmax(q k^T / sqrt(D) + causal mask) v per head, on the repeated keys and values.
Expected textbook_attention(const Inputs& in, const GroupedCase& c) {
  std::vector<double> q = values_of(in.q), k = repeat_kv(values_of(in.k), c), v = repeat_kv(values_of(in.v), c);
  const int64_t width = c.heads * c.head_dim;
  Expected e{std::vector<double>(q.size()), std::vector<double>(static_cast<size_t>(c.batch * c.heads * c.seq))};
  auto at = [&](int64_t b, int64_t t, int64_t h) {
    return static_cast<size_t>((b * c.seq + t) * width + h * c.head_dim);
  };
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t t = 0; t < c.seq; ++t) {
        std::vector<double> scores;
        for (int64_t s = 0; s <= t; ++s) {
          double score = 0.0;
          for (int64_t d = 0; d < c.head_dim; ++d) score += q[at(b, t, h) + d] * k[at(b, s, h) + d];
          scores.push_back(score / std::sqrt(static_cast<double>(c.head_dim)));
        }
        double max_score = *std::max_element(scores.begin(), scores.end());
        double total = 0.0;
        for (double score : scores) total += std::exp(score - max_score);
        for (int64_t s = 0; s <= t; ++s) {
          double p = std::exp(scores[static_cast<size_t>(s)] - max_score) / total;
          for (int64_t d = 0; d < c.head_dim; ++d) e.out[at(b, t, h) + d] += p * v[at(b, s, h) + d];
        }
        e.lse[static_cast<size_t>((b * c.heads + h) * c.seq + t)] = max_score + std::log(total);
      }
    }
  }
  return e;
}

TEST(GroupedAttention, ForwardMatchesRepeatedKeysAndValues) {
  for (const GroupedCase& c : kCases) {
    Inputs in = random_inputs(c, 10 + static_cast<uint64_t>(c.kv_heads));
    Tensors got = run_ref("grouped_attention", {in.q, in.k, in.v}, grouped_attrs(c));
    Expected expected = textbook_attention(in, c);
    expect_all_near(got[0], expected.out, 1e-14, 1e-12, "out " + label(c));
    expect_all_near(got[1], expected.lse, 1e-14, 1e-12, "lse " + label(c));
  }
}

TEST(GroupedAttention, GradientsMatchFiniteDifferences) {
  for (const GroupedCase& c : kCases) {
    Attrs attrs = grouped_attrs(c);
    Inputs in = random_inputs(c, 20);
    Tensor dout = random_tensor(in.q.shape(), 23);
    Tensors forward = run_ref("grouped_attention", {in.q, in.k, in.v}, attrs);
    Tensors grads = run_ref("grouped_attention_backward", {dout, in.q, in.k, in.v, forward[0], forward[1]}, attrs);
    auto out = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return run_ref("grouped_attention", {q, k, v}, attrs)[0];
    };
    expect_gradient([&](const Tensor& p) { return out(p, in.k, in.v); }, in.q, dout, grads[0], "dq " + label(c));
    expect_gradient([&](const Tensor& p) { return out(in.q, p, in.v); }, in.k, dout, grads[1], "dk " + label(c));
    expect_gradient([&](const Tensor& p) { return out(in.q, in.k, p); }, in.v, dout, grads[2], "dv " + label(c));
  }
}

// With KV == H both ops run the same loops on the same numbers: equal exactly.
TEST(GroupedAttention, OneKvHeadPerQueryHeadIsPackedAttention) {
  const int64_t batch = 2, seq = 5, heads = 3, width = 12;
  Tensor qkv = random_tensor({batch, seq, 3 * width}, 30);
  Tensor q = qkv.narrow(2, 0, width).clone(), k = qkv.narrow(2, width, width).clone();
  Tensor v = qkv.narrow(2, 2 * width, width).clone();
  Tensor dout = random_tensor({batch, seq, width}, 31);
  Attrs packed{{"n_head", heads}}, grouped{{"n_head", heads}, {"n_kv_head", heads}};
  Tensors attention = run_ref("attention", {qkv}, packed);
  Tensors grouped_out = run_ref("grouped_attention", {q, k, v}, grouped);
  EXPECT_EQ(values_of(grouped_out[0]), values_of(attention[0]));
  EXPECT_EQ(values_of(grouped_out[1]), values_of(attention[1]));
  Tensor dqkv = run_ref("attention_backward", {dout, qkv, attention[0], attention[1]}, packed)[0];
  Tensors grads = run_ref("grouped_attention_backward", {dout, q, k, v, attention[0], attention[1]}, grouped);
  for (int64_t part = 0; part < 3; ++part) {
    EXPECT_EQ(values_of(grads[static_cast<size_t>(part)]), values_of(dqkv.narrow(2, part * width, width).clone()))
        << "part " << part;
  }
}

TEST(GroupedAttention, ShapeErrorsNameTheOpAndInput) {
  Attrs attrs{{"n_head", int64_t{4}}, {"n_kv_head", int64_t{2}}};
  // q [1, 3, 8]: D = 2, so k and v are [1, 3, 4].
  expect_error([&] { run_ref("grouped_attention", {f64({1, 3, 8}), f64({1, 3, 8}), f64({1, 3, 4})}, attrs); },
               {"'grouped_attention'", "'k'", "[1, 3, 4]"});
  expect_error([&] { run_ref("grouped_attention", {f64({1, 3, 8}), f64({1, 3, 4}), f64({1, 2, 4})}, attrs); },
               {"'grouped_attention'", "'v'"});
  expect_error([&] { run_ref("grouped_attention", {f64({1, 3, 6}), f64({1, 3, 4}), f64({1, 3, 4})}, attrs); },
               {"'grouped_attention'", "n_head 4", "'q'"});
  expect_error([] { run_ref("grouped_attention", {f64({1, 3, 8}), f64({1, 3, 6}), f64({1, 3, 6})},
                            {{"n_head", int64_t{4}}, {"n_kv_head", int64_t{3}}}); },
               {"'grouped_attention'", "n_kv_head 3"});
  expect_error([] { run_ref("grouped_attention", {f64({1, 3, 8}), f64({1, 3, 8}), f64({1, 3, 8})},
                            {{"n_head", int64_t{4}}}); },
               {"'grouped_attention'", "'n_kv_head'"});
  expect_error([] { run_ref("attention_cached", {f64({1, 1, 8}), f64({1, 3, 8}), f64({1, 3, 8})},
                            {{"n_head", int64_t{4}}, {"n_kv_head", int64_t{2}}, {"position", int64_t{0}}}); },
               {"'attention_cached'", "k_cache", "2 kv heads"});
  Tensor q = f64({1, 3, 8}), kv = f64({1, 3, 4});
  expect_error([&] { run_ref("grouped_attention_backward", {q, q, kv, kv, q, f64({1, 4, 2})}, attrs); },
               {"'grouped_attention_backward'", "'lse'", "[1, 4, 3]"});
  expect_error([&] { run_ref("grouped_attention_backward", {kv, q, kv, kv, q, f64({1, 4, 3})}, attrs); },
               {"'grouped_attention_backward'", "'dout'"});
}

}  // namespace
}  // namespace strata::testing
