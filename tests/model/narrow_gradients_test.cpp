// keep_gradients_narrow through build_model_graph's narrow_gradients option, on a bf16 GPT-2
// training graph: each weight gradient made in bf16 is copied in bf16 where it was cast to f32, and
// keeps its name; the f32 ones (LayerNorm's, the embedding's) and the LM head copy's (added to the
// embedding's f32 gradient) stay as they were.
#include <gtest/gtest.h>

#include "model/model_graph.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

ModelGraph bf16_training_graph(bool narrow_gradients) {
  ModelBuildOptions options;
  options.precision = PrecisionPolicy::parse("bf16", default_fp32_ops(), "precision.fp32_ops");
  options.fuse = true;
  options.separate_head_copy = true;
  options.narrow_gradients = narrow_gradients;
  return build_model_graph(testing::gpt2_config(2, 2, 40, 37, 12), 3, 11, /*training=*/true, options);
}

TEST(NarrowGradients, WeightGradientsMadeInBf16AreCopiedInBf16AndKeepTheirNames) {
  const ModelGraph wide = bf16_training_graph(false);
  const ModelGraph narrow = bf16_training_graph(true);
  ASSERT_EQ(wide.params.size(), narrow.params.size());
  int narrowed = 0, kept_f32 = 0;
  for (size_t i = 0; i < wide.params.size(); ++i) {
    const Value& before = wide.graph.value(wide.grads.of.at(wide.params[i]));
    const Value& after = narrow.graph.value(narrow.grads.of.at(narrow.params[i]));
    EXPECT_EQ(after.name, before.name);
    EXPECT_EQ(after.meta.shape, before.meta.shape) << before.name;
    const Node& producer = wide.graph.node(before.producer);
    const bool widened = producer.op == "cast" && wide.graph.value(producer.inputs[0]).meta.dtype == DType::BF16;
    EXPECT_EQ(after.meta.dtype, widened ? DType::BF16 : before.meta.dtype) << before.name;
    if (widened) {
      const Node& copy = narrow.graph.node(after.producer);
      EXPECT_EQ(copy.op, "cast") << before.name;
      EXPECT_EQ(narrow.graph.value(copy.inputs[0]).name, wide.graph.value(producer.inputs[0]).name) << before.name;
    }
    narrowed += widened ? 1 : 0;
    kept_f32 += widened ? 0 : 1;
  }
  // Per layer: attention's c_attn and c_proj, the MLP's c_fc and c_proj weights (their biases' sums are f32 ops).
  EXPECT_GE(narrowed, 4 * 2);
  EXPECT_GT(kept_f32, 0);
  const Value& head_copy = narrow.graph.value(narrow.grads.of.at(narrow.head_copy));
  EXPECT_EQ(head_copy.meta.dtype, DType::F32) << head_copy.name;
  EXPECT_EQ(narrow.graph.num_nodes(), wide.graph.num_nodes());
}

TEST(NarrowGradients, F32GraphsAreUnchanged) {
  ModelBuildOptions options;
  options.separate_head_copy = true;
  const ModelGraph wide = build_model_graph(testing::gpt2_config(2, 2, 40, 37, 12), 3, 11, true, options);
  options.narrow_gradients = true;
  const ModelGraph narrow = build_model_graph(testing::gpt2_config(2, 2, 40, 37, 12), 3, 11, true, options);
  EXPECT_EQ(narrow.graph.num_nodes(), wide.graph.num_nodes());
  for (size_t i = 0; i < wide.params.size(); ++i) {
    EXPECT_EQ(narrow.graph.value(narrow.grads.of.at(narrow.params[i])).meta.dtype, DType::F32);
  }
}

}  // namespace
}  // namespace strata
