// attention, attention_backward and attention_cached: the cpu tiled kernels
// vs ref on shapes that exercise partial tiles (T not a multiple of 64), head
// sizes that are and are not multiples of 16 (64, 80, 24, 8, 20), a single
// position, and peaked softmaxes (qkv scaled by 3). Tolerance: an f32 score s
// carries an absolute error of a few |s| * 6e-8, which becomes a relative
// error of the probability exp(s - lse); with qkv scaled by 3 scores reach
// ~40 and the measured worst errors are 7e-6 forward and 2e-5 backward (which
// chains three products), against 3e-5 and 1e-4 allowed. Unscaled inputs
// stay below 2e-6 and 5e-6.
#include <gtest/gtest.h>

#include "attention_cases.h"
#include "cpu_test_util.h"

namespace strata::testing {
namespace {

TEST(CpuAttention, ForwardMatchesRef) { check_attention_against_ref("cpu", 3e-5); }

TEST(CpuAttention, BackwardMatchesRef) { check_attention_backward_against_ref("cpu", 1e-4); }

TEST(CpuAttention, CachedDecodingMatchesRef) {
  struct CachedCase {
    int64_t batch, queries, position, cache_len, heads, head_dim;
  };
  const CachedCase cases[] = {
      {2, 1, 70, 80, 3, 64},  // one new token, a partial key tile
      {1, 5, 10, 20, 2, 80},  // a few tokens after a prompt
      {2, 67, 0, 67, 3, 24},  // the prompt itself
      {1, 3, 130, 140, 2, 8},
      {3, 1, 0, 1, 1, 16},    // the very first token
  };
  for (const CachedCase& c : cases) {
    int64_t width = c.heads * c.head_dim;
    Tensor q = random_f32({c.batch, c.queries, width}, 400 + c.position);
    Tensor k = random_f32({c.batch, c.cache_len, width}, 500 + c.position);
    Tensor v = random_f32({c.batch, c.cache_len, width}, 600 + c.position);
    check_against_ref("attention_cached", {q, k, v}, {{"n_head", c.heads}, {"position", c.position}}, 3e-5,
                      "attention_cached Tn=" + std::to_string(c.queries) + " position=" + std::to_string(c.position) +
                          " D=" + std::to_string(c.head_dim));
  }
}

}  // namespace
}  // namespace strata::testing
