// A device fitted to kernels measured on it, held to the matrix rate it sustains at its power limit
// (bench/planner/gpu/measure_sustained.py): the measurement file is read as untrusted input, and the fit
// gives the rate to the dtype measured and to the one that shares its tensor cores.
#include "planner/device_fit.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "planner/device_time.h"
#include "support/test_files.h"

namespace strata {
namespace {

std::string sustained_file(const std::string& rate) {
  return R"({"schema": "strata-gpu-sustained-1", "device": "Test GPU", "dtype": "torch.bfloat16", "seconds": 60,
             "shapes": [[4096, 4096, 4096], [4096, 16384, 4096]], "windows": [], "sustained_tflops": )" +
         rate + "}";
}

void expect_refused(const std::string& text, const std::string& needle) {
  testing::TempDir dir;
  testing::write_bytes(dir / "sustained.json", text);
  try {
    load_sustained_measurement(dir / "sustained.json");
    ADD_FAILURE() << "accepted a file that should fail with: " << needle;
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("sustained.json"), std::string::npos) << message;
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
}

TEST(PlannerDeviceFit, ReadsTheSustainedRateMeasuredOnAnH200) {
  const SustainedMeasurement m = load_sustained_measurement(
      std::string(STRATA_SOURCE_DIR) + "/bench/planner/gpu/measurements/h200-sustained.json");
  EXPECT_EQ(m.device, "NVIDIA H200");
  EXPECT_EQ(m.dtype, DType::BF16);
  EXPECT_EQ(m.shapes, 4u);
  EXPECT_DOUBLE_EQ(m.seconds, 100.0);
  // 70B-class GEMMs at the 700 W limit: well below the 989 TFLOP/s datasheet peak.
  EXPECT_GT(m.sustained_flops, 600e12);
  EXPECT_LT(m.sustained_flops, 750e12);
}

TEST(PlannerDeviceFit, RefusesASustainedFileThatIsNotOne) {
  expect_refused(R"({"schema": "strata-gpu-kernels-1"})", "schema strata-gpu-sustained-1");
  std::string missing = sustained_file("1");
  missing.replace(missing.find("\"sustained_tflops\""), 18, "\"tflops\"");
  expect_refused(missing, "missing 'sustained_tflops'");
  expect_refused(sustained_file("-5"), "'sustained_tflops' must be a positive rate");
  expect_refused(sustained_file("\"fast\""), "'sustained_tflops' has the wrong type");
  std::string dtype = sustained_file("500");
  dtype.replace(dtype.find("torch.bfloat16"), 14, "torch.int8");
  expect_refused(dtype, "unknown dtype 'int8'");
}

// A bf16 engine with an f16 table on the same tensor cores, and kernels timed on it: GEMMs that fill its
// waves, and attention of both passes (a fit needs both engines' kernels).
struct Measured {
  DeviceSpec device;
  KernelMeasurements kernels;
};

Measured measured_device() {
  Measured m;
  m.device.name = "test";
  m.device.memory_bandwidth_Bps = 1e18;
  m.device.memory_efficiency = 1;
  DTypePerformance perf;
  perf.matrix_flops = 1e12;
  perf.vector_flops = 1e11;
  perf.gemm.compute_units = 16;
  perf.gemm.tiles = {{128, 128, 0.8}};
  perf.gemm.k_step = 64;
  perf.attention = {0.5, 0.4, 128, 32, 0.0};
  m.device.dtypes[DType::BF16] = perf;
  m.device.dtypes[DType::F16] = perf;
  m.kernels.source = "test.json";
  m.kernels.device = "Test GPU";
  for (int64_t m_rows : {512, 2048, 8192}) {
    GemmShape shape{1, m_rows, 2048, 2048};
    m.kernels.gemm[DType::BF16].push_back({"a", "", {shape, gemm_compute_seconds(shape, perf)}});
  }
  for (bool backward : {false, true}) {
    AttentionShape shape{64, 1024, 64, backward};
    const double flops = (backward ? 2.5 : 1.0) * 4.0 * 64 * 1024 * 1024 * 64 / 2;
    m.kernels.attention.push_back({"cudnn", {shape, flops, fused_attention_compute_seconds(shape, flops, perf)}});
  }
  return m;
}

TEST(PlannerDeviceFit, GivesTheSustainedRateToTheDtypeMeasuredAndItsTensorCoreTwin) {
  const Measured m = measured_device();
  DeviceFitOptions options;
  options.memory = false;
  options.sustained_matrix_flops = 0.6e12;
  const DeviceFit fit = fit_device(m.device, m.kernels, options);
  EXPECT_DOUBLE_EQ(fit.device.performance(DType::BF16).sustained_matrix_flops, 0.6e12);
  EXPECT_DOUBLE_EQ(fit.device.performance(DType::F16).sustained_matrix_flops, 0.6e12);
  // The largest GEMM is now priced at the sustained rate.
  const GemmShape largest{1, 8192, 2048, 2048};
  EXPECT_DOUBLE_EQ(gemm_compute_seconds(largest, fit.device.performance(DType::BF16)),
                   2.0 * 8192 * 2048 * 2048 / 0.6e12);

  options.sustained_matrix_flops = 1.5e12;  // above the 1 TFLOP/s peak
  try {
    fit_device(m.device, m.kernels, options);
    ADD_FAILURE() << "a sustained rate above the peak was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("above device 'test''s bf16 peak of 1"), std::string::npos)
        << error.what();
  }
}

// Memory-bound kernels timed beside large copies: each mapped op's efficiency is its ideal traffic at the copies'
// rate over its measured time, from its large tensors only, at most 1; f16 takes bf16's.
TEST(PlannerDeviceFit, PricesMeasuredMemoryBoundOpsAgainstTheCopiesRate) {
  Measured m = measured_device();
  m.device.dtypes[DType::F32] = m.device.dtypes.at(DType::BF16);
  const double rate = 2e12;  // bytes per second the large copies reach
  auto op = [&](const std::string& name, DType dtype, double bytes, double slowdown) {
    m.kernels.memory_ops.push_back({name, dtype, bytes / 4, bytes, slowdown * bytes / rate});
  };
  op("copy", DType::BF16, 512e6, 1.0);
  op("add", DType::F32, 1024e6, 1.0);
  op("layer_norm", DType::BF16, 512e6, 2.0);
  op("layer_norm", DType::BF16, 1024e6, 2.0);
  op("layer_norm", DType::BF16, 4e6, 50.0);     // launch-bound: not fitted
  op("rms_norm", DType::BF16, 512e6, 0.9);      // faster than a copy: capped at 1
  op("adamw_fused", DType::F32, 1024e6, 1.25);
  op("cross_entropy", DType::BF16, 1024e6, 3.0);  // forward and backward at once: no one planner op
  DeviceFitOptions options;
  const DeviceFit fit = fit_device(m.device, m.kernels, options);
  const auto& bf16 = fit.device.performance(DType::BF16).op_efficiency;
  EXPECT_DOUBLE_EQ(bf16.at("layernorm"), 0.5);
  EXPECT_DOUBLE_EQ(bf16.at("rms_norm"), 1.0);
  EXPECT_EQ(bf16.size(), 2u);
  EXPECT_EQ(fit.device.performance(DType::F16).op_efficiency, bf16);
  EXPECT_DOUBLE_EQ(fit.device.performance(DType::F32).op_efficiency.at("adamw"), 0.8);
  // The planner divides the op's ideal-traffic time by it: a large bf16 LayerNorm at twice a copy's time.
  const double bytes = 1024e6;
  OpWork layernorm{"layernorm", "ln", OpKind::Other, 0, bytes};
  EXPECT_NEAR(op_seconds(layernorm, fit.device, DType::BF16), fit.device.op_overhead_s * 2 + 2 * bytes / rate,
              1e-12);
}

}  // namespace
}  // namespace strata
