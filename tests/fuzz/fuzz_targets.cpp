#include "fuzz_targets.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "data/corpus.h"
#include "data/hf_tokenizer.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "model/hf_model_dir.h"
#include "train/config.h"

namespace strata::fuzz {

namespace {

namespace fs = std::filesystem;

// A per-process scratch directory in memory-backed /dev/shm when there is one.
const fs::path& scratch() {
  static const fs::path dir = [] {
    fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    fs::path path = base / ("strata_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(path / "step_00000001");
    return path;
  }();
  return dir;
}

void write(const fs::path& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                                static_cast<std::streamsize>(size));
}

// Runs `parse`; strata::Error is the expected way to refuse bad input.
template <typename Parse>
void refusing_is_fine(const Parse& parse) {
  try {
    parse();
  } catch (const Error&) {
  }
}

void safetensors(const uint8_t* data, size_t size) {
  const fs::path file = scratch() / "input.safetensors";
  write(file, data, size);
  refusing_is_fine([&] {
    SafetensorsReader reader(file);
    for (const auto& [name, entry] : reader.entries()) reader.load(name);
  });
}

void token_shard(const uint8_t* data, size_t size) {
  const fs::path file = scratch() / "input.bin";
  write(file, data, size);
  refusing_is_fine([&] {
    TokenShard shard(file);
    std::vector<int32_t> tokens(static_cast<size_t>(std::min<int64_t>(shard.size(), 64)));
    shard.read(0, static_cast<int64_t>(tokens.size()), tokens.data());
  });
}

void meta_json(const uint8_t* data, size_t size) {
  write(scratch() / "meta.json", data, size);
  refusing_is_fine([&] { read_corpus_meta(scratch()); });
}

void checkpoint_json(const uint8_t* data, size_t size) {
  write(scratch() / "step_00000001" / "checkpoint.json", data, size);
  refusing_is_fine([&] { Checkpoint checkpoint(scratch() / "step_00000001"); });
}

// A HuggingFace tokenizer.json, loaded and run over a text with multi-byte characters, digits,
// whitespace runs and a special token's spelling, then decoded.
void tokenizer_json(const uint8_t* data, size_t size) {
  const fs::path file = scratch() / "tokenizer.json";
  write(file, data, size);
  refusing_is_fine([&] {
    Tokenizer tokenizer(load_hf_tokenizer(file));
    const std::vector<int32_t> ids = tokenizer.encode("In the beginning, don't  panic\t\u00e9t\u00e9 42 <|end_of_text|>\n");
    tokenizer.decode(ids);
  });
}

// A HuggingFace model directory's config.json, as model.init_from reads it.
void hf_config(const uint8_t* data, size_t size) {
  write(scratch() / "config.json", data, size);
  refusing_is_fine([&] {
    ModelConfig config;
    adopt_hf_model_config(config, {}, scratch());
    config.validate();
  });
}

void train_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  refusing_is_fine([&] { parse_train_config(text, "fuzz.toml", {}); });
}

}  // namespace

const std::vector<NamedTarget>& targets() {
  static const std::vector<NamedTarget> all{{"safetensors", safetensors},
                                            {"token_shard", token_shard},
                                            {"meta_json", meta_json},
                                            {"checkpoint_json", checkpoint_json},
                                            {"train_config", train_config},
                                            {"tokenizer_json", tokenizer_json},
                                            {"hf_config", hf_config}};
  return all;
}

Target target_named(const std::string& name) {
  for (const NamedTarget& target : targets()) {
    if (target.name == name) return target.run;
  }
  return nullptr;
}

}  // namespace strata::fuzz
