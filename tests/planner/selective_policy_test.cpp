// What selective recomputation redoes and keeps under each policy, against the shapes of a LLaMA layer:
// Megatron's (the attention core) and torchtitan's per-op policy (keep attention and the 1st, 3rd, ...
// GEMM of the layer, i.e. q, v, gate and down; redo k, o, up and every element-wise op).
#include <gtest/gtest.h>

#include "planner/model_spec.h"
#include "planner/workload.h"

namespace strata {
namespace {

// SmolLM-135M's shape: width 576, 9 query and 3 key/value heads of 64, MLP 1536.
ModelConfig smollm() { return model_preset("smollm-135m").config; }
constexpr double kWidth = 576, kHeads = 9, kKvHeads = 3, kHeadDim = 64, kFfn = 1536;

struct Redone {
  double gemm_flops = 0;
  bool attention = false;
  bool every_other_op = true;  // each op that is neither a GEMM nor attention
};

Redone redone(const SegmentWork& layer) {
  Redone r;
  for (const OpWork& op : layer.forward) {
    if (op.kind == OpKind::Gemm && op.selective_recompute) r.gemm_flops += op.flops;
    if (op.kind == OpKind::Attention && op.selective_recompute) r.attention = true;
    if (op.kind == OpKind::Other && !op.selective_recompute) r.every_other_op = false;
  }
  return r;
}

constexpr int64_t kBatch = 2, kSeq = 32;

TEST(PlannerSelective, AlternateGemmsRedoesKOAndUpProjectionsAndTheElementWiseOps) {
  const double tokens = kBatch * kSeq;
  const Workload w = build_workload(smollm(), kBatch, kSeq, 1, DType::F32, SelectivePolicy::AlternateGemms);
  const Redone r = redone(w.layer);
  const double k_proj = 2 * tokens * kWidth * kKvHeads * kHeadDim, o_proj = 2 * tokens * kHeads * kHeadDim * kWidth,
               up_proj = 2 * tokens * kWidth * kFfn;
  EXPECT_DOUBLE_EQ(r.gemm_flops, k_proj + o_proj + up_proj);
  EXPECT_FALSE(r.attention);
  EXPECT_TRUE(r.every_other_op);
}

TEST(PlannerSelective, AttentionCoreRedoesOnlyAttention) {
  const Workload w = build_workload(smollm(), kBatch, kSeq, 1, DType::F32, SelectivePolicy::AttentionCore);
  const Redone r = redone(w.layer);
  EXPECT_DOUBLE_EQ(r.gemm_flops, 0.0);
  EXPECT_TRUE(r.attention);
}

// PyTorch's selective checkpointing keeps the layer's input and every output of the ops it saves:
// q, v, gate and down projections, attention's output and its f32 log-sum-exp per (row, head, position).
TEST(PlannerSelective, AlternateGemmsKeepsTheLayerInputAndTheSavedOpsOutputs) {
  const double tokens = kBatch * kSeq;
  const Workload w = build_workload(smollm(), kBatch, kSeq, 1, DType::F32, SelectivePolicy::AlternateGemms);
  const double elements = tokens * kWidth                // layer input
                          + tokens * kHeads * kHeadDim   // q projection
                          + tokens * kKvHeads * kHeadDim  // v projection
                          + tokens * kHeads * kHeadDim   // attention output
                          + kBatch * kHeads * kSeq       // log-sum-exp
                          + tokens * kFfn                // gate projection
                          + tokens * kWidth;             // down projection
  EXPECT_DOUBLE_EQ(w.layer.saved[static_cast<size_t>(RecomputeMode::Selective)].total(1), 4 * elements);
}

}  // namespace
}  // namespace strata
