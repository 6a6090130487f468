#include "ckpt/hf_weights.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/json_file.h"
#include "model/family.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// The tensors of a weights file or model directory: each stored name with the file that holds it.
struct StoredWeights {
  std::vector<std::unique_ptr<SafetensorsReader>> files;
  std::map<std::string, const SafetensorsReader*> where;
};

StoredWeights open_weights(const fs::path& path) {
  StoredWeights weights;
  auto add_file = [&](const fs::path& file) {
    weights.files.push_back(std::make_unique<SafetensorsReader>(file));
    return weights.files.back().get();
  };
  if (!fs::is_directory(path)) {
    const SafetensorsReader* file = add_file(path);
    for (const auto& [name, entry] : file->entries()) weights.where[name] = file;
    return weights;
  }
  const fs::path index_path = path / "model.safetensors.index.json";
  if (!fs::exists(index_path)) {
    if (!fs::exists(path / "model.safetensors")) {
      fail("'{}' holds neither model.safetensors nor model.safetensors.index.json", path.string());
    }
    return open_weights(path / "model.safetensors");
  }
  const nlohmann::json index = read_json_file(index_path);
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail("{}: key 'weight_map' is missing or not an object", index_path.string());
  }
  std::map<std::string, const SafetensorsReader*> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) fail("{}: weight_map['{}'] must be a file name", index_path.string(), name);
    const std::string file_name = file.get<std::string>();
    if (file_name.find('/') != std::string::npos) {
      fail("{}: weight_map['{}'] names '{}', not a file of this directory", index_path.string(), name, file_name);
    }
    auto [at, fresh] = by_file.emplace(file_name, nullptr);
    if (fresh) at->second = add_file(path / file_name);
    if (!at->second->contains(name)) {
      fail("{}: weight_map puts tensor '{}' in '{}', which has no such tensor", index_path.string(), name, file_name);
    }
    weights.where[name] = at->second;
  }
  // A shard's tensor the index does not list would be silently ignored by transformers: refuse it.
  for (const auto& [file_name, file] : by_file) {
    for (const auto& [name, entry] : file->entries()) {
      if (weights.where.at(name) != file) {
        fail("{}: tensor '{}' is in '{}' but the index does not list it there", index_path.string(), name, file_name);
      }
    }
  }
  return weights;
}

std::string location(const SafetensorsReader& file) { return file.path().string(); }

Tensor load_finite(const SafetensorsReader& file, const std::string& stored) {
  const SafetensorsEntry& entry = file.entry(stored);
  if (!is_floating(entry.dtype)) {
    fail("{}: tensor '{}' has dtype {}, expected a floating-point type", location(file), stored,
         dtype_name(entry.dtype));
  }
  Tensor values = file.load(stored).to(DType::F32);
  const float* data = values.data<float>();
  for (int64_t i = 0; i < values.numel(); ++i) {
    if (!std::isfinite(data[i])) {
      fail("{}: tensor '{}' holds a non-finite value ({}) at element {}", location(file), stored, data[i], i);
    }
  }
  return values;
}

}  // namespace

