// The mesh layout without MPI: Megatron's order (tp fastest, then dp, then pp), every rank at
// exactly one coordinate, and groups that partition the world along each dimension.
#include "parallel/device_mesh.h"

#include <gtest/gtest.h>

#include <set>

namespace strata {
namespace {

TEST(DeviceMesh, TensorParallelRanksAreNeighboursThenDataThenPipeline) {
  const MeshShape shape{.dp = 2, .tp = 4, .pp = 3};
  EXPECT_EQ(group_ranks(0, shape, MeshDimension::Tensor), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(group_ranks(5, shape, MeshDimension::Tensor), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(group_ranks(5, shape, MeshDimension::Data), (std::vector<int>{1, 5}));
  EXPECT_EQ(group_ranks(5, shape, MeshDimension::Pipeline), (std::vector<int>{5, 13, 21}));
  EXPECT_EQ(coordinates_of(13, shape), (MeshCoordinates{.dp = 1, .tp = 1, .pp = 1}));
}

TEST(DeviceMesh, EveryDimensionPartitionsTheWorld) {
  for (const MeshShape& shape : {MeshShape{1, 1, 1}, MeshShape{3, 1, 1}, MeshShape{2, 3, 2}, MeshShape{1, 2, 4}}) {
    for (int rank = 0; rank < shape.size(); ++rank) EXPECT_EQ(rank_at(coordinates_of(rank, shape), shape), rank);
    for (MeshDimension dimension : {MeshDimension::Data, MeshDimension::Tensor, MeshDimension::Pipeline}) {
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
