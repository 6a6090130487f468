#include "planner/model_spec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "model/family.h"
#include "support/test_files.h"

namespace strata {
namespace {

TEST(PlannerModelSpec, PresetsHaveThePublishedSizes) {
  // GPT-2 small as HuggingFace counts it (tied LM head): 124,439,808 parameters.
  EXPECT_EQ(model_preset("gpt2-small").config.num_parameters(), 124439808);
  EXPECT_NEAR(static_cast<double>(model_preset("gpt2-xl").config.num_parameters()), 1.558e9, 0.002e9);
  // Narayanan et al.'s 1T configuration: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)) = 1.008T.
  ModelConfig t = model_preset("gpt-1t").config;
  double l = 128, h = 25600, V = 51200, s = 2048;
  double expected = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
  EXPECT_NEAR(static_cast<double>(t.num_parameters()), expected, 1e-6 * expected);
  EXPECT_THROW(model_preset("gpt5"), Error);
}

TEST(PlannerModelSpec, ReadsTheModelTableOfATrainingConfig) {
  ModelSpec spec = parse_model_file(R"(
[model]
n_layer = 4
n_head = 4
n_embd = 256
vocab_size = 4096
block_size = 128
[train]
global_batch = 32
[data]
dir = "x"
)",
                                    "configs/default.toml");
  EXPECT_EQ(spec.name, "default");
  EXPECT_EQ(spec.config.n_embd, 256);
  EXPECT_EQ(spec.global_batch, 32);
}

// The planner reads a LLaMA training config, and a HuggingFace model directory (alone, or as the
// table's init_from with the training length given), as the trainer does.
TEST(PlannerModelSpec, ReadsLlamaTablesAndModelDirectories) {
  ModelSpec table = parse_model_file(
      "[model]\nfamily = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 64\nintermediate_size = 96\n"
      "vocab_size = 100\nblock_size = 32\ntie_word_embeddings = false\n",
      "llama.toml");
  EXPECT_EQ(table.config.family, "llama");
  EXPECT_EQ(table.config.kv_heads(), 2);
  EXPECT_FALSE(table.config.tie_word_embeddings);

  testing::TempDir dir;
  nlohmann::json hf = model_family("llama").to_hf_config(table.config);
  hf["max_position_embeddings"] = 128;
  write_file_atomic(dir / "config.json", hf.dump());
  ModelSpec directory = load_model_spec(dir.path().string());
  EXPECT_EQ(directory.config.n_layer, 2);
  EXPECT_EQ(directory.config.block_size, 128);
  ModelSpec shorter = parse_model_file("[model]\ninit_from = \"" + dir.path().string() + "\"\nblock_size = 32\n",
                                       "job.toml");
  EXPECT_EQ(shorter.config.block_size, 32);
  EXPECT_EQ(shorter.config.intermediate_size, 96);
  EXPECT_THROW(parse_model_file("[model]\ninit_from = \"" + dir.path().string() + "\"\nn_layer = 3\n", "job.toml"),
               Error);
}

TEST(PlannerModelSpec, RefusesBadModelTables) {
  auto message = [](const std::string& text) {
    try {
      parse_model_file(text, "m.toml");
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("[model]\nn_layer = 2\nn_head = 3\nn_embd = 8\nvocab_size = 10\nblock_size = 4\n").find("n_head"),
            std::string::npos);
  EXPECT_NE(message("[model]\nn_layers = 2\n").find("unknown key 'model.n_layers'"), std::string::npos);
  EXPECT_NE(message("[train]\nsteps = 1\n").find("missing table [model]"), std::string::npos);
}

}  // namespace
}  // namespace strata
