// attention, grouped_attention, their backwards and attention_cached on the opencl backend against
// ref, on the cpu kernels' shapes (attention_test.cpp, grouped_attention_test.cpp): T not a
// multiple of the kernels' 32-row blocks (1, 5, 37, 67, 129, 130, 200), head sizes 7 to 80, one kv
// head for all query heads, several and one each, caches with a partial last block, plain and
// peaked (inputs scaled by 3) softmaxes. Tolerances are the cpu f32 kernels', whose arithmetic
// (f32 scores, exps and sums) this is: 3e-5 forward and 1e-4 backward of |expected| + rms.
#include <gtest/gtest.h>

#include "attention_cases.h"
#include "cpu_test_util.h"

namespace strata::testing {
namespace {

constexpr double kForwardTol = 3e-5;
constexpr double kBackwardTol = 1e-4;

TEST(OpenCLAttention, ForwardMatchesRef) { check_attention_against_ref("opencl", kForwardTol); }

TEST(OpenCLAttention, BackwardMatchesRef) { check_attention_backward_against_ref("opencl", kBackwardTol); }

TEST(OpenCLGroupedAttention, ForwardAndBackwardMatchRef) {
  for (const GroupedAttentionCase& c : kGroupedAttentionCases) {
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

TEST(OpenCLGroupedAttention, OneKvHeadPerQueryHeadIsPackedAttention) {
  expect_one_kv_head_per_query_head_is_packed_attention("opencl", DType::F32, "");
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
