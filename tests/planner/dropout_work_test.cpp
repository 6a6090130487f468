// Megatron's dropout added to a layer (dropout_work.h), against Korthikanti et al. 2022's count of a
// layer's activations in 16-bit precision: the two residual branches' masks are 2sbh of the 34sbh, and
// the attention core keeps 5as^2b, of which the dropout adds its mask (as^2b) and output (2as^2b) to the
// softmax output (2as^2b, which the planner counts for unfused attention already).
#include <gtest/gtest.h>

#include "planner/dropout_work.h"
#include "planner_test_support.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

constexpr int64_t kBatch = 2, kSeq = 32;

using testing::bytes_of;

double saved(const SegmentWork& layer, RecomputeMode mode) { return layer.saved[static_cast<size_t>(mode)].total(1); }

TEST(PlannerDropout, KeepsTheMasksAndTheDroppedProbabilitiesKorthikantiCounts) {
  const ModelConfig c = testing::gpt2_config(2, 4, 64, 100, kSeq);
  const double sbh = kBatch * kSeq * 64.0, as2b = 4.0 * kSeq * kSeq * kBatch;
  const SegmentWork before = build_workload(c, kBatch, kSeq, 1, DType::F16).layer;
  SegmentWork after = before;
  add_dropout(after, c, kBatch, kSeq, 1, DType::F16, true, SelectivePolicy::AttentionCore);
  EXPECT_DOUBLE_EQ(saved(after, RecomputeMode::None) - saved(before, RecomputeMode::None), 2 * sbh + 3 * as2b);
  // Selective recomputation redoes the attention core, dropout included; the masks of the branches stay.
  EXPECT_DOUBLE_EQ(saved(after, RecomputeMode::Selective) - saved(before, RecomputeMode::Selective), 2 * sbh);
  EXPECT_DOUBLE_EQ(saved(after, RecomputeMode::Full), saved(before, RecomputeMode::Full));
}

// Forward: each branch writes its one-byte mask beside the residual add; the probabilities are read and
// written in 16 bits with their mask. Backward: every dropout reads the gradient and the mask and writes
// the gradient.
TEST(PlannerDropout, MovesTheBytesOfTorchsDropoutAndMegatronsBiasDropoutAdd) {
  const ModelConfig c = testing::gpt2_config(2, 4, 64, 100, kSeq);
  const double sbh = kBatch * kSeq * 64.0, as2b = 4.0 * kSeq * kSeq * kBatch;
  const SegmentWork before = build_workload(c, kBatch, kSeq, 1, DType::F16).layer;
  SegmentWork unfused = before, fused = before;
  add_dropout(unfused, c, kBatch, kSeq, 1, DType::F16, true, SelectivePolicy::AttentionCore);
  add_dropout(fused, c, kBatch, kSeq, 1, DType::F16, false, SelectivePolicy::AttentionCore);
  EXPECT_DOUBLE_EQ(bytes_of(unfused.forward) - bytes_of(before.forward), 2 * sbh + 5 * as2b);
  EXPECT_DOUBLE_EQ(bytes_of(unfused.backward) - bytes_of(before.backward), 2 * 5 * sbh + 5 * as2b);
  // A fused attention kernel drops inside: only the branches' dropout moves bytes.
  EXPECT_DOUBLE_EQ(bytes_of(fused.forward) - bytes_of(before.forward), 2 * sbh);
}

}  // namespace
}  // namespace strata
