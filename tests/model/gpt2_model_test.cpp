#include <gtest/gtest.h>

#include <cmath>

#include "backends/backends.h"
#include "model/model_graph.h"
#include "model/sampler.h"
#include "support/full_forward.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

ModelConfig small_config() { return testing::gpt2_config(2, 2, 16, 29, 12); }

TEST(GPT2, ParameterCountMatchesTheClosedForm) {
  // 124M for GPT-2 small: the published figure (tied head, 1024 positions).
  ModelConfig gpt2_small = testing::gpt2_config(12, 12, 768, 50257, 1024);
  EXPECT_EQ(gpt2_small.num_parameters(), 124439808);
  int64_t from_specs = 0;
  for (const ParamSpec& spec : model_param_specs(gpt2_small)) from_specs += shape_numel(spec.shape);
  EXPECT_EQ(from_specs, 124439808);
}

TEST(GPT2, HuggingFaceNamesAndLayouts) {
  std::vector<ParamSpec> specs = model_param_specs(small_config());
  auto find = [&](const std::string& name) -> const ParamSpec& {
    for (const ParamSpec& spec : specs) {
      if (spec.name == name) return spec;
    }
    ADD_FAILURE() << "missing " << name;
    return specs[0];
  };
  EXPECT_EQ(find("transformer.wte.weight").shape, (Shape{29, 16}));
  EXPECT_EQ(find("transformer.wpe.weight").shape, (Shape{12, 16}));
  EXPECT_EQ(find("transformer.h.1.attn.c_attn.weight").shape, (Shape{16, 48}));
  EXPECT_EQ(find("transformer.h.1.mlp.c_fc.weight").shape, (Shape{16, 64}));
  EXPECT_EQ(find("transformer.h.1.mlp.c_proj.weight").shape, (Shape{64, 16}));
  EXPECT_EQ(find("transformer.ln_f.bias").shape, (Shape{16}));
  EXPECT_FLOAT_EQ(find("transformer.h.0.attn.c_proj.weight").stddev, 0.02f / std::sqrt(4.0f));
  EXPECT_TRUE(find("transformer.h.0.mlp.c_fc.weight").decay);
  EXPECT_FALSE(find("transformer.h.0.mlp.c_fc.bias").decay);
  EXPECT_FALSE(find("transformer.h.0.ln_2.weight").decay);
  for (const ParamSpec& spec : specs) EXPECT_NE(spec.name.find("transformer."), std::string::npos);
}

TEST(GPT2, InitialisationHasTheConfiguredStatistics) {
  ModelConfig config = small_config();
  config.n_embd = 64;
  config.vocab_size = 500;
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(3));
  const Tensor& wte = params.get("transformer.wte.weight");
  double sum = 0, squares = 0;
  for (int64_t i = 0; i < wte.numel(); ++i) {
    sum += wte.data<float>()[i];
    squares += wte.data<float>()[i] * wte.data<float>()[i];
  }
  double mean = sum / wte.numel();
  double stddev = std::sqrt(squares / wte.numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(stddev, 0.02, 0.0005);
  EXPECT_EQ(params.get("transformer.h.0.ln_1.weight").data<float>()[5], 1.0f);
  EXPECT_EQ(params.get("transformer.h.0.attn.c_attn.bias").data<float>()[5], 0.0f);
}

TEST(GPT2, ConfigErrorsNameTheKey) {
  ModelConfig config = small_config();
  config.n_head = 3;
  try {
    config.validate();
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("model.n_head"), std::string::npos);
  }
  ModelConfig too_long = small_config();
  EXPECT_THROW(build_model_graph(too_long, 1, 13, false), Error);
}

// The KV-cache sampler must produce the same next-token logits as the full
// forward graph over the whole prefix.
TEST(Sampler, CachedDecodingMatchesTheFullForwardPass) {
  ModelConfig config = small_config();
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(5));
  auto dispatcher = make_dispatcher("ref", FallbackPolicy::Error);
  testing::expect_cached_decoding_matches(config, params, *dispatcher, {3, 17, 5, 0, 28, 11, 9}, "gpt2");
}

TEST(Sampler, GreedyIsDeterministicAndSlidesPastTheContext) {
  ModelConfig config = small_config();
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(5));
  auto dispatcher = make_dispatcher("ref", FallbackPolicy::Error);
  Sampler sampler(config, params, *dispatcher);
  SamplingOptions greedy{0.0, 0, 1};
  auto first = sampler.generate({1, 2, 3}, 20, greedy);  // 23 > block_size 12
  auto second = sampler.generate({1, 2, 3}, 20, greedy);
  EXPECT_EQ(first.size(), 20u);
  EXPECT_EQ(first, second);
  SamplingOptions top1{1.0, 1, 9};  // top-1 sampling is greedy
  EXPECT_EQ(sampler.generate({1, 2, 3}, 20, top1), first);
  EXPECT_THROW(sampler.generate({}, 5, greedy), Error);
  EXPECT_THROW(sampler.generate({29}, 5, greedy), Error);
}

}  // namespace
}  // namespace strata
