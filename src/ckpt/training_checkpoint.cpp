#include "ckpt/training_checkpoint.h"

#include "core/json_file.h"

#include <algorithm>
#include <exception>
#include <set>
#include <type_traits>
#include <variant>

#include "core/error.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

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
         std::is_same_v<T, std::string> ? "string" : std::is_same_v<T, bool> ? "boolean" : "number");
  }
}

// The model keys every checkpoint has: those from before model families hold GPT-2 and these alone, so
// any other key missing keeps its default.
const std::set<std::string> kKeysOfEveryCheckpoint = {"n_layer",    "n_head",     "n_embd",
                                                      "vocab_size", "block_size", "layer_norm_eps"};

// The inverse of model_config_json, field by field.
ModelConfig model_config(const Checkpoint& checkpoint) {
  ModelConfig config;
  for (const ModelField& field : model_fields(config)) {
    std::visit(
        [&](auto* value) {
          using Value = std::remove_pointer_t<decltype(value)>;
          const std::string pointer = std::string("/model").append(field.json_pointer());
          *value = kKeysOfEveryCheckpoint.count(field.key) ? metadata_value<Value>(checkpoint, pointer)
                                                           : metadata_value<Value>(checkpoint, pointer, *value);
        },
        field.value);
  }
  config.validate();
  return config;
}

}  // namespace

json training_metadata(const TrainingCheckpoint& state) {
  json metadata{
      {"model", model_config_json(state.model)},
      {"tokenizer", state.tokenizer},
      {"seed", state.seed},
      {"rng", {{"kind", "philox4x32-10"}, {"seed", state.seed}, {"counter", 0}}},
      {"train_loader", {{"shard", state.train_loader.shard}, {"offset", state.train_loader.offset}}},
      {"optimizer_updates", state.optimizer_updates},
      {"layout", state.layout},
  };
  if (state.loss_scale) {
    metadata["loss_scale"] = {{"scale", state.loss_scale->scale}, {"finite_steps", state.loss_scale->finite_steps}};
  }
  return metadata;
}

namespace {

// This rank's pieces, by key: the parameters' and, under prefixed keys, the moments'.
TensorMap rank_pieces(const std::vector<ShardPiece>& pieces, int world_rank, const RankTensors& tensors) {
  TensorMap written;
  for (const ShardPiece& piece : pieces) {
    if (piece.writer != world_rank) continue;
    auto held = std::find(tensors.held.begin(), tensors.held.end(), piece.param);
    STRATA_CHECK(held != tensors.held.end(), "rank {} writes a piece of parameter {}, which it does not hold",
                 world_rank, piece.param);
    const size_t k = static_cast<size_t>(held - tensors.held.begin());
    for (size_t kind = 0; kind < kTrainingTensorPrefixes.size(); ++kind) {
      const std::string& prefix = kTrainingTensorPrefixes[kind];
      const Tensor& shard = tensors.of_kind(kind).at(k);
      if (piece.box.lengths == shard.shape()) {
        written[prefix + piece.key] = shard;
        continue;
      }
      Tensor box = Tensor::empty(piece.box.lengths, shard.dtype());
      copy_box(shard, piece.shard_offsets, box, std::vector<int64_t>(box.shape().size(), 0), piece.box.lengths);
      written[prefix + piece.key] = box;
    }
  }
  return written;
}

}  // namespace

TensorIndex training_index(const std::vector<ParamSpec>& specs, const std::vector<ShardPiece>& pieces,
                           std::vector<std::string>& files) {
  TensorIndex index;
  for (const ShardPiece& piece : pieces) {
    const std::string file = rank_file(piece.writer);
    if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
    for (const std::string& prefix : kTrainingTensorPrefixes) {
      StoredTensor& tensor = index[prefix + specs[piece.param].name];
      tensor.shape = specs[piece.param].shape;
      tensor.dtype = DType::F32;
      tensor.pieces.push_back({file, prefix + piece.key, piece.box});
    }
  }
  std::sort(files.begin(), files.end());
  return index;
}

