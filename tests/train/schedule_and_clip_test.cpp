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

double norm_then_clip(std::vector<Tensor>& grads, double max_norm, Dispatcher& dispatcher) {
  double norm = std::sqrt(square_sum(grads, dispatcher).value());
  clip_to_norm(grads, norm, max_norm, dispatcher);
  return norm;
}

TEST(ClipGradNorm, ScalesLikeTorchWhenAboveTheLimit) {
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Allow);
  std::vector<Tensor> grads{Tensor::empty({2}, DType::F32), Tensor::empty({1}, DType::F32)};
  grads[0].data<float>()[0] = 3;
  grads[0].data<float>()[1] = 0;
  grads[1].data<float>()[0] = 4;
  double norm = norm_then_clip(grads, 1.0, *dispatcher);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  float factor = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_FLOAT_EQ(grads[0].data<float>()[0], 3 * factor);
  EXPECT_FLOAT_EQ(grads[1].data<float>()[0], 4 * factor);

  double unchanged = norm_then_clip(grads, 10.0, *dispatcher);
  EXPECT_NEAR(unchanged, 1.0, 1e-6);
  EXPECT_FLOAT_EQ(grads[1].data<float>()[0], 4 * factor);
  norm_then_clip(grads, 0.0, *dispatcher);  // 0 disables clipping
  EXPECT_FLOAT_EQ(grads[1].data<float>()[0], 4 * factor);
}

}  // namespace
}  // namespace strata
