#pragma once
// HuggingFace pre-tokenizers: they cut (normalized) text into the pieces the
// BPE model encodes one by one, and ByteLevel respells each piece in the
// byte-level alphabet. Read from tokenizer.json's "pre_tokenizer":
// ByteLevel (add_prefix_space, use_regex: GPT-2's split pattern), Split
// (a Regex or String pattern, any of the five behaviors, invert), Digits
// (individual_digits), Metaspace (SentencePiece's "▁" for spaces:
// replacement, prepend_scheme or add_prefix_space, split) and Sequence of these. Anything else is an error naming
// the key, since skipping a step would silently change every encoding.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata {

class PreTokenizer {
 public:
  // `node` is the pre_tokenizer value (null: the text stays one piece); `where` names it in errors.
  PreTokenizer(const nlohmann::json& node, std::string_view where);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // The non-empty pieces of `text` (valid UTF-8), in order; `at_text_start`: `text` begins the text
  // being encoded (not after an added token), where Metaspace's prepend_scheme "first" prepends.
  std::vector<std::string> split(std::string_view text, bool at_text_start) const;

  struct Step;  // one pre-tokenizer of the sequence, defined in pre_tokenizer.cpp

 private:
  std::vector<std::unique_ptr<const Step>> steps_;
};

}  // namespace strata
