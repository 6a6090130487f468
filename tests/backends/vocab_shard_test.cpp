// Vocabulary shards (ops/vocab_shard.h) on one process, against the whole-vocabulary ops: a
// sharded embedding is the whole lookup where the shard holds the id and zero elsewhere, so the
// shards' lookups add up to the whole one; a shard's embedding_backward is its rows of the whole
// backward; cross_entropy_backward on a shard of the logits, given the whole lse, is that shard of
// the whole backward. On cpu and ref, with uneven shards (50 rows as 17 + 17 + 16).
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "ops/vocab_shard.h"

namespace strata::testing {
namespace {

constexpr int64_t kVocab = 50, kChannels = 24;
const std::vector<std::pair<int64_t, int64_t>> kShards = {{0, 17}, {17, 17}, {34, 16}};  // (first row, rows)

Attrs shard_attrs(int64_t start) { return {{"vocab_start", start}, {"vocab_size", kVocab}}; }

// Columns [start, start + count) of the last dim of a 2-D f32 tensor [rows, cols].
Tensor columns(const Tensor& whole, int64_t start, int64_t count) {
  const int64_t rows = whole.numel() / whole.size(-1), cols = whole.size(-1);
  Tensor part = Tensor::empty({rows, count}, DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < count; ++c) part.data<float>()[r * count + c] = whole.data<float>()[r * cols + start + c];
  }
  return part;
}

TEST(VocabShard, ShardedLookupsAreTheWholeLookupWhereTheShardHoldsTheIdAndAddUpToIt) {
  const Tensor weight = random_f32({kVocab, kChannels}, 1), ids = random_indices({3, 40}, 2, kVocab, DType::I32);
  for (const char* backend : {"ref", "cpu"}) {
    const Tensor whole = run_on(backend, "embedding", {weight, ids})[0];
    Tensor sum = Tensor::zeros(whole.shape(), DType::F32);
    for (auto [start, rows] : kShards) {
      const Tensor table = weight.narrow(0, start, rows).clone();
      const Tensor part = run_on(backend, "embedding", {table, ids}, shard_attrs(start))[0];
      for (int64_t p = 0; p < ids.numel(); ++p) {
        const int64_t id = ids.data<int32_t>()[p];
        const bool held = id >= start && id < start + rows;
        for (int64_t c = 0; c < kChannels; ++c) {
          const float got = part.data<float>()[p * kChannels + c];
          ASSERT_EQ(got, held ? weight.data<float>()[id * kChannels + c] : 0.0f) << backend << " position " << p;
          sum.data<float>()[p * kChannels + c] += got;
        }
      }
    }
    expect_identical(sum, whole, std::string(backend) + ": the shards' lookups add up to the whole");
  }
}

TEST(VocabShard, ShardedEmbeddingBackwardIsItsRowsOfTheWholeBackward) {
  const Tensor dout = random_f32({3, 40, kChannels}, 3), ids = random_indices({3, 40}, 4, kVocab, DType::I32);
  for (const char* backend : {"ref", "cpu"}) {
    const Tensor whole = run_on(backend, "embedding_backward", {dout, ids}, {{"num_embeddings", kVocab}})[0];
    for (auto [start, rows] : kShards) {
      Attrs attrs = shard_attrs(start);
      attrs.set("num_embeddings", rows);
      const Tensor part = run_on(backend, "embedding_backward", {dout, ids}, attrs)[0];
      expect_close(part, whole.narrow(0, start, rows).clone(), 1e-6,
                   fmt::format("{} rows {}..{}", backend, start, start + rows));
    }
  }
}

TEST(VocabShard, ShardedCrossEntropyBackwardIsItsShardOfTheWholeBackward) {
  const Tensor logits = random_f32({6, kVocab}, 5, 3.0f), targets = random_indices({6}, 6, kVocab, DType::I32);
  Tensor dloss = Tensor::empty({}, DType::F32);
  dloss.data<float>()[0] = 0.7f;
  const Tensor lse = run_on("ref", "cross_entropy", {logits, targets})[1];
  const Tensor whole = run_on("ref", "cross_entropy_backward", {dloss, logits, targets, lse})[0];
  for (auto [start, rows] : kShards) {
    const Tensor part_logits = columns(logits, start, rows);
    for (const char* backend : {"ref", "cpu"}) {
      const Tensor part =
          run_on(backend, "cross_entropy_backward", {dloss, part_logits, targets, lse}, shard_attrs(start))[0];
      expect_close(part, columns(whole, start, rows), 2e-6, fmt::format("{} columns {}..{}", backend, start, start + rows));
    }
  }
}

TEST(VocabShard, ABadShardIsRefusedNamingTheOp) {
  const Tensor weight = random_f32({17, kChannels}, 7), ids = random_indices({4}, 8, kVocab, DType::I32);
  Attrs beyond = shard_attrs(40);  // rows 40..56 of 50
  EXPECT_THROW(run_on("cpu", "embedding", {weight, ids}, beyond), Error);
  Attrs half{{"vocab_start", int64_t{0}}};
  try {
    run_on("ref", "embedding", {weight, ids}, half);
    ADD_FAILURE() << "a shard without vocab_size ran";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("'vocab_start' and 'vocab_size' go together"), std::string::npos)
        << error.what();
  }
  const Tensor logits = random_f32({4, 17}, 9), targets = random_indices({4}, 10, kVocab, DType::I32);
  try {
    run_on("cpu", "cross_entropy", {logits, targets}, shard_attrs(0));
    ADD_FAILURE() << "a shard of the logits without its group ran";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("need attrs 'group' and 'ranks'"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace strata::testing
