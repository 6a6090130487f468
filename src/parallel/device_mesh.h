#pragma once
// The device mesh: the world's ranks arranged as a grid of the registered parallel dimensions
// (parallel/parallel_dimension.h), in the order of their nesting (the lowest varies fastest:
// Megatron's tp, then dp, then pp gives rank = tp + t·(dp + d·pp)), and split into one
// communicator per dimension.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "parallel/parallel_dimension.h"

namespace strata {

struct MeshExtent {
  std::string dimension;
  int degree = 1;
};

// A rank's position along each dimension, by name.
using MeshCoordinates = std::map<std::string, int, std::less<>>;

class MeshShape {
 public:
  MeshShape() : MeshShape(std::map<std::string, int>{}) {}  // one rank
  // Every registered dimension, with its degree in `degrees` (absent: 1); fails naming an unknown one.
  explicit MeshShape(const std::map<std::string, int>& degrees);

  int size() const;
  int degree(std::string_view dimension) const;
  // Every registered dimension's extent, innermost (lowest nesting) first.
  const std::vector<MeshExtent>& extents() const { return extents_; }
  // The extents a message names, in registration order: every dimension but one that applies to
  // some models only (ParallelDimension::named_when_set_only) at degree 1.
  std::vector<MeshExtent> named_extents() const;
  // "keys 'parallel.dp' (2), 'parallel.tp' (1) and 'parallel.pp' (1)": the named extents.
  std::string keys() const;

 private:
  std::vector<MeshExtent> extents_;
};

MeshCoordinates coordinates_of(int rank, const MeshShape& shape);
int rank_at(const MeshCoordinates& coordinates, const MeshShape& shape);
// The world ranks of `rank`'s group along `dimension`, in group-rank order.
std::vector<int> group_ranks(int rank, const MeshShape& shape, std::string_view dimension);

class DeviceMesh {
 public:
  // Collective over `world`: fails naming the parallel.* keys when the degrees' product is not
  // the number of ranks.
  DeviceMesh(const comm::Communicator& world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoordinates& coordinates() const { return coordinates_; }
  // The group along `dimension` through this rank.
  comm::Communicator& group(std::string_view dimension);
  // The group of the ranks that differ from this one only along `dimensions` (innermost first, its
  // ranks in that order: the first varies fastest), for any of the batch-splitting dimensions
  // (parallel_dimension.h): the ranks sharing a step's micro-batches, or a parameter's replicas.
  comm::Communicator& group_across(const std::vector<std::string>& dimensions);
  comm::Communicator& world() { return world_; }  // every rank of the job

 private:
  comm::Communicator world_;
  MeshShape shape_;
  MeshCoordinates coordinates_;
  std::map<std::string, comm::Communicator, std::less<>> groups_;
};

}  // namespace strata
