#pragma once
// HuggingFace normalizers, tokenizer.json's "normalizer": null (the text as
// it is: GPT-2, SmolLM, LLaMA 3) or NFC (Qwen2), which ICU computes. Any other
// is an error naming the key, since ignoring it would change encodings.
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace strata {

class Normalizer {
 public:
  // `node` is the normalizer value; `where` names it in errors.
  Normalizer(const nlohmann::json& node, std::string_view where);

  bool changes_text() const { return nfc_; }
  // `text` (valid UTF-8) normalized.
  std::string apply(std::string_view text) const;

 private:
  bool nfc_ = false;
};

}  // namespace strata
