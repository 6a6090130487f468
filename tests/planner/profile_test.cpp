// Calibrated machines: their cluster file round trip, the cluster derived from them and the
// planner reading the same file as any other cluster.
#include "planner/profile.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/toml_reader.h"
#include "planner/auto_plan.h"
#include "planner/device_time.h"
#include "planner/model_spec.h"
#include "planner/uncertainty.h"

namespace strata {
namespace {

HardwareProfile sample_profile() {
  HardwareProfile profile;
  profile.cpu = "test cpu";
  profile.cores = 2;
  profile.memory_bytes = 8e9;
  profile.backend = "cpu";
  ThreadProfile t;
  t.threads = 2;
  t.memory_bandwidth_Bps = 20e9;
  t.op_overhead_s = 2e-6;
  DTypeProfile f32;
  // m, n, k with 2 m n k = the FLOPs
  f32.gemm = {{"matmul", {50, 100, 100, 0, 0}, 1e6, 1e-4},           // 10 GFLOP/s
              {"matmul", {500, 100, 1000, 0, 0}, 1e8, 2e-3},         // 50 GFLOP/s: the peak
              {"matmul", {500, 100, 1000, 0, 1}, 1e8, 2.5e-3},       // 40 GFLOP/s, same size
              {"matmul", {500, 1000, 1000, 0, 0}, 1e9, 2.5e-2}};     // 40 GFLOP/s
  f32.attention = {{"attention", {1, 64, 64, 2}, 1e7, 1e-3}};      // 10 GFLOP/s
  f32.vector_flops = 5e9;
  t.dtypes[DType::F32] = f32;
  profile.threads.push_back(t);
  return profile;
}

TEST(PlannerProfile, RoundTripsThroughItsClusterFile) {
  HardwareProfile profile = sample_profile();
  profile.links = LinkProfile{2, 1, 1e-6, 5e9, 0, 0, 8e9};
  auto path = std::filesystem::temp_directory_path() / "strata_profile_test.toml";
  save_profile(path, profile);
  HardwareProfile back = load_profile(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.cpu, "test cpu");
  ASSERT_EQ(back.threads.size(), 1u);
  EXPECT_EQ(back.threads[0].dtypes.at(DType::F32).gemm.size(), 4u);
  EXPECT_DOUBLE_EQ(back.threads[0].dtypes.at(DType::F32).gemm[1].seconds, 2e-3);
  EXPECT_EQ(back.threads[0].dtypes.at(DType::F32).gemm[2].dims, (std::vector<int64_t>{500, 100, 1000, 0, 1}));
  EXPECT_DOUBLE_EQ(back.threads[0].dtypes.at(DType::F32).vector_flops, 5e9);
  EXPECT_DOUBLE_EQ(back.threads[0].memory_bandwidth_Bps, 20e9);
  EXPECT_DOUBLE_EQ(back.threads[0].op_overhead_s, 2e-6);
  EXPECT_DOUBLE_EQ(back.memory_bytes, 8e9);
  ASSERT_TRUE(back.links.has_value());
  EXPECT_DOUBLE_EQ(back.links->intra_bandwidth_Bps, 5e9);
  EXPECT_DOUBLE_EQ(back.links->intra_latency_s, 1e-6);
}

// One format: the file `strata calibrate` writes is a cluster file with the presets' [cluster]
// table, and the planner's cluster lookup reads it like a preset.
TEST(PlannerProfile, TheCalibratedFileIsAClusterFileThePlannerResolves) {
  const std::string text = format_measured_cluster(sample_profile());
  TomlReader file = TomlReader::parse(text, "calibrated.toml");
  EXPECT_TRUE(is_measured_cluster(file));
  EXPECT_EQ(file.table("cluster").non_empty_string("name"), "this machine (test cpu, calibrated)");
  auto path = std::filesystem::temp_directory_path() / "strata_calibrated_cluster_test.toml";
  save_profile(path, sample_profile());
  ClusterSpec resolved = resolve_cluster(path.string(), 2, 1);
  EXPECT_DOUBLE_EQ(resolved.device.performance(DType::F32).matrix_flops, 50e9);
  // A job's threads per rank price a calibrated file; a preset describes its devices itself.
  EXPECT_DOUBLE_EQ(resolve_cluster_for_job(path.string(), 2, 1).device.performance(DType::F32).matrix_flops, 50e9);
  EXPECT_THROW(resolve_cluster("dgx-h100", 2, 1), Error);
  EXPECT_EQ(resolve_cluster_for_job("dgx-h100", 2, 1).devices(), resolve_cluster("dgx-h100").devices());
  std::filesystem::remove(path);
}

TEST(PlannerProfile, DerivesThisMachineAsACluster) {
  ClusterSpec one = cluster_from_profile(sample_profile(), 2, 1, "p.json");
  const DTypePerformance& perf = one.device.performance(DType::F32);
  EXPECT_DOUBLE_EQ(perf.matrix_flops, 50e9);
  // The same engine model as every device: a core per compute unit, fitted to the measured kernels.
  EXPECT_EQ(perf.gemm.compute_units, 2);
  const double predicted = one.device.op_overhead_s + gemm_compute_seconds({1, 500, 1000, 1000}, perf);
  EXPECT_NEAR(predicted / 2.5e-2, 1.0, 0.25);
  EXPECT_LE(perf.gemm.tiles[0].efficiency, 1.0);
  EXPECT_GT(perf.attention.forward_efficiency, 0.0);
  EXPECT_DOUBLE_EQ(perf.attention.backward_efficiency, perf.attention.forward_efficiency);  // forward measured only
  EXPECT_DOUBLE_EQ(one.device.memory_bandwidth_Bps, 20e9);
  EXPECT_THROW(cluster_from_profile(sample_profile(), 1, 1, "p.json"), Error);  // 1 thread not measured
  EXPECT_THROW(cluster_from_profile(sample_profile(), 2, 2, "p.json"), Error);  // two processes need links
  HardwareProfile linked = sample_profile();
  linked.links = LinkProfile{2, 1, 1e-6, 5e9, 0, 0, 8e9};
  ClusterSpec two = cluster_from_profile(linked, 2, 2, "p.json");
  EXPECT_EQ(two.devices(), 2);
  EXPECT_DOUBLE_EQ(two.intra_node.bandwidth_Bps, 5e9);
  EXPECT_DOUBLE_EQ(two.reduce_Bps, 8e9);
  // Two processes of 2 threads on the profile's 2 cores share them: half the measured rates each.
  EXPECT_DOUBLE_EQ(two.device.performance(DType::F32).matrix_flops, 25e9);
  EXPECT_DOUBLE_EQ(two.device.performance(DType::F32).vector_flops, 2.5e9);
  EXPECT_DOUBLE_EQ(two.device.memory_bandwidth_Bps, 10e9);
  EXPECT_NE(two.name.find("oversubscribed: 50%"), std::string::npos) << two.name;
  // Every figure that prices time was measured: no step-time interval comes from it.
  ModelSpec model = model_preset("gpt2-small");
  EXPECT_TRUE(uncertain_figures(PlanningProblem{model.name, model.config, 8, 64, DType::F32, two}).empty());
}

TEST(PlannerProfile, RefusesBrokenFilesNamingTheKey) {
  const std::string good = format_measured_cluster(sample_profile());
  auto error_of = [](const std::string& text) -> std::string {
    try {
      read_measured_cluster(TomlReader::parse(text, "calibrated.toml"));
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  };
  std::string negative = good;
  negative.replace(negative.find("memory_bandwidth_gbps = "), std::string("memory_bandwidth_gbps = ").size(),
                   "memory_bandwidth_gbps = -");
  EXPECT_NE(error_of(negative).find("calibrated.toml: key 'measured.threads.2.memory_bandwidth_gbps' must be positive"),
            std::string::npos)
      << error_of(negative);
  std::string short_row = good;
  short_row.replace(short_row.find("[ 50, 100, 100, 0, 0, "), std::string("[ 50, 100, 100, 0, 0, ").size(), "[ 50, 100, 0, 0, ");
  EXPECT_NE(error_of(short_row).find("measured.threads.2.f32.gemm' entry 0 must be [m, n, k, transpose_a, transpose_b, "
                                     "flops, seconds]"),
            std::string::npos)
      << error_of(short_row);
  std::string unknown = good + "\n[measured.extra]\nx = 1\n";
  EXPECT_NE(error_of(unknown).find("unknown key 'measured.extra'"), std::string::npos) << error_of(unknown);
}

TEST(PlannerProfile, AnOldJsonProfileSaysToRecalibrate) {
  try {
    load_profile("/tmp/hardware-profile.json");
    ADD_FAILURE() << "read a JSON profile";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("rerun `strata calibrate --out /tmp/hardware-profile.toml`"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace strata
