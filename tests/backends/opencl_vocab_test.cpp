// embedding, embedding_backward, cross_entropy and cross_entropy_backward on the opencl backend
// (opencl_vocab.cpp) against ref, whole and vocabulary-sharded (ops/vocab_shard.h), on the cpu tests'
// shapes. The gather is exact; the backward sums repeated ids in f32 in position order; cross_entropy
// sums up to 50257 exponentials in f32: the cpu tests' 2e-6. Every comparison also runs the kernel
// twice and requires the same bits. Ids outside the vocabulary cannot fail a kernel: they make NaNs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_test_util.h"
#include "cross_entropy_cases.h"
#include "ops/collective_group.h"

namespace strata::testing {
namespace {

constexpr double kF32Tol = 2e-6;

Tensor scalar(float value) {
  Tensor tensor = Tensor::empty({}, DType::F32);
  tensor.data<float>()[0] = value;
  return tensor;
}

// Columns [start, start + count) of the last dim of a 2-D f32 tensor [rows, cols].
Tensor columns(const Tensor& whole, int64_t start, int64_t count) {
  const int64_t rows = whole.size(0), cols = whole.size(1);
  Tensor part = Tensor::empty({rows, count}, DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < count; ++c) part.data<float>()[r * count + c] = whole.data<float>()[r * cols + start + c];
  }
  return part;
}

TEST(OpenCLEmbedding, GatherMatchesRefForBothIndexTypes) {
  const Tensor weight = random_f32({50, 33}, 1);
  for (DType index : {DType::I32, DType::I64}) {
    check_backend_against_ref("opencl", "embedding", {weight, random_indices({3, 70}, 2, 50, index)}, {}, 0.0,
                              "embedding " + std::string(dtype_name(index)));
  }
  check_backend_against_ref("opencl", "embedding", {weight, random_indices({1}, 3, 50)}, {}, 0.0, "one id");
}

TEST(OpenCLEmbedding, BackwardSumsRepeatedIdsAndZeroesUnusedRows) {
  // 1000 positions over 37 ids repeat every id many times; 500 ids leave most rows unused.
  for (int64_t vocab : {37, 500}) {
    for (DType index : {DType::I32, DType::I64}) {
      const Tensor ids = random_indices({4, 250}, 4, vocab, index);
      check_backend_against_ref("opencl", "embedding_backward", {random_f32({4, 250, 24}, 5), ids},
                                {{"num_embeddings", vocab}}, kF32Tol,
                                fmt::format("embedding_backward V={} {}", vocab, dtype_name(index)));
    }
  }
  check_backend_against_ref("opencl", "embedding_backward", {random_f32({1, 24}, 6), random_indices({1}, 7, 9)},
                            {{"num_embeddings", int64_t{9}}}, kF32Tol, "one position");
}

TEST(OpenCLEmbedding, IdsOutsideTheVocabularyMakeNaNRows) {
  Tensor ids = Tensor::empty({3}, DType::I32);
  const int32_t values[] = {1, -1, 4};
  std::memcpy(ids.data<int32_t>(), values, sizeof(values));
  const Tensor rows = run_on("opencl", "embedding", {random_f32({4, 3}, 8), ids})[0];
  for (int64_t p = 0; p < 3; ++p) {
    for (int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(std::isnan(rows.data<float>()[p * 3 + c]), p != 0) << "position " << p << " column " << c;
    }
  }
}

TEST(OpenCLCrossEntropy, ForwardAndBackwardMatchRef) {
  for (const CrossEntropyCase& c : kCrossEntropyCases) {
    const Tensor logits = random_f32(c.logits, 6, c.scale);
    const Tensor targets =
        random_indices(Shape(c.logits.begin(), c.logits.end() - 1), 7, c.logits.back(), c.targets);
    const std::string what = "cross_entropy " + shape_str(c.logits);
    check_backend_against_ref("opencl", "cross_entropy", {logits, targets}, {}, kF32Tol, what);
    const Tensor lse = run_on("ref", "cross_entropy", {logits, targets})[1];
    const Tensor dlogits = check_backend_against_ref("opencl", "cross_entropy_backward",
                                                     {scalar(0.7f), logits, targets, lse}, {}, kF32Tol,
                                                     what + " backward")[0];
    // dlogits may take over the logits' buffer.
    const Device& device = dispatcher("opencl").backend().device();
    Tensor in_place = logits.to_device(device);
    const Tensors inputs{scalar(0.7f).to_device(device), in_place, targets.to_device(device), lse.to_device(device)};
    dispatcher("opencl").run("cross_entropy_backward", inputs, {in_place});
    expect_identical(in_place.to_host(), dlogits, what + " backward in place");
  }
}

TEST(OpenCLCrossEntropy, TargetsOutsideTheVocabularyMakeTheLossNaN) {
  Tensor targets = Tensor::empty({2}, DType::I64);
  targets.data<int64_t>()[0] = 3;
  targets.data<int64_t>()[1] = 10;
  const Tensor logits = random_f32({2, 10}, 8);
  const Tensors forward = run_on("opencl", "cross_entropy", {logits, targets});
  EXPECT_TRUE(std::isnan(forward[0].data<float>()[0]));
  const Tensor dlogits = run_on("opencl", "cross_entropy_backward", {scalar(1.0f), logits, targets, forward[1]})[0];
  EXPECT_FALSE(std::isnan(dlogits.data<float>()[0]));
  EXPECT_TRUE(std::isnan(dlogits.data<float>()[10]));
}

// ---- vocabulary shards: 50 rows as 17 + 17 + 16 -------------------------------------

constexpr int64_t kVocab = 50, kChannels = 24;
const std::pair<int64_t, int64_t> kShards[] = {{0, 17}, {17, 17}, {34, 16}};  // (first row, rows)

Attrs shard_attrs(int64_t start) { return {{"vocab_start", start}, {"vocab_size", kVocab}}; }

TEST(OpenCLVocabShard, ShardedEmbeddingAndBackwardMatchRef) {
  const Tensor weight = random_f32({kVocab, kChannels}, 1), ids = random_indices({3, 40}, 2, kVocab, DType::I32);
  const Tensor dout = random_f32({3, 40, kChannels}, 3);
  for (auto [start, rows] : kShards) {
    const std::string what = fmt::format("rows {}..{}", start, start + rows);
    check_backend_against_ref("opencl", "embedding", {weight.narrow(0, start, rows).clone(), ids}, shard_attrs(start),
                              0.0, "embedding " + what);
    Attrs attrs = shard_attrs(start);
    attrs.set("num_embeddings", rows);
    check_backend_against_ref("opencl", "embedding_backward", {dout, ids}, attrs, kF32Tol, "backward " + what);
  }
}

TEST(OpenCLVocabShard, ShardedCrossEntropyBackwardMatchesRef) {
  const Tensor logits = random_f32({6, kVocab}, 5, 3.0f), targets = random_indices({6}, 6, kVocab, DType::I32);
  const Tensor lse = run_on("ref", "cross_entropy", {logits, targets})[1];
  for (auto [start, rows] : kShards) {
    check_backend_against_ref("opencl", "cross_entropy_backward",
                              {scalar(0.7f), columns(logits, start, rows), targets, lse}, shard_attrs(start), kF32Tol,
                              fmt::format("columns {}..{}", start, start + rows));
  }
}

// Rank 0 of a group of two whose other rank holds logits columns [split, V): its collectives add
// and gather that rank's target logits and log-sum-exps, computed here from the whole logits.
class PeerShardGroup final : public CollectiveGroup {
 public:
  PeerShardGroup(const Tensor& logits, const Tensor& targets, int64_t split) {
    const int64_t rows = logits.size(0), cols = logits.size(1);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data<float>() + r * cols;
      double largest = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t c = split; c < cols; ++c) largest = std::max(largest, static_cast<double>(row[c]));
      for (int64_t c = split; c < cols; ++c) sum += std::exp(row[c] - largest);
      peer_lse_.push_back(largest + std::log(sum));
      const int32_t target = targets.data<int32_t>()[r];
      peer_target_logit_.push_back(target >= split ? row[target] : 0.0);
    }
  }
  int size() const override { return 2; }
  int rank() const override { return 0; }
  // The kernels combine in f32 (opencl, cpu) or f64 (ref).
  void all_reduce_sum(void* data, size_t count, DType dtype) override {
    for (size_t i = 0; i < count; ++i) {
      if (dtype == DType::F64) {
        static_cast<double*>(data)[i] += peer_target_logit_[i];
      } else {
        static_cast<float*>(data)[i] += static_cast<float>(peer_target_logit_[i]);
      }
    }
  }
  void all_gather_bytes(const void* in, void* out, size_t bytes) override {
    std::memcpy(out, in, bytes);
    void* peer = static_cast<std::byte*>(out) + bytes;
    for (size_t i = 0; i < peer_lse_.size(); ++i) {
      if (bytes == peer_lse_.size() * sizeof(double)) {
        static_cast<double*>(peer)[i] = peer_lse_[i];
      } else {
        static_cast<float*>(peer)[i] = static_cast<float>(peer_lse_[i]);
      }
    }
  }
  void reduce_scatter_sum(const void*, void*, size_t, DType) override { fail("not used by cross_entropy"); }
  void all_to_all_bytes(const void*, void*, size_t) override { fail("not used by cross_entropy"); }
  void all_to_all_v_bytes(const void*, std::span<const size_t>, void*, std::span<const size_t>) override {
    fail("not used by cross_entropy");
  }
  void send_bytes(const void*, size_t, int, StageFlow) override { fail("not used by cross_entropy"); }
  void receive_bytes(void*, size_t, int, StageFlow) override { fail("not used by cross_entropy"); }
  double finish_sends() override { return 0; }

 private:
  std::vector<double> peer_lse_, peer_target_logit_;
};

TEST(OpenCLVocabShard, ShardedCrossEntropyCombinesOverItsGroup) {
  constexpr int64_t kSplit = 17;
  const Tensor logits = random_f32({6, kVocab}, 9, 3.0f), targets = random_indices({6}, 10, kVocab, DType::I32);
  register_collective_group("opencl-test-tp", std::make_shared<PeerShardGroup>(logits, targets, kSplit));
  Attrs attrs = shard_attrs(0);
  attrs.set("group", std::string("opencl-test-tp"));
  attrs.set("ranks", int64_t{2});
  const Tensors sharded = check_backend_against_ref("opencl", "cross_entropy", {columns(logits, 0, kSplit), targets},
                                                    attrs, kF32Tol, "sharded cross_entropy");
  register_collective_group("opencl-test-tp", nullptr);
  const Tensors whole = run_on("ref", "cross_entropy", {logits, targets});
  expect_close(sharded[0], whole[0], kF32Tol, "the shards' loss is the whole vocabulary's");
  expect_close(sharded[1], whole[1], kF32Tol, "the shards' lse is the whole vocabulary's");
}

}  // namespace
}  // namespace strata::testing
