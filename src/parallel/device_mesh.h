#pragma once
// The device mesh: the world's ranks arranged as a dp × tp × pp grid and split
// into one communicator per dimension. Megatron's order: tensor-parallel ranks
// are neighbours (consecutive world ranks, so a tp group stays inside a node,
// where its per-layer collectives are cheap), then data parallelism, then
// pipeline stages outermost (stage boundaries cross the slowest links the
// least often). Rank = tp + t·(dp + d·pp).
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace strata {

struct MeshShape {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int size() const { return dp * tp * pp; }
};

enum class MeshDimension { Data, Tensor, Pipeline };
std::string_view mesh_dimension_name(MeshDimension dimension);  // "dp", "tp", "pp"

struct MeshCoordinates {
  int dp = 0;
  int tp = 0;
  int pp = 0;
  bool operator==(const MeshCoordinates&) const = default;
};

// The extent of `dimension` in a shape, and a rank's position along it.
int extent(const MeshShape& shape, MeshDimension dimension);
int& coordinate(MeshCoordinates& coordinates, MeshDimension dimension);

MeshCoordinates coordinates_of(int rank, const MeshShape& shape);
int rank_at(const MeshCoordinates& coordinates, const MeshShape& shape);
// The world ranks of `rank`'s group along `dimension`, in group-rank order.
std::vector<int> group_ranks(int rank, const MeshShape& shape, MeshDimension dimension);

class DeviceMesh {
 public:
  // Collective over `world`: fails naming the parallel.* keys when
  // dp × tp × pp is not the number of ranks.
  DeviceMesh(const comm::Communicator& world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoordinates& coordinates() const { return coordinates_; }
  // The group along `dimension` through this rank; invalid in one process.
  comm::Communicator& group(MeshDimension dimension);

 private:
  MeshShape shape_;
  MeshCoordinates coordinates_;
  comm::Communicator data_, tensor_, pipeline_;
};

}  // namespace strata
