// `strata export --hf` of a mixture of experts: a few steps of training exported, the experts one tensor
// each under the Hub's names, config.json naming transformers' class, and the directory read back as
// model.init_from giving the checkpoint's parameters bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_export.h"
#include "ckpt/safetensors.h"
#include "core/file_io.h"
#include "tiny_training_test.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using HfExportMoeTest = testing::TinyTrainingTest;

struct MoeCase {
  std::string family;
  std::string architecture;
  std::vector<std::string> settings;  // beyond the shared ones below
  std::string expert_tensor;  // expert 2 of layer 1's down projection, as the Hub names it
  std::string stacked_infix;  // in Strata's stacked parameters' names only
};

void PrintTo(const MoeCase& moe, std::ostream* out) { *out << moe.family; }

std::vector<std::string> moe_settings(const MoeCase& moe, const std::string& extra = "") {
  std::vector<std::string> settings{"model.family=" + moe.family, "model.n_kv_head=1", "model.num_experts=3",
                                    "model.num_experts_per_tok=2", "model.moe_intermediate_size=16",
                                    "model.tie_word_embeddings=false", "train.steps=2"};
  settings.insert(settings.end(), moe.settings.begin(), moe.settings.end());
  if (!extra.empty()) settings.push_back(extra);
  return settings;
}

// The checkpoint's parameters (no moments) against another's, bit for bit.
void expect_same_parameters(const Checkpoint& want, const Checkpoint& got, const std::string& what) {
  int compared = 0;
  for (const auto& [name, stored] : want.tensors()) {
    if (name.starts_with("exp_avg")) continue;
    Tensor a = Tensor::empty(stored.shape, stored.dtype), b = Tensor::empty(stored.shape, stored.dtype);
    want.read(name, a);
    got.read(name, b);
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what << ": " << name;
    ++compared;
  }
  EXPECT_GT(compared, 10) << what;
}

class EachMoeFamily : public HfExportMoeTest, public ::testing::WithParamInterface<MoeCase> {};

TEST_P(EachMoeFamily, ExportsExpertsAsTheHubDoesAndReadsBackBitIdentically) {
  const MoeCase& moe = GetParam();
  const fs::path run = root() / ("export_" + moe.family), exported = root() / ("exported_" + moe.family);
  {
    Trainer trainer(config(run.filename(), moe_settings(moe)));
    trainer.run();
  }
  const Checkpoint trained(resolve_checkpoint(run));
  export_hf(trained, exported, /*max_shard_bytes=*/20'000);  // several shards

  const nlohmann::json index = nlohmann::json::parse(read_text_file(exported / "model.safetensors.index.json"));
  const nlohmann::json& weight_map = index.at("weight_map");
  EXPECT_TRUE(weight_map.contains(moe.expert_tensor)) << weight_map.dump();
  int expert_tensors = 0;
  for (const auto& [name, file] : weight_map.items()) {
    EXPECT_EQ(name.find(moe.stacked_infix), std::string::npos) << "a stacked parameter exported: " << name;
    EXPECT_TRUE(SafetensorsReader(exported / file.get<std::string>()).contains(name)) << name << " in " << file;
    expert_tensors += name.find(".experts.") != std::string::npos;
  }
  EXPECT_EQ(expert_tensors, 2 * 3 * 3);  // 2 layers of 3 experts' 3 projections
  const nlohmann::json hf = nlohmann::json::parse(read_text_file(exported / "config.json"));
  EXPECT_EQ(hf.at("architectures"), nlohmann::json({moe.architecture}));
  EXPECT_EQ(hf.at("model_type"), moe.family);
  EXPECT_EQ(hf.at("num_experts_per_tok"), 2);

  // Read back as a run's initial weights, every [model] key given agreeing with config.json.
  const fs::path restarted = root() / ("restarted_" + moe.family);
  Trainer from_export(config(restarted.filename(), moe_settings(moe, "model.init_from=" + exported.string())));
  from_export.save_checkpoint();
  expect_same_parameters(trained, Checkpoint(resolve_checkpoint(restarted)), moe.family);
}

INSTANTIATE_TEST_SUITE_P(
    Families, EachMoeFamily,
    ::testing::Values(MoeCase{"mixtral",
                              "MixtralForCausalLM",
                              {},
                              "model.layers.1.block_sparse_moe.experts.2.w2.weight",
                              "experts.w"},
                      MoeCase{"qwen3_moe", "Qwen3MoeForCausalLM", {}, "model.layers.1.mlp.experts.2.down_proj.weight",
                              "experts.down"},
                      MoeCase{"qwen2_moe",
                              "Qwen2MoeForCausalLM",
                              {"model.shared_expert_intermediate_size=24", "model.attention_bias=true"},
                              "model.layers.1.mlp.experts.2.down_proj.weight",
                              "experts.down"},
                      MoeCase{"olmoe", "OlmoeForCausalLM", {}, "model.layers.1.mlp.experts.2.down_proj.weight",
                              "experts.down"}),
    [](const ::testing::TestParamInfo<MoeCase>& info) { return info.param.family; });

}  // namespace
}  // namespace strata
