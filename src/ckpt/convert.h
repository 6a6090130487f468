#pragma once
// Offline resharding: a training checkpoint of any layout rewritten as the one
// another layout saves, without a training process. Each target rank's pieces
// (shard_plan.h) are read straight from the source's pieces that overlap them
// and written to that rank's file, one rank at a time, so memory holds one
// rank's share at most; the index and metadata follow, committed as a save is.
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "model/model_config.h"
#include "parallel/device_mesh.h"

namespace strata {

struct CheckpointLayout {
  MeshShape mesh;
  int virtual_stages = 1;
};

// "dp=2,tp=2,pp=1,vs=1": every parallel dimension's degree by its name, and the virtual stages
// (keys in any order, each at most once; absent ones 1);
// fails naming the text and the bad part.
CheckpointLayout parse_checkpoint_layout(const std::string& text);

// The pipeline stages that hold each parameter of `config` (in model_param_specs
// order) when it is cut into pp × virtual_stages balanced parts, part q on
// stage q mod pp, found by cutting the model's graph as the trainer does.
std::vector<std::vector<int>> pipeline_stage_holders(const ModelConfig& config, int pp, int virtual_stages);

// Writes `source` as run directory `out` (step_XXXXXXXX and `latest`), saved
// under `layout`: a run of that layout resumes from it reading only its own
// pieces. `out` must not hold checkpoints already.
std::filesystem::path convert_training_checkpoint(const Checkpoint& source, const std::filesystem::path& out,
                                                  const CheckpointLayout& layout);

}  // namespace strata
