// Shapes real kernels dislike (issue 39 item 2), priced by the shipped presets against kernels measured on a GPU:
// a GEMM one element past a multiple of the 128-wide tiles (bench/planner/gpu/measurements/h200.json's and
// h100.json's m and n sweeps, 1023..3073 against 4096 x 4096), attention at a head dimension its kernel pads (the
// same files' flash kernels), and head dimension 108 on the A100 preset, whose kernels are not measured here.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "planner/device_time.h"
#include "planner/hardware.h"
#include "planner/kernel_measurements.h"
#include "planner_test_support.h"

namespace strata {
namespace {

// bench/planner/gpu/measurements/<card>.json ("h200", "h100"), read once.
const KernelMeasurements& measured_on(const std::string& card) {
  static std::map<std::string, KernelMeasurements> loaded;
  auto found = loaded.find(card);
  if (found == loaded.end()) {
    found = loaded.emplace(card, load_kernel_measurements(std::string(STRATA_SOURCE_DIR) +
                                                          "/bench/planner/gpu/measurements/" + card + ".json"))
                .first;
  }
  return found->second;
}

struct Penalty {
  double measured = 0;  // geometric mean over the sweep of time(t + 1) / time(t), t a multiple of 128
  double priced = 0;
};

// One sweep ("m sweep" or "n sweep"): every multiple t of 128 measured together with t + 1.
Penalty one_past_a_tile_multiple(const KernelMeasurements& measured_gemms, const std::string& sweep,
                                 const DeviceSpec& device) {
  std::map<int64_t, GemmMeasurement> by_size;
  for (const MeasuredGemm& g : measured_gemms.gemm.at(DType::BF16)) {
    if (g.tag == sweep) by_size[sweep == "m sweep" ? g.sample.shape.m : g.sample.shape.n] = g.sample;
  }
  double measured = 0, priced = 0;
  int pairs = 0;
  for (const auto& [size, on] : by_size) {
    auto past = by_size.find(size + 1);
    if (size % 128 != 0 || past == by_size.end()) continue;
    measured += std::log(past->second.seconds / on.seconds);
    priced += std::log(gemm_seconds(past->second.shape, device, DType::BF16) / gemm_seconds(on.shape, device, DType::BF16));
    ++pairs;
  }
  EXPECT_GE(pairs, 10) << sweep;
  return {std::exp(measured / pairs), std::exp(priced / pairs)};
}

// The measured ratios: m one past a tile multiple costs nothing on the H200 (cuBLAS picks tiles that absorb the
// row; measured 0.89x, the multiples themselves a little slow); n one past costs about 9x, as the odd leading
// dimension leaves the 16-byte aligned path. Within 20%: the preset prices the n sweep's penalty at about 7.6x,
// its fitted alignment level being a compromise over all 1139 bf16 GEMMs (median |error| 6% per kernel).
TEST(PlannerShapePenalty, OneElementPastATileMultipleIsPricedAtTheH200sMeasuredPenalty) {
  const DeviceSpec device = load_cluster(testing::preset_path("dgx-h200")).device;
  for (const char* sweep : {"m sweep", "n sweep"}) {
    const Penalty p = one_past_a_tile_multiple(measured_on("h200"), sweep, device);
    EXPECT_LT(std::abs(std::log(p.priced / p.measured)), std::log(1.2))
        << sweep << ": measured " << p.measured << "x, priced " << p.priced << "x";
  }
  EXPECT_LT(one_past_a_tile_multiple(measured_on("h200"), "m sweep", device).measured, 1.05);
  EXPECT_GT(one_past_a_tile_multiple(measured_on("h200"), "n sweep", device).measured, 5.0);
}

// The same sweeps on the H100 (measurements/h100.json) against the preset fitted to that card.
TEST(PlannerShapePenalty, OneElementPastATileMultipleIsPricedAtTheH100sMeasuredPenalty) {
  const DeviceSpec device = load_cluster(testing::preset_path("dgx-h100")).device;
  for (const char* sweep : {"m sweep", "n sweep"}) {
    const Penalty p = one_past_a_tile_multiple(measured_on("h100"), sweep, device);
    EXPECT_LT(std::abs(std::log(p.priced / p.measured)), std::log(1.2))
        << sweep << ": measured " << p.measured << "x, priced " << p.priced << "x";
  }
}

// Time per FLOP of the measured flash kernels at `head_dim` over that at 128, measured and priced (geometric mean
// over the file's forward or backward shapes at both head dimensions' sequence lengths).
Penalty attention_per_flop(const KernelMeasurements& kernels, int64_t head_dim, bool backward, const DeviceSpec& device) {
  std::map<int64_t, AttentionMeasurement> at_128, at_dim;
  for (const MeasuredAttention& a : kernels.attention) {
    if (a.backend != "flash" || a.sample.shape.backward != backward) continue;
    if (a.sample.shape.head_dim == 128) at_128[a.sample.shape.seq] = a.sample;
    if (a.sample.shape.head_dim == head_dim) at_dim[a.sample.shape.seq] = a.sample;
  }
  auto priced_per_flop = [&](const AttentionMeasurement& a) {
    OpWork op{backward ? "attention_backward" : "attention", "attn", OpKind::Attention, a.flops, 0};
    op.attention = a.shape;
    return op_seconds(op, device, DType::BF16) / a.flops;
  };
  double measured = 0, priced = 0;
  int pairs = 0;
  for (const auto& [seq, a] : at_dim) {
    auto base = at_128.find(seq);
    if (base == at_128.end()) continue;
    measured += std::log((a.seconds / a.flops) / (base->second.seconds / base->second.flops));
    priced += std::log(priced_per_flop(a) / priced_per_flop(base->second));
    ++pairs;
  }
  EXPECT_GE(pairs, 4) << "head dim " << head_dim;
  return {std::exp(measured / pairs), std::exp(priced / pairs)};
}

// Head dimension 80 runs FlashAttention's 96 kernel: measured 1.28x 128's time per FLOP forward and 1.40x backward
// on the H200, priced by the padding (96 / 80) and the fixed per-tile cost on the preset whose attention engine is
// the flash backend's: forward within 10%; backward within 20%, as the measured 96 kernel's backward runs below the
// engine's rate by more than the padding explains (not modelled: the engine has one backward efficiency for every
// head dimension; the cuDNN kernels' gap is larger, 1.45x measured against 1.2x priced forward).
TEST(PlannerShapePenalty, HeadDim80IsPricedNearTheH200sMeasuredFlashPenalty) {
  const DeviceSpec device = load_cluster(testing::preset_path("grand-teton-h100")).device;
  for (bool backward : {false, true}) {
    const Penalty p = attention_per_flop(measured_on("h200"), 80, backward, device);
    EXPECT_GT(p.measured, 1.15) << (backward ? "backward" : "forward");
    EXPECT_GT(p.priced, 1.15) << (backward ? "backward" : "forward");
    EXPECT_LT(std::abs(std::log(p.priced / p.measured)), std::log(backward ? 1.2 : 1.1))
        << (backward ? "backward" : "forward") << ": measured " << p.measured << "x, priced " << p.priced << "x";
  }
}

// The same on the H100 (measurements/h100.json), whose flash kernels Grand Teton's engine is now fitted to.
TEST(PlannerShapePenalty, HeadDim80IsPricedNearTheH100sMeasuredFlashPenalty) {
  const DeviceSpec device = load_cluster(testing::preset_path("grand-teton-h100")).device;
  for (bool backward : {false, true}) {
    const Penalty p = attention_per_flop(measured_on("h100"), 80, backward, device);
    EXPECT_GT(p.measured, 1.1) << (backward ? "backward" : "forward");
    EXPECT_LT(std::abs(std::log(p.priced / p.measured)), std::log(backward ? 1.2 : 1.1))
        << (backward ? "backward" : "forward") << ": measured " << p.measured << "x, priced " << p.priced << "x";
  }
}

// Head dimension 108 on the A100 preset. Fused: FlashAttention-2 instantiates head dims in multiples of 32, so 108
// runs the 128 kernel: 128's time for 108's FLOPs (128/108 = 1.185x per FLOP, less the fixed per-tile cost).
// Unfused (Megatron's batched GEMMs, as the BLOOM-era runs): the scores' k and the context's n are 108, off the
// 8-element alignment and the 64-deep k step; slower per FLOP than 128 by an amount the preset assumes.
TEST(PlannerShapePenalty, HeadDim108IsPricedSlowerPerFlopThan128OnTheA100) {
  const DeviceSpec device = load_cluster(testing::preset_path("dgx-a100-80gb")).device;
  auto per_flop = [&](int64_t head_dim, AttentionKernel kernel) {
    const double flops = 4.0 * 128 * 2048 * 2048 * static_cast<double>(head_dim) / 2;  // causal forward
    OpWork op{"attention", "attn", OpKind::Attention, flops, 0};
    op.attention = {128, 2048, head_dim, false};
    return op_seconds(op, device, DType::BF16, 1.0, kernel) / flops;
  };
  const double fused = per_flop(108, AttentionKernel::Fused) / per_flop(128, AttentionKernel::Fused);
  EXPECT_NEAR(fused, 128.0 / 108.0, 0.02);
  EXPECT_GT(per_flop(108, AttentionKernel::Unfused) / per_flop(128, AttentionKernel::Unfused), 1.1);
  // 216 (BLOOM's other head count at the same width) runs the 224 kernel: cheaper per FLOP than 108.
  EXPECT_LT(per_flop(216, AttentionKernel::Fused), per_flop(108, AttentionKernel::Fused));
}

}  // namespace
}  // namespace strata
