// FSDP's copies around its collectives (fsdp_copies.h): the bytes each unit moves per micro-batch, as read from
// PyTorch's FSDP1 and FSDP2, and a ZeRO-3 step paying them on the device's memory bandwidth.
#include "planner/fsdp_copies.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/cost_model.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

// A unit's bytes in one micro-batch: a layer is gathered twice (forward, and again for backward), then its
// gradients are handled once.
double layer_bytes(const FsdpUnitCopies& copies) {
  return 2 * testing::bytes_of(copies.per_gather) + testing::bytes_of(copies.per_backward);
}

// 1000 bf16 parameters over 4 ranks, fp32 master weights and reduction.
TEST(PlannerFsdpCopies, Fsdp1CastsTheShardConcatenatesCastsAndDividesTheGradient) {
  const FsdpUnitCopies copies = fsdp_unit_copies(FsdpRuntime::Fsdp1, 1000, 4, DType::BF16, DType::F32);
  EXPECT_DOUBLE_EQ(testing::bytes_of(copies.per_gather), 250.0 * (4 + 2));  // fp32 shard read, bf16 shard written
  // split's backward concatenates (2 + 2), the cast to fp32 (2 + 4), the pre-divide in place (4 + 4), all over the
  // unit; the post-divide over the reduced fp32 shard (4 + 4).
  EXPECT_DOUBLE_EQ(testing::bytes_of(copies.per_backward), 1000.0 * (4 + 6 + 8) + 250.0 * 8);
  EXPECT_DOUBLE_EQ(layer_bytes(copies), 1000.0 * (18 + 20.0 / 4));
}

TEST(PlannerFsdpCopies, Fsdp2CopiesTheGatheredUnitOutAndTheGradientsIn) {
  const FsdpUnitCopies copies = fsdp_unit_copies(FsdpRuntime::Fsdp2, 1000, 4, DType::BF16, DType::F32);
  // The shard cast to bf16 (4 + 2) and copied into the all-gather input (2 + 2); the whole unit copied out (2 + 2).
  EXPECT_DOUBLE_EQ(testing::bytes_of(copies.per_gather), 250.0 * (6 + 4) + 1000.0 * 4);
  // The bf16 gradients copied into the fp32 reduce-scatter input (2 + 4); NCCL averages, no division kernel.
  EXPECT_DOUBLE_EQ(testing::bytes_of(copies.per_backward), 1000.0 * 6);
  EXPECT_DOUBLE_EQ(layer_bytes(copies), 1000.0 * (14 + 20.0 / 4));
}

// Float8 weights gathered in fp8 (fp8_linears.h), one byte each: the shard cast from fp32 writes one byte (4 + 1), the
// copies around the gather move half a bf16 unit's bytes (1 + 1 each); the gradients stay bf16.
TEST(PlannerFsdpCopies, Fsdp2GatheringInFp8MovesOneBytePerWeight) {
  const FsdpUnitCopies copies = fsdp_unit_copies(FsdpRuntime::Fsdp2, 1000, 4, DType::BF16, DType::F32, 1.0);
  EXPECT_DOUBLE_EQ(testing::bytes_of(copies.per_gather), 250.0 * (5 + 2) + 1000.0 * 2);
  EXPECT_DOUBLE_EQ(testing::bytes_of(copies.per_backward), 1000.0 * 6);
}

// Composer's PURE mixed precision reduces in bf16: FSDP1's cast of the gradients is a no-op, the divisions stream
// bf16 and the reduced shard is cast to the fp32 shard's dtype; FSDP2 copies the gradients in without widening them.
TEST(PlannerFsdpCopies, ReducingInTheComputeDtypeCastsOnlyTheReducedShard) {
  const FsdpUnitCopies one = fsdp_unit_copies(FsdpRuntime::Fsdp1, 1000, 4, DType::BF16, DType::BF16);
  EXPECT_DOUBLE_EQ(testing::bytes_of(one.per_gather), 250.0 * (4 + 2));
  // split's backward concatenates (2 + 2), the pre-divide in place (2 + 2); the post-divide (2 + 2) and the cast to
  // fp32 (2 + 4) over the shard.
  EXPECT_DOUBLE_EQ(testing::bytes_of(one.per_backward), 1000.0 * (4 + 4) + 250.0 * (4 + 6));
  const FsdpUnitCopies two = fsdp_unit_copies(FsdpRuntime::Fsdp2, 1000, 4, DType::BF16, DType::BF16);
  EXPECT_DOUBLE_EQ(testing::bytes_of(two.per_backward), 1000.0 * (2 + 2));
}

