// Another library's fused attention on the same device (hardware.h's attention_libraries): read from the
// cluster file with a source for every figure, the device's tiling shared, and a run that calls it
// (`strata plan --attention-library`) priced on its efficiencies.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "planner/cost_model.h"
#include "planner/device_time.h"
#include "planner/explain.h"
#include "planner/hardware.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

// 10 TFLOP/s bf16 on 4 units; the device's own attention at 0.5 of peak both ways, a slower library beside it
// (f32 on the vector units only, for the optimizer).
const char* kCluster = R"(
[cluster]
name = "x"
nodes = 1
devices_per_node = 2
[device]
name = "d"
memory_gib = { value = 80, source = "sheet" }
reserved_gib = { value = 0, source = "sheet" }
memory_bandwidth_gbps = { value = 1000, source = "sheet" }
memory_efficiency = { value = 1, source = "sheet" }
op_overhead_us = { value = 0, source = "sheet" }
[device.bf16]
matrix_tflops = { value = 10, source = "sheet" }
vector_tflops = { value = 1, source = "sheet" }
compute_units = { value = 4, source = "sheet" }
gemm_tiles = { value = [[64, 64, 1.0]], source = "sheet" }
gemm_k_step = { value = 1, source = "sheet" }
gemm_tile_overhead_us = { value = 0, source = "sheet" }
gemm_alignment = { value = [[1, 1.0]], source = "sheet" }
attention_efficiency = { value = 0.5, source = "sheet" }
attention_backward_efficiency = { value = 0.5, source = "sheet" }
attention_block_rows = { value = 64, source = "sheet" }
attention_head_dim_step = { value = 32, source = "sheet" }
attention_tile_overhead_us = { value = 0, source = "sheet" }
[device.bf16.attention_libraries.slow]
attention_efficiency = { value = 0.25, source = "paper" }
attention_backward_efficiency = { value = 0.125, source = "paper" }
attention_tile_overhead_us = { value = 2, source = "paper" }
[device.f32]
vector_tflops = { value = 1, source = "sheet" }
[intra_node]
bandwidth_gbps = { value = 100, source = "sheet" }
latency_us = { value = 3, source = "sheet" }
)";

