// The mesh layout without MPI: Megatron's order (tp fastest, then dp, then pp), every rank at
// exactly one coordinate, and groups that partition the world along each dimension.
#include "parallel/device_mesh.h"

#include <gtest/gtest.h>

#include <set>

namespace strata {
namespace {

TEST(DeviceMesh, TensorParallelRanksAreNeighboursThenDataThenPipeline) {
  const MeshShape shape({{"dp", 2}, {"tp", 4}, {"pp", 3}});
  EXPECT_EQ(group_ranks(0, shape, "tp"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(group_ranks(5, shape, "tp"), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(group_ranks(5, shape, "dp"), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_ranks(5, shape, "pp"), (std::vector<int>{5, 13, 21}));
  EXPECT_EQ(coordinates_of(13, shape), (MeshCoordinates{{"dp", 1}, {"tp", 1}, {"pp", 1}, {"ep", 0}}));
}

TEST(DeviceMesh, EveryDimensionPartitionsTheWorld) {
  for (const MeshShape& shape : {MeshShape({{"dp", 1}, {"tp", 1}, {"pp", 1}}), MeshShape({{"dp", 3}, {"tp", 1}, {"pp", 1}}),
                                 MeshShape({{"dp", 2}, {"tp", 3}, {"pp", 2}}), MeshShape({{"dp", 1}, {"tp", 2}, {"pp", 4}})}) {
    for (int rank = 0; rank < shape.size(); ++rank) EXPECT_EQ(rank_at(coordinates_of(rank, shape), shape), rank);
    for (const char* dimension : {"dp", "tp", "pp"}) {
      std::set<int> seen;
      std::set<std::vector<int>> groups;
      for (int rank = 0; rank < shape.size(); ++rank) {
        std::vector<int> group = group_ranks(rank, shape, dimension);
        EXPECT_TRUE(std::find(group.begin(), group.end(), rank) != group.end());
        groups.insert(group);
      }
      for (const std::vector<int>& group : groups) {
        for (int member : group) EXPECT_TRUE(seen.insert(member).second) << "rank " << member << " in two groups";
      }
      EXPECT_EQ(static_cast<int>(seen.size()), shape.size());
    }
  }
}

}  // namespace
}  // namespace strata
