// A mixture-of-experts run's router figures in metrics.jsonl, against what they must be whatever the
// routing: the assignment counts against tokens x top-k x layers, drops against each expert's
// capacity, and the losses against what they add to the training loss when weighted.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tiny_training_test.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using RouterMetricsTest = testing::TinyTrainingTest;

// The tiny config's 2 layers as Mixtral's: 4 experts, each token routed to 2.
constexpr int64_t kExperts = 4, kTopK = 2, kLayers = 2;
constexpr int64_t kTokensPerStep = 4 * 16;          // global batch 4 rows of 16
constexpr int64_t kTokensPerMicroBatch = 2 * 16;    // batch_size 2
constexpr int64_t kMicroBatchesPerStep = 2;

std::vector<std::string> mixtral(std::vector<std::string> extra = {}) {
  std::vector<std::string> settings{"model.family=mixtral", "model.n_kv_head=1", "model.num_experts=4",
                                    "model.num_experts_per_tok=2", "model.moe_intermediate_size=16",
                                    "model.tie_word_embeddings=false"};
  settings.insert(settings.end(), extra.begin(), extra.end());
  return settings;
}

std::vector<nlohmann::json> run_metrics(Trainer& trainer, const fs::path& run) {
  trainer.run();
  std::vector<nlohmann::json> lines;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST_F(RouterMetricsTest, EveryStepCountsEachTokensAssignmentsInEveryLayer) {
  Trainer trainer(config("moe_counts", mixtral()));
  const std::vector<nlohmann::json> lines = run_metrics(trainer, root() / "moe_counts");
  ASSERT_EQ(lines.size(), 6u);
  for (const nlohmann::json& line : lines) {
    const double assignments = kTokensPerStep * kTopK * kLayers;
    EXPECT_EQ(line.at("expert_tokens_mean").get<double>(), assignments / kExperts) << line.dump();
    const double low = line.at("expert_tokens_min"), high = line.at("expert_tokens_max");
    EXPECT_LE(low, assignments / kExperts);
    EXPECT_GE(high, assignments / kExperts);
    // An expert takes each token at most once per layer.
    EXPECT_LE(high, static_cast<double>(kTokensPerStep * kLayers));
    EXPECT_EQ(low, std::floor(low));
    EXPECT_EQ(line.at("expert_tokens_dropped").get<int64_t>(), 0);  // dropless
    // transformers' balance loss is k when every expert takes its share with its mean probability; it
    // is positive and finite whatever the routing, as is the z-loss (a mean of squared log-sum-exps).
    EXPECT_GT(line.at("router_aux_loss").get<double>(), 0);
    EXPECT_GT(line.at("router_z_loss").get<double>(), 0);
  }
}

TEST_F(RouterMetricsTest, TheLoggedLossesAreWhatTheirCoefficientsAddToTheFirstStepsLoss) {
  // The first step's forward pass sees the same initial weights and batches whatever the coefficients.
  auto first_step = [&](const std::string& run, const std::string& aux, const std::string& z) {
    Trainer trainer(config(run, mixtral({"model.router_aux_loss_coef=" + aux, "model.router_z_loss_coef=" + z})));
    return trainer.step();
  };
  const StepMetrics plain = first_step("coef_none", "0", "0");
  const StepMetrics balanced = first_step("coef_aux", "1", "0");
  const StepMetrics z = first_step("coef_z", "0", "0.5");
  ASSERT_TRUE(plain.router && balanced.router && z.router);
  EXPECT_EQ(plain.router->aux_loss, balanced.router->aux_loss);
  EXPECT_EQ(plain.router->z_loss, z.router->z_loss);
  // The training loss is f32: a few ulps of its value (about 6).
  EXPECT_NEAR(balanced.loss - plain.loss, plain.router->aux_loss, 2e-6);
  EXPECT_NEAR(z.loss - plain.loss, 0.5 * plain.router->z_loss, 2e-6);
}

TEST_F(RouterMetricsTest, ACapacityFactorDropsWhatOverflowsEachExpert) {
  // Factor 2 gives each expert ceil(2 x 32 x 2 / 4) = 32 rows per layer and micro-batch: every token once.
  Trainer roomy(config("moe_roomy", mixtral({"model.capacity_factor=2"})));
  for (const nlohmann::json& line : run_metrics(roomy, root() / "moe_roomy")) {
    EXPECT_EQ(line.at("expert_tokens_dropped").get<int64_t>(), 0) << line.dump();
  }
  // Factor 0.5 gives 8 rows: the experts keep at most half of the assignments, and at least their
  // first 8 each unless fewer came.
  Trainer tight(config("moe_tight", mixtral({"model.capacity_factor=0.5"})));
  const int64_t capacity = static_cast<int64_t>(std::ceil(0.5 * kTokensPerMicroBatch * kTopK / kExperts));
  const int64_t assignments = kTokensPerStep * kTopK * kLayers;
  const int64_t most_kept = capacity * kExperts * kLayers * kMicroBatchesPerStep;
  for (const nlohmann::json& line : run_metrics(tight, root() / "moe_tight")) {
    const int64_t dropped = line.at("expert_tokens_dropped");
    EXPECT_GE(dropped, assignments - most_kept) << line.dump();
    EXPECT_LT(dropped, assignments) << line.dump();
    // Counts are what the router chose, before the capacity.
    EXPECT_EQ(line.at("expert_tokens_mean").get<double>(), static_cast<double>(assignments) / kExperts);
  }
}

}  // namespace
}  // namespace strata
