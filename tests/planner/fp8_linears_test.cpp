// Float8 linears (fp8_linears.h) against counts and rates worked out by hand:
// - a large float8 GEMM on the DGX H100 preset runs at the [device.fp8] engine's sustained rate (the tiles would be
//   faster), plus the launch, as the formula flops / rate gives from the preset's own figures; that rate is the bf16
//   one times the FP8/bf16 ratio a published benchmark measured (Transformer Engine's GEMM tutorial, 1.9046);
// - at small k the float8 engine gains less over bf16, as TileLang's published K sweep on an H800 SXM measured (M = N =
//   8192: 1.47x at k 256, 1.65x at 512, 1.80x at 1024, 1.91x at 2048): the per-tile fixed cost is the bf16 engine's
//   while the arithmetic halves;
// - the casts move, per element of a bf16 tensor (2 bytes), with delayed scaling one read and two fp8 writes
//   (2 + 1 + 1 = 4 bytes), with tensorwise scaling an amax read more (6 bytes); the weight's cast is none under
//   delayed scaling, and a transpose of the fp8 weight (1 + 1 = 2 bytes) when it is gathered in fp8; priced at the
//   device's memory bandwidth;
// - an A100 preset, with no [device.fp8] table, is refused by name;
// - gathering a layer's float8 weights in fp8 halves their bytes in ZeRO-3's gathered-layer buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "planner/cost_model.h"
#include "planner/device_time.h"
#include "planner/fp8_linears.h"
#include "planner/uncertainty.h"
#include "planner_test_support.h"

