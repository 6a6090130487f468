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
  ModelConfig saved = every_field_set();
  ModelConfig defaults;
  const std::vector<ModelField> set = model_fields(saved), unset = model_fields(defaults);
  for (size_t i = 0; i < set.size(); ++i) {
    std::visit([&](auto* value) { EXPECT_NE(*value, *std::get<decltype(value)>(unset[i].value)) << set[i].key; },
               set[i].value);
  }
  const TrainingCheckpoint state = state_of(saved);
  EXPECT_EQ(round_trip(state, training_metadata(state)["model"]).model, saved);
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
