// Which of a layer's forward ops live on the residual stream, the part sequence parallelism splits by sequence
// (Korthikanti et al. 2022, Sec. 4.2.2: the LayerNorms and the dropout-residual regions): the two norms and the two
// residual adds of a block, and nothing that tensor parallelism already splits, in a GPT-2 and in a Llama alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/model_spec.h"
#include "planner/workload.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

std::vector<std::string> residual_ops(const ModelConfig& config) {
  std::vector<std::string> ops;
  for (const OpWork& op : build_workload(config, 2, 32, 2, DType::BF16).layer.forward) {
    if (op.residual_stream) ops.push_back(op.op);
  }
  std::sort(ops.begin(), ops.end());
  return ops;
}

TEST(PlannerResidualStream, Gpt2TwoLayerNormsAndTwoResidualAdds) {
  EXPECT_EQ(residual_ops(testing::gpt2_config(2, 4, 64, 100, 32)),
            (std::vector<std::string>{"add", "add", "layernorm", "layernorm"}));
}

TEST(PlannerResidualStream, LlamaTwoRmsNormsAndTwoResidualAdds) {
  ModelConfig c = model_preset("llama3-8b").config;  // 32 query and 8 key/value heads: tp = 2 divides both
  c.n_embd = 256;
  c.intermediate_size = 512;
  c.block_size = 32;
  EXPECT_EQ(residual_ops(c), (std::vector<std::string>{"add", "add", "rms_norm", "rms_norm"}));
}

}  // namespace
}  // namespace strata