namespace strata {
namespace {

OpWork gemm(int64_t m, int64_t n, int64_t k, int input) {
  OpWork op{"matmul", "linear", OpKind::Gemm, 2.0 * static_cast<double>(m * n * k), 0};
  op.gemm = {1, m, n, k};
  op.gemm_input = input;
  return op;
}

// One forward linear [m, k] x [k, n] and its two backward GEMMs.
SegmentWork one_linear(int64_t m, int64_t n, int64_t k) {
  SegmentWork layer;
  layer.forward.push_back(gemm(m, n, k, 7));
  layer.backward.push_back(gemm(m, k, n, 8));  // the input's gradient: [m, n] x [n, k]
  layer.backward.push_back(gemm(k, n, m, 9));  // the weight's gradient: [k, m] x [m, n]
  return layer;
}

double bytes_named(const std::vector<OpWork>& ops, const std::string& suffix) {
  double total = 0;
  for (const OpWork& op : ops) {
    if (op.label.size() >= suffix.size() && op.label.compare(op.label.size() - suffix.size(), suffix.size(), suffix) == 0)
      total += op.bytes;
  }
  return total;
}

TEST(PlannerFp8, LargeGemmRunsAtTheFp8EnginesSustainedRate) {
  const ClusterSpec h100 = load_cluster(testing::preset_path("dgx-h100"));
  ASSERT_TRUE(h100.device.fp8.has_value());
  const double sustained = h100.device.fp8->sustained_matrix_flops;
  EXPECT_DOUBLE_EQ(h100.device.fp8->matrix_flops, 1979e12);  // the datasheet's dense FP8 peak
  // The bf16 sustained rate times the FP8/bf16 ratio Transformer Engine's GEMM tutorial measured over a layer's 12
  // GEMMs on an H200 NVL (767.242 ms in bf16, 402.838 ms in FP8), as the preset writes it (to 4 decimals of a TFLOP/s).
  const double measured_ratio = 767.242 / 402.838;
  const double bf16_sustained = h100.device.performance(DType::BF16).sustained_matrix_flops;
  EXPECT_NEAR(sustained, measured_ratio * bf16_sustained, 1e-6 * sustained);
  const int64_t n = 8192;
  SegmentWork layer = one_linear(n, n, n);
  add_fp8_linears(layer, Fp8Recipe::Delayed, DType::BF16, false);
  const OpWork& forward = layer.forward.front();
  ASSERT_TRUE(forward.fp8);
  // Operands in fp8 (1 byte), the output in bf16: 2 n^2 + 2 n^2 bytes.
  EXPECT_DOUBLE_EQ(forward.bytes, 4.0 * n * n);
  const double by_hand = h100.device.op_overhead_s + 2.0 * n * n * n / sustained;
  EXPECT_NEAR(op_seconds(forward, h100.device, DType::BF16), by_hand, 1e-9);
  OpWork in_bf16 = gemm(n, n, n, 7);
  in_bf16.bytes = 6.0 * n * n;
  const double bf16_by_hand =
      h100.device.op_overhead_s + 2.0 * n * n * n / h100.device.performance(DType::BF16).sustained_matrix_flops;
  EXPECT_NEAR(op_seconds(in_bf16, h100.device, DType::BF16), bf16_by_hand, 1e-9);
}

// TileLang's published FP8 and FP16 matmul benchmarks (benchmark/matmul_fp8/README.md and benchmark/matmul/README.md,
// read in the fork xwhzz/tilelang at b2acfc3; runs at TileLang 6b1faf7 and 17bd0a6 on an NVIDIA H800 SXM, the H100
// SXM's SMs and tensor peaks, dense): M = N = 8192 over a k sweep, TFLOP/s per dtype. Past k 2048 both engines are at
// their sustained caps, which TileLang's short runs are not held to: the comparison stops there.
TEST(PlannerFp8, GainOverBf16FallsAtSmallKAsTileLangMeasured) {
  const ClusterSpec h100 = load_cluster(testing::preset_path("dgx-h100"));
  struct Point {
    int64_t k;
    double fp16_tflops, fp8_tflops;
  };
  const Point measured[] = {{256, 386, 569}, {512, 520, 858}, {1024, 628, 1129}, {2048, 705, 1343}};
  double previous = 0;
  for (const Point& p : measured) {
    const GemmShape shape{1, 8192, 8192, p.k};
    const double gain = gemm_compute_seconds(shape, h100.device.performance(DType::BF16)) /
                        gemm_compute_seconds(shape, h100.device.fp8_performance());
    EXPECT_NEAR(gain, p.fp8_tflops / p.fp16_tflops, 0.15) << "k " << p.k;
    EXPECT_GT(gain, previous) << "k " << p.k;
    previous = gain;
  }
}

TEST(PlannerFp8, CastsMoveTheRecipesBytesAtMemoryBandwidth) {
  const int64_t m = 4096, n = 2048, k = 1024;
  const double input = m * k, weight = k * n, grad_output = m * n;
  struct Case {
    Fp8Recipe recipe;
    bool gathered;
    double per_element, per_weight;
  };
  for (const Case& c : {Case{Fp8Recipe::Delayed, false, 4, 0}, Case{Fp8Recipe::Tensorwise, false, 6, 6},
                        Case{Fp8Recipe::Tensorwise, true, 6, 2}, Case{Fp8Recipe::Delayed, true, 4, 0}}) {
    SegmentWork layer = one_linear(m, n, k);
    add_fp8_linears(layer, c.recipe, DType::BF16, c.gathered);
    EXPECT_DOUBLE_EQ(bytes_named(layer.forward, ".fp8_input"), input * c.per_element);
    EXPECT_DOUBLE_EQ(bytes_named(layer.forward, ".fp8_weight"), weight * c.per_weight);
    EXPECT_DOUBLE_EQ(bytes_named(layer.backward, ".fp8_grad_output"), grad_output * c.per_element);
    for (const OpWork& op : layer.backward) EXPECT_EQ(op.fp8, op.kind == OpKind::Gemm);
  }
  // At the device's bandwidth: a 100 GB/s device at full efficiency with no launch cost.
  const ClusterSpec unit = testing::test_cluster(1, 1, 16);
  SegmentWork layer = one_linear(m, n, k);
  add_fp8_linears(layer, Fp8Recipe::Tensorwise, DType::BF16, false);
  const OpWork& cast = layer.forward.at(1);
  ASSERT_EQ(cast.op, "fp8_cast");
  EXPECT_DOUBLE_EQ(op_seconds(cast, unit.device, DType::F32), input * 6 / 100e9);
}

// Transformer Engine's GEMM tutorial (docs/examples/gemm_profiling/gemm_profiling.rst at 8f2e635, H200 NVL, 4.8 TB/s)
// times te.Linear forwards of a layer's 12 GEMM shapes (M 15,872, hidden 4,096, MLP 16,384; the backward GEMMs as
// linears of their shapes: dgrad (M, N, K), wgrad (K, M, N)) under autocast, each call casting its input and its
// weight with both fp8 copies, and the pre-quantized kernels alone: per layer 18.978 ms delayed and 20.285 ms current
// scaling against 16.785 ms pre-quantized, so the casts take 2.193 and 3.500 ms. The recipes' cast bytes at the H200
// preset's bandwidth, a launch each, come within 10% (2.40 and 3.56 ms).
TEST(PlannerFp8, CastsTakeWhatTransformerEnginesTutorialMeasured) {
  const ClusterSpec h200 = load_cluster(testing::preset_path("dgx-h200"));
  const int64_t m = 15872, h = 4096, i = 16384;
  std::vector<std::array<int64_t, 3>> calls;  // (rows, in, out) of each te.Linear call
  for (const auto& [k, n] : {std::pair<int64_t, int64_t>{h, 3 * h}, {h, h}, {h, i}, {i, h}}) {
    calls.push_back({m, k, n});  // fprop
    calls.push_back({m, n, k});  // dgrad
    calls.push_back({k, m, n});  // wgrad
  }
  struct Case {
    Fp8Recipe recipe;
    double measured_s;
  };
  const Case cases[] = {{Fp8Recipe::Delayed, (18.978 - 16.785) * 1e-3},
                        {Fp8Recipe::Tensorwise, (20.285 - 16.785) * 1e-3}};
  for (const Case& c : cases) {
    double predicted = 0;
    for (const auto& [rows, in, out] : calls) {
      for (double elements : {static_cast<double>(rows * in), static_cast<double>(in * out)}) {
        const OpWork cast{"fp8_cast", "cast", OpKind::Other, 0, elements * fp8_cast_bytes(c.recipe, 2)};
        predicted += op_seconds(cast, h200.device, DType::BF16);
      }
    }
    EXPECT_NEAR(predicted / c.measured_s, 1.0, 0.1) << fp8_recipe_name(c.recipe);
  }
}

// Linears reading one value (q/k/v) share its cast; their weights and output gradients are cast one by one.
TEST(PlannerFp8, LinearsReadingOneValueShareItsCast) {
  SegmentWork layer;
  layer.forward = {gemm(64, 32, 16, 3), gemm(64, 8, 16, 3), gemm(64, 8, 16, 3), gemm(64, 16, 32, 4)};
  add_fp8_linears(layer, Fp8Recipe::Delayed, DType::BF16, false);
  EXPECT_DOUBLE_EQ(bytes_named(layer.forward, ".fp8_input"), (64 * 16 + 64 * 32) * 4.0);
  EXPECT_DOUBLE_EQ(bytes_named(layer.backward, ".fp8_grad_output"), 64 * (32 + 8 + 8 + 16) * 4.0);
}

// [device.fp8] holds GEMM figures only, each with its source.
TEST(PlannerFp8, ReadsTheFp8TableStrictly) {
  const std::string path = testing::preset_path("dgx-h100");
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const ClusterSpec h100 = parse_cluster(text, path);
  EXPECT_EQ(h100.device.fp8->gemm.k_step, 128);
  EXPECT_EQ(h100.device.fp8->gemm.alignment.front().first, 16);
  std::string extra = text;
  extra.insert(extra.find("[device.fp8]\n") + 13, "vector_tflops = { value = 134, source = 'test' }\n");
  try {
    parse_cluster(extra, "extra.toml");
    ADD_FAILURE() << "accepted vector_tflops in [device.fp8]";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("vector_tflops"), std::string::npos) << error.what();
  }
  // Another card's measured ratio: varied by the intervals as an assumed figure, not held as a measurement.
  EXPECT_EQ(figure_basis(h100.figure_sources.at("device.fp8.sustained_matrix_tflops")), FigureBasis::Assumed);
}

TEST(PlannerFp8, RefusesADeviceWithoutAnFp8EngineByName) {
  PlanningProblem problem{"llama", testing::small_llama_config(), 8, 16, DType::BF16,
                          load_cluster(testing::preset_path("dgx-a100-80gb"))};
  problem.fp8 = Fp8Recipe::Tensorwise;
  try {
    CostModel model(problem);
    ADD_FAILURE() << "float8 linears accepted on an A100";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("A100-SXM4-80GB"), std::string::npos) << message;
    EXPECT_NE(message.find("no float8 matrix engine"), std::string::npos) << message;
    EXPECT_NE(message.find("dgx-a100-80gb.toml"), std::string::npos) << message;
  }
  problem.fp8 = Fp8Recipe::None;
  problem.fp8_gather = true;
  EXPECT_THROW(CostModel{problem}, Error);  // an fp8 gather needs float8 linears
}