namespace {

// Runs `part` on the ranks `runs_here` says, then agrees over every rank: the first failure is
// rethrown where it happened, and every other rank fails naming what failed.
void in_step(bool runs_here, const std::function<void()>& part, const std::function<bool(bool)>& all_succeeded,
             const std::string& what) {
  std::exception_ptr failure;
  if (runs_here) {
    try {
      part();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (all_succeeded(!failure)) return;
  if (failure) std::rethrow_exception(failure);
  fail("checkpoint save failed: {} failed on another rank (its error is in that rank's output)", what);
}

}  // namespace

fs::path save_training_checkpoint(const fs::path& run_dir, const TrainingCheckpoint& state,
                                  const std::vector<ParamSpec>& specs, const std::vector<ShardPiece>& pieces,
                                  int world_rank, const RankTensors& tensors, int keep_last,
                                  const std::function<bool(bool)>& all_succeeded) {
  const bool owner = world_rank == 0;
  in_step(owner, [&] { begin_checkpoint(run_dir, state.step); }, all_succeeded, "starting it");
  const fs::path temp_dir = checkpoint_temp_dir(run_dir, state.step);
  const TensorMap mine = rank_pieces(pieces, world_rank, tensors);
  try {
    in_step(!mine.empty(), [&] { write_safetensors(temp_dir / rank_file(world_rank), mine); }, all_succeeded,
            "writing a rank's pieces");
  } catch (...) {
    if (owner) abandon_checkpoint(run_dir, state.step);
    throw;
  }
  fs::path committed;
  in_step(owner, [&] {
    std::vector<std::string> files;
    const TensorIndex index = training_index(specs, pieces, files);
    committed = commit_checkpoint(run_dir, state.step, files, index, training_metadata(state), keep_last);
  }, all_succeeded, "committing it");
  return owner ? committed : run_dir / checkpoint_dir_name(state.step);
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
  state.layout = checkpoint.metadata().value("layout", json());
  if (checkpoint.metadata().contains("loss_scale")) {
    state.loss_scale = LossScaleState{metadata_value<double>(checkpoint, "/loss_scale/scale", 1.0),
                                      metadata_value<int64_t>(checkpoint, "/loss_scale/finite_steps", 0)};
  }
  return state;
}

void check_training_tensors(const Checkpoint& checkpoint, const std::vector<ParamSpec>& specs,
                            const std::vector<size_t>& params) {
  for (size_t param : params) {
    for (const std::string& prefix : kTrainingTensorPrefixes) {
      const std::string name = prefix + specs.at(param).name;
      const StoredTensor& stored = checkpoint.tensor(name);
      if (stored.shape != specs[param].shape || stored.dtype != DType::F32) {
        fail("checkpoint '{}': tensor '{}' is {} {}, but this model's is F32 {}", checkpoint.dir().string(), name,
             safetensors_dtype_name(stored.dtype), shape_str(stored.shape), shape_str(specs[param].shape));
      }
    }
  }
}

void load_training_tensors(const Checkpoint& checkpoint, const std::vector<ParamSpec>& specs,
                           const std::vector<HeldPiece>& pieces, const RankTensors& tensors) {
  check_training_tensors(checkpoint, specs, tensors.held);  // before any read: nothing is loaded partially
  // Kind by kind, so that reads move forward through each file (which stores the kinds apart).
  for (size_t kind = 0; kind < kTrainingTensorPrefixes.size(); ++kind) {
    for (size_t k = 0; k < tensors.held.size(); ++k) {
      const size_t param = tensors.held[k];
      const std::string name = kTrainingTensorPrefixes[kind] + specs[param].name;
      Tensor destination = tensors.of_kind(kind).at(k);  // a view sharing the caller's buffer
      for (const ShardBox& box : pieces.at(param).boxes) {
        checkpoint.read(name, box.full, destination, box.shard_offsets);
      }
    }
  }
}

void load_training_parameters(const Checkpoint& checkpoint, ParameterSet& parameters) {
  for (size_t i = 0; i < parameters.size(); ++i) {
    Tensor destination = parameters.tensor(i);
    checkpoint.read(parameters.spec(i).name, destination);
  }
}

}  // namespace strata
