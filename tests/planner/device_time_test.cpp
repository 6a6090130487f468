// The device model of issue 17: GEMMs cut into tiles that run in waves, with
// alignment and fixed per-tile costs; fused attention padded to the kernel's
// head-dim step; unfused attention as its GEMMs; and the fit of an engine to
// measurements recovering the parameters that made them.
#include "planner/device_time.h"

#include <gtest/gtest.h>

#include <cmath>

#include "planner/engine_fit.h"

namespace strata {
namespace {

// One matrix engine at 1 TFLOP/s on `units` units, 128 x 128 tiles at full speed, nothing else.
DTypePerformance engine(int units) {
  DTypePerformance perf;
  perf.matrix_flops = 1e12;
  perf.vector_flops = 1e11;
  perf.gemm.compute_units = units;
  perf.gemm.tiles = {{128, 128, 1.0}};
  perf.attention = {0.5, 0.25, 128, 32, 0.0};
  return perf;
}

DeviceSpec device_of(const DTypePerformance& perf) {
  DeviceSpec device;
  device.name = "test";
  device.memory_bandwidth_Bps = 1e18;  // arithmetic decides
  device.dtypes[DType::BF16] = perf;
  return device;
}

// Time of one 128 x 128 tile over k on one unit of a 1 TFLOP/s engine with `units` units.
double tile_seconds(double k, int units) { return 2 * 128 * 128 * k / (1e12 / units); }

TEST(PlannerDeviceTime, OneElementPastATileBoundaryCostsOneMoreRowOfTiles) {
  const DTypePerformance perf = engine(1);
  const double on_boundary = gemm_compute_seconds({1, 4 * 128, 2 * 128, 64}, perf);
  const double past = gemm_compute_seconds({1, 4 * 128 + 1, 2 * 128, 64}, perf);
  EXPECT_DOUBLE_EQ(on_boundary, 8 * tile_seconds(64, 1));
  EXPECT_DOUBLE_EQ(past - on_boundary, 2 * tile_seconds(64, 1));  // a row of two tiles
  // And a column likewise.
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({1, 4 * 128, 2 * 128 + 1, 64}, perf) - on_boundary, 4 * tile_seconds(64, 1));
}

TEST(PlannerDeviceTime, OneTilePastAFullWaveCostsOneMoreWave) {
  const DTypePerformance perf = engine(4);
  const double two_waves = gemm_compute_seconds({1, 8 * 128, 128, 256}, perf);   // 8 tiles on 4 units
  const double three_waves = gemm_compute_seconds({1, 9 * 128, 128, 256}, perf); // 9 tiles
  EXPECT_DOUBLE_EQ(two_waves, 2 * tile_seconds(256, 4));
  EXPECT_DOUBLE_EQ(three_waves, 3 * tile_seconds(256, 4));
  // Up to the next multiple of the units the waves do not change: 12 tiles cost what 9 do.
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({1, 12 * 128, 128, 256}, perf), three_waves);
  // Batched problems fill the waves together.
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({3, 3 * 128, 128, 256}, perf), three_waves);
}

TEST(PlannerDeviceTime, KIsConsumedInStepsAndTilesPayAFixedCost) {
  DTypePerformance perf = engine(1);
  perf.gemm.k_step = 64;
  perf.gemm.tile_overhead_s = 1e-6;
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({1, 128, 128, 65}, perf), tile_seconds(128, 1) + 1e-6);
  // The small-k regime: the fixed cost dominates.
  EXPECT_GT(gemm_compute_seconds({1, 128, 128, 1}, perf), 0.5 * (tile_seconds(64, 1) + 1e-6));
}

TEST(PlannerDeviceTime, DimensionsOffTheAlignmentRunSlower) {
  DTypePerformance perf = engine(1);
  perf.gemm.alignment = {{8, 1.0}, {2, 0.5}, {1, 0.25}};
  const double aligned = gemm_compute_seconds({1, 1024, 1024, 4096}, perf);
  // Same tiles and k steps, k off the 8-element alignment: even runs at half speed, odd at a quarter.
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({1, 1024, 1024, 4094}, perf), 2 * gemm_compute_seconds({1, 1024, 1024, 4094}, engine(1)));
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({1, 1024, 1024, 4095}, perf), 4 * gemm_compute_seconds({1, 1024, 1024, 4095}, engine(1)));
  EXPECT_GT(gemm_compute_seconds({1, 1024, 1024, 4095}, perf), 3.9 * aligned);
  // n decides as k does; m, the rows, does not.
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({1, 1024, 1023, 4096}, perf), 4 * gemm_compute_seconds({1, 1024, 1023, 4096}, engine(1)));
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({1, 1023, 1024, 4096}, perf), gemm_compute_seconds({1, 1023, 1024, 4096}, engine(1)));
}

