#pragma once
// How a layout's ranks share a checkpoint: every global tensor is saved as
// the boxes the ranks' tensor-parallel shards cover (a fused parameter's
// shard is one box per part), each distinct box once, by one of the ranks
// that hold it (data-parallel replicas, the first and last pipeline stage for
// the tied embedding, every tensor-parallel rank for a replicated parameter),
// taken in turn so that the writing spreads over them. Every rank computes
// the same plan from the layout alone, so no rank needs another's list, and
// the rank that commits the save writes the index from it.
#include <string>
#include <vector>

#include "core/tensor_box.h"
#include "model/parameters.h"
#include "model/sharding_plan.h"
#include "parallel/device_mesh.h"

namespace strata {

struct ShardPiece {
  size_t param = 0;                    // index in the model's parameter specs
  int tp_rank = 0;                     // whose shard it is a box of
  TensorBox box;                       // in the global parameter
  std::vector<int64_t> shard_offsets;  // in that shard
  int writer = 0;                      // world rank
  std::string key;                     // its safetensors key: the parameter's name, "#tp<t>.<box>" when a box
};

// `stage_holders[i]`: the pipeline stages holding parameter i (PipelineParallel::holders).
std::vector<ShardPiece> checkpoint_pieces(const std::vector<ParamSpec>& specs, const ShardingPlan& plan,
                                          const MeshShape& mesh, const std::vector<std::vector<int>>& stage_holders);

// The file a rank's pieces go to: "rank_00003.safetensors".
std::string rank_file(int world_rank);

}  // namespace strata
