// Bucket layout, the buffers each reduction keeps, and gradient collection timing, in one process.
#include <gtest/gtest.h>

#include "parallel/gradient_buckets.h"
#include "parallel/gradient_reduction.h"
#include "parallel/gradient_sync.h"
#include "parallel/zero_partition.h"

namespace strata {
namespace {

TEST(GradientBuckets, FillInReverseParameterOrderUpToTheSizeAndAliasOneFlatBuffer) {
  // 4-byte floats: 10 + 6 + 3 + 20 elements, buckets of 16 elements (64 bytes).
  GradientBuckets buckets({{10}, {2, 3}, {3}, {4, 5}}, 64);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets.parameters_of(0), (std::vector<size_t>{3}));     // larger than a bucket: alone
  EXPECT_EQ(buckets.parameters_of(1), (std::vector<size_t>{2, 1}));  // 3 + 6 fit, + 10 would not
  EXPECT_EQ(buckets.parameters_of(2), (std::vector<size_t>{0}));
  EXPECT_EQ(buckets.bucket(1).numel(), 9);
  EXPECT_EQ(buckets.grads()[1].shape(), (Shape{2, 3}));
  buckets.grads()[1].data<float>()[5] = 7.0f;  // the views write into the bucket, parameter 2 first
  EXPECT_EQ(buckets.bucket(1).data<float>()[3 + 5], 7.0f);
}

const std::vector<Shape> kShapes{{10}, {2, 3}, {3}, {4, 5}};

// The layout of kShapes in 64-byte buckets (20, 9 and 10 elements) for `ranks`.
GradientReduction choose(int ranks, int zero, int micro_batches_per_rank, size_t bucket_bytes = 64) {
  GradientBuckets layout(kShapes, bucket_bytes, ranks, GradientStorage::layout_only());
  return GradientReduction::choose(ranks, zero, micro_batches_per_rank, layout);
}

TEST(GradientBuckets, PadToTheRanksAndKeepOnlyWhatTheReductionNeeds) {
  const std::vector<Shape>& shapes = kShapes;
  GradientReduction zero1 = choose(4, 1, 2);
  GradientBuckets accumulating(shapes, 64, 4, zero1.storage);
  EXPECT_EQ(accumulating.bucket(1).numel(), 12);  // 9 padded to 4 blocks of 3
  EXPECT_EQ(accumulating.block(1), 3);
  EXPECT_EQ(accumulating.shard(1).numel(), 3);
  EXPECT_EQ(accumulating.bytes(), 4u * ((20 + 12 + 12) + (5 + 3 + 3)));

  GradientReduction zero2 = choose(4, 2, 1);  // one micro-batch per rank: nothing whole
  EXPECT_FALSE(zero2.storage.whole);
  GradientBuckets staged(shapes, 64, 4, zero2.storage);
  EXPECT_TRUE(staged.grads().empty());
  EXPECT_EQ(staged.staging_slots(), 2);
  EXPECT_EQ(staged.bytes(), 4u * (2 * 20 + (5 + 3 + 3)));
  EXPECT_TRUE(choose(4, 2, 2).storage.whole);  // accumulating micro-batches needs whole buffers
  EXPECT_TRUE(choose(4, 2, 1, 1 << 20).storage.whole);  // one bucket: two staging copies would be larger
}

TEST(GradientReduction, EveryZeroStageSumsWithTheSameCollectiveBeyondTwoRanks) {
  EXPECT_EQ(choose(1, 0, 4).collective, GradientCollective::None);
  EXPECT_EQ(choose(2, 0, 1).collective, GradientCollective::AllReduce);
  EXPECT_EQ(choose(3, 0, 1).collective, GradientCollective::ReduceScatterThenAllGather);
  EXPECT_EQ(choose(3, 1, 1).collective, GradientCollective::ReduceScatter);
  EXPECT_EQ(choose(3, 2, 1).collective, GradientCollective::ReduceScatter);
  EXPECT_FALSE(choose(3, 0, 1).sharded_optimizer);
  EXPECT_TRUE(choose(2, 2, 1).sharded_optimizer);
}

TEST(ZeroPartition, RanksOwnDisjointRangesCoveringEveryElementOnce) {
  const std::vector<Shape>& shapes = kShapes;
  std::vector<int> covered(10 + 6 + 3 + 20, 0);
  const std::vector<int64_t> first_element{0, 10, 16, 19};
  for (int rank = 0; rank < 3; ++rank) {
    GradientBuckets buckets(shapes, 64, 3, choose(3, 1, 1).storage);
    ZeroPartition partition(buckets, rank);
    ASSERT_EQ(partition.owned().size(), partition.gradients().size());
    for (size_t r = 0; r < partition.owned().size(); ++r) {
      const ParameterRange& range = partition.owned()[r];
      EXPECT_EQ(partition.gradients()[r].numel(), range.length);
      for (int64_t i = 0; i < range.length; ++i) ++covered[first_element[range.parameter] + range.begin + i];
    }
  }
  EXPECT_EQ(covered, std::vector<int>(covered.size(), 1));
}

TEST(GradientSync, CollectsEachGradientRightAfterTheNodeThatFinishesIt) {
  GradientBuckets buckets({{4}, {4}, {4}}, 1 << 20);
  DataParallel one_process;
  GradientSync sync(one_process, buckets, GradientReduction::choose(1, 0, 2, buckets), /*ready_after=*/{7, 3, 5},
                    /*num_nodes=*/9);
  std::vector<std::tuple<int, size_t, bool>> collected;
  for (bool first : {true, false}) {
    for (int node = 0; node < 9; ++node) {
      sync.after_node(node, first, !first, [&](size_t p, Tensor& destination, bool accumulate) {
        EXPECT_EQ(destination.data<float>(), buckets.grads()[p].data<float>());
        collected.emplace_back(node, p, accumulate);
      });
    }
  }
  EXPECT_EQ(collected, (std::vector<std::tuple<int, size_t, bool>>{
                           {3, 1, false}, {5, 2, false}, {7, 0, false}, {3, 1, true}, {5, 2, true}, {7, 0, true}}));
  EXPECT_GE(sync.finish(), 0.0);
}

}  // namespace
}  // namespace strata
