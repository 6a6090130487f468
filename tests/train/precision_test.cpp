// Mixed precision and recomputation through the real training loop: fp16
// dynamic loss scaling skips an overflowing step and backs off, bf16 trains,
// and recomputing activations leaves every loss bit-identical.
#include <gtest/gtest.h>

#include <map>

#include "support/error_text.h"
#include "tiny_training_test.h"
#include "train/trainer.h"

namespace strata {
namespace {

class PrecisionTest : public testing::TinyTrainingTest {
 protected:
  static std::vector<float> snapshot(const Trainer& trainer) {
    std::vector<float> values;
    for (size_t i = 0; i < trainer.params().size(); ++i) {
      const Tensor& tensor = trainer.params().tensor(i);
      values.insert(values.end(), tensor.data<float>(), tensor.data<float>() + tensor.numel());
    }
    return values;
  }
};

// An initial scale far beyond fp16's range (65504) makes the backward
// overflow in the fp16 casts: each such step is skipped with the parameters
// untouched and the scale multiplied by the backoff, until the scale fits;
// then steps apply and the loss falls.
// A checkpoint of an f32 run holds no loss scale: resuming it in fp16 starts from the configured
// scale (a scale of 1 would let fp16 gradients underflow).
TEST_F(PrecisionTest, Fp16ResumedFromAnF32CheckpointStartsFromItsOwnScale) {
  {
    Trainer f32(config("switch"));
    f32.step();
    f32.save_checkpoint();
  }
  Trainer fp16(config("switch", {"precision.compute=fp16", "precision.loss_scale=256"}));
  EXPECT_EQ(fp16.completed_steps(), 1);
  const StepMetrics metrics = fp16.step();
  ASSERT_TRUE(metrics.loss_scale.has_value());
  EXPECT_DOUBLE_EQ(*metrics.loss_scale, 256);
}

TEST_F(PrecisionTest, Fp16OverflowStepIsSkippedAndTheScaleBacksOff) {
  Trainer trainer(config("fp16", {"precision.compute=fp16", "precision.loss_scale=1e12", "precision.backoff=0.001",
                                  "train.steps=10"}));
  std::vector<float> before = snapshot(trainer);
  StepMetrics first = trainer.step();
  EXPECT_TRUE(first.skipped);
  ASSERT_TRUE(first.loss_scale.has_value());
  EXPECT_DOUBLE_EQ(*first.loss_scale, 1e12);
  EXPECT_EQ(snapshot(trainer), before);
  EXPECT_EQ(trainer.completed_steps(), 1);

  double expected_scale = 1e12 * 0.001;
  StepMetrics metrics = trainer.step();
  for (int guard = 0; metrics.skipped && guard < 4; ++guard) {
    EXPECT_DOUBLE_EQ(*metrics.loss_scale, expected_scale);
    EXPECT_EQ(snapshot(trainer), before);
    expected_scale *= 0.001;
    metrics = trainer.step();
  }
  ASSERT_FALSE(metrics.skipped) << "the scale never came into fp16's range";
  EXPECT_DOUBLE_EQ(*metrics.loss_scale, expected_scale);
  EXPECT_NE(snapshot(trainer), before);
  double last = metrics.loss;
  for (int i = 0; i < 3; ++i) last = trainer.step().loss;
  EXPECT_LT(last, first.loss);
}

TEST_F(PrecisionTest, Fp16ScaleGrowsAfterTheGrowthInterval) {
  Trainer trainer(config("fp16_growth", {"precision.compute=fp16", "precision.loss_scale=256",
                                         "precision.growth_interval=2"}));
  EXPECT_DOUBLE_EQ(*trainer.step().loss_scale, 256);
  EXPECT_DOUBLE_EQ(*trainer.step().loss_scale, 256);
  EXPECT_DOUBLE_EQ(*trainer.step().loss_scale, 512);  // grown after two finite steps
}

TEST_F(PrecisionTest, Bf16TrainsCloseToFp32AndDeterministically) {
  Trainer fp32(config("fp32"));
  Trainer bf16(config("bf16", {"precision.compute=bf16"}));
  Trainer bf16_again(config("bf16_again", {"precision.compute=bf16"}));
  for (int step = 0; step < 5; ++step) {
    double reference = fp32.step().loss;
    double low = bf16.step().loss;
    EXPECT_NEAR(low, reference, 0.02 * reference) << "step " << step;
    EXPECT_EQ(bf16_again.step().loss, low) << "step " << step;
  }
}

// After an update AdamW writes each parameter's low-precision copy, which the graphs read instead of casting
// the parameter; a resumed run casts in the graph on its first step. The same bits either way: the resumed
// run's step 4 (cast in the graph) and validation match the uninterrupted run's (copies).
TEST_F(PrecisionTest, LowPrecisionWeightCopiesGiveTheBitsOfCastingInTheGraph) {
  for (const char* precision : {"bf16", "fp16"}) {
    const std::string p = std::string("precision.compute=") + precision;
    const std::string whole_run = std::string("copies_") + precision, resumed_run = std::string("resumed_") + precision;
    Trainer whole(config(whole_run, {p}));
    std::vector<StepMetrics> expected;
    for (int step = 0; step < 6; ++step) expected.push_back(whole.step());
    {
      Trainer first_half(config(resumed_run, {p}));
      for (int step = 0; step < 3; ++step) EXPECT_EQ(first_half.step().loss, expected[step].loss) << precision;
      first_half.save_checkpoint();
    }
    Trainer resumed(config(resumed_run, {p, "checkpoint.resume=true"}));
    ASSERT_EQ(resumed.completed_steps(), 3);
    for (int step = 3; step < 6; ++step) {
      const StepMetrics metrics = resumed.step();
      EXPECT_EQ(metrics.loss, expected[step].loss) << precision << " step " << step + 1;
      EXPECT_EQ(metrics.grad_norm, expected[step].grad_norm) << precision << " step " << step + 1;
    }
    EXPECT_EQ(resumed.validation_loss(), whole.validation_loss()) << precision;
    EXPECT_EQ(snapshot(resumed), snapshot(whole)) << precision;
  }
}

TEST_F(PrecisionTest, RecomputationGivesBitIdenticalLossesAndASmallerArena) {
  for (const char* precision : {"fp32", "bf16"}) {
    std::string p = std::string("precision.compute=") + precision;
    Trainer none(config(std::string("none_") + precision, {p}));
    Trainer selective(config(std::string("selective_") + precision, {p, "train.recompute=selective"}));
    Trainer full(config(std::string("full_") + precision, {p, "train.recompute=full"}));
    for (int step = 0; step < 3; ++step) {
      double loss = none.step().loss;
      EXPECT_EQ(selective.step().loss, loss) << precision << " step " << step;
      EXPECT_EQ(full.step().loss, loss) << precision << " step " << step;
    }
    EXPECT_EQ(snapshot(selective), snapshot(none)) << precision;
    EXPECT_EQ(snapshot(full), snapshot(none)) << precision;
    EXPECT_LT(selective.arena_bytes(), none.arena_bytes()) << precision;
    EXPECT_LT(full.arena_bytes(), selective.arena_bytes()) << precision;
  }
}

// bf16 with one micro-batch on one rank: nothing sums the gradients, so those made in bf16 stay
// bf16 (no cast to f32) and the norm and the optimizer read them so. The same job with ZeRO-1 on its
// one rank (the same arithmetic on f32 gradients) gives every loss, norm and parameter bit for bit,
// on the first micro-batch observed (the graph keeps its gradients, copied) and on later ones
// (the graph writes them in place).
TEST_F(PrecisionTest, Bf16GradientsThatNothingSumsStayBf16AndTrainBitForBit) {
  const std::vector<std::string> one_micro_batch{"precision.compute=bf16", "train.global_batch=2"};
  std::vector<std::string> sharded = one_micro_batch;
  sharded.push_back("parallel.zero=1");
  Trainer narrow(config("narrow", one_micro_batch));
  Trainer wide(config("wide", sharded));
  auto gradient_dtypes = [](std::map<DType, int>& counts) {
    return [&counts](const Trainer::ObservedNode& observed) {
      if (observed.node != 0) return;
      for (auto [param, grad] : observed.model.grads.of) ++counts[observed.model.graph.value(grad).meta.dtype];
    };
  };
  std::map<DType, int> narrow_dtypes, wide_dtypes;
  narrow.observe_first_micro_batch(gradient_dtypes(narrow_dtypes));
  wide.observe_first_micro_batch(gradient_dtypes(wide_dtypes));
  for (int step = 0; step < 3; ++step) {
    const StepMetrics expected = wide.step();
    const StepMetrics metrics = narrow.step();
    EXPECT_EQ(metrics.loss, expected.loss) << "step " << step;
    EXPECT_EQ(metrics.grad_norm, expected.grad_norm) << "step " << step;
  }
  EXPECT_EQ(snapshot(narrow), snapshot(wide));
  // The linears' weights are bf16; the norms', the embedding's (and the head copy's, added to it) f32.
  EXPECT_GE(narrow_dtypes[DType::BF16], 8);
  EXPECT_GE(narrow_dtypes[DType::F32], 3);
  EXPECT_EQ(wide_dtypes.count(DType::BF16), 0);
}

TEST_F(PrecisionTest, FusionChangesOnlyRounding) {
  Trainer fused(config("fused"));
  Trainer unfused(config("unfused", {"ops.fuse=false"}));
  for (int step = 0; step < 3; ++step) {
    double loss = unfused.step().loss;
    EXPECT_NEAR(fused.step().loss, loss, 1e-4 * loss) << "step " << step;
  }
}

TEST_F(PrecisionTest, BadPrecisionSettingsNameTheKey) {
  auto error_of = [&](const std::vector<std::string>& overrides) {
    return testing::error_of([&] { config("bad", overrides); });
  };
  EXPECT_NE(error_of({"precision.compute=fp8"}).find("precision.compute"), std::string::npos);
  EXPECT_NE(error_of({"precision.fp32_ops=[\"layernrom\"]"}).find("precision.fp32_ops"), std::string::npos);
  EXPECT_NE(error_of({"precision.fp32_ops=\"layernorm\""}).find("precision.fp32_ops"), std::string::npos);
  EXPECT_NE(error_of({"precision.backoff=2"}).find("precision.backoff"), std::string::npos);
  EXPECT_NE(error_of({"train.recompute=some"}).find("train.recompute"), std::string::npos);
}

}  // namespace
}  // namespace strata
