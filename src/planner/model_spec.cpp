#include "planner/model_spec.h"

#include <filesystem>
#include <set>
#include <type_traits>

#include "core/error.h"
#include "core/file_io.h"
#include "core/toml_reader.h"

namespace strata {

namespace {

struct Preset {
  const char* name;
  int64_t n_layer, n_head, n_embd, vocab_size, block_size, global_batch;
};

// GPT-2 sizes as released by OpenAI (HuggingFace configs); GPT-3 175B and the
// 1T model as in Narayanan et al. (SC21) Table 1, with their batch sizes.
constexpr Preset kPresets[] = {
    {"gpt2-small", 12, 12, 768, 50257, 1024, 512},   {"gpt2-medium", 24, 16, 1024, 50257, 1024, 512},
    {"gpt2-large", 36, 20, 1280, 50257, 1024, 512},  {"gpt2-xl", 48, 25, 1600, 50257, 1024, 512},
    {"gpt3-175b", 96, 96, 12288, 51200, 2048, 1536}, {"gpt-1t", 128, 160, 25600, 51200, 2048, 3072},
};

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& preset : kPresets) names.emplace_back(preset.name);
  return names;
}

bool is_model_preset(const std::string& name) {
  for (const Preset& preset : kPresets) {
    if (name == preset.name) return true;
  }
  return false;
}

ModelSpec model_preset(const std::string& name) {
  for (const Preset& preset : kPresets) {
    if (name != preset.name) continue;
    ModelSpec spec;
    spec.name = preset.name;
    spec.config.n_layer = preset.n_layer;
    spec.config.n_head = preset.n_head;
    spec.config.n_embd = preset.n_embd;
    spec.config.vocab_size = preset.vocab_size;
    spec.config.block_size = preset.block_size;
    spec.global_batch = preset.global_batch;
    return spec;
  }
  std::string known;
  for (const std::string& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown model preset '{}' (presets: {}; or give a TOML file with a [model] table)", name, known);
}

ModelSpec parse_model_file(const std::string& toml_text, const std::string& source) {
  TomlReader fields = TomlReader::parse(toml_text, source);
  TomlReader model = fields.table("model");
  ModelSpec spec;
  spec.name = std::filesystem::path(source).stem().string();
  std::set<std::string> known = {"init_from"};
  for (const ModelField& field : model_fields(spec.config)) {
    known.insert(field.key);
    if (!model.has(field.key)) continue;
    std::visit(
        [&](auto* value) {
          using T = std::remove_pointer_t<decltype(value)>;
          if constexpr (std::is_same_v<T, int64_t>) *value = model.integer(field.key);
          else if constexpr (std::is_same_v<T, double>) *value = model.number(field.key);
          else if constexpr (std::is_same_v<T, std::string>) *value = model.string(field.key);
          else *value = model.boolean(field.key);
        },
        field.value);
  }
  model.only(known);
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size", "block_size"}) {
    if (!model.has(key)) fail("{}: key 'model.{}' is missing", source, key);
  }
  try {
    spec.config.validate();
  } catch (const Error& error) {
    fail("{}: {}", source, error.what());
  }
  TomlReader train = fields.table("train", false);
  if (train.has("global_batch")) spec.global_batch = train.integer("global_batch", 1);
  return spec;
}

ModelSpec load_model_spec(const std::string& name_or_path) {
  if (is_model_preset(name_or_path)) return model_preset(name_or_path);
  if (!std::filesystem::exists(name_or_path)) {
    std::string known;
    for (const std::string& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
    fail("model '{}' is neither a preset ({}) nor an existing TOML file", name_or_path, known);
  }
  return parse_model_file(read_text_file(name_or_path), name_or_path);
}

}  // namespace strata
