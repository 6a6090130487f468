// model.init_from files that are ambiguous or hold non-finite values are
// refused, naming the file and the tensors.
#include "ckpt/hf_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "ckpt/safetensors.h"
#include "model/model_graph.h"
#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::TempDir;

ModelConfig tiny() {
  ModelConfig config;
  config.n_layer = 1;
  config.n_head = 2;
  config.n_embd = 8;
  config.vocab_size = 16;
  config.block_size = 4;
  return config;
}

TensorMap weights_of(const ParameterSet& params) {
  TensorMap tensors;
  for (size_t i = 0; i < params.size(); ++i) tensors[params.spec(i).name] = params.tensor(i);
  return tensors;
}

TEST(HfWeights, TheSameTensorUnderBothSpellingsIsRefusedNamingBoth) {
  TempDir dir;
  ParameterSet params(model_param_specs(tiny()));
  params.initialise(CounterRng(1));
  TensorMap tensors = weights_of(params);
  tensors["h.0.attn.c_attn.weight"] = params.get("transformer.h.0.attn.c_attn.weight");
  write_safetensors(dir / "both.safetensors", tensors);
  ParameterSet target(model_param_specs(tiny()));
  std::string message = error_of([&] { load_hf_weights(dir / "both.safetensors", tiny(), target); });
  EXPECT_THAT(message, HasSubstr("'h.0.attn.c_attn.weight'"));
  EXPECT_THAT(message, HasSubstr("'transformer.h.0.attn.c_attn.weight'"));
  EXPECT_THAT(message, HasSubstr("keep one"));
}

TEST(HfWeights, NonFiniteValuesAreRefusedNamingTheTensorAndElement) {
  TempDir dir;
  ParameterSet params(model_param_specs(tiny()));
  params.initialise(CounterRng(1));
  params.get("transformer.h.0.mlp.c_fc.bias").data<float>()[3] = std::nanf("");
  save_hf_weights(dir / "nan.safetensors", params);
  ParameterSet target(model_param_specs(tiny()));
  std::string message = error_of([&] { load_hf_weights(dir / "nan.safetensors", tiny(), target); });
  EXPECT_THAT(message, HasSubstr("tensor 'transformer.h.0.mlp.c_fc.bias' holds a non-finite value (nan) at element 3"));
}

}  // namespace
}  // namespace strata
