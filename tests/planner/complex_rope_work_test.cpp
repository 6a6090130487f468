// torchtitan's complex rotary embedding under torch.compile (complex_rope_work.h), against the kernels left to
// eager PyTorch counted by hand for each element of q and k (a = bytes of an activation, the complex64 arithmetic
// in fp32, 4 bytes a real component):
//   forward  x.float() (Inductor) a+4, complex product with freqs_cis (eager aten.mul) 4+4, type_as (Inductor) 4+a
//   backward type_as's gradient a+4, product with conj(freqs_cis) 4+4, float()'s gradient 4+a
// bf16: 20 bytes each way; fp32: 24; against the fused rotary kernel's 2a (q and k read and written once).
#include "planner/complex_rope_work.h"

#include <gtest/gtest.h>

#include "planner/cost_model.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

TEST(PlannerComplexRope, BytesPerElementAsTheKernelsCountedByHand) {
  EXPECT_DOUBLE_EQ(complex_rope_extra(2).forward, (2 + 4) + (4 + 4) + (4 + 2) - 4);
  EXPECT_DOUBLE_EQ(complex_rope_extra(2).backward, (2 + 4) + (4 + 4) + (4 + 2) - 4);
  EXPECT_DOUBLE_EQ(complex_rope_extra(4).forward, 24 - 8);
  EXPECT_DOUBLE_EQ(complex_rope_extra(4).backward, 24 - 8);
}

// Over the q and k heads this rank holds (4 query and 2 key/value heads of 8, split by tp), beside the fused rotary
// kernel: redone by selective recomputation exactly when it is (torchtitan's per-op policy redoes it), split by heads.
TEST(PlannerComplexRope, AddsTheFallbacksTrafficOverTheRanksQAndK) {
  const ModelConfig config = testing::small_llama_config();
  const double rows = 2.0 * 16;  // micro-batch 2 of 16 positions
  for (SelectivePolicy policy : {SelectivePolicy::AttentionCore, SelectivePolicy::AlternateGemms}) {
    for (int tp : {1, 2}) {
      Workload work = build_workload(config, 2, 16, tp, DType::BF16, policy);
      const size_t forward_ops = work.layer.forward.size(), backward_ops = work.layer.backward.size();
      add_complex_rope(work.layer, config, 2, 16, tp, DType::BF16);
      ASSERT_EQ(work.layer.forward.size(), forward_ops + 1);
      ASSERT_EQ(work.layer.backward.size(), backward_ops + 1);
      const double elements = rows * (4.0 + 2.0) * 8 / tp;
      const OpWork& forward = testing::op_labelled(work.layer.forward, "self_attn.complex_rope");
      const OpWork& backward = testing::op_labelled(work.layer.backward, "self_attn.complex_rope.grad");
      EXPECT_DOUBLE_EQ(forward.bytes, elements * 16) << "tp " << tp;
      EXPECT_DOUBLE_EQ(backward.bytes, elements * 16) << "tp " << tp;
      EXPECT_EQ(forward.flops, 0);
      EXPECT_FALSE(forward.residual_stream);
      EXPECT_EQ(forward.selective_recompute, policy == SelectivePolicy::AlternateGemms);
      EXPECT_EQ(forward.selective_recompute, first_op_named(work.layer.forward, "rope")->selective_recompute);
    }
  }
}

// Through the cost model: on a device of 100 GB/s at full efficiency and no launch cost, the fallback adds its bytes
// of every layer, forward and backward, at that bandwidth to the step's compute (f32: a = 4); under `eager` the same
// kernels are already priced (eager_work.h), so it adds nothing.
TEST(PlannerComplexRope, CostModelPricesTheTrafficOnceCompiledAndNotAgainUnderEager) {
  const ModelConfig config = testing::small_llama_config();
  auto compute = [&](bool complex_rope, bool eager) {
    return testing::f32_step_compute_s(config, 2, 16, [&](PlanningProblem& problem) {
      problem.complex_rope = complex_rope;
      problem.eager = eager;
    });
  };
  const double per_layer = 2.0 * 16 * (4 + 2) * 8 * (16 + 16);  // q and k elements, 4 fp32 passes each way
  EXPECT_NEAR(compute(true, false) - compute(false, false), config.n_layer * per_layer / 100e9, 1e-12);
  EXPECT_DOUBLE_EQ(compute(true, true), compute(false, true));
}

// GPT-2 has no rotary embedding: nothing to add.
TEST(PlannerComplexRope, LeavesAGpt2LayerAsItIs) {
  const ModelConfig config = testing::gpt2_config(2, 4, 64, 100, 16);
  Workload work = build_workload(config, 2, 16, 1, DType::BF16);
  const size_t forward_ops = work.layer.forward.size(), backward_ops = work.layer.backward.size();
  add_complex_rope(work.layer, config, 2, 16, 1, DType::BF16);
  EXPECT_EQ(work.layer.forward.size(), forward_ops);
  EXPECT_EQ(work.layer.backward.size(), backward_ops);
}

}  // namespace
}  // namespace strata
