// The merging of context parallelism's ring steps (ring_merge_work.h), against the kernels of Transformer Engine's
// AttnFuncWithCPAndKVP2P and of PyTorch's _templated_ring_attention (and its backward) counted by hand, pass by pass,
// for the busiest rank (the last, whose every step takes all its queries); added over the attention output and the
// keys the device holds, and only where the attention runs over more than one step.
#include "planner/ring_merge_work.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

TEST(PlannerRingMerge, TransformerEngineCorrectsAndAddsEachStepInPlace) {
  // bf16, cp 2, O = 100 output elements, K = 25 key elements (4 query heads per key/value head).
  // forward: cat(k, v) 50 read + 50 written = 2 * 100; out zeroed 2 * 100; two corrections, out read and written and
  //          the step's output read, 2 * 300 each: 200 + 200 + 1200 = 1600.
  // backward: the first buffer's copy of k, v 200; per step dq add_ 600, cat(dk, dv) 200, dkv add_ (150 elements) 300:
  //           200 + 2 * (600 + 200 + 300) = 2400.
  const RingMergeBytes te = ring_merge_bytes(RingMerge::TransformerEngine, 2, 100, 25, 2);
  EXPECT_DOUBLE_EQ(te.forward, 1600);
  EXPECT_DOUBLE_EQ(te.backward, 2400);
  const RingMergeBytes none = ring_merge_bytes(RingMerge::None, 2, 100, 25, 2);
  EXPECT_DOUBLE_EQ(none.forward + none.backward, 0);
}

TEST(PlannerRingMerge, TorchMergesAndAccumulatesInFp32) {
  // bf16, cp 2, O = K = 100 (torchtitan's SDPA sees every query head's keys).
  // forward: two steps' outputs cast to fp32, 6 * 100 each = 1200; the second step's merge, out - out_step 12,
  //          times the sigmoid 8, out - that 12: 3200; cat(k, v) before the one exchange 4 * 2 * 100 = 800 (200
  //          elements read and written in bf16); the result cast back 600: 5800.
  // backward: accumulators zeroed 4 * 300 = 1200; dQ added in fp32 twice, 10 * 100 each = 2000; the first step's dK
  //           and dV added 2 * 1000; the second's into half of each (500) and each rebuilt by cat (800): 2600; the fp32
  //           dK/dV concatenated each step, 2 * 1600; cat(k, v) once, 800; dQ cast back 600, dK/dV 1200:
  //           1200 + 2000 + 2000 + 2600 + 3200 + 800 + 600 + 1200 = 13600.
  const RingMergeBytes torch = ring_merge_bytes(RingMerge::Torch, 2, 100, 100, 2);
  EXPECT_DOUBLE_EQ(torch.forward, 5800);
  EXPECT_DOUBLE_EQ(torch.backward, 13600);
  // More steps, more merges: linear in the steps beyond the first.
  const RingMergeBytes four = ring_merge_bytes(RingMerge::Torch, 4, 100, 100, 2);
  const RingMergeBytes three = ring_merge_bytes(RingMerge::Torch, 3, 100, 100, 2);
  EXPECT_DOUBLE_EQ(four.forward - three.forward, three.forward - torch.forward);
  EXPECT_DOUBLE_EQ(four.backward - three.backward, three.backward - torch.backward);
}

TEST(PlannerRingMerge, CompiledTorchMergesEachStepInOnePass) {
  // bf16, cp 2, O = K = 100.
  // forward: the first output cast 600, the second merged in one pass (4 + 2 + 4) * 100 = 1000, cat(k, v) 800, the
  //          result cast back 600: 3000.
  // backward: the first dQ cast 600, the second added 1000; each step's dK, dV added into the fp32 send buffer,
  //           2 * 10 * 200 = 4000; cat(k, v) 800; casts back 600 + 1200: 8200.
  const RingMergeBytes compiled = ring_merge_bytes(RingMerge::TorchCompiled, 2, 100, 100, 2);
  EXPECT_DOUBLE_EQ(compiled.forward, 3000);
  EXPECT_DOUBLE_EQ(compiled.backward, 8200);
  // Fusing only removes passes.
  for (int steps : {2, 4, 8}) {
    const RingMergeBytes eager = ring_merge_bytes(RingMerge::Torch, steps, 100, 100, 2);
    const RingMergeBytes fused = ring_merge_bytes(RingMerge::TorchCompiled, steps, 100, 100, 2);
    EXPECT_LT(fused.forward, eager.forward) << steps << " steps";
    EXPECT_LT(fused.backward, eager.backward) << steps << " steps";
  }
  EXPECT_EQ(parse_ring_merge("torch-compiled", "--cp-merge"), RingMerge::TorchCompiled);
}

TEST(PlannerRingMerge, AddedOverTheAttentionTheDeviceHolds) {
  const ModelConfig config = testing::small_llama_config();  // 4 heads, 2 key/value heads, head dim 8
  for (int tp : {1, 2}) {
    const Workload plain = build_workload(config, 2, 16, tp, DType::BF16);
    Workload te = plain, torch = plain, single = plain;
    add_ring_merge(te.layer, RingMerge::TransformerEngine, config, 2, DType::BF16);
    add_ring_merge(torch.layer, RingMerge::Torch, config, 2, DType::BF16);
    add_ring_merge(single.layer, RingMerge::Torch, config, 1, DType::BF16);
    const double out = 2.0 * 16 * (4.0 / tp) * 8;  // micro-batch 2 of 16 positions, the rank's heads, head dim 8
    const RingMergeBytes te_bytes = ring_merge_bytes(RingMerge::TransformerEngine, 2, out, out / 2, 2);
    const RingMergeBytes torch_bytes = ring_merge_bytes(RingMerge::Torch, 2, out, out, 2);
    EXPECT_DOUBLE_EQ(testing::bytes_of(te.layer.forward) - testing::bytes_of(plain.layer.forward), te_bytes.forward);
    EXPECT_DOUBLE_EQ(testing::bytes_of(te.layer.backward) - testing::bytes_of(plain.layer.backward), te_bytes.backward);
    EXPECT_DOUBLE_EQ(testing::bytes_of(torch.layer.forward) - testing::bytes_of(plain.layer.forward),
                     torch_bytes.forward);
    EXPECT_DOUBLE_EQ(testing::bytes_of(torch.layer.backward) - testing::bytes_of(plain.layer.backward),
                     torch_bytes.backward);
    // One step: nothing to merge.
    EXPECT_EQ(single.layer.forward.size(), plain.layer.forward.size());
  }
  EXPECT_EQ(parse_ring_merge("te", "--cp-merge"), RingMerge::TransformerEngine);
  EXPECT_EQ(parse_ring_merge("torch", "--cp-merge"), RingMerge::Torch);
  EXPECT_EQ(parse_ring_merge("none", "--cp-merge"), RingMerge::None);
  EXPECT_THROW(parse_ring_merge("ring", "--cp-merge"), Error);
}

}  // namespace
}  // namespace strata