std::string replaced(const std::string& from, const std::string& to) {
  std::string text = kCluster;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

void expect_error(const std::string& text, const std::string& needle) {
  try {
    parse_cluster(text, "bad.toml");
    ADD_FAILURE() << "accepted a cluster that should fail with: " << needle;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
  }
}

// Causal attention over 4 (row, head) problems of 1024 queries, head dim 64: 4 * 16 = 64 tiles of 64 rows,
// 16 full waves on 4 units, so the time is flops / (peak * efficiency) plus 16 waves of the per-tile cost.
OpWork attention(bool backward) {
  const double forward_flops = 4.0 * 4 * 1024 * 1024 * 64 / 2;
  OpWork op{backward ? "attention_backward" : "attention", "attn", OpKind::Attention,
            backward ? 2.5 * forward_flops : forward_flops, 0};
  op.attention = {4, 1024, 64, backward};
  return op;
}

TEST(PlannerAttentionLibrary, ReadsALibrarysFiguresAndSharesTheDevicesTiling) {
  const DTypePerformance& bf16 = parse_cluster(kCluster, "ok.toml").device.performance(DType::BF16);
  ASSERT_EQ(bf16.attention_libraries.count("slow"), 1u);
  const AttentionEngine& slow = bf16.attention_libraries.at("slow");
  EXPECT_DOUBLE_EQ(slow.forward_efficiency, 0.25);
  EXPECT_DOUBLE_EQ(slow.backward_efficiency, 0.125);
  EXPECT_DOUBLE_EQ(slow.tile_overhead_s, 2e-6);
  EXPECT_EQ(slow.block_rows, 64);
  EXPECT_EQ(slow.head_dim_step, 32);
  EXPECT_DOUBLE_EQ(bf16.attention.forward_efficiency, 0.5);  // the device's own engine is unchanged
}

TEST(PlannerAttentionLibrary, RefusesALibraryFigureWithoutASourceOrAnUnknownKey) {
  expect_error(replaced(R"(attention_efficiency = { value = 0.25, source = "paper" })", "attention_efficiency = 0.25"),
               "attention_libraries.slow.attention_efficiency' gives no source");
  expect_error(replaced(R"(attention_tile_overhead_us = { value = 2, source = "paper" })", ""),
               "attention_tile_overhead_us");
  expect_error(replaced(R"(attention_tile_overhead_us = { value = 2, source = "paper" })",
                        R"(attention_tile_overhead_us = { value = 2, source = "paper" }
attention_block_rows = { value = 32, source = "paper" })"),
               "attention_block_rows");
}

TEST(PlannerAttentionLibrary, ARunCallingTheLibraryIsPricedOnItsEfficiencies) {
  DeviceSpec device = parse_cluster(kCluster, "ok.toml").device;
  const double forward = attention(false).flops, backward = attention(true).flops;
  EXPECT_NEAR(op_seconds(attention(false), device, DType::BF16), forward / (10e12 * 0.5), 1e-12);
  device.use_attention_library(DType::BF16, "slow");
  EXPECT_NEAR(op_seconds(attention(false), device, DType::BF16), forward / (10e12 * 0.25) + 16 * 2e-6, 1e-12);
  EXPECT_NEAR(op_seconds(attention(true), device, DType::BF16), backward / (10e12 * 0.125) + 16 * 2e-6, 1e-12);
}

TEST(PlannerAttentionLibrary, AnUnknownLibraryNamesTheOnesTheDeviceDescribes) {
  DeviceSpec device = parse_cluster(kCluster, "ok.toml").device;
  try {
    device.use_attention_library(DType::BF16, "cudnn");
    ADD_FAILURE() << "accepted a library the device does not describe";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'cudnn'"), std::string::npos) << message;
    EXPECT_NE(message.find("describes: slow"), std::string::npos) << message;
  }
}

TEST(PlannerAttentionLibrary, TheCostModelPricesTheProblemsLibrary) {
  PlanningProblem problem{"gpt2-small", model_preset("gpt2-small").config, 8, 1024, DType::BF16,
                          parse_cluster(kCluster, "ok.toml")};
  problem.attention_library = "slow";
  const CostModel model(problem);
  const AttentionEngine& priced = model.problem().cluster.device.performance(DType::BF16).attention;
  EXPECT_DOUBLE_EQ(priced.forward_efficiency, 0.25);
  EXPECT_DOUBLE_EQ(priced.backward_efficiency, 0.125);
}

// --explain makes the attention figures 10% worse: for a run calling a library, that library's engine's.
TEST(PlannerAttentionLibrary, ExplainsTheSensitivityToTheLibrarysEngine) {
  PlanningProblem problem{"gpt2-small", model_preset("gpt2-small").config, 8, 1024, DType::BF16,
                          parse_cluster(kCluster, "ok.toml")};
  problem.attention_library = "slow";
  CostModel model(problem);
  ParallelPlan plan;
  plan.degrees.set("dp", 2);
  plan.micro_batch = 1;
  plan.micro_batches = 4;
  const Explanation explanation = explain_plans(model, model.evaluate(plan), nullptr);
  bool found = false;
  for (const Sensitivity& s : explanation.sensitivities) {
    if (s.figure != "attention efficiencies") continue;
    found = true;
    EXPECT_GT(s.winner_change, 0.0);
  }
  EXPECT_TRUE(found);
}

// The shipped FlashAttention-in-Triton engines are FlashAttention-2's slowed by the FlashAttention-2 paper's ratios
// (sec. 4.1: 1.3-1.5x in the forward pass, the middle taken, and 2x in the backward pass).
TEST(PlannerAttentionLibrary, ShippedTritonEnginesAreFlashAttention2sByThePapersRatios) {
  struct Case {
    const char* preset;
    bool flash_is_a_library;  // H100's own engine is cuDNN's; the A100 presets' own is FlashAttention-2's
  };
  for (const Case& c : {Case{"dgx-h100", true}, Case{"dgx-a100-80gb", false}, Case{"dgx-a100-40gb", false}}) {
    const ClusterSpec cluster = load_cluster(testing::preset_path(c.preset));
    for (DType dtype : {DType::BF16, DType::F16}) {
      const DTypePerformance& perf = cluster.device.performance(dtype);
      const AttentionEngine& flash = c.flash_is_a_library ? perf.attention_libraries.at("flash") : perf.attention;
      const AttentionEngine& triton = perf.attention_libraries.at("flash-triton");
      EXPECT_NEAR(triton.forward_efficiency, flash.forward_efficiency / 1.4, 1e-6) << c.preset;
      EXPECT_NEAR(triton.backward_efficiency, flash.backward_efficiency / 2, 1e-6) << c.preset;
    }
  }
}

// A library built for a few head dims only (FlashAttention 1.x: 32, 64, 128) runs a head dim on the smallest kernel
// at least as large: 96 pays the 128 kernel's padding, 64 none.
TEST(PlannerAttentionLibrary, AHeadDimRunsTheSmallestKernelBuiltForIt) {
  const std::string text = replaced(R"(attention_tile_overhead_us = { value = 2, source = "paper" })",
                                    R"(attention_tile_overhead_us = { value = 2, source = "paper" }
attention_head_dims = { value = [32, 64, 128], source = "its source code" })");
  DeviceSpec device = parse_cluster(text, "ok.toml").device;
  const AttentionEngine& slow = device.performance(DType::BF16).attention_libraries.at("slow");
  EXPECT_EQ(slow.kernel_head_dim(20), 32);
  EXPECT_EQ(slow.kernel_head_dim(64), 64);
  EXPECT_EQ(slow.kernel_head_dim(96), 128);
  EXPECT_EQ(slow.kernel_head_dim(128), 128);
  EXPECT_EQ(slow.kernel_head_dim(160), std::nullopt);
  EXPECT_EQ(device.performance(DType::BF16).attention.kernel_head_dim(96), 96);  // the device's: multiples of 32

  // 4 problems of 1024 queries as attention() has them, at head dim 96: 16 waves of 16 tiles on 4 units, each
  // tile's FLOPs grown by 128 / 96.
  device.use_attention_library(DType::BF16, "slow");
  OpWork op = attention(false);
  op.flops = op.flops * 96 / 64;
  op.attention.head_dim = 96;
  EXPECT_NEAR(op_seconds(op, device, DType::BF16), op.flops * 128 / 96 / (10e12 * 0.25) + 16 * 2e-6, 1e-12);
}

TEST(PlannerAttentionLibrary, RefusesKernelHeadDimsOutOfOrder) {
  const std::string figure = R"(attention_tile_overhead_us = { value = 2, source = "paper" })";
  expect_error(replaced(figure, std::string(figure) + R"(
attention_head_dims = { value = [64, 32], source = "code" })"),
               "entry 1: head dims must be positive and ascending, got 32");
  expect_error(replaced(figure, std::string(figure) + R"(
attention_head_dims = [32, 64])"),
               "attention_head_dims' gives no source");
}

TEST(PlannerAttentionLibrary, TheCostModelRefusesAHeadDimNoKernelTakes) {
  const std::string text = replaced(R"(attention_tile_overhead_us = { value = 2, source = "paper" })",
                                    R"(attention_tile_overhead_us = { value = 2, source = "paper" }
attention_head_dims = { value = [32, 64], source = "its source code" })");
  ModelConfig config = model_preset("gpt2-small").config;  // head dim 768 / 12 = 64
  config.n_head = 6;                                         // 128
  PlanningProblem problem{"wide heads", config, 8, 1024, DType::BF16, parse_cluster(text, "ok.toml")};
  problem.attention_library = "slow";
  try {
    const CostModel model(problem);
    ADD_FAILURE() << "priced a head dim the library has no kernel for";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("attention library 'slow' has kernels for head dims 32, 64 only; the model's head dim "
                           "is 128"),
              std::string::npos)
        << message;
  }
  problem.attention = AttentionKernel::Unfused;  // priced as GEMMs: no kernel needed
  EXPECT_NO_THROW(CostModel{problem});
}

// The shipped FlashAttention 1.x engines are FlashAttention-2's at half its rate (the FlashAttention-2 paper's
// "about 2x"), with the 1.x kernels' head dims.
TEST(PlannerAttentionLibrary, ShippedFlashAttention1EnginesAreHalfFlashAttention2s) {
  for (const char* preset : {"dgx-a100-80gb", "dgx-a100-40gb"}) {
    const ClusterSpec cluster = load_cluster(testing::preset_path(preset));
    for (DType dtype : {DType::BF16, DType::F16}) {
      const DTypePerformance& perf = cluster.device.performance(dtype);
      const AttentionEngine& v1 = perf.attention_libraries.at("flash-attn-1");
      EXPECT_NEAR(v1.forward_efficiency, perf.attention.forward_efficiency / 2, 1e-9) << preset;
      EXPECT_NEAR(v1.backward_efficiency, perf.attention.backward_efficiency / 2, 1e-9) << preset;
      EXPECT_EQ(v1.head_dims, (std::vector<int64_t>{32, 64, 128})) << preset;
    }
  }
}

}  // namespace
}  // namespace strata
