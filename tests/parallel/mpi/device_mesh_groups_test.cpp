// The device mesh on real ranks: for every way to factor the world into dp × tp × pp, each
// rank's three groups hold exactly the ranks the layout formula names (checked by summing
// world ranks over each group against the formula), in coordinate order.
#include <gtest/gtest.h>

#include <numeric>

#include "comm/mpi_session.h"
#include "core/error.h"
#include "parallel/device_mesh.h"

namespace strata {
namespace {

std::vector<MeshShape> every_shape(int ranks) {
  std::vector<MeshShape> shapes;
  for (int tp = 1; tp <= ranks; ++tp) {
    for (int pp = 1; tp * pp <= ranks; ++pp) {
      if (ranks % (tp * pp) == 0) shapes.push_back(MeshShape({{"dp", ranks / (tp * pp)}, {"tp", tp}, {"pp", pp}}));
    }
  }
  return shapes;
}

TEST(DeviceMeshGroups, EveryFactoringSplitsTheWorldAsTheLayoutSays) {
  comm::Communicator world = comm::Communicator::world();
  for (const MeshShape& shape : every_shape(world.size())) {
    DeviceMesh mesh(world, shape);
    EXPECT_EQ(mesh.coordinates(), coordinates_of(world.rank(), shape));
    for (const char* dimension : {"dp", "tp", "pp"}) {
      comm::Communicator& group = mesh.group(dimension);
      std::vector<int> expected = group_ranks(world.rank(), shape, dimension);
      const std::string what = fmt::format("{} group of rank {} in dp={} tp={} pp={}", dimension, world.rank(),
                                           shape.degree("dp"), shape.degree("tp"), shape.degree("pp"));
      ASSERT_EQ(group.size(), static_cast<int>(expected.size())) << what;
      EXPECT_EQ(expected[static_cast<size_t>(group.rank())], world.rank()) << what;
      for (int member = 0; member < group.size(); ++member) {
        EXPECT_EQ(group.world_rank_of(member), expected[static_cast<size_t>(member)]) << what;
      }
      // The collectives run on the same ranks: the sum of world ranks over the group.
      float mine = static_cast<float>(world.rank()), sum = 0.0f;
      group.all_reduce(&mine, &sum, 1, DType::F32, comm::ReduceOp::Sum);
      EXPECT_EQ(sum, static_cast<float>(std::accumulate(expected.begin(), expected.end(), 0))) << what;
    }
  }
}

TEST(DeviceMeshGroups, AShapeThatIsNotTheWorldNamesTheKeys) {
  comm::Communicator world = comm::Communicator::world();
  try {
    DeviceMesh mesh(world, MeshShape({{"dp", world.size()}, {"tp", 2}, {"pp", 1}}));
    ADD_FAILURE() << "accepted a mesh twice the world";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(fmt::format("keys 'parallel.dp' ({}), 'parallel.tp' (2) and "
                                                         "'parallel.pp' (1) multiply to {} but the job has {} ranks",
                                                         world.size(), 2 * world.size(), world.size())),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace strata