// A device at its power limit holds a lower clock: large GEMMs run at the sustained rate however well
// their tiles fill the waves, while GEMMs the tiles already make slower are priced as before.
TEST(PlannerDeviceTime, NoGemmRunsFasterThanTheSustainedRate) {
  DTypePerformance perf = engine(4);
  perf.sustained_matrix_flops = 0.5e12;
  const GemmShape large{1, 64 * 128, 8 * 128, 4096};  // 512 tiles in 128 full waves: 1 TFLOP/s by the tiles
  const double flops = 2.0 * 64 * 128 * 8 * 128 * 4096;
  EXPECT_DOUBLE_EQ(gemm_compute_seconds(large, engine(4)), flops / 1e12);
  EXPECT_DOUBLE_EQ(gemm_compute_seconds(large, perf), flops / 0.5e12);
  // One row of useful output in a 128-row tile: far below the sustained rate, so the tiles decide.
  const GemmShape thin{1, 1, 4 * 128, 4096};
  EXPECT_DOUBLE_EQ(gemm_compute_seconds(thin, perf), gemm_compute_seconds(thin, engine(4)));
  EXPECT_DOUBLE_EQ(gemm_compute_seconds(thin, perf), tile_seconds(4096, 4));
}

TEST(PlannerDeviceTime, TheLibraryPicksTheTileThatFinishesFirst) {
  DTypePerformance perf = engine(4);
  perf.gemm.tiles = {{128, 128, 1.0}, {64, 64, 0.5}};
  // 256 x 256: four big tiles, one wave at full speed, beats sixteen small ones at half.
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({1, 256, 256, 512}, perf), tile_seconds(512, 4));
  // 64 x 256: four small tiles in one wave at half speed beat two big tiles of mostly padding.
  const double small = 2 * 64 * 64 * 512 / (1e12 / 4 * 0.5);
  EXPECT_DOUBLE_EQ(gemm_compute_seconds({1, 64, 256, 512}, perf), std::min(small, tile_seconds(512, 4)));
}

OpWork attention_op(int64_t head_dim, double flops, bool backward) {
  OpWork op{backward ? "attention_backward" : "attention", "attn", OpKind::Attention, flops, 0};
  op.attention = {64, 1024, head_dim, backward};
  return op;
}

TEST(PlannerDeviceTime, FusedAttentionPadsTheHeadDimToTheKernelsStep) {
  const DeviceSpec device = device_of(engine(132));
  // Head dim 80 runs the 96 kernel: the time of 96's FLOPs.
  const double flops_80 = 4.0 * 64 * 1024 * 1024 * 80 / 2;
  EXPECT_NEAR(op_seconds(attention_op(80, flops_80, false), device, DType::BF16),
              op_seconds(attention_op(96, flops_80 * 96 / 80, false), device, DType::BF16), 1e-15);
  // The backward pass at its own efficiency (half the forward's here).
  EXPECT_NEAR(op_seconds(attention_op(128, flops_80, true), device, DType::BF16),
              2 * op_seconds(attention_op(128, flops_80, false), device, DType::BF16), 1e-15);
}

TEST(PlannerDeviceTime, UnfusedAttentionIsItsBatchedGemmsAndTheSoftmaxInMemory) {
  DTypePerformance perf = engine(8);
  DeviceSpec device = device_of(perf);
  device.memory_bandwidth_Bps = 1e12;
  const OpWork forward = attention_op(128, 1.0, false);
  const double gemms = gemm_compute_seconds({64, 1024, 1024, 128}, perf) + gemm_compute_seconds({64, 1024, 128, 1024}, perf);
  const double softmax = 2.0 * 64 * 1024 * 1024 * 2 / 1e12;  // read the bf16 scores, write the probabilities
  EXPECT_NEAR(op_seconds(forward, device, DType::BF16, 1.0, AttentionKernel::Unfused), gemms + softmax, 1e-12);
  // Unfused computes the whole square: more than the fused kernel's causal half at the same efficiency.
  const double causal_flops = 4.0 * 64 * 1024 * 1024 * 128 / 2;
  EXPECT_GT(op_seconds(forward, device, DType::BF16, 1.0, AttentionKernel::Unfused),
            op_seconds(attention_op(128, causal_flops, false), device, DType::BF16) * 0.5 * 1.9);
}

