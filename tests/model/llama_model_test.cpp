// The LLaMA family: LlamaForCausalLM's parameters (names, nn.Linear layouts, published counts), the
// config checks, config.json both ways, and the KV-cache sampler against the full forward graph with
// grouped-query attention and llama3 rope scaling.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "model/family.h"
#include "model/model_graph.h"
#include "model/sampler.h"
#include "support/error_text.h"
#include "support/full_forward.h"
#include "support/llama_shapes.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::llama_config;

// A small GQA model with llama3 scaling whose original length (8) the sampler's positions pass.
ModelConfig small_llama() {
  ModelConfig c = llama_config(2, 4, 2, 32, 40, 37, 16, false);
  c.rope_scaling = {.type = "llama3", .factor = 4, .low_freq_factor = 1, .high_freq_factor = 2,
                    .original_max_positions = 8};
  c.attention_bias = true;
  return c;
}

TEST(Llama, ParameterCountsAreThePublishedOnes) {
  // SmolLM-135M (tied) and Meta-Llama-3-8B (untied), from their config.json.
  EXPECT_EQ(llama_config(30, 9, 3, 576, 1536, 49152, 2048, true).num_parameters(), 134515008);
  EXPECT_EQ(llama_config(32, 32, 8, 4096, 14336, 128256, 8192, false).num_parameters(), 8030261248);
}

TEST(Llama, HuggingFaceNamesAndNnLinearLayouts) {
  ModelConfig c = small_llama();
  c.head_dim = 12;  // not n_embd / n_head: the projections follow head_dim
  std::map<std::string, ParamSpec> specs;
  for (const ParamSpec& spec : model_param_specs(c)) specs[spec.name] = spec;
  EXPECT_EQ(specs.at("model.embed_tokens.weight").shape, (Shape{37, 32}));
  EXPECT_EQ(specs.at("model.layers.1.self_attn.q_proj.weight").shape, (Shape{48, 32}));
  EXPECT_EQ(specs.at("model.layers.1.self_attn.q_proj.bias").shape, (Shape{48}));
  EXPECT_EQ(specs.at("model.layers.1.self_attn.k_proj.weight").shape, (Shape{24, 32}));
  EXPECT_EQ(specs.at("model.layers.1.self_attn.v_proj.weight").shape, (Shape{24, 32}));
  EXPECT_EQ(specs.at("model.layers.1.self_attn.o_proj.weight").shape, (Shape{32, 48}));
  EXPECT_EQ(specs.at("model.layers.0.mlp.gate_proj.weight").shape, (Shape{40, 32}));
  EXPECT_EQ(specs.at("model.layers.0.mlp.down_proj.weight").shape, (Shape{32, 40}));
  EXPECT_EQ(specs.at("model.layers.0.post_attention_layernorm.weight").shape, (Shape{32}));
  EXPECT_EQ(specs.at("model.norm.weight").init, Init::Ones);
  EXPECT_EQ(specs.at("lm_head.weight").shape, (Shape{37, 32}));
  EXPECT_EQ(specs.count("model.layers.0.mlp.up_proj.bias"), 0u);  // mlp_bias off
  EXPECT_TRUE(specs.at("model.layers.0.mlp.up_proj.weight").decay);
  EXPECT_FALSE(specs.at("model.layers.0.input_layernorm.weight").decay);
  c.tie_word_embeddings = true;
  for (const ParamSpec& spec : model_param_specs(c)) EXPECT_NE(spec.name, "lm_head.weight");
}

TEST(Llama, ConfigErrorsNameTheKey) {
  ModelConfig c = small_llama();
  c.n_kv_head = 3;
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("key 'model.n_kv_head' (3) must divide model.n_head (4)"));
  c = small_llama();
  c.intermediate_size = 0;
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("model.intermediate_size"));
  c = small_llama();
  c.rope_scaling.type = "yarn";
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("key 'model.rope_scaling' must be"));
  ModelConfig gpt2;
  gpt2.n_kv_head = 2;
  EXPECT_THAT(error_of([&] { gpt2.validate(); }), HasSubstr("key 'model.n_kv_head' is not a GPT-2 setting"));
  gpt2 = ModelConfig{};
  gpt2.family = "mamba";
  EXPECT_THAT(error_of([&] { gpt2.validate(); }), HasSubstr("key 'model.family' must be one of \"gpt2\", \"llama\""));
}

TEST(Llama, HfConfigRoundTripsAndReadsTheV5Spelling) {
  const ModelFamily& family = model_family("llama");
  ModelConfig c = small_llama();
  c.max_position_embeddings = 16;
  c.head_dim = 8;  // config.json spells out the head size, so the config read back does too
  const nlohmann::json v4 = family.to_hf_config(c);
  EXPECT_EQ(v4["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(v4["num_key_value_heads"], 2);
  EXPECT_EQ(family.from_hf_config(v4, "config.json"), c);
  nlohmann::json v5 = v4;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5["rope_parameters"] = v4["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = c.rope_theta;
  EXPECT_EQ(family.from_hf_config(v5, "config.json"), c);
  v5["hidden_act"] = "gelu";
  EXPECT_THAT(error_of([&] { family.from_hf_config(v5, "dir/config.json"); }),
              HasSubstr("dir/config.json: hidden_act \"gelu\""));
}

// The sampler's cached decoding (absolute positions for the rotary, k and v of the kv heads cached)
// gives the full graph's logits of the last position, on both backends.
TEST(Llama, CachedDecodingMatchesTheFullForwardPass) {
  const ModelConfig config = small_llama();
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(5));
  const std::vector<int32_t> tokens{3, 17, 5, 0, 28, 11, 9, 36, 2, 30, 4};
  for (const char* backend : {"ref", "cpu"}) {
    auto dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
    testing::expect_cached_decoding_matches(config, params, *dispatcher, tokens, backend);
  }
}

}  // namespace
}  // namespace strata
