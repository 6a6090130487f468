#pragma once
// A training run's checkpoint: the one place that knows which files of a
// checkpoint directory (checkpoint.h) hold what, and the metadata's keys.
//
//   model.safetensors      the parameters, by their HuggingFace GPT-2 names
//   optimizer.safetensors  AdamW's moments: exp_avg.<name>, exp_avg_sq.<name>
//   checkpoint.json        metadata: model, tokenizer, seed, rng, train_loader,
//                          optimizer_updates, loss_scale
//
// The trainer saves and resumes through it; `strata sample` loads the model.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "data/token_loader.h"
#include "model/gpt2_config.h"
#include "model/parameters.h"

namespace strata {

struct LossScaleState {
  double scale = 1;
  int64_t finite_steps = 0;  // finite steps in a row since the scale last changed
};

// What a training checkpoint records beside its tensors.
struct TrainingCheckpoint {
  int64_t step = 0;  // completed optimizer steps
  GPT2Config model;
  std::string tokenizer;  // the corpus's SentencePiece model; empty when none was recorded
  int64_t seed = 0;
  LoaderPosition train_loader;               // where the next training batch starts
  int64_t optimizer_updates = 0;             // AdamW's step count: steps skipped for overflow do not count
  std::optional<LossScaleState> loss_scale;  // absent in checkpoints from before loss scaling
};

// The tensors of a training checkpoint where their owners keep them: saving
// writes them, loading copies into them. The moments are in parameter order.
struct TrainingTensors {
  ParameterSet& parameters;
  std::vector<Tensor>& first_moments;   // AdamW's exp_avg
  std::vector<Tensor>& second_moments;  // AdamW's exp_avg_sq
};

// Saves `state` and `tensors` as run_dir/step_XXXXXXXX through save_checkpoint
// (crash-safe; with keep_last > 0, older checkpoints beyond it are deleted).
std::filesystem::path save_training_checkpoint(const std::filesystem::path& run_dir, const TrainingCheckpoint& state,
                                               const TrainingTensors& tensors, int keep_last);

// The checkpoint's step and metadata; fails naming its manifest and the key
// that is missing or malformed.
TrainingCheckpoint read_training_checkpoint(const Checkpoint& checkpoint);

// Copy the checkpoint's tensors into existing ones, which must match them
// exactly in names, dtypes and shapes (load_into): the parameters alone (built
// from the checkpoint's model config), or the parameters and AdamW's moments.
void load_training_parameters(const Checkpoint& checkpoint, ParameterSet& parameters);
void load_training_tensors(const Checkpoint& checkpoint, const TrainingTensors& tensors);

}  // namespace strata
