// Cluster description files: what they mean, and that every mistake is an
// error naming the file and the key.
#include <gtest/gtest.h>

#include <filesystem>

#include "comm/cluster_file.h"
#include "core/error.h"

namespace strata::comm {
namespace {

const char* kValid = R"(
nodes = 2
ranks_per_node = 8
reduce_gbps = 12
[intra]
latency_us = 0.5
bandwidth_gbps = 20.0
[inter]
latency_us = 5
bandwidth_gbps = 2.5
[calibration.ring]
latency_scale = 1.5
bandwidth_scale = 0.8
size_factors = [[4096, 0.5], [1048576, 2]]
)";

void expect_error(const std::string& text, const std::string& fragment) {
  try {
    parse_cluster_description(text, "cluster.toml");
    ADD_FAILURE() << "accepted:\n" << text;
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("cluster.toml"), std::string::npos) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << "wanted '" << fragment << "' in: " << message;
  }
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(ClusterFile, ReadsUnitsAsDocumented) {
  ClusterDescription description = parse_cluster_description(kValid, "cluster.toml");
  const TopologyDesc& t = description.topology;
  EXPECT_EQ(t.nodes, 2);
  EXPECT_EQ(t.ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(t.reduce_Bps, 12e9);
  EXPECT_DOUBLE_EQ(t.intra.latency_s, 0.5e-6);
  EXPECT_DOUBLE_EQ(t.intra.bandwidth_Bps, 20e9);
  EXPECT_DOUBLE_EQ(t.inter.latency_s, 5e-6);
  EXPECT_DOUBLE_EQ(t.inter.bandwidth_Bps, 2.5e9);
  const Calibration& ring = description.calibration[static_cast<size_t>(Algorithm::Ring)];
  EXPECT_DOUBLE_EQ(ring.latency_scale, 1.5);
  EXPECT_DOUBLE_EQ(ring.bandwidth_scale, 0.8);
  ASSERT_EQ(ring.size_factors.size(), 2u);
  EXPECT_DOUBLE_EQ(ring.size_factor(1000), 0.5);
  EXPECT_DOUBLE_EQ(ring.size_factor(1 << 22), 2.0);
  EXPECT_DOUBLE_EQ(ring.size_factor(65536), 1.25);  // halfway in log(bytes)
  const Calibration& rhd = description.calibration[static_cast<size_t>(Algorithm::RecursiveHalvingDoubling)];
  EXPECT_DOUBLE_EQ(rhd.latency_scale, 1.0);
}

TEST(ClusterFile, SharedMemoryFlag) {
  std::string text = std::string("shared_memory = true\n") + kValid;
  ClusterDescription description = parse_cluster_description(text, "cluster.toml");
  EXPECT_TRUE(description.topology.shared_memory);
  EXPECT_TRUE(description.topology.cross_memory);
  EXPECT_FALSE(parse_cluster_description(kValid, "cluster.toml").topology.shared_memory);
  expect_error(std::string("shared_memory = 1\n") + kValid, "key 'shared_memory' must be a boolean, got an integer");
}

// The node's memory bandwidth and last-level cache (the probe's, or stated):
// optional, GB/s and MiB; absent they are unknown (0).
TEST(ClusterFile, MemoryBandwidthAndCacheSize) {
  std::string text = std::string("memory_gbps = 20.5\ncache_mib = 32\n") + kValid;
  ClusterDescription description = parse_cluster_description(text, "cluster.toml");
  EXPECT_EQ(description.topology.memory_Bps, 20.5e9);
  EXPECT_EQ(description.topology.cache_bytes, 32.0 * 1024 * 1024);
  ClusterDescription plain = parse_cluster_description(kValid, "cluster.toml");
  EXPECT_EQ(plain.topology.memory_Bps, 0.0);
  EXPECT_EQ(plain.topology.cache_bytes, 0.0);
  expect_error(std::string("memory_gbps = 0\n") + kValid, "key 'memory_gbps' must be positive, got 0");
  expect_error(std::string("cache_mib = -2\n") + kValid, "key 'cache_mib' must be positive, got -2");
  EXPECT_EQ(parse_cluster_description(format_cluster_description(description), "again.toml").topology.cache_bytes,
            description.topology.cache_bytes);
}

// The copy, cross-memory read and local copy rates by block size (the probe's, or stated):
// optional [[bytes, GB/s], ...], bytes ascending; absent they are unknown (empty).
TEST(ClusterFile, CopyAndCrossReadRates) {
  std::string text = std::string("copy_gbps = [[262144, 31], [8388608, 12.5]]\ncross_read_gbps = [[262144, 13]]\n"
                                 "local_copy_gbps = [[262144, 35], [1048576, 20]]\n") +
                     kValid;
  ClusterDescription description = parse_cluster_description(text, "cluster.toml");
  EXPECT_EQ(description.topology.copy.points, (std::vector<std::pair<double, double>>{{262144, 31e9}, {8388608, 12.5e9}}));
  EXPECT_EQ(description.topology.cross_read.points, (std::vector<std::pair<double, double>>{{262144, 13e9}}));
  EXPECT_EQ(description.topology.local_copy.points,
            (std::vector<std::pair<double, double>>{{262144, 35e9}, {1048576, 20e9}}));
  EXPECT_TRUE(parse_cluster_description(kValid, "cluster.toml").topology.copy.empty());
  EXPECT_TRUE(parse_cluster_description(kValid, "cluster.toml").topology.local_copy.empty());
  expect_error(std::string("copy_gbps = [[262144, 0]]\n") + kValid,
               "key 'copy_gbps' at 262144 bytes: GB/s must be positive, got 0");
  expect_error(std::string("cross_read_gbps = [[8, 1], [4, 1]]\n") + kValid,
               "key 'cross_read_gbps' entry 1: bytes must increase from entry to entry, got 4 after 8");
  expect_error(std::string("local_copy_gbps = [[4096, -2]]\n") + kValid,
               "key 'local_copy_gbps' at 4096 bytes: GB/s must be positive, got -2");
  ClusterDescription again = parse_cluster_description(format_cluster_description(description), "again.toml");
  EXPECT_EQ(again.topology.copy.points, description.topology.copy.points);
  EXPECT_EQ(again.topology.cross_read.points, description.topology.cross_read.points);
  EXPECT_EQ(again.topology.local_copy.points, description.topology.local_copy.points);
}

TEST(ClusterFile, IntraNodeMessageTimes) {
  std::string text = std::string("intra_message_us = [[4, 0.7], [4096, 3.5]]\n") + kValid;
  ClusterDescription description = parse_cluster_description(text, "cluster.toml");
  ASSERT_EQ(description.topology.intra_message.size(), 2u);
  EXPECT_EQ(description.topology.intra_message[0].first, 4);
  EXPECT_DOUBLE_EQ(description.topology.intra_message[1].second, 3.5e-6);
  EXPECT_TRUE(parse_cluster_description(kValid, "cluster.toml").topology.intra_message.empty());
  expect_error(std::string("intra_message_us = [[4096, -1]]\n") + kValid,
               "key 'intra_message_us' at 4096 bytes: us must be positive, got -1");
  expect_error(std::string("intra_message_us = [[8, 1], [4, 1]]\n") + kValid,
               "key 'intra_message_us' entry 1: bytes must increase from entry to entry, got 4 after 8");
  ClusterDescription again = parse_cluster_description(format_cluster_description(description), "again.toml");
  EXPECT_EQ(again.topology.intra_message, description.topology.intra_message);
}

TEST(ClusterFile, OneNodeNeedsNoInterTable) {
  std::string text = "nodes = 1\nranks_per_node = 4\nreduce_gbps = 5\n[intra]\nlatency_us = 1\nbandwidth_gbps = 3\n";
  ClusterDescription description = parse_cluster_description(text, "cluster.toml");
  EXPECT_DOUBLE_EQ(description.topology.inter.bandwidth_Bps, 3e9);
}

TEST(ClusterFile, RejectsMistakesNamingTheKey) {
  std::string valid = kValid;
  expect_error("colour = 3\n" + valid, "unknown key 'colour'");
  expect_error(valid + "colour = 3\n", "unknown key 'calibration.ring.colour'");
  expect_error(replace(valid, "latency_us = 0.5", "latency_us = 0.5\nlatncy_us = 1"), "unknown key 'intra.latncy_us'");
  expect_error(replace(valid, "nodes = 2\n", ""), "missing key 'nodes'");
  expect_error(replace(valid, "nodes = 2", "nodes = 0"), "key 'nodes' must be in [1, 16777216], got 0");
  expect_error(replace(valid, "nodes = 2", "nodes = 2.5"), "'nodes' must be an integer");
  expect_error(replace(valid, "bandwidth_gbps = 20.0", "bandwidth_gbps = -1"),
               "key 'intra.bandwidth_gbps' must be positive, got -1");
  expect_error(replace(valid, "latency_us = 5", "latency_us = \"fast\""), "'inter.latency_us' must be a number");
  expect_error(replace(valid, "latency_us = 5", "latency_us = nan"), "'inter.latency_us' must be finite");
  expect_error(replace(valid, "reduce_gbps = 12", "reduce_gbps = 0"), "key 'reduce_gbps' must be positive, got 0");
  expect_error(replace(valid, "[inter]\nlatency_us = 5\nbandwidth_gbps = 2.5\n", ""), "missing table [inter]");
  expect_error(replace(valid, "[calibration.ring]", "[calibration.rings]"), "unknown key 'calibration.rings'");
  expect_error(replace(valid, "[calibration.ring]", "[calibration.mpi]"), "unknown key 'calibration.mpi'");
  expect_error(replace(valid, "bandwidth_scale = 0.8", "bandwidth_scale = 0"),
               "key 'calibration.ring.bandwidth_scale' must be positive, got 0");
  expect_error(replace(valid, "nodes = 2", "nodes = = 2"), "cluster.toml:2:");
  expect_error(replace(valid, "[[4096, 0.5], [1048576, 2]]", "[[4096, 0.5], [1024, 2]]"),
               "key 'calibration.ring.size_factors' entry 1: bytes must increase from entry to entry, "
               "got 1024 after 4096");
  expect_error(replace(valid, "[[4096, 0.5], [1048576, 2]]", "[[4096, 0.5, 3]]"),
               "key 'calibration.ring.size_factors' entry 0 must be a pair [bytes, factor] of finite numbers");
  expect_error(replace(valid, "[[4096, 0.5], [1048576, 2]]", "[[4096, 0]]"),
               "key 'calibration.ring.size_factors' entry 0: factor must be positive, got 0");
}

TEST(ClusterFile, SavedDescriptionsReadBackExactly) {
  ClusterDescription original = parse_cluster_description(kValid, "cluster.toml");
  original.probe_key = "strata comm links v1: 16 ranks; \"a\" x8";
  original.topology.intra.latency_s = 1.0 / 3.0 * 1e-6;
  original.topology.memory_Bps = 1e10 / 3.0;
  original.topology.cache_bytes = 1.5 * 1024 * 1024;
  std::filesystem::path path = std::filesystem::temp_directory_path() / "strata-cluster-roundtrip.toml";
  save_cluster_description(path, original);
  ClusterDescription loaded = load_cluster_description(path);
  std::filesystem::remove(path);
  EXPECT_EQ(loaded.probe_key, original.probe_key);
  EXPECT_EQ(loaded.topology.intra.latency_s, original.topology.intra.latency_s);
  EXPECT_EQ(loaded.topology.inter.bandwidth_Bps, original.topology.inter.bandwidth_Bps);
  EXPECT_EQ(loaded.topology.reduce_Bps, original.topology.reduce_Bps);
  EXPECT_EQ(loaded.topology.memory_Bps, original.topology.memory_Bps);
  EXPECT_EQ(loaded.topology.cache_bytes, original.topology.cache_bytes);
  for (size_t i = 0; i < kAlgorithmSlots; ++i) {
    EXPECT_EQ(loaded.calibration[i].latency_scale, original.calibration[i].latency_scale);
    EXPECT_EQ(loaded.calibration[i].bandwidth_scale, original.calibration[i].bandwidth_scale);
    EXPECT_EQ(loaded.calibration[i].size_factors, original.calibration[i].size_factors);
  }
}

TEST(ClusterFile, MissingFileIsNamed) {
  try {
    load_cluster_description("/nonexistent/cluster.toml");
    FAIL() << "loaded a missing file";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/cluster.toml"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace strata::comm
