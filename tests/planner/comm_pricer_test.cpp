// How plan groups map onto the communication layer's topology model.
#include "planner/comm_pricer.h"

#include <gtest/gtest.h>

#include "planner_test_support.h"

namespace strata {
namespace {

TEST(PlannerCommPricer, PlacesGroupsOnNodes) {
  ClusterSpec cluster = testing::test_cluster(4, 8, 16, /*nic_gbps=*/10);
  CommPricer pricer(cluster);
  // Tensor-parallel group of 8 consecutive devices: one node.
  comm::TopologyDesc tp = pricer.group_topology(8, 1);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_EQ(tp.ranks_per_node, 8);
  // Data-parallel group of 4 with stride 8: one device per node, sharing its node's
  // network link with the 7 other groups running at once.
  comm::TopologyDesc dp = pricer.group_topology(4, 8);
  EXPECT_EQ(dp.nodes, 4);
  EXPECT_EQ(dp.ranks_per_node, 1);
  EXPECT_DOUBLE_EQ(dp.inter.bandwidth_Bps, 10e9 / 8);
  // Stride 2, 8 members: 4 per node on 2 nodes, half the node link.
  comm::TopologyDesc half = pricer.group_topology(8, 2);
  EXPECT_EQ(half.nodes, 2);
  EXPECT_EQ(half.ranks_per_node, 4);
  EXPECT_DOUBLE_EQ(half.inter.bandwidth_Bps, 10e9 / 2);
}

TEST(PlannerCommPricer, PricesThroughTheCostModel) {
  ClusterSpec cluster = testing::test_cluster(2, 4, 16, 10, 100);
  CommPricer pricer(cluster);
  comm::CallShape shape{comm::Collective::AllReduce, 64e6, DType::F32};
  double expected = comm::choose_algorithm(shape, pricer.group_topology(4, 1)).predicted_s;
  EXPECT_DOUBLE_EQ(pricer.collective(comm::Collective::AllReduce, 64e6, 4, 1), expected);
  // One message inside a node, and to the next node: latency plus bytes over the link.
  EXPECT_NEAR(pricer.point_to_point(1e6, 1), 1e-6 + 1e6 / 100e9, 1e-12);
  EXPECT_NEAR(pricer.point_to_point(1e6, 4), 5e-6 + 1e6 / (10e9 / 4), 1e-12);
  EXPECT_EQ(pricer.collective(comm::Collective::AllReduce, 64e6, 1, 1), 0.0);
}

TEST(PlannerCommPricer, PricesExpertAllToAll) {
  ClusterSpec cluster = testing::test_cluster(2, 4, 16, 10, 100);
  CommPricer pricer(cluster);
  // Four devices of one node exchanging 16 MB each: three pairwise steps of a quarter each.
  EXPECT_NEAR(pricer.collective(comm::Collective::AllToAll, 16e6, 4, 1), 3 * (1e-6 + 4e6 / 100e9), 1e-12);
  EXPECT_GT(pricer.collective(comm::Collective::AllToAll, 16e6, 8, 1), pricer.collective(comm::Collective::AllToAll, 16e6, 4, 1));
}

}  // namespace
}  // namespace strata
