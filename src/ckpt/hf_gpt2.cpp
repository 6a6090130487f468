#include "ckpt/hf_gpt2.h"

#include <cmath>
#include <map>

#include "ckpt/safetensors.h"

namespace strata {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void load_gpt2_weights(const std::filesystem::path& path, ParameterSet& params) {
  SafetensorsReader reader(path);
  std::map<std::string, std::string> loaded;  // parameter -> the file's name for it
  for (const auto& [file_name, entry] : reader.entries()) {
    std::string name = file_name.rfind("transformer.", 0) == 0 ? file_name : "transformer." + file_name;
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;  // causal-mask buffers
    if (file_name == "lm_head.weight") {  // tied to wte: must agree in shape, the values are wte's
      if (entry.shape != params.get("transformer.wte.weight").shape()) {
        fail("{}: tensor 'lm_head.weight' has shape {}, but it is tied to transformer.wte.weight {}", path.string(),
             shape_str(entry.shape), shape_str(params.get("transformer.wte.weight").shape()));
      }
      continue;
    }
    size_t index = params.size();
    for (size_t i = 0; i < params.size(); ++i) {
      if (params.spec(i).name == name) index = i;
    }
    if (index == params.size()) {
      fail("{}: tensor '{}' is not a parameter of the configured GPT-2 model", path.string(), file_name);
    }
    const Shape& expected = params.spec(index).shape;
    if (entry.shape != expected) {
      fail("{}: tensor '{}' has shape {}, the config (model.*) implies {}", path.string(), file_name,
           shape_str(entry.shape), shape_str(expected));
    }
    if (!is_floating(entry.dtype)) {
      fail("{}: tensor '{}' has dtype {}, expected a floating-point type", path.string(), file_name,
           dtype_name(entry.dtype));
    }
    // The same tensor under both spellings: which one is meant is anyone's guess.
    if (auto [previous, fresh] = loaded.emplace(name, file_name); !fresh) {
      fail("{}: tensors '{}' and '{}' are both parameter '{}': keep one", path.string(), previous->second,
           file_name, name);
    }
    Tensor values = reader.load(file_name).to(DType::F32);
    const float* data = values.data<float>();
    for (int64_t i = 0; i < values.numel(); ++i) {
      if (!std::isfinite(data[i])) {
        fail("{}: tensor '{}' holds a non-finite value ({}) at element {}", path.string(), file_name, data[i], i);
      }
    }
    params.tensor(index).copy_from(values);
  }
  for (const ParamSpec& spec : params.specs()) {
    if (!loaded.count(spec.name)) fail("{}: tensor '{}' is missing", path.string(), spec.name);
  }
}

void save_gpt2_weights(const std::filesystem::path& path, const ParameterSet& params) {
  TensorMap tensors;
  for (size_t i = 0; i < params.size(); ++i) tensors[params.spec(i).name] = params.tensor(i);
  write_safetensors(path, tensors, {{"format", "pt"}});
}

}  // namespace strata
