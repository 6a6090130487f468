// A training checkpoint's model config: every model_fields key survives the round trip, the JSON is
// the one earlier checkpoints hold (same keys, same value types), and checkpoints from before model
// families, or with a key damaged, are read as before.
#include "ckpt/training_checkpoint.h"

#include <variant>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/error_text.h"
#include "support/llama_shapes.h"
#include "support/test_files.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::TempDir;

// A LLaMA model with every field away from its default.
ModelConfig every_field_set() {
  ModelConfig c = testing::llama_config(3, 4, 2, 64, 96, 100, 32, false);
  c.layer_norm_eps = 1e-6;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.rope_theta = 500000;
  c.rope_scaling = {.type = "llama3", .factor = 8, .low_freq_factor = 2, .high_freq_factor = 3,
                    .original_max_positions = 16};
  c.attention_bias = true;
  c.mlp_bias = true;
  return c;
}

// A Qwen2-MoE model with every mixture-of-experts field away from its default (no family takes both
// these and LLaMA's MLP keys).
ModelConfig every_moe_field_set() {
  ModelConfig c = testing::llama_config(2, 4, 2, 64, 96, 100, 32, false);
  c.family = "qwen2_moe";
  c.attention_bias = true;
  c.shared_expert_intermediate_size = 80;
  c.num_experts = 6;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 40;
  c.norm_topk_prob = true;
  c.router_aux_loss_coef = 0.01;
  c.router_z_loss_coef = 0.001;
  c.capacity_factor = 1.25;
  return c;
}

// Saves a checkpoint whose metadata is `state`'s with its "model" replaced by `model`, and reads it back.
TrainingCheckpoint round_trip(const TrainingCheckpoint& state, const nlohmann::json& model) {
  TempDir run;
  nlohmann::json metadata = training_metadata(state);
  metadata["model"] = model;
  return read_training_checkpoint(Checkpoint(save_checkpoint(run.path(), state.step, {}, metadata)));
}

TrainingCheckpoint state_of(const ModelConfig& model) {
  TrainingCheckpoint state;
  state.step = 3;
  state.model = model;
  return state;
}

TEST(TrainingCheckpoint, EveryModelFieldSurvivesTheRoundTrip) {
  ModelConfig dense = every_field_set(), moe = every_moe_field_set(), defaults;
  const std::vector<ModelField> in_dense = model_fields(dense), in_moe = model_fields(moe),
                                unset = model_fields(defaults);
  for (size_t i = 0; i < unset.size(); ++i) {
    std::visit(
        [&](auto* value) {
          const auto& other = *std::get<decltype(value)>(in_moe[i].value);
          const auto& fallback = *std::get<decltype(value)>(unset[i].value);
          EXPECT_TRUE(*value != fallback || other != fallback) << in_dense[i].key << " is set in neither model";
        },
        in_dense[i].value);
  }
  for (const ModelConfig& saved : {dense, moe}) {
    const TrainingCheckpoint state = state_of(saved);
    EXPECT_EQ(round_trip(state, training_metadata(state)["model"]).model, saved) << saved.family;
  }
}

TEST(TrainingCheckpoint, TheModelJsonIsTheOneEarlierCheckpointsHold) {
  // As the hand-written writer before model_fields spelt it: integers as integers, numbers with a point.
  const nlohmann::json earlier = nlohmann::json::parse(R"({
      "family": "llama", "n_layer": 3, "n_head": 4, "n_embd": 64, "vocab_size": 100, "block_size": 32,
      "layer_norm_eps": 1e-06, "n_kv_head": 2, "head_dim": 8, "intermediate_size": 96,
      "max_position_embeddings": 64, "rope_theta": 500000.0,
      "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 3.0,
                       "original_max_positions": 16},
      "tie_word_embeddings": false, "attention_bias": true, "mlp_bias": true})");
  const TrainingCheckpoint state = state_of(every_field_set());
  EXPECT_EQ(training_metadata(state)["model"].dump(), earlier.dump());
  EXPECT_EQ(round_trip(state, earlier).model, every_field_set());
}

TEST(TrainingCheckpoint, ACheckpointFromBeforeModelFamiliesIsGPT2WithTheDefaults) {
  ModelConfig gpt2;
  gpt2.n_layer = 2;
  gpt2.n_embd = 48;
  const nlohmann::json before_families = {{"n_layer", 2},      {"n_head", 6},       {"n_embd", 48},
                                          {"vocab_size", 4096}, {"block_size", 256}, {"layer_norm_eps", 1e-5}};
  EXPECT_EQ(round_trip(state_of(gpt2), before_families).model, gpt2);
}

TEST(TrainingCheckpoint, AMissingOrMistypedModelKeyIsNamed) {
  const TrainingCheckpoint state = state_of(every_field_set());
  nlohmann::json model = training_metadata(state)["model"];
  model.erase("n_head");
  EXPECT_THAT(error_of([&] { round_trip(state, model); }), HasSubstr("metadata key /model/n_head is missing"));

  model = training_metadata(state)["model"];
  model["rope_scaling"]["factor"] = "eight";
  EXPECT_THAT(error_of([&] { round_trip(state, model); }),
              HasSubstr(R"(metadata key /model/rope_scaling/factor is "eight", expected a number)"));
}

}  // namespace
}  // namespace strata