TEST(PlannerFsdpCopies, WithoutMixedPrecisionNothingIsCast) {
  const FsdpUnitCopies one = fsdp_unit_copies(FsdpRuntime::Fsdp1, 1000, 4, DType::F32, DType::F32);
  EXPECT_TRUE(one.per_gather.empty());
  EXPECT_DOUBLE_EQ(testing::bytes_of(one.per_backward), 1000.0 * (8 + 8) + 250.0 * 8);
  const FsdpUnitCopies two = fsdp_unit_copies(FsdpRuntime::Fsdp2, 1000, 4, DType::F32, DType::F32);
  EXPECT_DOUBLE_EQ(testing::bytes_of(two.per_gather), 250.0 * 8 + 1000.0 * 8);
  EXPECT_DOUBLE_EQ(testing::bytes_of(two.per_backward), 1000.0 * 8);
}

TEST(PlannerFsdpCopies, NoneWithoutARuntimeOrSharding) {
  for (const FsdpUnitCopies& copies : {fsdp_unit_copies(FsdpRuntime::None, 1000, 4, DType::BF16, DType::F32),
                                       fsdp_unit_copies(FsdpRuntime::Fsdp1, 1000, 1, DType::BF16, DType::F32)}) {
    EXPECT_TRUE(copies.per_gather.empty());
    EXPECT_TRUE(copies.per_backward.empty());
  }
  EXPECT_EQ(parse_fsdp_runtime("2", "--fsdp"), FsdpRuntime::Fsdp2);
  EXPECT_THROW(parse_fsdp_runtime("3", "--fsdp"), Error);
}

// GPT-2 small (124,439,808 parameters: 12 layers of 12h^2 + 13h = 7,087,872 with h = 768, and the root unit's
// 39,385,344: token and position embeddings and the final LayerNorm) as ZeRO-3 over 4 f32 devices streaming
// 100 GB/s with no launch cost, two micro-batches per step: the copies take their bytes at that bandwidth.
double copies_seconds(FsdpRuntime runtime, DType reduce = DType::F32) {
  PlanningProblem problem{"gpt2-small", model_preset("gpt2-small").config, 8, 1024, DType::F32,
                          testing::test_cluster(1, 4, 1000)};
  problem.fsdp = runtime;
  problem.fsdp_reduce = reduce;
  CostModel model(problem);
  ParallelPlan plan;
  plan.degrees.set("dp", 4);
  plan.micro_batch = 1;
  plan.micro_batches = 2;
  plan.zero = 3;
  return model.evaluate(plan).time.fsdp_copies;
}

TEST(PlannerFsdpCopies, AZeroThreeStepPaysEveryUnitsCopiesEachMicroBatch) {
  const double layer = 7087872, root = 39385344, bandwidth = 100e9, micro_batches = 2, d = 4;
  // FSDP1, f32: every unit's gradients concatenated (4 + 4) and pre-divided (4 + 4), the shard post-divided.
  EXPECT_NEAR(copies_seconds(FsdpRuntime::Fsdp1), micro_batches * (12 * layer + root) * (16 + 8 / d) / bandwidth, 1e-9);
  // FSDP2, f32: per gather the shard copied in (4 + 4) and the unit out (4 + 4), twice for a layer and once for the
  // root unit, which stays gathered; then the gradients copied in (4 + 4).
  EXPECT_NEAR(copies_seconds(FsdpRuntime::Fsdp2),
              micro_batches * (12 * layer * (2 * (8 / d + 8) + 8) + root * (8 / d + 8 + 8)) / bandwidth, 1e-9);
  EXPECT_EQ(copies_seconds(FsdpRuntime::None), 0.0);
}

TEST(PlannerFsdpCopies, AZeroThreeStepPaysTheCopiesOfItsReduceDtype) {
  const double layer = 7087872, root = 39385344, bandwidth = 100e9, micro_batches = 2, d = 4;
  // FSDP1 reducing f32 gradients in bf16: concatenated (4 + 4), cast (4 + 2), pre-divided (2 + 2); the shard
  // post-divided (2 + 2) and cast back to f32 (2 + 4).
  EXPECT_NEAR(copies_seconds(FsdpRuntime::Fsdp1, DType::BF16),
              micro_batches * (12 * layer + root) * (18 + 10 / d) / bandwidth, 1e-9);
}

TEST(PlannerFsdpCopies, AReduceDtypeThatIsNoFloatIsRefusedNamingIt) {
  PlanningProblem problem{"gpt2-small", model_preset("gpt2-small").config, 8, 1024, DType::F32,
                          testing::test_cluster(1, 4, 1000)};
  problem.fsdp_reduce = DType::I32;
  try {
    CostModel model(problem);
    FAIL() << "an i32 reduction was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what())
                  .find("FSDP's gradient reduction (strata plan --fsdp-reduce) must be f32, bf16 or f16, got i32"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace strata
