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

#include "data/token_model.h"

namespace strata {

class BpeModel : public TokenModel {
 public:
  // `model` is the "model" value; `where` names it in errors.
  BpeModel(const nlohmann::json& model, std::string_view where);

  void encode(std::string_view piece, std::vector<int32_t>& ids) const override;
  std::optional<int32_t> id_of(std::string_view token) const override;
  const std::string* token_of(int32_t id) const override;
  int32_t id_limit() const override { return id_limit_; }

 private:
  struct Merge {
    uint32_t rank;
    int32_t merged_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  // The merge of two adjacent tokens, or nullptr.
  const Merge* find_merge(int32_t left, int32_t right) const;

  std::unordered_map<std::string, int32_t, TokenHash, std::equal_to<>> vocab_;
  std::unordered_map<int32_t, const std::string*> tokens_;  // points at vocab_'s keys, which never move
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t id_limit_ = 0;
};

}  // namespace strata
