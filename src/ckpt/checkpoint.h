#pragma once
// Checkpoint directories. A run directory holds one `step_XXXXXXXX` directory
// per saved step and a `latest` file naming the newest complete one. A
// checkpoint is built in a fresh temporary directory and renamed into place
// only once every file in it is durable, so a crash or error mid-save never
// changes the previous checkpoint or `latest`.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "ckpt/stored_tensors.h"

namespace strata {

inline constexpr std::string_view kCheckpointManifest = "checkpoint.json";
inline constexpr std::string_view kLatestPointer = "latest";

// File name (e.g. "model.safetensors") -> the tensors stored in it.
using CheckpointFiles = std::map<std::string, TensorMap>;

std::string checkpoint_dir_name(int64_t step);  // "step_00001000"

// Writes `files` (each tensor a whole global tensor of that name) and a
// manifest holding `step`, `metadata`, each file's size and the tensors'
// index as run_dir/step_XXXXXXXX, then points run_dir/latest at it. With
// keep_last > 0, afterwards deletes all but the keep_last highest-step
// checkpoints (never the one just written). An existing directory of that
// step is replaced atomically (a run resumed from an earlier step saves it
// again). Callers own the run directory (RunDirectoryLock) while saving.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                      const CheckpointFiles& files, const nlohmann::json& metadata,
                                      int keep_last = 0);

// The same in steps, for a save that several processes write: the owner of
// the run directory begins it (a fresh temporary directory, whose name every
// writer knows: checkpoint_temp_dir), every writer puts its files there, each
// fsynced (write_safetensors does), and once all have, the owner commits: the
// manifest goes in last, then the directory is renamed into place and
// `latest` replaced, as save_checkpoint does. A failed save is abandoned
// (the temporary directory removed); the previous checkpoint and `latest`
// are never touched before the commit.
std::filesystem::path checkpoint_temp_dir(const std::filesystem::path& run_dir, int64_t step);
std::filesystem::path begin_checkpoint(const std::filesystem::path& run_dir, int64_t step);
std::filesystem::path commit_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                        const std::vector<std::string>& files, const TensorIndex& index,
                                        const nlohmann::json& metadata, int keep_last = 0);
void abandon_checkpoint(const std::filesystem::path& run_dir, int64_t step);

// A checkpoint directory as is, or a run directory's newest complete
// checkpoint (manifest valid, every file present with its recorded size),
// which is the one `latest` names unless a save died between its rename and
// the update of `latest` (then a warning says which it took and why).
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);
bool has_checkpoints(const std::filesystem::path& run_dir);  // any step_* directory
// Deletes the temporary directories of saves that died (killed mid-save):
// only while holding the run directory, so that no live save is among them.
void remove_stale_temporaries(const std::filesystem::path& run_dir);

// A complete checkpoint, opened through resolve_checkpoint. Opening checks
// the whole index against the files before anything is read: every file
// present, every piece's tensor in its file with the dtype of its global
// tensor and the shape of its box (errors name the tensor and the file), so
// a load never stops part-way for bad input. A checkpoint of manifest
// version 1 (one process, each tensor whole in its file) reads the same way.
class Checkpoint {
 public:
  explicit Checkpoint(const std::filesystem::path& path);

  const std::filesystem::path& dir() const { return dir_; }
  int64_t step() const { return step_; }
  const nlohmann::json& metadata() const { return metadata_; }
  const std::vector<std::string>& files() const { return files_; }
  const TensorIndex& tensors() const { return index_; }
  const StoredTensor& tensor(const std::string& name) const;  // fails naming it

  // Copies `box` of global tensor `name` into `destination` at
  // `destination_offsets`, from the pieces that overlap it. The dtypes must
  // be equal (no silent conversion); errors name the tensor.
  void read(const std::string& name, const TensorBox& box, Tensor& destination,
            const std::vector<int64_t>& destination_offsets) const;
  // All of global tensor `name` into `destination` of its shape.
  void read(const std::string& name, Tensor& destination) const;

  const SafetensorsReader& open(const std::string& file) const;  // fails naming a file not in it
  TensorMap load(const std::string& file) const;                  // a file's tensors, as stored

 private:
  std::filesystem::path dir_;
  int64_t step_ = 0;
  nlohmann::json metadata_;
  std::vector<std::string> files_;
  TensorIndex index_;
  std::map<std::string, std::shared_ptr<SafetensorsReader>> readers_;  // per file
};

}  // namespace strata
