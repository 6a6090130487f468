// AdamW's reach (compare/adamw_reach.h) against the optimizer itself: Adam's moments run in f64 over
// gradient sequences, the one that makes Cauchy-Schwarz an equality reaching the bound and random ones
// staying under it.
#include "compare/adamw_reach.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace strata {
namespace {

// |m_hat / sqrt(v_hat)| after each gradient of `gradients` (eps 0), as AdamW computes it.
std::vector<double> update_ratios(const std::vector<double>& gradients, double beta1, double beta2) {
  std::vector<double> ratios;
  double m = 0, v = 0;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const double t = static_cast<double>(i + 1);
    m = beta1 * m + (1 - beta1) * gradients[i];
    v = beta2 * v + (1 - beta2) * gradients[i] * gradients[i];
    ratios.push_back(std::abs(m / (1 - std::pow(beta1, t))) / std::sqrt(v / (1 - std::pow(beta2, t))));
  }
  return ratios;
}

TEST(CompareAdamwReach, TheFirstUpdateMovesByTheLearningRateAndLaterOnesByTheLimitAtMost) {
  EXPECT_DOUBLE_EQ(adamw_step_reach(0.9, 0.95, 1), 1.0);
  double before = 0;
  for (int64_t t = 1; t <= 400; ++t) {
    const double reach = adamw_step_reach(0.9, 0.95, t);
    EXPECT_GE(reach, before) << t;
    before = reach;
  }
  // The geometric sum's limit: (1 - b1) / (sqrt(1 - b2) sqrt(1 - b1^2 / b2)).
  const double limit = 0.1 / (std::sqrt(0.05) * std::sqrt(1 - 0.81 / 0.95));
  EXPECT_NEAR(adamw_step_reach(0.9, 0.95, 3000), limit, 1e-9);
  EXPECT_NEAR(limit, 1.165, 1e-3);
  // Without momentum, only the second moment's bias correction: sqrt(1 - b2^t) / sqrt(1 - b2).
  EXPECT_NEAR(adamw_step_reach(0, 0.9, 5), std::sqrt(1 - std::pow(0.9, 5)) / std::sqrt(0.1), 1e-12);
  // A second moment forgotten at once lets a small gradient after a large one move without bound.
  EXPECT_DOUBLE_EQ(adamw_step_reach(0.9, 0, 1), 1.0);
  EXPECT_EQ(adamw_step_reach(0.9, 0, 2), std::numeric_limits<double>::infinity());
}

TEST(CompareAdamwReach, AGradientSequenceReachesItAndNoneExceedsIt) {
  for (auto [beta1, beta2] : {std::pair{0.9, 0.95}, std::pair{0.9, 0.999}, std::pair{0.8, 0.99}}) {
    // g_i proportional to (b1 / b2)^(t - i): the equality case of Cauchy-Schwarz at update t.
    const int t = 60;
    std::vector<double> gradients;
    for (int i = 1; i <= t; ++i) gradients.push_back(std::pow(beta1 / beta2, t - i));
    EXPECT_NEAR(update_ratios(gradients, beta1, beta2).back(), adamw_step_reach(beta1, beta2, t),
                1e-9 * adamw_step_reach(beta1, beta2, t));

    std::mt19937_64 random(7);
    std::normal_distribution<double> normal;
    std::cauchy_distribution<double> heavy;
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<double> sequence(120);
      for (size_t i = 0; i < sequence.size(); ++i) {
        sequence[i] = trial % 2 ? heavy(random) : normal(random) * std::exp(0.1 * normal(random) * double(i));
      }
      const std::vector<double> ratios = update_ratios(sequence, beta1, beta2);
      for (size_t i = 0; i < ratios.size(); ++i) {
        ASSERT_LE(ratios[i], adamw_step_reach(beta1, beta2, static_cast<int64_t>(i + 1)) * (1 + 1e-12))
            << "betas " << beta1 << ", " << beta2 << ", trial " << trial << ", update " << i + 1;
      }
    }
  }
}

TEST(CompareAdamwReach, ARunsReachSumsItsStepsLearningRates) {
  AdamwReach reach(0.9, 0.95);
  reach.add_step(1, 1e-3);
  EXPECT_DOUBLE_EQ(reach.total(), 1e-3);
  reach.add_step(2, 2e-3);
  EXPECT_DOUBLE_EQ(reach.total(), 1e-3 + 2e-3 * adamw_step_reach(0.9, 0.95, 2));
}

}  // namespace
}  // namespace strata
