// A mixture-of-experts model's weights as the Hub stores them, one tensor per expert
// (model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight) or in transformers' packed form
// (experts.gate_up_proj, experts.down_proj), loaded into the experts' stacked parameters; a missing or
// extra expert, a wrong shape, or an expert given two ways is refused, naming the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ckpt/hf_weights.h"
#include "ckpt/safetensors.h"
#include "model/model_graph.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::TempDir;

constexpr int64_t kExperts = 3;

ModelConfig tiny_mixtral() {
  ModelConfig c;
  c.family = "mixtral";
  c.n_layer = 1;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.n_embd = 8;
  c.vocab_size = 16;
  c.block_size = 4;
  c.tie_word_embeddings = false;
  c.num_experts = kExperts;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 6;
  return c;
}

const char* const kProjections[] = {"w1", "w2", "w3"};

// The parameters as the Hub stores them: every stacked expert parameter split into its experts.
TensorMap hub_tensors(const ParameterSet& params) {
  TensorMap tensors;
  const std::string stacked = "block_sparse_moe.experts.";
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& name = params.spec(i).name;
    const size_t at = name.find(stacked);
    if (at == std::string::npos) {
      tensors[name] = params.tensor(i);
      continue;
    }
    const Shape& shape = params.tensor(i).shape();
    for (int64_t e = 0; e < kExperts; ++e) {
      const std::string hub = name.substr(0, at + stacked.size()) + std::to_string(e) + "." +
                              name.substr(at + stacked.size());
      tensors[hub] = params.tensor(i).narrow(0, e, 1).reshape(Shape(shape.begin() + 1, shape.end())).clone();
    }
  }
  return tensors;
}

void expect_same_parameters(const ParameterSet& params, const ParameterSet& loaded) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor &expected = params.tensor(i), &actual = loaded.tensor(i);
    for (int64_t j = 0; j < expected.numel(); ++j) {
      ASSERT_EQ(actual.data<float>()[j], expected.data<float>()[j]) << params.spec(i).name << " element " << j;
    }
  }
}

// The error loading `tensors` (written to a file) into a tiny Mixtral gives.
std::string error_loading(const TensorMap& tensors) {
  TempDir dir;
  write_safetensors(dir / "w.safetensors", tensors);
  ParameterSet target(model_param_specs(tiny_mixtral()));
  return error_of([&] { load_hf_weights(dir / "w.safetensors", tiny_mixtral(), target); });
}

TEST(HfExpertWeights, EachExpertLandsInItsSliceOfTheStackedParameter) {
  TempDir dir;
  ParameterSet params(model_param_specs(tiny_mixtral()));
  params.initialise(CounterRng(1));
  const TensorMap hub = hub_tensors(params);
  ASSERT_EQ(hub.count("model.layers.0.block_sparse_moe.experts.2.w2.weight"), 1u);
  write_safetensors(dir / "hub.safetensors", hub);
  ParameterSet loaded(model_param_specs(tiny_mixtral()));
  load_hf_weights(dir / "hub.safetensors", tiny_mixtral(), loaded);
  expect_same_parameters(params, loaded);
}

TEST(HfExpertWeights, MissingExtraOrDoubledExpertsAreRefusedByName) {
  ParameterSet params(model_param_specs(tiny_mixtral()));
  params.initialise(CounterRng(1));
  TensorMap missing = hub_tensors(params);
  missing.erase("model.layers.0.block_sparse_moe.experts.1.w3.weight");
  EXPECT_THAT(error_loading(missing),
              HasSubstr("tensor 'model.layers.0.block_sparse_moe.experts.1.w3.weight' is missing (expert 1 of the 3"));
  TensorMap extra = hub_tensors(params);
  extra["model.layers.0.block_sparse_moe.experts.3.w1.weight"] =
      extra.at("model.layers.0.block_sparse_moe.experts.0.w1.weight");
  EXPECT_THAT(error_loading(extra), HasSubstr("tensor 'model.layers.0.block_sparse_moe.experts.3.w1.weight' is "
                                              "expert 3, but the config has 3 experts (model.num_experts)"));
  TensorMap wrong = hub_tensors(params);
  wrong["model.layers.0.block_sparse_moe.experts.0.w2.weight"] = Tensor::zeros({6, 8}, DType::F32);
  EXPECT_THAT(error_loading(wrong), HasSubstr("'model.layers.0.block_sparse_moe.experts.0.w2.weight' has shape [6, 8], "
                                              "the config (model.*) implies [8, 6]"));
  TensorMap doubled = hub_tensors(params);
  doubled["model.layers.0.block_sparse_moe.experts.w1.weight"] =
      params.get("model.layers.0.block_sparse_moe.experts.w1.weight");
  EXPECT_THAT(error_loading(doubled), HasSubstr("keep one spelling"));
  for (const char* projection : kProjections) {
    TensorMap none = hub_tensors(params);
    for (int64_t e = 0; e < kExperts; ++e) {
      none.erase("model.layers.0.block_sparse_moe.experts." + std::to_string(e) + "." + projection + ".weight");
    }
    EXPECT_THAT(error_loading(none), HasSubstr("is missing")) << projection;
  }
}

