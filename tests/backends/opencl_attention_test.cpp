// attention, grouped_attention, their backwards and attention_cached on the opencl backend against
// ref, on the cpu kernels' shapes (attention_test.cpp, grouped_attention_test.cpp): T not a
// multiple of the kernels' 32-row blocks (1, 5, 37, 67, 129, 130, 200), head sizes 7 to 80, one kv
// head for all query heads, several and one each, caches with a partial last block, plain and
// peaked (inputs scaled by 3) softmaxes. Tolerances are the cpu f32 kernels', whose arithmetic
// (f32 scores, exps and sums) this is: 3e-5 forward and 1e-4 backward of |expected| + rms.
#include <algorithm>

#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

constexpr double kForwardTol = 3e-5;
constexpr double kBackwardTol = 1e-4;

struct PackedCase {
  int64_t batch, seq, heads, head_dim;
  float scale;
};

const PackedCase kPackedCases[] = {
    {2, 67, 3, 64, 1.0f}, {1, 130, 2, 80, 1.0f}, {3, 1, 4, 8, 1.0f},  {2, 5, 4, 24, 3.0f},
    {1, 64, 1, 16, 1.0f}, {1, 200, 2, 20, 3.0f}, {2, 129, 2, 64, 3.0f},
};

std::string label(const PackedCase& c) {
  return "B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) + " H=" + std::to_string(c.heads) +
         " D=" + std::to_string(c.head_dim) + " scale=" + std::to_string(c.scale);
}

TEST(OpenCLAttention, ForwardMatchesRef) {
  for (const PackedCase& c : kPackedCases) {
    Tensor qkv = random_f32({c.batch, c.seq, 3 * c.heads * c.head_dim}, 100 + c.seq, c.scale);
    check_backend_against_ref("opencl", "attention", {qkv}, {{"n_head", c.heads}}, kForwardTol,
                              "attention " + label(c));
  }
}

TEST(OpenCLAttention, BackwardMatchesRef) {
  for (const PackedCase& c : kPackedCases) {
    int64_t width = c.heads * c.head_dim;
    Tensor qkv = random_f32({c.batch, c.seq, 3 * width}, 200 + c.seq, c.scale);
    Attrs attrs{{"n_head", c.heads}};
    Tensors forward = run_on("ref", "attention", {qkv}, attrs);
    Tensor dout = random_f32({c.batch, c.seq, width}, 300 + c.seq);
    check_backend_against_ref("opencl", "attention_backward", {dout, qkv, forward[0], forward[1]}, attrs,
                              kBackwardTol, "attention_backward " + label(c));
  }
}

struct GroupedCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
  float scale;
};

const GroupedCase kGroupedCases[] = {
    {2, 37, 4, 1, 64, 1.0f}, {1, 130, 4, 2, 64, 3.0f}, {2, 1, 4, 4, 64, 1.0f}, {1, 130, 4, 1, 80, 1.0f},
    {2, 37, 6, 2, 80, 3.0f}, {1, 130, 2, 2, 80, 1.0f}, {2, 1, 4, 1, 80, 1.0f}, {1, 37, 4, 4, 64, 3.0f},
    {2, 70, 4, 2, 7, 1.0f},
};

std::string label(const GroupedCase& c) {
  return "B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) + " H=" + std::to_string(c.heads) +
         " KV=" + std::to_string(c.kv_heads) + " D=" + std::to_string(c.head_dim);
}

// The gradients side by side, flattened: at T = 1 dq and dk are exactly 0 (one key: out = v), and
// elsewhere they cancel along rows, so they are judged against the rms of all three together.
Tensor side_by_side(const Tensors& grads) {
  int64_t total = 0;
  for (const Tensor& grad : grads) total += grad.numel();
  Tensor joined = Tensor::empty({total}, DType::F64);
  double* next = joined.data<double>();
  for (const Tensor& grad : grads) {
    Tensor wide = grad.to(DType::F64);
    next = std::copy_n(wide.data<double>(), wide.numel(), next);
  }
  return joined;
}

