#pragma once
// The model of a HuggingFace tokenizer.json ("model"): what turns one
// pre-tokenized piece into ids. BPE (bpe_model.h) or Unigram
// (unigram_model.h); read_token_model picks by "type".
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata {

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of one pre-tokenized piece (valid UTF-8) to `ids`.
  virtual void encode(std::string_view piece, std::vector<int32_t>& ids) const = 0;
  virtual std::optional<int32_t> id_of(std::string_view token) const = 0;
  // The token spelled by `id`, or nullptr when the vocabulary has no such id.
  virtual const std::string* token_of(int32_t id) const = 0;
  // One past the highest id of the vocabulary.
  virtual int32_t id_limit() const = 0;
};

// The <0xXX> tokens of `text`'s bytes (a model's byte_fallback), or nullopt when the vocabulary lacks one.
std::optional<std::vector<int32_t>> byte_fallback_ids(const TokenModel& model, std::string_view text);

// Hashes std::string keys and finds them by std::string_view.
struct TokenHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

// `model` is the "model" value; `where` names it in errors.
std::unique_ptr<TokenModel> read_token_model(const nlohmann::json& model, std::string_view where);

}  // namespace strata