// transformers' packed form: per layer experts.gate_up_proj [E, 2F, C] (each expert's w1 rows, then its w3
// rows) and experts.down_proj [E, C, F] (w2 stacked), built here element by element from the parameters.
TensorMap packed_tensors(const ParameterSet& params) {
  TensorMap tensors;
  const std::string experts = "model.layers.0.block_sparse_moe.experts.";
  for (size_t i = 0; i < params.size(); ++i) {
    if (params.spec(i).name.find(experts) == std::string::npos) tensors[params.spec(i).name] = params.tensor(i);
  }
  const Tensor &gate = params.get(experts + "w1.weight"), &up = params.get(experts + "w3.weight");
  const int64_t width = gate.shape()[1], channels = gate.shape()[2];
  Tensor gate_up = Tensor::zeros({kExperts, 2 * width, channels}, DType::F32);
  for (int64_t e = 0; e < kExperts; ++e) {
    for (int64_t r = 0; r < 2 * width; ++r) {
      for (int64_t c = 0; c < channels; ++c) {
        const Tensor& from = r < width ? gate : up;
        gate_up.data<float>()[(e * 2 * width + r) * channels + c] =
            from.data<float>()[(e * width + r % width) * channels + c];
      }
    }
  }
  tensors[experts + "gate_up_proj"] = gate_up;
  tensors[experts + "down_proj"] = params.get(experts + "w2.weight");
  return tensors;
}

TEST(HfExpertWeights, TransformersPackedExpertsLoadIntoTheStackedParameters) {
  TempDir dir;
  ParameterSet params(model_param_specs(tiny_mixtral()));
  params.initialise(CounterRng(3));
  write_safetensors(dir / "packed.safetensors", packed_tensors(params));
  ParameterSet loaded(model_param_specs(tiny_mixtral()));
  load_hf_weights(dir / "packed.safetensors", tiny_mixtral(), loaded);
  expect_same_parameters(params, loaded);
}

TEST(HfExpertWeights, PackedExpertsOfTheWrongCountMissingOrGivenTwiceAreRefusedByName) {
  ParameterSet params(model_param_specs(tiny_mixtral()));
  params.initialise(CounterRng(4));
  const std::string experts = "model.layers.0.block_sparse_moe.experts.";
  TensorMap short_one = packed_tensors(params);
  short_one[experts + "gate_up_proj"] = Tensor::zeros({kExperts - 1, 12, 8}, DType::F32);
  EXPECT_THAT(error_loading(short_one),
              HasSubstr("tensor '" + experts + "gate_up_proj' has shape [2, 12, 8], the config (model.*) implies "
                        "[3, 12, 8] (every expert's " + experts + "w1.weight and " + experts + "w3.weight packed)"));
  TensorMap missing = packed_tensors(params);
  missing.erase(experts + "down_proj");
  EXPECT_THAT(error_loading(missing), HasSubstr("tensor '" + experts + "w2.weight' is missing"));
  TensorMap both = packed_tensors(params);
  both[experts + "1.w1.weight"] = params.get(experts + "w1.weight").narrow(0, 1, 1).reshape({6, 8}).clone();
  EXPECT_THAT(error_loading(both), HasSubstr("keep one spelling"));
}

// Strata's own files (save_hf_weights: the stacked parameters whole) load as before.
TEST(HfExpertWeights, StackedParametersLoadWhole) {
  TempDir dir;
  ParameterSet params(model_param_specs(tiny_mixtral()));
  params.initialise(CounterRng(2));
  save_hf_weights(dir / "stacked.safetensors", params);
  ParameterSet loaded(model_param_specs(tiny_mixtral()));
  load_hf_weights(dir / "stacked.safetensors", tiny_mixtral(), loaded);
  const Tensor& w1 = loaded.get("model.layers.0.block_sparse_moe.experts.w1.weight");
  EXPECT_EQ(w1.data<float>()[17], params.get("model.layers.0.block_sparse_moe.experts.w1.weight").data<float>()[17]);
}

}  // namespace
}  // namespace strata