TEST(OpenCLGroupedAttention, ForwardAndBackwardMatchRef) {
  for (const GroupedCase& c : kGroupedCases) {
    std::string what = label(c);
    Attrs attrs{{"n_head", c.heads}, {"n_kv_head", c.kv_heads}};
    Tensor q = random_f32({c.batch, c.seq, c.heads * c.head_dim}, 100 + c.seq, c.scale);
    Tensor k = random_f32({c.batch, c.seq, c.kv_heads * c.head_dim}, 200 + c.seq, c.scale);
    Tensor v = random_f32({c.batch, c.seq, c.kv_heads * c.head_dim}, 300 + c.seq);
    check_backend_against_ref("opencl", "grouped_attention", {q, k, v}, attrs, kForwardTol,
                              "grouped_attention " + what);
    Tensors forward = run_on("ref", "grouped_attention", {q, k, v}, attrs);
    Tensors inputs{random_f32(q.shape(), 400 + c.seq), q, k, v, forward[0], forward[1]};
    Tensors grads = run_on("opencl", "grouped_attention_backward", inputs, attrs);
    expect_close(side_by_side(grads), side_by_side(run_on("ref", "grouped_attention_backward", inputs, attrs)),
                 kBackwardTol, "grouped_attention_backward " + what);
    Tensors again = run_on("opencl", "grouped_attention_backward", inputs, attrs);
    for (size_t i = 0; i < 3; ++i) expect_identical(grads[i], again[i], what + " gradient " + std::to_string(i));
  }
}

// One kv head per query head: the grouped op reads q, k and v where the packed op reads the
// thirds of qkv, through the same kernels, and must give the same bits.
TEST(OpenCLGroupedAttention, OneKvHeadPerQueryHeadIsPackedAttention) {
  for (int64_t head_dim : {64, 80}) {
    const int64_t batch = 2, seq = 130, heads = 3, width = heads * head_dim;
    std::string what = "D=" + std::to_string(head_dim);
    Tensor qkv = random_f32({batch, seq, 3 * width}, 7, 2.0f);
    Tensor q = qkv.narrow(2, 0, width).clone(), k = qkv.narrow(2, width, width).clone();
    Tensor v = qkv.narrow(2, 2 * width, width).clone();
    Tensor dout = random_f32({batch, seq, width}, 8);
    Attrs packed{{"n_head", heads}}, grouped{{"n_head", heads}, {"n_kv_head", heads}};
    Tensors attention = run_on("opencl", "attention", {qkv}, packed);
    Tensors grouped_out = run_on("opencl", "grouped_attention", {q, k, v}, grouped);
    expect_identical(grouped_out[0], attention[0], what + " out");
    expect_identical(grouped_out[1], attention[1], what + " lse");
    Tensor dqkv = run_on("opencl", "attention_backward", {dout, qkv, attention[0], attention[1]}, packed)[0];
    Tensors grads =
        run_on("opencl", "grouped_attention_backward", {dout, q, k, v, attention[0], attention[1]}, grouped);
    for (int64_t part = 0; part < 3; ++part) {
      expect_identical(grads[static_cast<size_t>(part)], dqkv.narrow(2, part * width, width).clone(),
                       what + " gradient " + std::to_string(part));
    }
  }
}

TEST(OpenCLAttention, CachedDecodingMatchesRef) {
  struct CachedCase {
    int64_t batch, queries, position, cache_len, heads, kv_heads, head_dim;
  };
  const CachedCase cases[] = {
      {2, 1, 70, 80, 3, 3, 64},  // one new token, a partial key block
      {1, 5, 10, 20, 2, 2, 80},  // a few tokens after a prompt
      {2, 67, 0, 67, 3, 3, 24},  // the prompt itself
      {1, 3, 130, 140, 2, 2, 8},
      {3, 1, 0, 1, 1, 1, 16},    // the very first token
      {2, 1, 70, 80, 4, 1, 64},  // grouped caches [B, L, KV*D]
      {1, 5, 10, 20, 6, 2, 80},
      {2, 37, 0, 40, 4, 2, 64},
  };
  for (const CachedCase& c : cases) {
    Tensor q = random_f32({c.batch, c.queries, c.heads * c.head_dim}, 400 + c.position);
    Tensor k = random_f32({c.batch, c.cache_len, c.kv_heads * c.head_dim}, 500 + c.position);
    Tensor v = random_f32({c.batch, c.cache_len, c.kv_heads * c.head_dim}, 600 + c.position);
    Attrs attrs{{"n_head", c.heads}, {"position", c.position}};
    if (c.kv_heads != c.heads) attrs.set("n_kv_head", c.kv_heads);
    check_backend_against_ref("opencl", "attention_cached", {q, k, v}, attrs, kForwardTol,
                              "attention_cached Tn=" + std::to_string(c.queries) +
                                  " position=" + std::to_string(c.position) + " KV=" + std::to_string(c.kv_heads) +
                                  " D=" + std::to_string(c.head_dim));
  }
}

}  // namespace
}  // namespace strata::testing
