#pragma once
// Where a model's parameters lie along one parallel dimension, as that dimension places them
// (DTensor's placements, for whole parameters): held by every coordinate (replicated), by some
// coordinates only (a pipeline stage's layers), or split, coordinate c holding shard c, made of one
// box of the whole parameter per fused part. The checkpoint's shard plan and its converter combine
// every dimension's placements into the boxes each rank saves; no dimension is named there.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/tensor_box.h"
#include "model/model_config.h"
#include "model/parameters.h"

namespace strata {

class MeshShape;

// A box of a whole parameter and where it starts in the shard that holds it.
struct ShardBox {
  TensorBox full;
  std::vector<int64_t> shard_offsets;
};

struct ParameterPlacement {
  std::vector<int> holders;  // the coordinates holding it, ascending; empty: every coordinate
  // Split: shard c's boxes for each coordinate c. Empty: each holder holds the whole parameter.
  std::vector<std::vector<ShardBox>> shards;

  bool split() const { return !shards.empty(); }
  bool held_by(int coordinate) const;
};

// What a dimension places parameters from: the model, its parameters in order, the dimension's
// degree, and how the model is cut into parts (the stages' layer counts, empty for an even split,
// and the parts each stage runs).
struct PlacementInput {
  const ModelConfig& model;
  const std::vector<ParamSpec>& specs;
  int degree = 1;
  std::vector<int> layers_per_part;
  int parts_per_stage = 1;
};

// A rank's piece of one parameter: the boxes of the whole parameter it holds (the whole, where no
// dimension splits it) and the piece's shape.
struct HeldPiece {
  Shape shape;
  std::vector<ShardBox> boxes;

  void slice(const Tensor& whole, Tensor& piece) const;  // piece = this rank's part of whole
};

// Per dimension name, every parameter's placement along it (in `input.specs` order), each
// registered dimension of `mesh` at its degree there (`input.degree` is ignored).
using MeshPlacements = std::map<std::string, std::vector<ParameterPlacement>, std::less<>>;
MeshPlacements place_parameters(const MeshShape& mesh, const PlacementInput& input);

// The dimension that splits parameter `index` (named `name`), if any; fails naming the parameter
// when two dimensions split it (their shards' boxes are not combined yet).
const std::string* splitting_dimension(const std::string& name, size_t index, const MeshPlacements& placements);

// The piece of every parameter of `specs` (in order) that the rank at `at` holds, or would hold
// where the parameter is on another coordinate of a dimension that does not split it.
std::vector<HeldPiece> held_pieces(const std::vector<ParamSpec>& specs, const MeshPlacements& placements,
                                   const std::map<std::string, int, std::less<>>& at);

}  // namespace strata
