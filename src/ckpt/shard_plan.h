#pragma once
// How a layout's ranks share a checkpoint: every global tensor is saved as
// the boxes its shards cover along the dimension that splits it (a fused
// parameter's shard is one box per part; parallel/parameter_placement.h),
// each distinct box once, by one of the ranks that hold it (replicas along
// the other dimensions, every stage that reads it, every coordinate of a
// dimension that does not split it), taken in turn so that the writing
// spreads over them. Every rank computes
// the same plan from the layout alone, so no rank needs another's list, and
// the rank that commits the save writes the index from it.
#include <string>
#include <vector>

#include "core/tensor_box.h"
#include "model/parameters.h"
#include "parallel/device_mesh.h"
#include "parallel/parameter_placement.h"

namespace strata {

struct ShardPiece {
  size_t param = 0;                    // index in the model's parameter specs
  std::string split_by;                // the dimension splitting the parameter ("": none)
  int shard = 0;                       // whose shard along it it is a box of
  TensorBox box;                       // in the global parameter
  std::vector<int64_t> shard_offsets;  // in that shard
  int writer = 0;                      // world rank
  // Its safetensors key: the parameter's name, "<name>#<split_by><shard>.<box>" when a box of a shard.
  std::string key;
};

// Fails naming the parameter when two dimensions split it (splitting_dimension).
std::vector<ShardPiece> checkpoint_pieces(const std::vector<ParamSpec>& specs, const MeshShape& mesh,
                                          const MeshPlacements& placements);

// The file a rank's pieces go to: "rank_00003.safetensors".
std::string rank_file(int world_rank);

}  // namespace strata
