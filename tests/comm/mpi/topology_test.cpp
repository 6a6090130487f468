// Discovery: hwloc's view of the machine, ranks per node from MPI, and the
// link probe with its cache.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "comm/cluster_file.h"
#include "comm/machine.h"
#include "comm/probe_history.h"
#include "mpi/comm_test_support.h"

namespace strata::comm::testing {
namespace {

TEST(Topology, HwlocSeesThisMachine) {
  MachineInfo machine = discover_machine();
  long online = sysconf(_SC_NPROCESSORS_CONF);
  EXPECT_GE(machine.hardware_threads, 1);
  EXPECT_LE(machine.hardware_threads, online);
  EXPECT_GE(machine.cores, 1);
  EXPECT_LE(machine.cores, machine.hardware_threads);
  EXPECT_GE(machine.packages, 1);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(machine.hostname, host);
}

TEST(Topology, AllRanksOfThisMachineShareOneNode) {
  Communicator& world = flat_world();
  EXPECT_EQ(world.nodes(), 1);
  EXPECT_EQ(world.topology().ranks_per_node, world.size());
  for (int rank = 0; rank < world.size(); ++rank) EXPECT_EQ(world.node_of(rank), 0);
}

TEST(Topology, ProbeMeasuresCachesAndReuses) {
  Communicator& world = flat_world();
  // Probing many oversubscribed ranks would be slow and meaningless.
  if (world.size() > 4) GTEST_SKIP() << "probe tested up to 4 ranks";
  std::string directory = (std::filesystem::temp_directory_path() / "strata-comm-probe-test").string();
  if (world.rank() == 0) std::filesystem::remove_all(directory);
  world.barrier();
  CommConfig config = test_config();
  config.topology_file.clear();
  config.cache_dir = directory;
  Communicator probed = Communicator::world(config);
  EXPECT_EQ(probed.link_source().kind, "probe");
  const TopologyDesc& measured = probed.topology();
  EXPECT_GT(measured.intra.bandwidth_Bps, 0.0);
  EXPECT_GT(measured.reduce_Bps, 0.0);
  EXPECT_GE(measured.intra.latency_s, 0.0);
  // Message times between two ranks, from 4 bytes (the latency) up to larger messages. Their times are not
  // compared with each other: on oversubscribed cores a 4-byte exchange can wait longer than a large one.
  if (world.size() >= 2) {
    ASSERT_GE(measured.intra_message.size(), 2u);
    EXPECT_EQ(measured.intra_message.front().first, 4.0);
    EXPECT_EQ(measured.intra_message.front().second, measured.intra.latency_s);
    for (size_t i = 1; i < measured.intra_message.size(); ++i) {
      EXPECT_GT(measured.intra_message[i].first, measured.intra_message[i - 1].first) << "point " << i;
      EXPECT_GT(measured.intra_message[i].second, 0.0) << "point " << i;
    }
  } else {
    EXPECT_TRUE(measured.intra_message.empty());
  }
  // Every rank holds the same figures, so all choose alike.
  std::vector<std::byte> figures(sizeof(double) * 3);
  double values[3] = {measured.intra.latency_s, measured.intra.bandwidth_Bps, measured.reduce_Bps};
  std::memcpy(figures.data(), values, sizeof(values));
  EXPECT_TRUE(identical_on_all_ranks(probed, figures));

  // The next launches probe too until the layout has kSettlingProbes probes; the cache then holds the figures
  // they settle on (probe_history.h), and later launches read it.
  for (size_t launch = 1; launch < kSettlingProbes; ++launch) {
    Communicator settling = Communicator::world(config);
    EXPECT_EQ(settling.link_source().kind, "probe") << "launch " << launch;
  }
  Communicator cached = Communicator::world(config);
  EXPECT_EQ(cached.link_source().kind, "cache");
  EXPECT_EQ(cached.link_source().path, probed.link_source().path);
  const std::filesystem::path cache = cached.link_source().path;
  const std::vector<ClusterDescription> kept = kept_probes(cache, load_cluster_description(cache).probe_key);
  ASSERT_EQ(kept.size(), kSettlingProbes);
  const ClusterDescription settled = settled_figures(kept);
  EXPECT_DOUBLE_EQ(cached.topology().intra.bandwidth_Bps, settled.topology.intra.bandwidth_Bps);
  EXPECT_DOUBLE_EQ(cached.topology().reduce_Bps, settled.topology.reduce_Bps);

  // A reprobe starts the layout's probes again from itself.
  config.reprobe = true;
  Communicator reprobed = Communicator::world(config);
  EXPECT_EQ(reprobed.link_source().kind, "probe");
  config.reprobe = false;
  EXPECT_EQ(kept_probes(cache, load_cluster_description(cache).probe_key).size(), 1u);
  for (size_t launch = 1; launch < kSettlingProbes; ++launch) {
    Communicator settling = Communicator::world(config);
    EXPECT_EQ(settling.link_source().kind, "probe") << "launch " << launch << " after the reprobe";
  }

  // A cache this build cannot read (another version's keys, or a damaged file) is probed again and replaced.
  if (world.rank() == 0) {
    std::ofstream(probed.link_source().path, std::ios::app) << "\n[calibration.a_future_algorithm]\nlatency_scale = 1.0\n";
  }
  world.barrier();
  Communicator replaced = Communicator::world(config);
  EXPECT_EQ(replaced.link_source().kind, "probe");
  Communicator cached_again = Communicator::world(config);
  EXPECT_EQ(cached_again.link_source().kind, "cache");
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace strata::comm::testing
