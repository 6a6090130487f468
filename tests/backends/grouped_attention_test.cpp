// grouped_attention, its backward and attention_cached with n_kv_head: the
// cpu fused kernels vs ref on head sizes 64 and 80, one kv head for all query
// heads, several, and one each, T = 1, 37 and 130 (not multiples of the
// kernels' 64-row tiles), plain and peaked (inputs scaled by 3) softmaxes,
// f32 and bf16. With one kv head per query head the cpu op must give the bits
// of `attention` on the packed equivalent: both run the one kernel.
//
// Tolerances, relative to |expected| + rms (expect_close), those of
// `attention`, whose arithmetic this is: f32 3e-5 forward and 1e-4 backward
// (attention_test.cpp: f32 scores near 40 in peaked softmaxes); bf16 one
// ulp (2^-7) of output rounding, and on the CPU's bf16 dot products (even
// head sizes), which round P and dS to bf16 as FlashAttention does, 2 ulps
// forward and 6 backward (cpu_bf16_test.cpp). dk and dv now add the terms of
// H/KV query heads, whose rounding errors grow with the sums themselves:
// measured worst f32 1.3e-5 forward and 2.5e-5 backward (peaked, KV = 2);
// bf16 0.85 ulp forward and 2.6 ulps backward (KV = 2, D = 80).
#include <functional>
#include <memory>

#include <gtest/gtest.h>

#include "attention_cases.h"
#include "backends/cpu/bf16_dot.h"
#include "cpu_test_util.h"

