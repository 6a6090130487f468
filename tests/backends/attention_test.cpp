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

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

struct AttentionCase {
  int64_t batch, seq, heads, head_dim;
  float scale;
};

const AttentionCase kCases[] = {
    {2, 67, 3, 64, 1.0f}, {1, 130, 2, 80, 1.0f}, {3, 1, 4, 8, 1.0f},  {2, 5, 4, 24, 3.0f},
    {1, 64, 1, 16, 1.0f}, {1, 200, 2, 20, 3.0f}, {2, 129, 2, 64, 3.0f},
};

std::string label(const AttentionCase& c) {
  return "B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) + " H=" + std::to_string(c.heads) +
         " D=" + std::to_string(c.head_dim) + " scale=" + std::to_string(c.scale);
}

TEST(CpuAttention, ForwardMatchesRef) {
  for (const AttentionCase& c : kCases) {
    Tensor qkv = random_f32({c.batch, c.seq, 3 * c.heads * c.head_dim}, 100 + c.seq, c.scale);
    check_against_ref("attention", {qkv}, {{"n_head", c.heads}}, 3e-5, "attention " + label(c));
  }
}

TEST(CpuAttention, BackwardMatchesRef) {
  for (const AttentionCase& c : kCases) {
    int64_t width = c.heads * c.head_dim;
    Tensor qkv = random_f32({c.batch, c.seq, 3 * width}, 200 + c.seq, c.scale);
    Attrs attrs{{"n_head", c.heads}};
    Tensors forward = run_on("ref", "attention", {qkv}, attrs);
    Tensor dout = random_f32({c.batch, c.seq, width}, 300 + c.seq);
    check_against_ref("attention_backward", {dout, qkv, forward[0], forward[1]}, attrs, 1e-4,
                      "attention_backward " + label(c));
  }
}

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
