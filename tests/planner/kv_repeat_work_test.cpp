// K/V expanded for an SDPA without GQA (kv_repeat_work.h) against the tensors repeat_interleave materialises,
// counted by hand: forward k's expansion written by the rotary kernel (heads * head_dim a row instead of
// kv_heads * head_dim) and v's copied (kv read, heads written); backward the gradients summed over each group, the
// mirror image; over the heads this rank holds; nothing for a model without grouping.
#include "planner/kv_repeat_work.h"

#include <gtest/gtest.h>

#include <string>

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
    add_kv_repeat(work.layer, config, 2, 16, tp, DType::BF16);
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

TEST(PlannerKvRepeat, NothingWithoutGrouping) {
  ModelConfig config = testing::small_llama_config();
  config.n_kv_head = config.n_head;
  Workload work = build_workload(config, 2, 16, 1, DType::BF16);
  const size_t forward_ops = work.layer.forward.size(), backward_ops = work.layer.backward.size();
  add_kv_repeat(work.layer, config, 2, 16, 1, DType::BF16);
  EXPECT_EQ(work.layer.forward.size(), forward_ops);
  EXPECT_EQ(work.layer.backward.size(), backward_ops);
}

}  // namespace
}  // namespace strata
