// model.init_from = a HuggingFace model directory: config.json (transformers v4's and v5's spellings)
// fills the [model] table, explicit keys must agree, and the weights load from one file or a sharded
// index, in bf16; every defect is an error naming the file and the tensor or key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ckpt/hf_weights.h"
#include "ckpt/safetensors.h"
#include "core/file_io.h"
#include "model/family.h"
#include "support/error_text.h"
#include "support/test_files.h"
#include "train/config.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::TempDir;
using json = nlohmann::json;

// What the directories below describe.
ModelConfig expected_llama() {
  ModelConfig c;
  c.family = "llama";
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.intermediate_size = 48;
  c.vocab_size = 64;
  c.max_position_embeddings = 64;
  c.block_size = 16;  // the training length the job asks for
  c.layer_norm_eps = 1e-6;
  c.head_dim = 8;
  c.rope_theta = 500000;
  c.rope_scaling = {.type = "llama3", .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                    .original_max_positions = 32};
  c.tie_word_embeddings = false;
  return c;
}

json llama_config_json(bool v5) {
  json rope = {{"rope_type", "llama3"},
               {"factor", 8.0},
               {"low_freq_factor", 1.0},
               {"high_freq_factor", 4.0},
               {"original_max_position_embeddings", 32}};
  json config = {{"architectures", {"LlamaForCausalLM"}},
                 {"model_type", "llama"},
                 {"hidden_size", 32},
                 {"intermediate_size", 48},
                 {"num_hidden_layers", 2},
                 {"num_attention_heads", 4},
                 {"num_key_value_heads", 2},
                 {"head_dim", 8},
                 {"hidden_act", "silu"},
                 {"max_position_embeddings", 64},
                 {"rms_norm_eps", 1e-6},
                 {"vocab_size", 64},
                 {"tie_word_embeddings", false},
                 {"torch_dtype", "bfloat16"}};
  if (v5) {
    rope["rope_theta"] = 500000.0;
    config["rope_parameters"] = rope;
  } else {
    config["rope_theta"] = 500000.0;
    config["rope_scaling"] = rope;
  }
  return config;
}

ParameterSet initial_weights(const ModelConfig& config) {
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(7));
  return params;
}

// Writes `params` in bf16 as two shards and an index (or one model.safetensors), with `extra`
// tensors added and `drop` left out.
void write_weights(const std::filesystem::path& dir, const ParameterSet& params, bool sharded,
                   const TensorMap& extra = {}, const std::string& drop = "") {
  std::vector<TensorMap> shards(sharded ? 2 : 1);
  for (size_t i = 0; i < params.size(); ++i) {
    if (params.spec(i).name == drop) continue;
    shards[i * shards.size() / params.size()][params.spec(i).name] = params.tensor(i).to(DType::BF16);
  }
  for (const auto& [name, tensor] : extra) shards.back()[name] = tensor;
  if (!sharded) {
    write_safetensors(dir / "model.safetensors", shards[0], {{"format", "pt"}});
    return;
  }
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    write_safetensors(dir / file, shards[s], {{"format", "pt"}});
    for (const auto& [name, tensor] : shards[s]) weight_map[name] = file;
  }
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  write_file_atomic(dir / "model.safetensors.index.json", index.dump(2));
}

std::string job(const std::filesystem::path& dir, const std::string& model_keys = "") {
  return "[model]\ninit_from = \"" + dir.string() + "\"\nblock_size = 16\n" + model_keys +
         "\n[train]\nbatch_size = 2\nglobal_batch = 2\n";
}

void make_llama_dir(const std::filesystem::path& dir, bool v5, bool sharded, const TensorMap& extra = {},
                    const std::string& drop = "") {
  write_file_atomic(dir / "config.json", llama_config_json(v5).dump(2));
  write_weights(dir, initial_weights(expected_llama()), sharded, extra, drop);
}

TEST(HfModelDirectory, BothConfigSpellingsFillTheModelTable) {
  for (bool v5 : {false, true}) {
    TempDir dir;
    make_llama_dir(dir.path(), v5, /*sharded=*/true);
    TrainConfig config = parse_train_config(job(dir.path()), "job.toml", {});
    EXPECT_EQ(config.model, expected_llama()) << (v5 ? "v5 rope_parameters" : "v4 rope_theta + rope_scaling");
  }
}

TEST(HfModelDirectory, ShardedBf16WeightsLoadAsTheirF32Values) {
  TempDir dir;
  make_llama_dir(dir.path(), /*v5=*/false, /*sharded=*/true);
  TrainConfig config = parse_train_config(job(dir.path()), "job.toml", {});
  ParameterSet loaded(model_param_specs(config.model));
  load_hf_weights(dir.path(), config.model, loaded);
  const ParameterSet original = initial_weights(expected_llama());
  for (size_t i = 0; i < loaded.size(); ++i) {
    const Tensor rounded = original.tensor(i).to(DType::BF16).to(DType::F32);
    for (int64_t e = 0; e < rounded.numel(); ++e) {
      ASSERT_EQ(loaded.tensor(i).data<float>()[e], rounded.data<float>()[e]) << loaded.spec(i).name << " at " << e;
    }
  }
}

TEST(HfModelDirectory, AMissingTensorIsNamed) {
  TempDir dir;
  make_llama_dir(dir.path(), false, true, {}, "model.layers.1.mlp.up_proj.weight");
  TrainConfig config = parse_train_config(job(dir.path()), "job.toml", {});
  ParameterSet params(model_param_specs(config.model));
  EXPECT_THAT(error_of([&] { load_hf_weights(dir.path(), config.model, params); }),
              HasSubstr("tensor 'model.layers.1.mlp.up_proj.weight' is missing"));
}

