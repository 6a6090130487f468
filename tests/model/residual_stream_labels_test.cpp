// Each family's residual stream (model/family.h) names ops its training graph has: a label renamed in a
// family and not in its list would silently take the op off the stream the planner splits under sequence
// parallelism.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "model/family.h"
#include "model/model_graph.h"
#include "support/gpt2_shapes.h"
#include "support/llama_shapes.h"

namespace strata {
namespace {

// Every node's label, the layer prefix and number taken off ("transformer.h.1.ln_1" -> "ln_1").
std::set<std::string> labels_of(const ModelConfig& config) {
  const ModelGraph model = build_model_graph(config, 2, 8, /*training=*/true);
  const std::string prefix(model_family(config).layer_prefix());
  std::set<std::string> labels;
  for (int id = 0; id < model.graph.num_nodes(); ++id) {
    std::string label = model.graph.node(id).label;
    if (label.rfind(prefix, 0) == 0) label = label.substr(label.find('.', prefix.size()) + 1);
    labels.insert(label);
  }
  return labels;
}

void expect_listed_ops_exist(const ModelConfig& config) {
  const std::set<std::string> labels = labels_of(config);
  const ResidualStream stream = model_family(config).residual_stream();
  EXPECT_FALSE(stream.ops.empty());
  for (const std::string& op : stream.ops) EXPECT_TRUE(labels.count(op)) << config.family << ": no op labelled " << op;
  for (const std::string& op : stream.gradient_ops) {
    EXPECT_TRUE(labels.count(op)) << config.family << ": no gradient op labelled " << op;
  }
}

TEST(ModelResidualStream, Gpt2ListsOpsItsGraphHas) { expect_listed_ops_exist(testing::gpt2_config(2, 2, 32, 64, 8)); }

TEST(ModelResidualStream, LlamaListsOpsItsGraphHas) {
  expect_listed_ops_exist(testing::llama_config(2, 4, 2, 32, 64, 64, 8, false));
}

// A mixture of experts adds the ops sequence parallelism keeps split (the router's gate; Qwen2-MoE's shared expert,
// its gate and the sum) and the sum of the normed input's two gradients.
TEST(ModelResidualStream, MixturesOfExpertsListOpsTheirGraphsHave) {
  expect_listed_ops_exist(testing::moe_config("mixtral", 2, 4, 2, 32, 24, 37, 4, 2));
  ModelConfig qwen2 = testing::moe_config("qwen2_moe", 2, 4, 2, 32, 24, 37, 4, 2);
  qwen2.attention_bias = true;
  qwen2.shared_expert_intermediate_size = 20;
  expect_listed_ops_exist(qwen2);
}

}  // namespace
}  // namespace strata
