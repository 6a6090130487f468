// Calibrated profiles: JSON round trip and the cluster derived from them.
#include "planner/profile.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"

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
  f32.gemm = {{"matmul", {64, 64, 64, 0, 0}, 1e6, 1e-4},           // 10 GFLOP/s
              {"matmul", {512, 512, 512, 0, 0}, 1e8, 2e-3},        // 50 GFLOP/s: the peak
              {"matmul", {512, 512, 512, 0, 1}, 1e8, 2.5e-3},      // 40 GFLOP/s, same size: averaged
              {"matmul", {1024, 1024, 1024, 0, 0}, 1e9, 2.5e-2}};  // 40 GFLOP/s
  f32.attention = {{"attention", {1, 64, 64, 2}, 1e7, 1e-3}};      // 10 GFLOP/s
  f32.vector_flops = 5e9;
  t.dtypes[DType::F32] = f32;
  profile.threads.push_back(t);
  return profile;
}

TEST(PlannerProfile, RoundTripsThroughJson) {
  HardwareProfile profile = sample_profile();
  profile.links = LinkProfile{2, 1, 1e-6, 5e9, 0, 0, 8e9};
  auto path = std::filesystem::temp_directory_path() / "strata_profile_test.json";
  save_profile(path, profile);
  HardwareProfile back = load_profile(path);
  std::filesystem::remove(path);
  EXPECT_EQ(back.cpu, "test cpu");
  ASSERT_EQ(back.threads.size(), 1u);
  EXPECT_EQ(back.threads[0].dtypes.at(DType::F32).gemm.size(), 4u);
  EXPECT_DOUBLE_EQ(back.threads[0].dtypes.at(DType::F32).gemm[1].seconds, 2e-3);
  ASSERT_TRUE(back.links.has_value());
  EXPECT_DOUBLE_EQ(back.links->intra_bandwidth_Bps, 5e9);
}

TEST(PlannerProfile, DerivesThisMachineAsACluster) {
  ClusterSpec one = cluster_from_profile(sample_profile(), 2, 1, "p.json");
  const DTypePerformance& perf = one.device.performance(DType::F32);
  EXPECT_DOUBLE_EQ(perf.matrix_flops, 50e9);
  ASSERT_EQ(perf.gemm.points.size(), 3u);
  EXPECT_DOUBLE_EQ(perf.gemm.points[0].second, 0.2);
  EXPECT_DOUBLE_EQ(perf.gemm.points[1].second, 0.9);  // (1.0 + 0.8) / 2
  EXPECT_DOUBLE_EQ(perf.gemm.points[2].second, 0.8);
  EXPECT_DOUBLE_EQ(perf.attention.at(1e7), 0.2);
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
}

TEST(PlannerProfile, RefusesForeignOrBrokenFiles) {
  nlohmann::json json = profile_to_json(sample_profile());
  json["format"] = "something else";
  EXPECT_THROW(profile_from_json(json, "x.json"), Error);
  json = profile_to_json(sample_profile());
  json["threads"][0]["memory_bandwidth_Bps"] = -1;
  try {
    profile_from_json(json, "x.json");
    ADD_FAILURE() << "accepted a negative bandwidth";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("memory_bandwidth_Bps"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace strata
