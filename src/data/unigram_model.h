#pragma once
// HuggingFace's Unigram model, tokenizer.json's "model" of type "Unigram"
// (T5, ALBERT, SentencePiece unigram models converted by transformers): a
// vocabulary of [token, log-probability] pairs, and a piece is cut into the
// tokens of highest total score (Viterbi), as the `tokenizers` library does:
// characters without a token of their own score the lowest score less 10
// (unk_id), runs of them are fused, and with byte_fallback a fused run
// becomes <0xXX> tokens when the vocabulary has them all.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/token_model.h"

namespace strata {

class UnigramModel : public TokenModel {
 public:
  // `model` is the "model" value; `where` names it in errors.
  UnigramModel(const nlohmann::json& model, std::string_view where);

  void encode(std::string_view piece, std::vector<int32_t>& ids) const override;
  std::optional<int32_t> id_of(std::string_view token) const override;
  const std::string* token_of(int32_t id) const override;
  int32_t id_limit() const override { return static_cast<int32_t>(tokens_.size()); }

 private:
  // The strings of the best segmentation of `piece`, unknown runs fused.
  std::vector<std::string_view> best_segmentation(std::string_view piece) const;

  std::vector<std::string> tokens_;
  std::vector<double> scores_;
  std::unordered_map<std::string, int32_t, TokenHash, std::equal_to<>> ids_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  double unknown_score_ = 0;  // the lowest score less the library's penalty of 10
  size_t longest_token_ = 0;  // in bytes
  std::string where_;
};

}  // namespace strata