TEST(HfModelDirectory, AnUnknownTensorIsNamed) {
  TempDir dir;
  make_llama_dir(dir.path(), false, true, {{"model.layers.0.self_attn.q_norm.weight", Tensor::zeros({8}, DType::BF16)}});
  TrainConfig config = parse_train_config(job(dir.path()), "job.toml", {});
  ParameterSet params(model_param_specs(config.model));
  const std::string message = error_of([&] { load_hf_weights(dir.path(), config.model, params); });
  EXPECT_THAT(message, HasSubstr("tensor 'model.layers.0.self_attn.q_norm.weight' is not a parameter of the "
                                 "configured llama model"));
  EXPECT_THAT(message, HasSubstr("model-00002-of-00002.safetensors"));
}

TEST(HfModelDirectory, AWrongShapeIsNamedWithBothShapes) {
  TempDir dir;
  write_file_atomic(dir / "config.json", llama_config_json(false).dump(2));
  ModelConfig wider = expected_llama();
  wider.intermediate_size = 64;  // every MLP weight the wrong size
  write_weights(dir.path(), initial_weights(wider), /*sharded=*/false);
  TrainConfig config = parse_train_config(job(dir.path()), "job.toml", {});
  ParameterSet params(model_param_specs(config.model));
  const std::string message = error_of([&] { load_hf_weights(dir.path(), config.model, params); });
  EXPECT_THAT(message, HasSubstr("model.safetensors: tensor 'model.layers.0.mlp."));
  EXPECT_THAT(message, HasSubstr("the config (model.*) implies"));
}

TEST(HfModelDirectory, AModelKeyThatDisagreesNamesBothValues) {
  TempDir dir;
  make_llama_dir(dir.path(), true, false);
  const std::string message = error_of([&] { parse_train_config(job(dir.path(), "n_kv_head = 4"), "job.toml", {}); });
  EXPECT_THAT(message, HasSubstr("key 'model.n_kv_head' is 4 here but 2 in"));
  EXPECT_THAT(message, HasSubstr("config.json"));
  // Agreeing keys are fine, and a training length beyond the model's positions is refused.
  EXPECT_EQ(parse_train_config(job(dir.path(), "n_kv_head = 2\nfamily = \"llama\""), "job.toml", {}).model,
            expected_llama());
  EXPECT_THAT(error_of([&] { parse_train_config(job(dir.path()), "job.toml", {"model.block_size=128"}); }),
              HasSubstr("key 'model.block_size' (128) exceeds model.max_position_embeddings (64)"));
}

TEST(HfModelDirectory, ATiedHeadStoredAnywayMustEqualTheEmbedding) {
  TempDir dir;
  json config = llama_config_json(false);
  config["tie_word_embeddings"] = true;
  write_file_atomic(dir / "config.json", config.dump(2));
  ModelConfig tied = expected_llama();
  tied.tie_word_embeddings = true;
  const ParameterSet weights = initial_weights(tied);
  write_weights(dir.path(), weights, false, {{"lm_head.weight", weights.get("model.embed_tokens.weight").to(DType::BF16)}});
  TrainConfig job_config = parse_train_config(job(dir.path()), "job.toml", {});
  ParameterSet params(model_param_specs(job_config.model));
  load_hf_weights(dir.path(), job_config.model, params);  // equal: accepted

  Tensor other = weights.get("model.embed_tokens.weight").clone();
  other.data<float>()[5] += 1.0f;
  write_weights(dir.path(), weights, false, {{"lm_head.weight", other.to(DType::BF16)}});
  EXPECT_THAT(error_of([&] { load_hf_weights(dir.path(), job_config.model, params); }),
              HasSubstr("tensor 'lm_head.weight' differs from model.embed_tokens.weight at element 5"));
}

TEST(HfModelDirectory, AGpt2DirectoryKeepsItsPositionTableAndTrainsShorter) {
  TempDir dir;
  json config = {{"model_type", "gpt2"}, {"n_layer", 2},     {"n_head", 2},
                 {"n_embd", 16},         {"vocab_size", 40}, {"n_positions", 64},
                 {"layer_norm_epsilon", 1e-5}};
  write_file_atomic(dir / "config.json", config.dump(2));
  ModelConfig expected;
  expected.n_layer = 2;
  expected.n_head = 2;
  expected.n_embd = 16;
  expected.vocab_size = 40;
  expected.max_position_embeddings = 64;
  expected.block_size = 16;
  write_weights(dir.path(), initial_weights(expected), false);
  TrainConfig job_config = parse_train_config(job(dir.path()), "job.toml", {});
  EXPECT_EQ(job_config.model, expected);
  ParameterSet params(model_param_specs(job_config.model));
  EXPECT_EQ(params.get("transformer.wpe.weight").shape(), (Shape{64, 16}));
  load_hf_weights(dir.path(), job_config.model, params);
}

TEST(HfModelDirectory, AnUnknownModelTypeNamesTheFamiliesThereAre) {
  TempDir dir;
  write_file_atomic(dir / "config.json", json{{"model_type", "mamba"}}.dump());
  EXPECT_THAT(error_of([&] { parse_train_config(job(dir.path()), "job.toml", {}); }),
              HasSubstr("model_type \"mamba\" is not a family Strata has "
                        "(gpt2, llama, mixtral, qwen3_moe, qwen2_moe, olmoe)"));
}

}  // namespace
}  // namespace strata
