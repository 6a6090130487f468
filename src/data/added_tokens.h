#pragma once
// HuggingFace added tokens, tokenizer.json's "added_tokens" (special tokens
// such as <|begin_of_text|>, and any others): found in the text before
// pre-tokenization and never split. As in the `tokenizers` library, the
// tokens with "normalized": false are matched in the raw text first, those
// with true in the normalized rest; each pass takes the leftmost match, the
// longest among those starting there; "single_word" drops a match inside a
// word, "lstrip"/"rstrip" take the whitespace beside it into the token.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/unicode_regex.h"

namespace strata {

class TokenModel;
class Normalizer;

class AddedTokens {
 public:
  // `list` is the added_tokens value; an id the model's vocabulary gives to
  // another string is an error. `where` names the list in errors.
  AddedTokens(const nlohmann::json& list, const TokenModel& model, const Normalizer& normalizer, std::string_view where);

  struct Segment {
    std::string_view text;
    std::optional<int32_t> id;  // an added token, else text for the pre-tokenizer
  };
  // `text` cut at the tokens matched in the raw text (`normalized` false) or
  // in normalized text (true).
  std::vector<Segment> split(std::string_view text, bool normalized) const;

  // What decoding reads for `id` (the normalized content of a normalized token), or nullptr.
  const std::string* token_of(int32_t id) const;
  // The id of the token whose content is `content`.
  std::optional<int32_t> id_of(const std::string& content) const;
  // One past the highest added id (0 with none).
  int32_t id_limit() const { return id_limit_; }

 private:
  struct Token {
    std::string match;  // the content, normalized for normalized tokens
    int32_t id;
    bool normalized, single_word, lstrip, rstrip;
  };
  // Whether the match [begin, end) in `text` has no word character right beside it.
  bool is_single_word(std::string_view text, size_t begin, size_t end) const;

  std::vector<Token> tokens_;
  // Per pass (raw, normalized) and first byte: indices into tokens_, longest match first.
  std::vector<size_t> by_first_byte_[2][256];
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  int32_t id_limit_ = 0;
  UnicodeRegex whitespace_;  // Rust's \s, which lstrip and rstrip take
  UnicodeRegex word_char_;   // Rust's \w, which single_word looks for beside a match
};

}  // namespace strata
