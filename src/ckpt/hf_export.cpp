#include "ckpt/hf_export.h"

#include <map>
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

namespace {

// One tensor of the export: a parameter, or one expert's slice of a parameter stacked over the experts
// (the Hub stores experts.{e}.w1.weight where Strata stacks experts.w1.weight).
struct ExportedTensor {
  std::string name;  // as HuggingFace stores it
  size_t parameter = 0;
  int64_t expert = -1;  // the slice along the parameter's first dim; -1: the whole parameter
  size_t bytes = 0;
};

std::vector<ExportedTensor> exported_tensors(const ModelFamily& family, const std::vector<ParamSpec>& specs) {
  std::vector<ExportedTensor> tensors;
  for (size_t i = 0; i < specs.size(); ++i) {
    const size_t bytes = static_cast<size_t>(shape_numel(specs[i].shape)) * sizeof(float);
    if (!family.stacked_over_experts(specs[i].name)) {
      tensors.push_back({specs[i].name, i, -1, bytes});
      continue;
    }
    const int64_t experts = specs[i].shape.at(0);
    const size_t slice_bytes = bytes / static_cast<size_t>(experts);
    for (int64_t e = 0; e < experts; ++e) {
      tensors.push_back({family.hf_tensor_of_expert_slice(specs[i].name, e), i, e, slice_bytes});
    }
  }
  return tensors;
}

// Greedy shards in order, as huggingface_hub splits a state dict: indices into `tensors`.
std::vector<std::vector<size_t>> plan_shards(const std::vector<ExportedTensor>& tensors, size_t max_shard_bytes) {
  std::vector<std::vector<size_t>> shards(1);
  size_t shard_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!shards.back().empty() && shard_bytes + tensors[i].bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += tensors[i].bytes;
  }
  return shards;
}

// A shard's tensors read from the checkpoint, each parameter once however many experts' slices it gives.
TensorMap read_shard(const Checkpoint& checkpoint, const std::vector<ParamSpec>& specs,
                     const std::vector<ExportedTensor>& tensors, const std::vector<size_t>& shard) {
  std::map<size_t, Tensor> parameters;
  TensorMap out;
  for (size_t i : shard) {
    const ExportedTensor& exported = tensors[i];
    const ParamSpec& spec = specs[exported.parameter];
    auto [parameter, fresh] = parameters.try_emplace(exported.parameter);
    if (fresh) {
      parameter->second = Tensor::empty(spec.shape, DType::F32);
      checkpoint.read(spec.name, parameter->second);
    }
    if (exported.expert < 0) {
      out[exported.name] = parameter->second;
      continue;
    }
    const Shape one_expert(spec.shape.begin() + 1, spec.shape.end());
    out[exported.name] = parameter->second.narrow(0, exported.expert, 1).reshape(one_expert).clone();
  }
  return out;
}

}  // namespace

void export_hf(const Checkpoint& checkpoint, const fs::path& out, size_t max_shard_bytes) {
  if (max_shard_bytes == 0) fail("the largest shard size must be positive");
  std::error_code error;
  if (fs::exists(out) && !fs::is_empty(out, error)) fail("export directory '{}' is not empty", out.string());
  fs::create_directories(out, error);
  if (error) fail("cannot create export directory '{}': {}", out.string(), error.message());
  const TrainingCheckpoint state = read_training_checkpoint(checkpoint);
  const std::vector<ParamSpec> specs = model_param_specs(state.model);
  const std::vector<ExportedTensor> tensors = exported_tensors(model_family(state.model), specs);
  const std::vector<std::vector<size_t>> shards = plan_shards(tensors, max_shard_bytes);
  size_t total_bytes = 0;
  for (const ExportedTensor& tensor : tensors) total_bytes += tensor.bytes;
  const size_t count = shards.size();
  json weight_map = json::object();
  for (size_t s = 0; s < count; ++s) {
    const std::string file =
        count == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, count);
    for (size_t i : shards[s]) weight_map[tensors[i].name] = file;
    write_safetensors(out / file, read_shard(checkpoint, specs, tensors, shards[s]), {{"format", "pt"}});
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
