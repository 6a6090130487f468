#include "ckpt/checkpoint_manager.h"

#include <chrono>
#include <variant>

#include <fmt/core.h>

#include "core/error.h"

namespace strata {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The [model] keys whose values differ, "model.n_embd = 64 there, 32 here": every key of
// model_fields, the list ModelConfig's equality covers.
std::string model_difference(ModelConfig there, ModelConfig here) {
  std::string text;
  const std::vector<ModelField> theirs = model_fields(there), ours = model_fields(here);
  for (size_t i = 0; i < ours.size(); ++i) {
    std::visit(
        [&](auto* value) {
          const auto& other = *std::get<decltype(value)>(theirs[i].value);
          if (other != *value) {
            text += fmt::format("{}model.{} = {} there, {} here", text.empty() ? "" : "; ", ours[i].key, other, *value);
          }
        },
        ours[i].value);
  }
  return text;
}

}  // namespace

CheckpointManager::CheckpointManager(CheckpointSettings settings, JobWorld& world)
    : settings_(std::move(settings)), world_(world) {
  if (!world_.reports()) return;
  lock_.emplace(settings_.run_dir, "run directory (checkpoint.dir)");
  remove_stale_temporaries(settings_.run_dir);  // the lock rules out live ones
}

std::optional<std::filesystem::path> CheckpointManager::resume_point() const {
  if (!has_checkpoints(settings_.run_dir)) return std::nullopt;
  if (!settings_.resume) {
    fail("key 'checkpoint.dir': '{}' already holds checkpoints of an earlier run; set checkpoint.resume = true "
         "to continue it, or choose another directory",
         settings_.run_dir.string());
  }
  return resolve_checkpoint(settings_.run_dir);
}

void CheckpointManager::save(const TrainingCheckpoint& state, const std::vector<ParamSpec>& specs,
                             const std::vector<ShardPiece>& pieces, const RankTensors& tensors) {
  const auto start = std::chrono::steady_clock::now();
  const std::filesystem::path saved =
      save_training_checkpoint(settings_.run_dir, state, specs, pieces, world_.rank(), tensors,
                               settings_.keep_last, [this](bool mine) { return world_.all_succeeded(mine); });
  const double seconds = seconds_since(start);
  if (!world_.reports()) return;
  double bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(saved)) bytes += static_cast<double>(entry.file_size());
  fmt::print("checkpoint {}: {:.1f} MiB in {:.3f} s ({:.0f} MB/s, every rank's files, fsynced)\n",
             saved.filename().string(), bytes / (1 << 20), seconds, bytes / seconds / 1e6);
}

TrainingCheckpoint CheckpointManager::restore(const std::filesystem::path& checkpoint_dir, const ModelConfig& model,
                                              const nlohmann::json& layout, const std::vector<ParamSpec>& specs,
                                              const std::vector<HeldPiece>& pieces, const RankTensors& tensors) {
  Checkpoint checkpoint(checkpoint_dir);
  TrainingCheckpoint state = read_training_checkpoint(checkpoint);
  if (state.model != model) {
    fail("checkpoint '{}' holds another model: {}", checkpoint.dir().string(), model_difference(state.model, model));
  }
  // Each rank reads the boxes its pieces cover, whatever layout saved them.
  const auto start = std::chrono::steady_clock::now();
  load_training_tensors(checkpoint, specs, pieces, tensors);
  const double seconds = seconds_since(start);
  double bytes = 0;
  for (const std::vector<Tensor>* kind : {&tensors.parameters, &tensors.first_moments, &tensors.second_moments}) {
    for (const Tensor& tensor : *kind) bytes += static_cast<double>(tensor.nbytes());
  }
  // Every rank reads its own boxes at once: the job's rate is all their bytes over the slowest.
  const double all_mib = world_.over_world(bytes / (1 << 20), comm::ReduceOp::Sum);
  const double slowest = world_.over_world(seconds, comm::ReduceOp::Max);
  if (world_.reports()) {
    fmt::print("resumed from {} at step {} (every rank read {:.1f} MiB in {:.3f} s, {:.0f} MB/s){}\n",
               checkpoint.dir().string(), state.step, all_mib, slowest, all_mib * (1 << 20) / slowest / 1e6,
               state.layout.is_object() && state.layout != layout
                   ? fmt::format(" (saved under {}, resharded to this run's layout)", state.layout.dump())
                   : "");
  }
  return state;
}

}  // namespace strata
