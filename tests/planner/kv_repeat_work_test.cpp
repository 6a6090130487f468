// K/V expanded for an SDPA without GQA (kv_repeat_work.h) against the tensors the expansion materialises, counted
// by hand over the heads this rank holds. Compiled (OLMo-core's repeat_interleave in a compiled block): forward k's
// expansion written by the rotary kernel (heads * head_dim a row instead of kv_heads * head_dim) and v's copied (kv
// read, heads written); backward the gradients summed over each group, the mirror image. Eager (torchtitan's
// repeat_kv without torch.compile): the reshape of the expanded view copies k and v (kv read, heads written each),
// and the expand's gradient sums each over its group (heads read, kv written each). Nothing without grouping.
#include "planner/kv_repeat_work.h"

#include <gtest/gtest.h>

#include <string>

#include "planner/cost_model.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

TEST(PlannerKvRepeat, MovesTheExpandedKeysAndValuesEachWay) {
  const ModelConfig config = testing::small_llama_config();  // 4 heads, 2 key/value heads, head dim 8
  const double a = 2;                                         // bf16
  const double rows = 2.0 * 16;                               // micro-batch 2 of 16 positions
  for (int tp : {1, 2}) {
    Workload work = build_workload(config, 2, 16, tp, DType::BF16);
    const size_t forward_ops = work.layer.forward.size(), backward_ops = work.layer.backward.size();
    add_kv_repeat(work.layer, config, 2, 16, tp, DType::BF16, /*eager=*/false);
    ASSERT_EQ(work.layer.forward.size(), forward_ops + 1);
    ASSERT_EQ(work.layer.backward.size(), backward_ops + 1);
    const double q = 4.0 * 8 / tp, kv = 2.0 * 8 / tp;
    // Forward: k written at q's width instead of kv's by the rotary kernel; v read at kv's and written at q's.
    const double forward_by_hand = rows * (q - kv) * a + rows * (kv + q) * a;
    // Backward: k's gradient read at q's width instead of kv's; v's read at q's and written at kv's.
    const double backward_by_hand = rows * (q - kv) * a + rows * (q + kv) * a;
    const OpWork& forward = testing::op_labelled(work.layer.forward, "self_attn.kv_repeat");
    const OpWork& backward = testing::op_labelled(work.layer.backward, "self_attn.kv_repeat.grad");
    EXPECT_DOUBLE_EQ(forward.bytes, forward_by_hand) << "tp " << tp;
    EXPECT_DOUBLE_EQ(backward.bytes, backward_by_hand) << "tp " << tp;
    EXPECT_EQ(forward.flops, 0);
    EXPECT_FALSE(forward.residual_stream);  // split by heads, not by sequence parallelism
  }
}

TEST(PlannerKvRepeat, EagerCopiesBothTensorsAndSumsBothGradients) {
  const ModelConfig config = testing::small_llama_config();  // 4 heads, 2 key/value heads, head dim 8
  const double a = 2;                                         // bf16
  const double rows = 2.0 * 16;
  for (int tp : {1, 2}) {
    Workload work = build_workload(config, 2, 16, tp, DType::BF16);
    add_kv_repeat(work.layer, config, 2, 16, tp, DType::BF16, /*eager=*/true);
    const double q = 4.0 * 8 / tp, kv = 2.0 * 8 / tp;
    // Forward: k's copy (kv read, q written) and v's (the same), after the rotary kernel has written k.
    const double forward_by_hand = rows * (kv + q) * a + rows * (kv + q) * a;
    // Backward: k's gradient summed over its group (q read, kv written), then v's.
    const double backward_by_hand = rows * (q + kv) * a + rows * (q + kv) * a;
    EXPECT_DOUBLE_EQ(testing::op_labelled(work.layer.forward, "self_attn.kv_repeat").bytes, forward_by_hand);
    EXPECT_DOUBLE_EQ(testing::op_labelled(work.layer.backward, "self_attn.kv_repeat.grad").bytes, backward_by_hand);
  }
}

// torchtitan's per-op policy keeps GEMM and attention outputs only, so the copy feeding SDPA is redone with the
// rotary embedding; the attention-core policy redoes it with the attention.
TEST(PlannerKvRepeat, RedoneWithTheRotaryEmbeddingOrTheAttention) {
  const ModelConfig config = testing::small_llama_config();
  for (SelectivePolicy policy : {SelectivePolicy::AttentionCore, SelectivePolicy::AlternateGemms}) {
    Workload work = build_workload(config, 2, 16, 1, DType::BF16, policy);
    const OpWork* rope = first_op_named(work.layer.forward, "rope");
    ASSERT_NE(rope, nullptr);
    EXPECT_EQ(rope->selective_recompute, policy == SelectivePolicy::AlternateGemms);
    add_kv_repeat(work.layer, config, 2, 16, 1, DType::BF16, /*eager=*/false);
    EXPECT_TRUE(testing::op_labelled(work.layer.forward, "self_attn.kv_repeat").selective_recompute);
  }
}

// Through the cost model: on a device of 100 GB/s at full efficiency and no launch cost, the expansion adds its bytes
// of every layer, forward and backward, at that bandwidth to the step's compute, eagerly under `eager` (f32: 4 bytes).
TEST(PlannerKvRepeat, CostModelPricesTheEagerCopiesUnderEager) {
  const ModelConfig config = testing::small_llama_config();
  auto compute = [&](bool kv_repeat, bool eager) {
    return testing::f32_step_compute_s(config, 2, 16, [&](PlanningProblem& problem) {
      problem.kv_repeat = kv_repeat;
      problem.eager = eager;
    });
  };
  const double rows = 2.0 * 16, a = 4, q = 4.0 * 8, kv = 2.0 * 8;
  const double eager_by_hand = 2 * rows * 2 * (kv + q) * a;  // forward and backward
  const double compiled_by_hand = 2 * rows * 2 * q * a;
  EXPECT_NEAR(compute(true, true) - compute(false, true), config.n_layer * eager_by_hand / 100e9, 1e-12);
  EXPECT_NEAR(compute(true, false) - compute(false, false), config.n_layer * compiled_by_hand / 100e9, 1e-12);
}

TEST(PlannerKvRepeat, NothingWithoutGrouping) {
  ModelConfig config = testing::small_llama_config();
  config.n_kv_head = config.n_head;
  for (bool eager : {false, true}) {
    Workload work = build_workload(config, 2, 16, 1, DType::BF16);
    const size_t forward_ops = work.layer.forward.size(), backward_ops = work.layer.backward.size();
    add_kv_repeat(work.layer, config, 2, 16, 1, DType::BF16, eager);
    EXPECT_EQ(work.layer.forward.size(), forward_ops);
    EXPECT_EQ(work.layer.backward.size(), backward_ops);
  }
}

}  // namespace
}  // namespace strata
