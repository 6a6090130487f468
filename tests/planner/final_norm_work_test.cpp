// OLMo-core's final RMSNorm in eager PyTorch (final_norm_work.h) against its kernels' traffic counted by hand from
// src/olmo_core/nn/layer_norm.py (forward: float, pow, mean, * rsqrt, * weight, to) and autograd's formulas
// (backward), less the fused kernel's; over micro_batch * seq * n_embd elements beside the head's norm; nothing when
// fused; refused, naming the flag, for a head without RMSNorm.
#include "planner/final_norm_work.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

TEST(PlannerFinalNorm, OlmoEagerRmsNormBytesByHand) {
  // bf16 activations (2 bytes), fp32 inside (4 bytes), per element.
  // Forward: float 2+4, pow 4+4, mean 4, * rsqrt 4+4, * weight 4+4, to 4+2 = 40; fused 2+2.
  // Backward: to 2+4, weight's input gradient 4+4, weight gradient 12+4, rsqrt's input gradient 4+4, rsqrt
  // gradient 12+4, mean 4, pow 28, sum of x's gradients 12, float 4+2 = 104; fused 2+2+2.
  const FinalNormExtra extra = olmo_eager_rms_norm_extra(2);
  EXPECT_DOUBLE_EQ(extra.forward, 40 - 4);
  EXPECT_DOUBLE_EQ(extra.backward, 104 - 6);
}

TEST(PlannerFinalNorm, AddedBesideTheHeadsNormOncePerMicroBatch) {
  const ModelConfig config = testing::small_llama_config();  // width 32
  Workload work = build_workload(config, 2, 16, 1, DType::BF16);
  const size_t forward_ops = work.head.forward.size(), backward_ops = work.head.backward.size();
  add_final_norm_work(work.head, FinalNorm::Fused, config, 2, 16, DType::BF16);
  EXPECT_EQ(work.head.forward.size(), forward_ops);
  add_final_norm_work(work.head, FinalNorm::OlmoEager, config, 2, 16, DType::BF16);
  ASSERT_EQ(work.head.forward.size(), forward_ops + 1);
  ASSERT_EQ(work.head.backward.size(), backward_ops + 1);
  const double elements = 2.0 * 16 * 32;
  EXPECT_DOUBLE_EQ(work.head.forward.back().bytes, elements * 36);
  EXPECT_DOUBLE_EQ(work.head.backward.back().bytes, elements * 98);
  EXPECT_EQ(work.head.forward.back().flops, 0);
}

TEST(PlannerFinalNorm, RefusesAHeadWithoutRmsNormNamingTheFlag) {
  const ModelConfig gpt2 = model_preset("gpt2-small").config;
  Workload work = build_workload(gpt2, 1, 64, 1, DType::BF16);
  try {
    add_final_norm_work(work.head, FinalNorm::OlmoEager, gpt2, 1, 64, DType::BF16);
    ADD_FAILURE() << "priced an eager RMSNorm on a LayerNorm head";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--final-norm"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace strata
