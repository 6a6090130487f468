#include <gtest/gtest.h>

#include <cmath>

#include "backends/backends.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace strata {
namespace {

TEST(LrSchedule, LinearWarmupThenCosineToTheMinimum) {
  LrSchedule schedule{1e-3, 1e-4, 10, 110};
  EXPECT_DOUBLE_EQ(schedule.at(0), 1e-3 * 1 / 10);
  EXPECT_DOUBLE_EQ(schedule.at(4), 1e-3 * 5 / 10);
  EXPECT_DOUBLE_EQ(schedule.at(9), 1e-3);
  EXPECT_DOUBLE_EQ(schedule.at(10), 1e-3);
  // halfway through the decay: the mean of lr and lr_min
  double halfway = 10 + (110 - 10 - 1) / 2.0;
  EXPECT_NEAR(schedule.at(static_cast<int64_t>(halfway)), 1e-4 + 0.5 * (1 + std::cos(M_PI * (49.0 / 99.0))) * 9e-4,
              1e-15);
  EXPECT_DOUBLE_EQ(schedule.at(109), 1e-4);
}

TEST(ClipGradNorm, ScalesLikeTorchWhenAboveTheLimit) {
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Allow);
  std::vector<Tensor> grads{Tensor::empty({2}, DType::F32), Tensor::empty({1}, DType::F32)};
  grads[0].data<float>()[0] = 3;
  grads[0].data<float>()[1] = 0;
  grads[1].data<float>()[0] = 4;
  double norm = std::sqrt(square_sum(grads, *dispatcher).value());
  EXPECT_DOUBLE_EQ(norm, 5.0);
  EXPECT_DOUBLE_EQ(clip_factor(norm, 1.0), 1.0 / (5.0 + 1e-6));  // torch: max_norm / (total_norm + 1e-6)
  EXPECT_EQ(clip_factor(norm, 10.0), 1.0);
  EXPECT_EQ(clip_factor(norm, 5.0), 1.0);  // at the limit: torch's clamp to 1 leaves it
  EXPECT_EQ(clip_factor(norm, 0.0), 1.0);  // 0 disables clipping
}

}  // namespace
}  // namespace strata
