#include "ckpt/training_checkpoint.h"

#include "core/json_file.h"

#include <type_traits>

#include "core/error.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";

// The parameters by the names model.safetensors stores them under.
TensorMap parameter_tensors(const ParameterSet& parameters) {
  TensorMap tensors;
  for (size_t i = 0; i < parameters.size(); ++i) tensors[parameters.spec(i).name] = parameters.tensor(i);
  return tensors;
}

CheckpointFiles checkpoint_files(const TrainingTensors& tensors) {
  CheckpointFiles files;
  files[kModelFile] = parameter_tensors(tensors.parameters);
  TensorMap& optimizer = files[kOptimizerFile];
  for (size_t i = 0; i < tensors.parameters.size(); ++i) {
    const std::string& name = tensors.parameters.spec(i).name;
    optimizer["exp_avg." + name] = tensors.first_moments.at(i);
    optimizer["exp_avg_sq." + name] = tensors.second_moments.at(i);
  }
  return files;
}

json model_json(const GPT2Config& model) {
  return {{"n_layer", model.n_layer},       {"n_head", model.n_head},         {"n_embd", model.n_embd},
          {"vocab_size", model.vocab_size}, {"block_size", model.block_size}, {"layer_norm_eps", model.layer_norm_eps}};
}

// The metadata's value at `pointer` (e.g. "/train_loader/shard") as T, or
// `fallback` where there is none; an error names the manifest and the key.
template <typename T>
T metadata_value(const Checkpoint& checkpoint, const std::string& pointer, std::optional<T> fallback = std::nullopt) {
  const json::json_pointer key(pointer);
  const json& metadata = checkpoint.metadata();
  const std::string manifest = (checkpoint.dir() / kCheckpointManifest).string();
  if (!metadata.contains(key)) {
    if (fallback) return *fallback;
    fail("'{}': metadata key {} is missing", manifest, pointer);
  }
  try {
    return metadata.at(key).get<T>();
  } catch (const json::exception&) {
    fail("'{}': metadata key {} is {}, expected a {}", manifest, pointer, json_excerpt(metadata.at(key)),
         std::is_same_v<T, std::string> ? "string" : "number");
  }
}

GPT2Config model_config(const Checkpoint& checkpoint) {
  GPT2Config config;
  config.n_layer = metadata_value<int64_t>(checkpoint, "/model/n_layer");
  config.n_head = metadata_value<int64_t>(checkpoint, "/model/n_head");
  config.n_embd = metadata_value<int64_t>(checkpoint, "/model/n_embd");
  config.vocab_size = metadata_value<int64_t>(checkpoint, "/model/vocab_size");
  config.block_size = metadata_value<int64_t>(checkpoint, "/model/block_size");
  config.layer_norm_eps = metadata_value<double>(checkpoint, "/model/layer_norm_eps");
  config.validate();
  return config;
}

}  // namespace

fs::path save_training_checkpoint(const fs::path& run_dir, const TrainingCheckpoint& state,
                                  const TrainingTensors& tensors, int keep_last) {
  json metadata{
      {"model", model_json(state.model)},
      {"tokenizer", state.tokenizer},
      {"seed", state.seed},
      {"rng", {{"kind", "philox4x32-10"}, {"seed", state.seed}, {"counter", 0}}},
      {"train_loader", {{"shard", state.train_loader.shard}, {"offset", state.train_loader.offset}}},
      {"optimizer_updates", state.optimizer_updates},
  };
  if (state.loss_scale) {
    metadata["loss_scale"] = {{"scale", state.loss_scale->scale}, {"finite_steps", state.loss_scale->finite_steps}};
  }
  return save_checkpoint(run_dir, state.step, checkpoint_files(tensors), metadata, keep_last);
}

TrainingCheckpoint read_training_checkpoint(const Checkpoint& checkpoint) {
  TrainingCheckpoint state;
  state.step = checkpoint.step();
  state.model = model_config(checkpoint);
  state.tokenizer = metadata_value<std::string>(checkpoint, "/tokenizer", "");
  state.seed = metadata_value<int64_t>(checkpoint, "/seed");
  state.train_loader = {metadata_value<int64_t>(checkpoint, "/train_loader/shard"),
                        metadata_value<int64_t>(checkpoint, "/train_loader/offset")};
  // Checkpoints from before loss scaling have neither of these.
  state.optimizer_updates = metadata_value<int64_t>(checkpoint, "/optimizer_updates", state.step);
  if (checkpoint.metadata().contains("loss_scale")) {
    state.loss_scale = LossScaleState{metadata_value<double>(checkpoint, "/loss_scale/scale", 1.0),
                                      metadata_value<int64_t>(checkpoint, "/loss_scale/finite_steps", 0)};
  }
  return state;
}

void load_training_parameters(const Checkpoint& checkpoint, ParameterSet& parameters) {
  checkpoint.load_into(kModelFile, parameter_tensors(parameters));
}

void load_training_tensors(const Checkpoint& checkpoint, const TrainingTensors& tensors) {
  for (const auto& [file, targets] : checkpoint_files(tensors)) checkpoint.load_into(file, targets);
}

}  // namespace strata
