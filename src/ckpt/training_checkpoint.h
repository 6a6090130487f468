#pragma once
// A training run's checkpoint: the one place that knows which global tensors
// a checkpoint directory (checkpoint.h) holds and what its metadata means.
//
//   <name>                 every parameter, by its HuggingFace name (f32)
//   exp_avg.<name>         AdamW's first moments
//   exp_avg_sq.<name>      and second moments
//   rank_XXXXX.safetensors the pieces each rank wrote (shard_plan.h)
//   checkpoint.json        the index of the pieces, and metadata: model,
//                          tokenizer, seed, rng, train_loader,
//                          optimizer_updates, loss_scale, layout
//
// Every rank of a layout writes the pieces it is given and reads the boxes
// its own shards cover, from a checkpoint saved under any layout (one
// process's too, of either manifest version). `strata sample` loads the model.
#include <cstdint>
#include <functional>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/shard_plan.h"
#include "data/token_loader.h"
#include "model/model_config.h"
#include "model/parameters.h"
#include "parallel/parameter_placement.h"

namespace strata {

struct LossScaleState {
  double scale = 1;
  int64_t finite_steps = 0;  // finite steps in a row since the scale last changed
};

// What a training checkpoint records beside its tensors.
struct TrainingCheckpoint {
  int64_t step = 0;  // completed optimizer steps
  ModelConfig model;
  std::string tokenizer;  // the corpus's SentencePiece model; empty when none was recorded
  int64_t seed = 0;
  LoaderPosition train_loader;               // where the next training batch starts
  int64_t optimizer_updates = 0;             // AdamW's step count: steps skipped for overflow do not count
  std::optional<LossScaleState> loss_scale;  // absent in checkpoints from before loss scaling
  nlohmann::json layout;  // what it was saved under (parallel.*), for reports; null in older checkpoints
};

// What one rank holds: the parameters `held` (indices into the model's
// specs, in the rank's order) and, per held parameter, its tensor and AdamW's
// moments, each of its tensor-parallel shard's shape (whole moments: under
// ZeRO the caller sums its data-parallel group's shares first).
struct RankTensors {
  std::vector<size_t> held;
  std::vector<Tensor> parameters;
  std::vector<Tensor> first_moments;   // AdamW's exp_avg
  std::vector<Tensor> second_moments;  // AdamW's exp_avg_sq

  // By kind, in kTrainingTensorPrefixes' order.
  const std::vector<Tensor>& of_kind(size_t kind) const {
    return kind == 0 ? parameters : kind == 1 ? first_moments : second_moments;
  }
};

// Saves as run_dir/step_XXXXXXXX, called by every rank of the job alike:
// world rank 0 (which owns the run directory) begins the save, every rank
// writes the pieces `pieces` gives it (writer == world_rank) from `tensors`
// into its rank file, and once all have, rank 0 commits the index and
// metadata (and, with keep_last > 0, deletes older checkpoints beyond it).
// `all_succeeded(mine)` is a barrier over every rank returning whether all
// passed true: a failure on any rank fails the save on every rank, and leaves
// the previous checkpoint and `latest` as they were.
std::filesystem::path save_training_checkpoint(const std::filesystem::path& run_dir, const TrainingCheckpoint& state,
                                               const std::vector<ParamSpec>& specs,
                                               const std::vector<ShardPiece>& pieces, int world_rank,
                                               const RankTensors& tensors, int keep_last,
                                               const std::function<bool(bool)>& all_succeeded);

// The global tensors kept per parameter: the parameter itself and AdamW's two
// moments, under these prefixes of its name.
inline const std::vector<std::string> kTrainingTensorPrefixes = {"", "exp_avg.", "exp_avg_sq."};

// Fails, naming the tensor, unless the checkpoint holds every kind of tensor
// of parameters `params` (indices into `specs`) as f32 of the spec's shape.
void check_training_tensors(const Checkpoint& checkpoint, const std::vector<ParamSpec>& specs,
                            const std::vector<size_t>& params);

// The manifest's metadata for `state`, and the index of `pieces` (each in its
// writer's rank file; `files` receives those files, sorted).
nlohmann::json training_metadata(const TrainingCheckpoint& state);
TensorIndex training_index(const std::vector<ParamSpec>& specs, const std::vector<ShardPiece>& pieces,
                           std::vector<std::string>& files);

// The checkpoint's step and metadata; fails naming its manifest and the key
// that is missing or malformed.
TrainingCheckpoint read_training_checkpoint(const Checkpoint& checkpoint);

// Reads into `tensors` the boxes of the held parameters and their moments
// that `pieces` (this rank's piece of every parameter) cover. The checkpoint
// must hold the model `specs` describes; errors name the tensor.
void load_training_tensors(const Checkpoint& checkpoint, const std::vector<ParamSpec>& specs,
                           const std::vector<HeldPiece>& pieces, const RankTensors& tensors);
// The whole parameters alone (built from the checkpoint's model config).
void load_training_parameters(const Checkpoint& checkpoint, ParameterSet& parameters);

}  // namespace strata