// The small Llama's layer (width 32, 4 query and 2 key/value heads of 8, MLP 48): linears q 32x32, k and v 32x16,
// o 32x32, gate and up 32x48, down 48x32 = 10240 weights, plus two norms of 32. ZeRO-3 keeps two gathered layers.
TEST(PlannerFp8, GatheringInFp8HalvesTheLinearsWeightBytes) {
  const double linears = 32 * 32 + 2 * 32 * 16 + 32 * 32 + 3 * 32 * 48, norms = 2 * 32;
  EXPECT_DOUBLE_EQ(fp8_gather_width(linears + norms, linears, 2), (linears * 1 + norms * 2) / (linears + norms));
  ClusterSpec h100 = load_cluster(testing::preset_path("dgx-h100"));
  h100.devices_per_node = 2;
  auto buffers = [&](bool gather) {
    PlanningProblem problem{"llama", testing::small_llama_config(), 8, 16, DType::BF16, h100};
    problem.fp8 = Fp8Recipe::Tensorwise;
    problem.fp8_gather = gather;
    CostModel model(problem);
    ParallelPlan plan;
    plan.degrees.set("dp", 2);
    plan.micro_batch = 1;
    plan.micro_batches = 4;  // 2 replicas x 1 row x 4 = the global batch of 8
    plan.zero = 3;
    return model.evaluate(plan).memory.buffers;
  };
  EXPECT_DOUBLE_EQ(buffers(false) - buffers(true), 2 * linears * (2 - 1));
}

// The float8 engine's figures carried over from the bf16 engine are assumptions the step-time intervals vary; its
// peak is the datasheet's and is held.
TEST(PlannerFp8, IntervalsVaryTheFloat8EnginesAssumedFigures) {
  PlanningProblem problem{"llama", testing::small_llama_config(), 8, 16, DType::BF16,
                          load_cluster(testing::preset_path("dgx-h100"))};
  problem.fp8 = Fp8Recipe::Delayed;
  std::vector<std::string> names;
  for (const UncertainFigure& figure : uncertain_figures(problem)) names.push_back(figure.figure);
  auto has = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  EXPECT_TRUE(has("float8 sustained matrix rate"));
  EXPECT_TRUE(has("float8 GEMM tile efficiencies"));
  EXPECT_FALSE(has("float8 matrix peak"));
  problem.fp8 = Fp8Recipe::None;
  names.clear();
  for (const UncertainFigure& figure : uncertain_figures(problem)) names.push_back(figure.figure);
  EXPECT_FALSE(has("float8 sustained matrix rate"));
}

}  // namespace
}  // namespace strata
