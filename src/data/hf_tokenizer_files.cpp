#include "data/hf_tokenizer_files.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "data/hf_tokenizer.h"
#include "data/sentencepiece_to_hf.h"
#include "data/sentencepiece_tokenizer.h"

namespace strata {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

// The special tokens a tokenizer has, by transformers' names.
ordered_json special_tokens(const Tokenizer& tokenizer) {
  ordered_json map = ordered_json::object();
  const std::pair<const char*, int32_t> specials[] = {{"bos_token", tokenizer.bos_id()},
                                                      {"eos_token", tokenizer.eos_id()},
                                                      {"unk_token", tokenizer.unk_id()},
                                                      {"pad_token", tokenizer.pad_id()}};
  for (const auto& [name, id] : specials) {
    if (id >= 0) map[name] = tokenizer.token(id);
  }
  return map;
}

// The tokenizer's tokenizer_config.json, if it came with one, with the keys it lacks filled in.
ordered_json tokenizer_config(const Tokenizer& tokenizer, const ordered_json& specials, int64_t model_max_length) {
  ordered_json config = ordered_json::object();
  for (const fs::path& file : tokenizer.files()) {
    if (file.filename() != kHfTokenizerConfigFile) continue;
    config = ordered_json::parse(read_text_file(file), nullptr, false);
    if (!config.is_object()) fail("'{}' is not a JSON object", file.string());
  }
  if (!config.contains("tokenizer_class")) config["tokenizer_class"] = "PreTrainedTokenizerFast";
  for (const auto& [name, token] : specials.items()) {
    if (!config.contains(name) || config[name].is_null()) config[name] = token;
  }
  if (!config.contains("clean_up_tokenization_spaces")) config["clean_up_tokenization_spaces"] = false;
  if (!config.contains("model_max_length") && model_max_length > 0) config["model_max_length"] = model_max_length;
  return config;
}

void write_json(const fs::path& file, const ordered_json& document) {
  write_file_atomic(file, document.dump(2, ' ', false, ordered_json::error_handler_t::strict) + "\n");
}

}  // namespace

void write_hf_tokenizer_files(const Tokenizer& tokenizer, const fs::path& out, int64_t model_max_length) {
  if (tokenizer.format() == "huggingface") {
    write_file_atomic(out / kHfTokenizerFile, read_text_file(tokenizer.path()));
  } else {
    write_json(out / kHfTokenizerFile, sentencepiece_to_hf(tokenizer.path()));
    write_file_atomic(out / kSentencePieceFile, read_text_file(tokenizer.path()));
  }
  const ordered_json specials = special_tokens(tokenizer);
  write_json(out / kHfTokenizerConfigFile, tokenizer_config(tokenizer, specials, model_max_length));
  write_json(out / kHfSpecialTokensMapFile, specials);
}

}  // namespace strata