namespace {

// What load_hf_weights has put where, by the file's names: parameters loaded whole, and the slices of
// parameters stacked over experts, expert by expert.
struct Loaded {
  std::map<std::string, std::string> whole;
  std::map<std::string, std::map<int64_t, std::string>> experts;
};

// One expert's tensor into its slice of the stacked parameter, its index and shape checked.
void load_expert_slice(const SafetensorsReader& file, const std::string& stored, const ModelFamily::ExpertSlice& slice,
                       const std::map<std::string, size_t>& index_of, ParameterSet& params, Loaded& loaded,
                       std::string_view family) {
  auto found = index_of.find(slice.parameter);
  if (found == index_of.end()) {
    fail("{}: tensor '{}' is not a parameter of the configured {} model", location(file), stored, family);
  }
  Tensor& stacked = params.tensor(found->second);
  const int64_t experts = stacked.shape()[0];
  if (slice.expert >= experts) {
    fail("{}: tensor '{}' is expert {}, but the config has {} experts (model.num_experts)", location(file), stored,
         slice.expert, experts);
  }
  const Shape expected(stacked.shape().begin() + 1, stacked.shape().end());
  if (file.entry(stored).shape != expected) {
    fail("{}: tensor '{}' has shape {}, the config (model.*) implies {}", location(file), stored,
         shape_str(file.entry(stored).shape), shape_str(expected));
  }
  if (auto [previous, fresh] = loaded.experts[slice.parameter].emplace(slice.expert, stored); !fresh) {
    fail("{}: tensors '{}' and '{}' are both expert {} of parameter '{}': keep one", location(file), previous->second,
         stored, slice.expert, slice.parameter);
  }
  Shape one_expert = expected;
  one_expert.insert(one_expert.begin(), 1);
  stacked.narrow(0, slice.expert, 1).copy_from(load_finite(file, stored).reshape(one_expert));
}

// transformers' packed experts: each stacked parameter `stored` packs gets its rows along the second dim.
void load_packed_experts(const SafetensorsReader& file, const std::string& stored,
                         const std::vector<std::string>& parameters, const std::map<std::string, size_t>& index_of,
                         ParameterSet& params, Loaded& loaded, std::string_view family) {
  std::vector<size_t> indices;
  Shape expected;
  int64_t rows = 0;
  for (const std::string& parameter : parameters) {
    auto found = index_of.find(parameter);
    if (found == index_of.end()) {
      fail("{}: tensor '{}' packs '{}', not a parameter of the configured {} model", location(file), stored,
           parameter, family);
    }
    indices.push_back(found->second);
    expected = params.spec(found->second).shape;
    rows += expected.at(1);
  }
  expected[1] = rows;
  if (file.entry(stored).shape != expected) {
    fail("{}: tensor '{}' has shape {}, the config (model.*) implies {} (every expert's {} packed)", location(file),
         stored, shape_str(file.entry(stored).shape), shape_str(expected), fmt::join(parameters, " and "));
  }
  const Tensor packed = load_finite(file, stored);
  const int64_t experts = expected[0], row = shape_numel(expected) / (experts * rows);
  int64_t offset = 0;
  for (size_t p = 0; p < indices.size(); ++p) {
    if (auto [previous, fresh] = loaded.whole.emplace(parameters[p], stored); !fresh) {
      fail("{}: tensors '{}' and '{}' are both parameter '{}': keep one", location(file), previous->second, stored,
           parameters[p]);
    }
    Tensor& stacked = params.tensor(indices[p]);
    const int64_t own = stacked.shape()[1];
    for (int64_t e = 0; e < experts; ++e) {
      std::memcpy(stacked.data<float>() + e * own * row, packed.data<float>() + (e * rows + offset) * row,
                  static_cast<size_t>(own * row) * sizeof(float));
    }
    offset += own;
  }
}

// A stored lm_head.weight of a tied model: equal to the embedding, as stored.
void check_tied_head(const SafetensorsReader& file, const Tensor& embedding, const std::string& tied) {
  if (file.entry("lm_head.weight").shape != embedding.shape()) {
    fail("{}: tensor 'lm_head.weight' has shape {}, but it is tied to {} {}", location(file),
         shape_str(file.entry("lm_head.weight").shape), tied, shape_str(embedding.shape()));
  }
  const Tensor head = load_finite(file, "lm_head.weight");
  // Equal as stored: the embedding went through the same conversion to f32.
  for (int64_t i = 0; i < head.numel(); ++i) {
    if (head.data<float>()[i] != embedding.data<float>()[i]) {
      fail("{}: tensor 'lm_head.weight' differs from {} at element {} ({} vs {}), but model.tie_word_embeddings "
           "is true; set it to false to load an untied head",
           location(file), tied, i, head.data<float>()[i], embedding.data<float>()[i]);
    }
  }
}

// Every parameter loaded, whole or (stacked over experts) every expert's slice, and not both.
void expect_every_parameter(const fs::path& path, const ModelFamily& family, const ParameterSet& params,
                            const Loaded& loaded) {
  for (const ParamSpec& spec : params.specs()) {
    auto sliced = loaded.experts.find(spec.name);
    const bool whole = loaded.whole.count(spec.name) != 0;
    if (sliced == loaded.experts.end()) {
      if (!whole) fail("{}: tensor '{}' is missing", path.string(), spec.name);
      continue;
    }
    if (whole) {
      fail("{}: tensors '{}' and '{}' are both parameter '{}' (all experts, and expert {} alone): keep one spelling",
           path.string(), loaded.whole.at(spec.name), sliced->second.begin()->second, spec.name,
           sliced->second.begin()->first);
    }
    for (int64_t expert = 0; expert < spec.shape[0]; ++expert) {
      if (!sliced->second.count(expert)) {
        fail("{}: tensor '{}' is missing (expert {} of the {} that model.num_experts gives)", path.string(),
             family.hf_tensor_of_expert_slice(spec.name, expert), expert, spec.shape[0]);
      }
    }
  }
}

}  // namespace

void load_hf_weights(const fs::path& path, const ModelConfig& config, ParameterSet& params) {
  const ModelFamily& family = model_family(config);
  const StoredWeights weights = open_weights(path);
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < params.size(); ++i) index_of[params.spec(i).name] = i;
  const std::string tied = family.tied_embedding(config);
  Loaded loaded;
  const SafetensorsReader* tied_head = nullptr;
  for (const auto& [stored, file] : weights.where) {
    if (const auto slice = family.expert_slice_of_hf_tensor(stored)) {
      load_expert_slice(*file, stored, *slice, index_of, params, loaded, family.name());
      continue;
    }
    if (const auto packed = family.parameters_of_packed_experts(stored); !packed.empty()) {
      load_packed_experts(*file, stored, packed, index_of, params, loaded, family.name());
      continue;
    }
    const std::string name = family.parameter_of_hf_tensor(stored);
    if (name.empty()) continue;
    if (name == "lm_head.weight" && !tied.empty() && !index_of.count(name)) {
      tied_head = file;  // checked against the embedding once that is loaded
      continue;
    }
    auto found = index_of.find(name);
    if (found == index_of.end()) {
      fail("{}: tensor '{}' is not a parameter of the configured {} model", location(*file), stored, family.name());
    }
    const Shape& expected = params.spec(found->second).shape;
    if (file->entry(stored).shape != expected) {
      fail("{}: tensor '{}' has shape {}, the config (model.*) implies {}", location(*file), stored,
           shape_str(file->entry(stored).shape), shape_str(expected));
    }
    // The same tensor under both spellings: which one is meant is anyone's guess.
    if (auto [previous, fresh] = loaded.whole.emplace(name, stored); !fresh) {
      fail("{}: tensors '{}' and '{}' are both parameter '{}': keep one", location(*file), previous->second, stored,
           name);
    }
    params.tensor(found->second).copy_from(load_finite(*file, stored));
  }
  expect_every_parameter(path, family, params, loaded);
  if (tied_head) check_tied_head(*tied_head, params.get(tied), tied);
}

void save_hf_weights(const fs::path& path, const ParameterSet& params) {
  TensorMap tensors;
  for (size_t i = 0; i < params.size(); ++i) tensors[params.spec(i).name] = params.tensor(i);
  write_safetensors(path, tensors, {{"format", "pt"}});
}

}  // namespace strata
