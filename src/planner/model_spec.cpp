#include "planner/model_spec.h"

#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "core/toml_reader.h"
#include "model/hf_model_dir.h"

namespace strata {

namespace {

struct Preset {
  const char* name;
  ModelConfig config;
  int64_t global_batch;
};

ModelConfig gpt(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t vocab_size, int64_t block_size) {
  ModelConfig c;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.vocab_size = vocab_size;
  c.block_size = block_size;
  return c;
}

ModelConfig llama(int64_t n_layer, int64_t n_head, int64_t n_kv_head, int64_t n_embd, int64_t intermediate,
                  int64_t vocab_size, int64_t block_size, double rope_theta, bool tied) {
  ModelConfig c = gpt(n_layer, n_head, n_embd, vocab_size, block_size);
  c.family = "llama";
  c.n_kv_head = n_kv_head;
  c.intermediate_size = intermediate;
  c.rope_theta = rope_theta;
  c.tie_word_embeddings = tied;
  return c;
}

// GPT-2 sizes as released by OpenAI (HuggingFace configs); GPT-3 175B and the 1T model as in
// Narayanan et al. (SC21) Table 1, with their batch sizes. LLaMA shapes from their HuggingFace
// config.json (SmolLM-135M, Llama-2-7b, Meta-Llama-3-8B), batches of about 1M, 4M and 4M tokens.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"gpt2-small", gpt(12, 12, 768, 50257, 1024), 512},
      {"gpt2-medium", gpt(24, 16, 1024, 50257, 1024), 512},
      {"gpt2-large", gpt(36, 20, 1280, 50257, 1024), 512},
      {"gpt2-xl", gpt(48, 25, 1600, 50257, 1024), 512},
      {"gpt3-175b", gpt(96, 96, 12288, 51200, 2048), 1536},
      {"gpt-1t", gpt(128, 160, 25600, 51200, 2048), 3072},
      {"smollm-135m", llama(30, 9, 3, 576, 1536, 49152, 2048, 10000, true), 512},
      {"llama2-7b", llama(32, 32, 32, 4096, 11008, 32000, 4096, 10000, false), 1024},
      {"llama3-8b", llama(32, 32, 8, 4096, 14336, 128256, 8192, 500000, false), 512},
  };
  return all;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& preset : presets()) names.emplace_back(preset.name);
  return names;
}

bool is_model_preset(const std::string& name) {
  for (const Preset& preset : presets()) {
    if (name == preset.name) return true;
  }
  return false;
}

ModelSpec model_preset(const std::string& name) {
  for (const Preset& preset : presets()) {
    if (name == preset.name) return {preset.name, preset.config, preset.global_batch};
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
    std::visit([&](auto* value) { model.read_into(field.key, value); }, field.value);
  }
  model.only(known);
  std::set<std::string> given;
  for (const std::string& key : known) {
    if (model.has(key)) given.insert(key);
  }
  const bool model_directory = model.has("init_from") && std::filesystem::is_directory(model.string("init_from"));
  for (const char* key : {"n_layer", "n_head", "n_embd", "vocab_size", "block_size"}) {
    if (!model_directory && !model.has(key)) fail("{}: key 'model.{}' is missing", source, key);
  }
  try {
    // A HuggingFace model directory gives what the table leaves out, as for training.
    if (model_directory) adopt_hf_model_config(spec.config, given, model.string("init_from"));
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
  if (std::filesystem::is_directory(name_or_path)) {  // a HuggingFace model directory
    ModelSpec spec;
    spec.name = std::filesystem::path(name_or_path).filename().string();
    adopt_hf_model_config(spec.config, {}, name_or_path);
    spec.config.validate();
    return spec;
  }
  if (!std::filesystem::exists(name_or_path)) {
    std::string known;
    for (const std::string& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
    fail("model '{}' is neither a preset ({}) nor an existing TOML file or HuggingFace model directory", name_or_path,
         known);
  }
  return parse_model_file(read_text_file(name_or_path), name_or_path);
}

}  // namespace strata
