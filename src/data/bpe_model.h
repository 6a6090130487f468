#pragma once
// HuggingFace's BPE model, tokenizer.json's "model" of type "BPE": a
// vocabulary of token strings and ranked merges. A piece is cut into
// characters (each a vocabulary token, else byte_fallback's <0xXX> tokens,
// else unk_token, else dropped, as the `tokenizers` library does), then merged
// lowest rank first, leftmost first among equal ranks. With ignore_merges
// (LLaMA 3) a piece that is itself in the vocabulary is that one token.
// Merges are read in both spellings, "a b" strings and ["a", "b"] pairs.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata {

class BpeModel {
 public:
  // `model` is the "model" value; `where` names it in errors.
  BpeModel(const nlohmann::json& model, std::string_view where);

  // Appends the ids of one pre-tokenized piece (valid UTF-8) to `ids`.
  void encode(std::string_view piece, std::vector<int32_t>& ids) const;

  std::optional<int32_t> id_of(std::string_view token) const;
  // The token spelled by `id`, or nullptr when the vocabulary has no such id.
  const std::string* token_of(int32_t id) const;
  // One past the highest id of the vocabulary.
  int32_t id_limit() const { return id_limit_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  struct Merge {
    uint32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  // The merge of two adjacent tokens, or nullptr.
  const Merge* find_merge(int32_t left, int32_t right) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::unordered_map<int32_t, const std::string*> tokens_;  // points at vocab_'s keys, which never move
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t id_limit_ = 0;
};

}  // namespace strata
