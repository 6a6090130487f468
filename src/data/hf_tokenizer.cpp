#include "data/hf_tokenizer.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"
#include "data/added_tokens.h"
#include "core/json_fields.h"
#include "data/decoder.h"
#include "data/normalizer.h"
#include "data/pre_tokenizer.h"
#include "data/token_model.h"
#include "data/utf8.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const json& member_or_null(const json& object, const char* key) {
  static const json null;
  auto found = object.find(key);
  return found == object.end() ? null : *found;
}

class HfTokenizer : public TokenizerBackend {
 public:
  HfTokenizer(const fs::path& path, const json& document)
      : path_(path),
        where_(fmt::format("'{}'", path.string())),
        normalizer_(member_or_null(document, "normalizer"), json_member(where_, "normalizer")),
        pre_tokenizer_(member_or_null(document, "pre_tokenizer"), json_member(where_, "pre_tokenizer")),
        model_(read_token_model(json_required(document, "model", where_), json_member(where_, "model"))),
        added_(member_or_null(document, "added_tokens"), *model_, normalizer_, json_member(where_, "added_tokens")),
        decoder_(member_or_null(document, "decoder"), json_member(where_, "decoder")) {
    vocab_size_ = std::max(model_->id_limit(), added_.id_limit());
    read_config();
  }

  // Bytes that are not UTF-8 are read as U+FFFD, one per maximal invalid subsequence: the text that
  // Python's bytes.decode(errors="replace") hands the library (and SentencePiece's reading of them).
  std::vector<int32_t> encode(std::string_view input) const override {
    std::string repaired;
    if (first_invalid_utf8(input)) repaired = utf8_lossy(input);
    const std::string_view text = repaired.empty() ? input : repaired;
    std::vector<int32_t> ids;
    for (const AddedTokens::Segment& raw : added_.split(text, false)) {
      if (raw.id) {
        ids.push_back(*raw.id);
        continue;
      }
      const std::string normalized = normalizer_.apply(raw.text);
      for (const AddedTokens::Segment& segment : added_.split(normalized, true)) {
        if (segment.id) {
          ids.push_back(*segment.id);
          continue;
        }
        const bool at_text_start = raw.text.data() == text.data() && segment.text.data() == normalized.data();
        for (const std::string& piece : pre_tokenizer_.split(segment.text, at_text_start)) model_->encode(piece, ids);
      }
    }
    return ids;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      const std::string* token = spelling(id);
      if (token == nullptr) {
        fail("tokenizer '{}' cannot decode id {}: neither the vocab nor added_tokens has it", path_.string(), id);
      }
      tokens.push_back(*token);
    }
    return decoder_.decode(std::move(tokens));
  }

  int32_t vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  int32_t unk_id() const override { return unk_id_; }
  int32_t pad_id() const override { return pad_id_; }
  std::string token(int32_t id) const override {
    const std::string* token = spelling(id);
    if (token == nullptr) fail("tokenizer '{}' has no token {} (a gap in the vocabulary)", path_.string(), id);
    return *token;
  }
  std::string_view format() const override { return "huggingface"; }
  std::vector<fs::path> files() const override {
    std::vector<fs::path> read{path_};
    if (config_) read.push_back(*config_);
    return read;
  }

 private:
  // The added token or vocabulary entry `id`, or nullptr for a gap.
  const std::string* spelling(int32_t id) const {
    const std::string* token = added_.token_of(id);
    return token != nullptr ? token : model_->token_of(id);
  }

  // bos_token, eos_token, unk_token and pad_token of tokenizer_config.json: a string, {"content": ...} or null.
  void read_config() {
    const fs::path config = path_.parent_path() / kHfTokenizerConfigFile;
    if (!fs::exists(config)) return;
    config_ = config;
    const json document = read_json_file(config);
    const std::string where = fmt::format("'{}'", config.string());
    expect_json_object(document, where);
    auto id_of = [&](const char* key) -> int32_t {
      const std::string key_where = json_member(where, key);
      const json& value = member_or_null(document, key);
      std::string token;
      if (value.is_null()) return -1;
      if (value.is_string()) {
        token = value.get<std::string>();
      } else if (value.is_object()) {
        token = json_string(value, "content", key_where);
      } else {
        fail("{} is {}, expected a string, {{\"content\": ...}} or null", key_where, json_excerpt(value));
      }
      if (std::optional<int32_t> id = added_.id_of(token)) return *id;
      if (std::optional<int32_t> id = model_->id_of(token)) return *id;
      fail("{} is {}, which neither the vocab nor added_tokens of '{}' has", key_where, json(token).dump(),
           path_.string());
    };
    bos_id_ = id_of("bos_token");
    eos_id_ = id_of("eos_token");
    unk_id_ = id_of("unk_token");
    pad_id_ = id_of("pad_token");
  }

  fs::path path_;
  std::string where_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::unique_ptr<TokenModel> model_;
  AddedTokens added_;
  Decoder decoder_;
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t unk_id_ = -1;
  int32_t pad_id_ = -1;
  std::optional<fs::path> config_;
};

}  // namespace

std::unique_ptr<TokenizerBackend> load_hf_tokenizer(const fs::path& tokenizer_json) {
  if (!fs::exists(tokenizer_json)) fail("tokenizer '{}' does not exist", tokenizer_json.string());
  const json document = read_json_file(tokenizer_json);
  expect_json_object(document, fmt::format("'{}'", tokenizer_json.string()));
  return std::make_unique<HfTokenizer>(tokenizer_json, document);
}

}  // namespace strata
