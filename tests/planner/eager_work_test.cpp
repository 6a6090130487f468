// Eager PyTorch's decompositions of torchtitan's Llama ops (eager_work.h), against a count by hand of the kernels
// its code runs, each reading its inputs and writing its output once (a = bytes of a bf16 activation, 2; the
// upcast copies fp32, 4):
//   RMSNorm forward  float() 2+4, pow 4+4, mean 4, * rsqrt 4+4, type_as 4+2, * weight 2+2      = 36 B/element
//   RMSNorm backward * weight 2+2 and its weight gradient 2+2+2 with a row sum 2, type_as 2+4,
//                    * rsqrt 4+4 and rsqrt's gradient 4+4+4 with a row sum 4, mean 4, pow 4+4 and 4+4+4,
//                    the two gradients of x summed 4+4+4, float() 4+2                          = 84 B/element
//   rotary embedding float() 2+4, complex product 4+4, type_as 4+2 each way                    = 20 B/element
//   SwiGLU forward   silu 2+2, product 2+2+2 = 10; backward two products 6 each and silu's 6 = 18 B/element
// against one fused kernel: RMSNorm 4 and 6, rotary 4 and 4, SwiGLU 6 and 10 B/element.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "planner/cost_model.h"
#include "planner/eager_work.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

constexpr int64_t kBatch = 2, kSeq = 32;

using testing::bytes_of;

ModelConfig small_llama() {
  ModelConfig c = model_preset("llama3-8b").config;  // a Llama's keys; the shape made small below
  c.n_layer = 2;
  c.n_head = 8;
  c.n_kv_head = 2;
  c.n_embd = 64;
  c.intermediate_size = 96;
  c.vocab_size = 100;
  c.block_size = kSeq;
  return c;
}

TEST(PlannerEager, BytesPerElementAsTheKernelsCountedByHand) {
  EXPECT_DOUBLE_EQ(eager_rms_norm_extra(2).forward, 36 - 4);
  EXPECT_DOUBLE_EQ(eager_rms_norm_extra(2).backward, 84 - 6);
  EXPECT_DOUBLE_EQ(eager_rope_extra(2).forward, 20 - 4);
  EXPECT_DOUBLE_EQ(eager_rope_extra(2).backward, 20 - 4);
  EXPECT_DOUBLE_EQ(eager_swiglu_extra(2).forward, 10 - 6);
  EXPECT_DOUBLE_EQ(eager_swiglu_extra(2).backward, 18 - 10);
}

// Two norms over the residual stream (s b h), the rotary embedding over q and k (their heads times the head
// size), SwiGLU over the MLP's width; tensor parallelism splits all but the norms.
TEST(PlannerEager, AddsTheDecompositionsTrafficToALlamaLayer) {
  const ModelConfig c = small_llama();
  for (int tp : {1, 2}) {
    const double tokens = kBatch * kSeq;
    const double residual = tokens * 64, rotary = tokens * (8 + 2) / tp * 8, mlp = tokens * 96 / tp;
    const SegmentWork before = build_workload(c, kBatch, kSeq, tp, DType::BF16).layer;
    SegmentWork after = before;
    add_eager_elementwise(after, c, kBatch, kSeq, tp, DType::BF16);
    EXPECT_DOUBLE_EQ(bytes_of(after.forward) - bytes_of(before.forward), 2 * residual * 32 + rotary * 16 + mlp * 4);
    EXPECT_DOUBLE_EQ(bytes_of(after.backward) - bytes_of(before.backward),
                     2 * residual * 78 + rotary * 16 + mlp * 8);
  }
}

// An extra is redone by selective recomputation, and split by sequence parallelism, exactly when the fused op it
// decomposes is: torchtitan's per-op policy redoes every element-wise op, the attention-core policy none of these.
TEST(PlannerEager, RecomputedAndSplitWithTheFusedOpItDecomposes) {
  const ModelConfig c = small_llama();
  for (SelectivePolicy policy : {SelectivePolicy::AttentionCore, SelectivePolicy::AlternateGemms}) {
    SegmentWork layer = build_workload(c, kBatch, kSeq, 1, DType::BF16, policy).layer;
    const std::vector<OpWork> fused = layer.forward;
    add_eager_elementwise(layer, c, kBatch, kSeq, 1, DType::BF16);
    ASSERT_EQ(layer.forward.size(), fused.size() + 3);
    for (size_t i = fused.size(); i < layer.forward.size(); ++i) {
      const OpWork& extra = layer.forward[i];
      const std::string name = extra.op.substr(std::string("eager_").size());
      auto beside = std::find_if(fused.begin(), fused.end(), [&](const OpWork& op) { return op.op == name; });
      ASSERT_NE(beside, fused.end()) << extra.op;
      EXPECT_EQ(extra.selective_recompute, policy == SelectivePolicy::AlternateGemms) << extra.op;
      EXPECT_EQ(extra.selective_recompute, beside->selective_recompute) << extra.op;
      EXPECT_EQ(extra.residual_stream, beside->residual_stream) << extra.op;
    }
  }
}

// Through the cost model: on a device of 100 GB/s at full efficiency and no launch cost, `eager` adds the extra
// bytes of every layer, forward and backward, at that bandwidth to the step's compute (f32: a = 4 bytes).
TEST(PlannerEager, CostModelPricesTheExtraTrafficAtTheDevicesBandwidth) {
  const ModelConfig c = small_llama();
  auto compute = [&](bool eager) {
    return testing::f32_step_compute_s(c, kBatch, kSeq, [&](PlanningProblem& problem) { problem.eager = eager; });
  };
  const double tokens = kBatch * kSeq, a = 4, f = 4;
  const double per_layer = 2 * tokens * 64 * ((2 * a + 7 * f) + (5 * a + 17 * f)) +  // two norms
                           tokens * (8 + 2) * 8 * (4 * f + 4 * f) +                     // rotary q and k
                           tokens * 96 * (2 * a + 4 * a);                               // SwiGLU
  EXPECT_NEAR(compute(true) - compute(false), c.n_layer * per_layer / 100e9, 1e-12);
}

// GPT-2's LayerNorm and GELU are single kernels in eager PyTorch too: nothing to add.
TEST(PlannerEager, LeavesAGpt2LayerAsItIs) {
  const ModelConfig c = testing::gpt2_config(2, 4, 64, 100, kSeq);
  const SegmentWork before = build_workload(c, kBatch, kSeq, 1, DType::BF16).layer;
  SegmentWork after = before;
  add_eager_elementwise(after, c, kBatch, kSeq, 1, DType::BF16);
  EXPECT_EQ(after.forward.size(), before.forward.size());
  EXPECT_EQ(after.backward.size(), before.backward.size());
}

}  // namespace
}  // namespace strata
