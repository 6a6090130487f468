#include "ckpt/hf_export.h"

#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/training_checkpoint.h"
#include "data/hf_tokenizer_files.h"
#include "data/tokenizer.h"
#include "core/error.h"
#include "core/file_io.h"
#include "model/family.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;


void export_hf(const Checkpoint& checkpoint, const fs::path& out, size_t max_shard_bytes) {
  if (max_shard_bytes == 0) fail("the largest shard size must be positive");
  std::error_code error;
  if (fs::exists(out) && !fs::is_empty(out, error)) fail("export directory '{}' is not empty", out.string());
  fs::create_directories(out, error);
  if (error) fail("cannot create export directory '{}': {}", out.string(), error.message());
  const TrainingCheckpoint state = read_training_checkpoint(checkpoint);
  const std::vector<ParamSpec> specs = model_param_specs(state.model);

  // Greedy shards in parameter order, as huggingface_hub splits a state dict.
  std::vector<std::vector<size_t>> shards(1);
  size_t shard_bytes = 0, total_bytes = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const size_t bytes = static_cast<size_t>(shape_numel(specs[i].shape)) * sizeof(float);
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  const size_t count = shards.size();
  json weight_map = json::object();
  for (size_t s = 0; s < count; ++s) {
    const std::string file =
        count == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, count);
    TensorMap tensors;
    for (size_t i : shards[s]) {
      Tensor tensor = Tensor::empty(specs[i].shape, DType::F32);
      checkpoint.read(specs[i].name, tensor);
      tensors[specs[i].name] = tensor;
      weight_map[specs[i].name] = file;
    }
    write_safetensors(out / file, tensors, {{"format", "pt"}});
  }
  if (count > 1) {
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    write_file_atomic(out / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  std::optional<Tokenizer> tokenizer;
  if (!state.tokenizer.empty() && fs::exists(state.tokenizer)) tokenizer = load_tokenizer(state.tokenizer);
  // The special ids are the run's tokenizer's, or null where it has none: a missing key would make
  // transformers take the family's stock ids (GPT-2's 50256), outside a small vocabulary.
  json config = model_family(state.model).to_hf_config(state.model);
  auto special = [&](int32_t id) { return id >= 0 ? json(id) : json(nullptr); };
  config["bos_token_id"] = special(tokenizer ? tokenizer->bos_id() : -1);
  config["eos_token_id"] = special(tokenizer ? tokenizer->eos_id() : -1);
  config["pad_token_id"] = special(tokenizer ? tokenizer->pad_id() : -1);
  write_file_atomic(out / "config.json", config.dump(2) + "\n");
  if (tokenizer) {
    const int64_t max_length =
        state.model.max_position_embeddings > 0 ? state.model.max_position_embeddings : state.model.block_size;
    write_hf_tokenizer_files(*tokenizer, out, max_length);
  }
}

}  // namespace strata
