// What runs: requested algorithms, pins, fallbacks, and agreement with the
// cost model on the group's own topology.
#include <gtest/gtest.h>

#include "mpi/comm_test_support.h"

namespace strata::comm::testing {
namespace {

TEST(Decisions, AutoFollowsTheCostModel) {
  for (Communicator* group : test_groups()) {
    for (Collective op : kCollectives) {
      for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
        Decision decision = group->plan(op, count, DType::F32);
        Choice choice = choose_algorithm({op, static_cast<double>(count * 4), DType::F32}, group->topology(), group->model());
        EXPECT_EQ(decision.algorithm, choice.algorithm) << collective_name(op) << " count " << count;
        EXPECT_EQ(decision.reason, "auto");
      }
    }
  }
}

TEST(Decisions, RequestedAlgorithmRunsAndIsRecorded) {
  Communicator& world = flat_world();
  float value = 1.0f, sum = 0.0f;
  world.all_reduce(&value, &sum, 1, DType::F32, ReduceOp::Sum, Algorithm::BinomialTree);
  EXPECT_EQ(world.last_decision().algorithm, Algorithm::BinomialTree);
  EXPECT_EQ(world.last_decision().reason, "requested by the call");
  EXPECT_EQ(sum, static_cast<float>(world.size()));
}

TEST(Decisions, PinsApplyAndInapplicablePinsFallBackSayingWhy) {
  CommConfig config = test_config();
  config.pin("all_reduce=recursive_doubling,reduce_scatter=binomial", "the test");
  Communicator world = Communicator::world(config);
  std::vector<float> in(64, 1.0f), out(64);
  world.all_reduce(in.data(), out.data(), 64, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(world.last_decision().algorithm, Algorithm::RecursiveDoubling);
  EXPECT_EQ(world.last_decision().reason, "pinned by the test");

  std::vector<float> block(64);
  std::vector<float> input(64 * static_cast<size_t>(world.size()), 2.0f);
  world.reduce_scatter(input.data(), block.data(), 64, DType::F32, ReduceOp::Sum);
  const Decision& decision = world.last_decision();
  EXPECT_NE(decision.algorithm, Algorithm::BinomialTree);
  EXPECT_NE(decision.reason.find("fallback: binomial pinned by the test but binomial does not implement reduce_scatter"),
            std::string::npos)
      << decision.reason;
  for (float value : block) EXPECT_EQ(value, 2.0f * static_cast<float>(world.size()));
}

TEST(Decisions, HierarchicalOnOneNodeFallsBack) {
  Communicator& world = flat_world();
  Decision decision = world.plan(Collective::AllReduce, 1 << 20, DType::F32, Algorithm::Hierarchical);
  EXPECT_NE(decision.algorithm, Algorithm::Hierarchical);
  EXPECT_NE(decision.reason.find("hierarchical needs"), std::string::npos) << decision.reason;
}

TEST(Decisions, TwoLevelGroupsPickHierarchicalForLargeMessages) {
  Communicator* two_level = two_level_world();
  if (!two_level) GTEST_SKIP() << "no two-level layout for this rank count";
  // The test links make the inter-node link ten times slower than the intra-node one.
  Decision large = two_level->plan(Collective::AllReduce, size_t{16} << 20, DType::F32);
  EXPECT_EQ(large.algorithm, Algorithm::Hierarchical) << format_decision(large);
}

}  // namespace
}  // namespace strata::comm::testing