// A matrix engine with two tiles, a fixed cost per tile and a slower unaligned path; and GEMMs timed on it,
// from thin ones the tiles make slow to large ones that run at the engine's best rate.
DTypePerformance measured_engine() {
  DTypePerformance truth = engine(16);
  truth.gemm.tiles = {{128, 256, 0.8}, {128, 128, 0.72}};
  truth.gemm.k_step = 64;
  truth.gemm.alignment = {{8, 1.0}, {1, 0.6}};
  truth.gemm.tile_overhead_s = 2e-6;
  return truth;
}

constexpr double kLaunch = 5e-6;

std::vector<GemmMeasurement> timed_on(const DTypePerformance& truth) {
  std::vector<GemmMeasurement> samples;
  for (int64_t m : {128, 1000, 4096, 8192}) {
    for (int64_t n : {256, 1024, 3072}) {
      for (int64_t k : {64, 1024, 4095, 4096}) {
        GemmShape shape{1, m, n, k};
        samples.push_back({shape, kLaunch + gemm_compute_seconds(shape, truth)});
      }
    }
  }
  return samples;
}

// The structure a fit starts from: the tile shapes, k step and alignment levels, every efficiency 1.
DTypePerformance unfitted_engine(double sustained_flops) {
  DTypePerformance fitted = engine(16);
  fitted.gemm.tiles = {{128, 256, 1.0}, {128, 128, 1.0}};
  fitted.gemm.k_step = 64;
  fitted.gemm.alignment = {{8, 1.0}, {1, 1.0}};
  fitted.sustained_matrix_flops = sustained_flops;
  return fitted;
}

TEST(PlannerDeviceTime, FittingRecoversTheEngineThatMadeTheMeasurements) {
  const std::vector<GemmMeasurement> samples = timed_on(measured_engine());
  DTypePerformance fitted = unfitted_engine(0);
  FitQuality quality = fit_gemm_engine(fitted, samples, kLaunch);
  EXPECT_NEAR(fitted.gemm.tiles[0].efficiency, 0.8, 0.02);
  EXPECT_NEAR(fitted.gemm.tiles[1].efficiency, 0.72, 0.03);
  EXPECT_NEAR(fitted.gemm.tile_overhead_s, 2e-6, 0.5e-6);
  EXPECT_NEAR(fitted.gemm.alignment[1].second, 0.6, 0.03);
  EXPECT_EQ(quality.samples, samples.size());
  EXPECT_LT(quality.median_abs_error, 0.03);
}

// Measurements of a device whose largest GEMMs run at its power limit: a fit that knows the limit recovers the
// tiles from the GEMMs below it; one that does not sets its tiles between the two regimes and misses both.
TEST(PlannerDeviceTime, FittingBelowTheSustainedRateRecoversTheTiles) {
  DTypePerformance truth = measured_engine();
  truth.sustained_matrix_flops = 0.7e12;  // below the best tile's 0.8 TFLOP/s: the largest GEMMs meet it
  const std::vector<GemmMeasurement> samples = timed_on(truth);
  size_t at_the_limit = 0;
  for (const GemmMeasurement& s : samples) {
    const double flops = 2.0 * static_cast<double>(s.shape.m * s.shape.n * s.shape.k);
    at_the_limit += std::abs((s.seconds - kLaunch) * truth.sustained_matrix_flops / flops - 1) < 1e-9;
  }
  ASSERT_GT(at_the_limit, 5u);

  DTypePerformance knowing = unfitted_engine(truth.sustained_matrix_flops);
  EXPECT_LT(fit_gemm_engine(knowing, samples, kLaunch).median_abs_error, 0.03);
  EXPECT_NEAR(knowing.gemm.tiles[0].efficiency, 0.8, 0.03);
  EXPECT_NEAR(knowing.gemm.tile_overhead_s, 2e-6, 0.5e-6);

  DTypePerformance unaware = unfitted_engine(0);
  fit_gemm_engine(unaware, samples, kLaunch);
  const GemmShape largest{1, 8192, 3072, 4096};
  const double measured = kLaunch + gemm_compute_seconds(largest, truth);
  EXPECT_NEAR(kLaunch + gemm_compute_seconds(largest, knowing), measured, 0.01 * measured);
  EXPECT_LT(kLaunch + gemm_compute_seconds(largest, unaware), 0.99 * measured);  // priced too fast
}

}  // namespace
}  // namespace strata
