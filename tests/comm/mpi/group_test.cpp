// Sub-groups: splitting, rank order, and collectives on disjoint groups in
// flight at the same time as each other and as world collectives.
#include <gtest/gtest.h>

#include <numeric>

#include "mpi/comm_test_support.h"

namespace strata::comm::testing {
namespace {

TEST(Groups, SplitOrdersRanksByKeyAndKeepsWorldRanks) {
  Communicator& world = flat_world();
  // Reverse order inside each parity class.
  Communicator group = world.split(world.rank() % 2, -world.rank(), "parity");
  int members = (world.size() + (world.rank() % 2 == 0 ? 1 : 0)) / 2;
  EXPECT_EQ(group.size(), members);
  // Members of my class in decreasing world rank: my position counts the larger ones.
  int larger = 0;
  for (int other = world.rank() + 2; other < world.size(); other += 2) ++larger;
  EXPECT_EQ(group.rank(), larger);
  EXPECT_EQ(group.world_rank_of(group.rank()), world.rank());
  EXPECT_EQ(group.name(), "parity");
}

TEST(Groups, ConcurrentCollectivesOnDisjointGroupsAndTheWorld) {
  Communicator& world = flat_world();
  const int p = world.size();
  const int color = world.rank() % 2;
  Communicator half = world.split(color, world.rank(), color == 0 ? "even" : "odd");
  // Each group sums different data with a different count, while the world
  // all-reduce, an even/odd broadcast and an all-gather are all in flight.
  const size_t group_count = color == 0 ? 1000 : 777;
  std::vector<float> group_in(group_count), group_out(group_count);
  for (size_t i = 0; i < group_count; ++i) group_in[i] = static_cast<float>(world.rank() + i % 3);
  const size_t world_count = 1234;
  std::vector<float> world_in(world_count), world_out(world_count);
  for (size_t i = 0; i < world_count; ++i) world_in[i] = static_cast<float>((world.rank() * 5 + i) % 7);
  std::vector<float> broadcast(300, half.rank() == 0 ? 42.0f + color : 0.0f);
  std::vector<float> gathered(static_cast<size_t>(half.size()) * 3);
  float mine[3] = {float(world.rank()), float(world.rank()) * 2, float(world.rank()) * 3};

  Handle world_call = world.all_reduce_async(world_in.data(), world_out.data(), world_count, DType::F32, ReduceOp::Sum);
  Handle group_call = half.all_reduce_async(group_in.data(), group_out.data(), group_count, DType::F32, ReduceOp::Sum,
                                            Algorithm::Ring);
  Handle broadcast_call = half.broadcast_async(broadcast.data(), broadcast.size(), DType::F32, 0, Algorithm::Ring);
  Handle gather_call = half.all_gather_async(mine, gathered.data(), 3, DType::F32);
  // Waiting in an order that differs from the start order must not deadlock.
  gather_call.wait();
  group_call.wait();
  broadcast_call.wait();
  world_call.wait();

  std::vector<int> members;
  for (int rank = color; rank < p; rank += 2) members.push_back(rank);
  for (size_t i = 0; i < group_count; ++i) {
    float want = 0;
    for (int rank : members) want += static_cast<float>(rank + i % 3);
    ASSERT_EQ(group_out[i], want) << "group element " << i;
  }
  for (size_t i = 0; i < world_count; ++i) {
    float want = 0;
    for (int rank = 0; rank < p; ++rank) want += static_cast<float>((rank * 5 + i) % 7);
    ASSERT_EQ(world_out[i], want) << "world element " << i;
  }
  for (float value : broadcast) ASSERT_EQ(value, 42.0f + color);
  for (size_t m = 0; m < members.size(); ++m) {
    for (int k = 0; k < 3; ++k) ASSERT_EQ(gathered[m * 3 + static_cast<size_t>(k)], float(members[m]) * float(k + 1));
  }
}

TEST(Groups, SplitOfASplit) {
  Communicator& world = flat_world();
  Communicator half = world.split(world.rank() < world.size() / 2 ? 0 : 1, world.rank(), "half");
  Communicator pairs = half.split(half.rank() / 2, half.rank(), "pair");
  float value = static_cast<float>(world.rank()), sum = 0.0f;
  pairs.all_reduce(&value, &sum, 1, DType::F32, ReduceOp::Sum);
  float want = 0.0f;
  for (int rank = 0; rank < pairs.size(); ++rank) want += static_cast<float>(pairs.world_rank_of(rank));
  EXPECT_EQ(sum, want);
  EXPECT_LE(pairs.size(), 2);
}

TEST(Groups, SplitKeepsSimulatedNodes) {
  Communicator* two_level = two_level_world();
  if (!two_level) GTEST_SKIP() << "no two-level layout for this rank count";
  Communicator copy = two_level->split(0, two_level->rank(), "copy");
  EXPECT_EQ(copy.nodes(), two_level->nodes());
  for (int rank = 0; rank < copy.size(); ++rank) EXPECT_EQ(copy.node_of(rank), two_level->node_of(rank));
}

}  // namespace
}  // namespace strata::comm::testing
