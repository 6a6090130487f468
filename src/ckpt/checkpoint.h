#pragma once
// Checkpoint directories. A run directory holds one `step_XXXXXXXX` directory
// per saved step and a `latest` file naming the newest complete one. A
// checkpoint is built in a fresh temporary directory and renamed into place
// only once every file in it is durable, so a crash or error mid-save never
// changes the previous checkpoint or `latest`.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"

namespace strata {

inline constexpr std::string_view kCheckpointManifest = "checkpoint.json";
inline constexpr std::string_view kLatestPointer = "latest";

// File name (e.g. "model.safetensors") -> the tensors stored in it.
using CheckpointFiles = std::map<std::string, TensorMap>;

std::string checkpoint_dir_name(int64_t step);  // "step_00001000"

// Writes `files` and a manifest holding `step`, `metadata` and each file's
// size as run_dir/step_XXXXXXXX, then points run_dir/latest at it. With
// keep_last > 0, afterwards deletes all but the keep_last highest-step
// checkpoints (never the one just written). An existing directory of that
// step is replaced atomically (a run resumed from an earlier step saves it
// again). Callers own the run directory (RunDirectoryLock) while saving.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                      const CheckpointFiles& files, const nlohmann::json& metadata,
                                      int keep_last = 0);

// A checkpoint directory as is, or a run directory's newest complete
// checkpoint (manifest valid, every file present with its recorded size),
// which is the one `latest` names unless a save died between its rename and
// the update of `latest` (then a warning says which it took and why).
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);
bool has_checkpoints(const std::filesystem::path& run_dir);  // any step_* directory
// Deletes the temporary directories of saves that died (killed mid-save):
// only while holding the run directory, so that no live save is among them.
void remove_stale_temporaries(const std::filesystem::path& run_dir);

// A complete checkpoint, opened through resolve_checkpoint.
class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& path);

  const std::filesystem::path& dir() const { return dir_; }
  int64_t step() const { return step_; }
  const nlohmann::json& metadata() const { return metadata_; }
  const std::vector<std::string>& files() const { return files_; }

  SafetensorsReader open(const std::string& file) const;  // fails naming a missing file
  TensorMap load(const std::string& file) const;
  // Copies the file's tensors into `targets`. The names must match exactly,
  // and each tensor's dtype and shape must equal its target's.
  void load_into(const std::string& file, const TensorMap& targets) const;

 private:
  std::filesystem::path dir_;
  int64_t step_ = 0;
  nlohmann::json metadata_;
  std::vector<std::string> files_;
};

}  // namespace strata
