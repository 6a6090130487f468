// Bucket layout and gradient collection timing, in one process.
#include <gtest/gtest.h>

#include "parallel/gradient_buckets.h"
#include "parallel/gradient_sync.h"

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

TEST(GradientSync, CollectsEachGradientRightAfterTheNodeThatFinishesIt) {
  GradientBuckets buckets({{4}, {4}, {4}}, 1 << 20);
  DataParallel one_process;
  GradientSync sync(one_process, buckets, /*ready_after=*/{7, 3, 5}, /*num_nodes=*/9);
  std::vector<std::pair<int, size_t>> collected;
  for (int node = 0; node < 9; ++node) {
    sync.after_node(node, /*last_micro_batch=*/true, [&](size_t p) { collected.emplace_back(node, p); });
  }
  EXPECT_EQ(collected, (std::vector<std::pair<int, size_t>>{{3, 1}, {5, 2}, {7, 0}}));
  EXPECT_GE(sync.finish(), 0.0);
}

}  // namespace
}  // namespace strata
