#pragma once
// HuggingFace normalizers, tokenizer.json's "normalizer": null (the text as
// it is: GPT-2, SmolLM, LLaMA 3), NFC (Qwen2, computed by ICU), Prepend and
// Replace (LLaMA 2 and Mistral as transformers converts them: "▁" before the
// text, spaces as "▁"), and Sequence of these. Any other is an error naming
// the key, since ignoring it would change encodings.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata {

class Normalizer {
 public:
  // `node` is the normalizer value; `where` names it in errors.
  Normalizer(const nlohmann::json& node, std::string_view where);
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;
  Normalizer& operator=(Normalizer&&) noexcept;

  bool changes_text() const { return !steps_.empty(); }
  // `text` (valid UTF-8) normalized.
  std::string apply(std::string_view text) const;

  struct Step;  // one normalizer of the sequence, defined in normalizer.cpp

 private:
  std::vector<std::unique_ptr<const Step>> steps_;
};

}  // namespace strata