namespace strata::testing {
namespace {

constexpr double kBf16Ulp = 1.0 / 128;

std::string label(const GroupedAttentionCase& c, DType dtype) {
  return std::string(dtype_name(dtype)) + " " + label(c);
}

Attrs grouped_attrs(const GroupedAttentionCase& c) { return {{"n_head", c.heads}, {"n_kv_head", c.kv_heads}}; }

// Forward out and lse; the backward's dq, dk and dv (judged together).
struct Tolerances {
  double out, lse, grads;
};

// Runs `check` on every path the kernels of `dtype` take on this CPU.
void for_each_path(DType dtype, const std::function<void(const std::string& path)>& check) {
  if (dtype == DType::BF16) return for_each_bf16_attention_path(check);
  check("f32 tiles");
}

Tolerances tolerances(DType dtype, int64_t head_dim) {
  if (dtype == DType::F32) return {3e-5, 3e-5, 1e-4};
  bool rounds_probabilities = cpu::has_bf16_dot() && head_dim % 2 == 0;
  return {rounds_probabilities ? 2 * kBf16Ulp : kBf16Ulp, 3e-5, rounds_probabilities ? 6 * kBf16Ulp : kBf16Ulp};
}

// Runs `op` on cpu (twice: the same bits) and ref; output i within tols[i].
Tensors check_outputs(const std::string& op, const Tensors& inputs, const Attrs& attrs,
                      const std::vector<double>& tols, const std::string& what) {
  Tensors cpu = run_on("cpu", op, inputs, attrs);
  Tensors ref = run_on("ref", op, inputs, attrs);
  Tensors again = run_on("cpu", op, inputs, attrs);
  for (size_t i = 0; i < cpu.size(); ++i) {
    std::string output = what + " " + op + " output " + std::to_string(i);
    EXPECT_EQ(cpu[i].dtype(), ref[i].dtype()) << output;
    expect_close(cpu[i], ref[i], tols.at(i), output);
    expect_identical(cpu[i], again[i], output);
  }
  return cpu;
}

class CpuGroupedAttention : public ::testing::TestWithParam<DType> {};

TEST_P(CpuGroupedAttention, ForwardAndBackwardMatchRef) {
  DType dtype = GetParam();
  for_each_path(dtype, [&](const std::string& path) {
    for (const GroupedAttentionCase& c : kGroupedAttentionCases) {
      std::string what = label(c, dtype) + " on " + path;
      Tolerances tol = tolerances(dtype, c.head_dim);
      Attrs attrs = grouped_attrs(c);
      Tensor q = random_f32({c.batch, c.seq, c.heads * c.head_dim}, 100 + c.seq, c.scale).to(dtype);
      Tensor k = random_f32({c.batch, c.seq, c.kv_heads * c.head_dim}, 200 + c.seq, c.scale).to(dtype);
      Tensor v = random_f32({c.batch, c.seq, c.kv_heads * c.head_dim}, 300 + c.seq).to(dtype);
      check_outputs("grouped_attention", {q, k, v}, attrs, {tol.out, tol.lse}, what);
      Tensors forward = run_on("ref", "grouped_attention", {q, k, v}, attrs);
      Tensor dout = random_f32(q.shape(), 400 + c.seq).to(dtype);
      Tensors inputs{dout, q, k, v, forward[0], forward[1]};
      Tensors cpu = run_on("cpu", "grouped_attention_backward", inputs, attrs);
      expect_close(side_by_side(cpu), side_by_side(run_on("ref", "grouped_attention_backward", inputs, attrs)),
                   tol.grads, what + " grouped_attention_backward");
      Tensors again = run_on("cpu", "grouped_attention_backward", inputs, attrs);
      for (size_t i = 0; i < 3; ++i) expect_identical(cpu[i], again[i], what + " gradient " + std::to_string(i));
    }
  });
}

// One kv head per query head: the cpu grouped op must give the bits of the
// packed op on every path (attention_cases.h).
TEST_P(CpuGroupedAttention, OneKvHeadPerQueryHeadIsPackedAttention) {
  DType dtype = GetParam();
  for_each_path(dtype, [&](const std::string& path) {
    expect_one_kv_head_per_query_head_is_packed_attention("cpu", dtype, " on " + path);
  });
}

// Decoding steps (one query, a partial key tile) and a prompt, over caches
// [B, L, KV*D]; the cache kernel always widens bf16, so one bf16 ulp.
TEST_P(CpuGroupedAttention, CachedDecodingMatchesRef) {
  DType dtype = GetParam();
  struct CachedCase {
    int64_t batch, queries, position, cache_len, heads, kv_heads, head_dim;
  };
  const CachedCase cases[] = {{2, 1, 70, 80, 4, 1, 64}, {1, 5, 10, 20, 6, 2, 80}, {2, 37, 0, 40, 4, 2, 64}};
  for (const CachedCase& c : cases) {
    Tensor q = random_f32({c.batch, c.queries, c.heads * c.head_dim}, 500 + c.position).to(dtype);
    Tensor k = random_f32({c.batch, c.cache_len, c.kv_heads * c.head_dim}, 600 + c.position).to(dtype);
    Tensor v = random_f32({c.batch, c.cache_len, c.kv_heads * c.head_dim}, 700 + c.position).to(dtype);
    check_outputs("attention_cached", {q, k, v},
                  {{"n_head", c.heads}, {"n_kv_head", c.kv_heads}, {"position", c.position}},
                  {dtype == DType::F32 ? 3e-5 : kBf16Ulp},
                  std::string(dtype_name(dtype)) + " Tn=" + std::to_string(c.queries) +
                      " position=" + std::to_string(c.position) + " KV=" + std::to_string(c.kv_heads));
  }
}

// f16 runs the f32 kernels on widened copies (cpu_through_f32.cpp), its
// 9 tensors of the backward included, rounding each output once: one f16 ulp
// (2^-10) of |expected| + rms.
TEST(CpuGroupedAttentionF16, RunsThroughF32) {
  const double f16_ulp = 1.0 / 1024;
  std::unique_ptr<Dispatcher> cpu = make_dispatcher("cpu", FallbackPolicy::Allow);
  const GroupedAttentionCase c{2, 37, 4, 2, 64, 1.0f};
  Attrs attrs = grouped_attrs(c);
  Tensor q = random_f32({c.batch, c.seq, c.heads * c.head_dim}, 800).to(DType::F16);
  Tensor k = random_f32({c.batch, c.seq, c.kv_heads * c.head_dim}, 801).to(DType::F16);
  Tensor v = random_f32({c.batch, c.seq, c.kv_heads * c.head_dim}, 802).to(DType::F16);
  Tensors forward = run_on("ref", "grouped_attention", {q, k, v}, attrs);
  Tensors got = cpu->call("grouped_attention", {q, k, v}, attrs);
  expect_close(got[0], forward[0], f16_ulp, "f16 out");
  expect_close(got[1], forward[1], 3e-5, "f16 lse");
  Tensors inputs{random_f32(q.shape(), 803).to(DType::F16), q, k, v, forward[0], forward[1]};
  expect_close(side_by_side(cpu->call("grouped_attention_backward", inputs, attrs)),
               side_by_side(run_on("ref", "grouped_attention_backward", inputs, attrs)), f16_ulp, "f16 gradients");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CpuGroupedAttention, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace strata::testing
