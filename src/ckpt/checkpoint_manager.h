#pragma once
// A training run's checkpoints as the run keeps them: the run directory's lock (held by the
// reporting rank while the run writes there), resuming or starting fresh, saves with their
// retention and timing, and restores into this rank's tensors whatever layout saved them.
#include <cstdint>
#include <filesystem>
#include <optional>

#include "ckpt/training_checkpoint.h"
#include "core/file_lock.h"
#include "parallel/job_world.h"

namespace strata {

struct CheckpointSettings {
  std::filesystem::path run_dir;  // checkpoint.dir
  bool resume = false;            // checkpoint.resume
  int keep_last = 0;              // checkpoint.keep (0: every one)
};

class CheckpointManager {
 public:
  // Locks the run directory on the reporting rank and clears temporaries of saves killed midway.
  CheckpointManager(CheckpointSettings settings, JobWorld& world);

  // The checkpoint this run continues from, or none: a fresh start. Fails, naming the key, when
  // the directory holds an earlier run's checkpoints and checkpoint.resume is off.
  std::optional<std::filesystem::path> resume_point() const;

  // Every rank writes the pieces it holds of `tensors`; rank 0 commits. Prints the size and rate.
  void save(const TrainingCheckpoint& state, const std::vector<ParamSpec>& specs, const std::vector<ShardPiece>& pieces,
            const RankTensors& tensors);
  // Reads `checkpoint_dir`'s state and the boxes this rank's `pieces` cover into `tensors` (on the
  // host). Fails when it holds another model than `model`; prints the rate, and the layout it was
  // saved under when that is not `layout`.
  TrainingCheckpoint restore(const std::filesystem::path& checkpoint_dir, const ModelConfig& model,
                             const nlohmann::json& layout, const std::vector<ParamSpec>& specs,
                             const std::vector<HeldPiece>& pieces, const RankTensors& tensors);

 private:
  CheckpointSettings settings_;
  JobWorld& world_;
  std::optional<DirectoryLock> lock_;
};

}  // namespace strata
