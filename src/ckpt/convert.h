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

// Writes `source` as run directory `out` (step_XXXXXXXX and `latest`), saved
// under `layout`: a run of that layout resumes from it reading only its own
// pieces. `out` must not hold checkpoints already.
std::filesystem::path convert_training_checkpoint(const Checkpoint& source, const std::filesystem::path& out,
                                                  const CheckpointLayout& layout);

}  // namespace strata
