// attention_cached against attention (and, with n_kv_head, grouped_attention)
// over the whole sequence: a prefill of the first tokens, then decoding one
// token at a time into a KV cache whose unused rows hold NaN, so any read past
// the causal limit would show.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

constexpr int64_t kBatch = 2, kSeq = 7, kWidth = 8, kHeads = 2, kCacheLen = 9;

Tensor rows(const Tensor& x, int64_t start, int64_t count) { return x.narrow(1, start, count).clone(); }

Tensor nan_cache(DType dtype, int64_t width = kWidth) {
  std::vector<double> nan(static_cast<size_t>(kBatch * kCacheLen * width), std::numeric_limits<double>::quiet_NaN());
  return make_tensor({kBatch, kCacheLen, width}, nan, dtype);
}

class AttentionCachedTest : public ::testing::TestWithParam<DType> {};

TEST_P(AttentionCachedTest, PrefillThenDecodeMatchesFullAttention) {
  DType dtype = GetParam();
  double tolerance = dtype == DType::F64 ? 1e-13 : 1e-6;
  Tensor qkv = random_tensor({kBatch, kSeq, 3 * kWidth}, 5, 1.0, dtype);
  Tensor full = run_ref("attention", {qkv}, {{"n_head", kHeads}})[0];
  Tensor q = qkv.narrow(2, 0, kWidth).clone();
  Tensor k = qkv.narrow(2, kWidth, kWidth).clone();
  Tensor v = qkv.narrow(2, 2 * kWidth, kWidth).clone();
  Tensor k_cache = nan_cache(dtype), v_cache = nan_cache(dtype);

  const int64_t prefill = 3;
  k_cache.narrow(1, 0, prefill).copy_from(k.narrow(1, 0, prefill));
  v_cache.narrow(1, 0, prefill).copy_from(v.narrow(1, 0, prefill));
  Tensor first = run_ref("attention_cached", {rows(q, 0, prefill), k_cache, v_cache},
                         {{"n_head", kHeads}, {"position", int64_t{0}}})[0];
  expect_all_near(first, values_of(rows(full, 0, prefill)), tolerance, tolerance, "prefill");

  for (int64_t position = prefill; position < kSeq; ++position) {
    k_cache.narrow(1, position, 1).copy_from(k.narrow(1, position, 1));
    v_cache.narrow(1, position, 1).copy_from(v.narrow(1, position, 1));
    Tensor step = run_ref("attention_cached", {rows(q, position, 1), k_cache, v_cache},
                          {{"n_head", kHeads}, {"position", position}})[0];
    expect_all_near(step, values_of(rows(full, position, 1)), tolerance, tolerance,
                    "decode at position " + std::to_string(position));
  }
}

TEST_P(AttentionCachedTest, ChunkInTheMiddleMatchesFullAttention) {
  DType dtype = GetParam();
  double tolerance = dtype == DType::F64 ? 1e-13 : 1e-6;
  Tensor qkv = random_tensor({kBatch, kSeq, 3 * kWidth}, 6, 1.0, dtype);
  Tensor full = run_ref("attention", {qkv}, {{"n_head", kHeads}})[0];
  Tensor k_cache = nan_cache(dtype), v_cache = nan_cache(dtype);
  k_cache.narrow(1, 0, kSeq).copy_from(qkv.narrow(2, kWidth, kWidth));
  v_cache.narrow(1, 0, kSeq).copy_from(qkv.narrow(2, 2 * kWidth, kWidth));
  Tensor chunk = run_ref("attention_cached", {rows(qkv.narrow(2, 0, kWidth).clone(), 2, 4), k_cache, v_cache},
                         {{"n_head", kHeads}, {"position", int64_t{2}}})[0];
  expect_all_near(chunk, values_of(rows(full, 2, 4)), tolerance, tolerance, "queries 2..5");
}

// Four query heads over two kv heads of 3: the caches hold [B, L, 2*3], and
// each step must give grouped_attention's row at its position.
TEST_P(AttentionCachedTest, GroupedCacheMatchesGroupedAttention) {
  DType dtype = GetParam();
  double tolerance = dtype == DType::F64 ? 1e-13 : 1e-6;
  const int64_t heads = 4, kv_heads = 2, head_dim = 3, kv_width = kv_heads * head_dim;
  Tensor q = random_tensor({kBatch, kSeq, heads * head_dim}, 7, 1.0, dtype);
  Tensor k = random_tensor({kBatch, kSeq, kv_width}, 8, 1.0, dtype);
  Tensor v = random_tensor({kBatch, kSeq, kv_width}, 9, 1.0, dtype);
  Tensor full = run_ref("grouped_attention", {q, k, v}, {{"n_head", heads}, {"n_kv_head", kv_heads}})[0];
  Tensor k_cache = nan_cache(dtype, kv_width), v_cache = nan_cache(dtype, kv_width);
  const int64_t prefill = 2;
  k_cache.narrow(1, 0, prefill).copy_from(k.narrow(1, 0, prefill));
  v_cache.narrow(1, 0, prefill).copy_from(v.narrow(1, 0, prefill));
  Attrs attrs{{"n_head", heads}, {"n_kv_head", kv_heads}, {"position", int64_t{0}}};
  Tensor first = run_ref("attention_cached", {rows(q, 0, prefill), k_cache, v_cache}, attrs)[0];
  expect_all_near(first, values_of(rows(full, 0, prefill)), tolerance, tolerance, "grouped prefill");
  for (int64_t position = prefill; position < kSeq; ++position) {
    k_cache.narrow(1, position, 1).copy_from(k.narrow(1, position, 1));
    v_cache.narrow(1, position, 1).copy_from(v.narrow(1, position, 1));
    attrs.set("position", position);
    Tensor step = run_ref("attention_cached", {rows(q, position, 1), k_cache, v_cache}, attrs)[0];
    expect_all_near(step, values_of(rows(full, position, 1)), tolerance, tolerance,
                    "grouped decode at position " + std::to_string(position));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionCachedTest, ::testing::Values(DType::F64, DType::F32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace strata::testing
