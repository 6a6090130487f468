#include "parallel/device_mesh.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

std::string_view mesh_dimension_name(MeshDimension dimension) {
  switch (dimension) {
    case MeshDimension::Data: return "dp";
    case MeshDimension::Tensor: return "tp";
    case MeshDimension::Pipeline: return "pp";
  }
  return "?";
}

int extent(const MeshShape& shape, MeshDimension dimension) {
  switch (dimension) {
    case MeshDimension::Data: return shape.dp;
    case MeshDimension::Tensor: return shape.tp;
    case MeshDimension::Pipeline: return shape.pp;
  }
  return 1;
}

int& coordinate(MeshCoordinates& coordinates, MeshDimension dimension) {
  switch (dimension) {
    case MeshDimension::Data: return coordinates.dp;
    case MeshDimension::Tensor: return coordinates.tp;
    case MeshDimension::Pipeline: return coordinates.pp;
  }
  return coordinates.dp;
}

MeshCoordinates coordinates_of(int rank, const MeshShape& shape) {
  STRATA_CHECK(rank >= 0 && rank < shape.size(), "rank {} outside a mesh of {}", rank, shape.size());
  return {.dp = rank / shape.tp % shape.dp, .tp = rank % shape.tp, .pp = rank / (shape.tp * shape.dp)};
}

int rank_at(const MeshCoordinates& c, const MeshShape& shape) {
  STRATA_CHECK(c.dp >= 0 && c.dp < shape.dp && c.tp >= 0 && c.tp < shape.tp && c.pp >= 0 && c.pp < shape.pp,
               "mesh coordinates ({}, {}, {}) outside ({}, {}, {})", c.dp, c.tp, c.pp, shape.dp, shape.tp, shape.pp);
  return c.tp + shape.tp * (c.dp + shape.dp * c.pp);
}

std::vector<int> group_ranks(int rank, const MeshShape& shape, MeshDimension dimension) {
  MeshCoordinates c = coordinates_of(rank, shape);
  std::vector<int> ranks;
  int& moving = coordinate(c, dimension);
  for (moving = 0; moving < extent(shape, dimension); ++moving) ranks.push_back(rank_at(c, shape));
  return ranks;
}

DeviceMesh::DeviceMesh(const comm::Communicator& world, MeshShape shape) : shape_(shape) {
  if (shape.tp == 1 && shape.pp == 1 && shape.dp != world.size()) {
    fail("key 'parallel.dp' is {} but the job has {} ranks: with parallel.tp = 1, parallel.dp must equal the "
         "number of ranks (or be 0)",
         shape.dp, world.size());
  }
  if (shape.dp < 1 || shape.tp < 1 || shape.pp < 1 || shape.size() != world.size()) {
    fail("keys 'parallel.dp' ({}), 'parallel.tp' ({}) and 'parallel.pp' ({}) multiply to {} but the job has {} ranks",
         shape.dp, shape.tp, shape.pp, shape.size(), world.size());
  }
  coordinates_ = coordinates_of(world.rank(), shape);
  // A group is the ranks that differ only along its dimension: its color is the rank with that
  // coordinate zeroed, its order that coordinate.
  auto split = [&](MeshDimension dimension) {
    const int first = group_ranks(world.rank(), shape, dimension).front();
    return world.split(first, coordinate(coordinates_, dimension), std::string(mesh_dimension_name(dimension)));
  };
  data_ = split(MeshDimension::Data);
  tensor_ = split(MeshDimension::Tensor);
  pipeline_ = split(MeshDimension::Pipeline);
}

comm::Communicator& DeviceMesh::group(MeshDimension dimension) {
  switch (dimension) {
    case MeshDimension::Data: return data_;
    case MeshDimension::Tensor: return tensor_;
    case MeshDimension::Pipeline: return pipeline_;
  }
  return data_;
}

}  // namespace strata
