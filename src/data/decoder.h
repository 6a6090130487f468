#pragma once
// HuggingFace decoders, tokenizer.json's "decoder": how the tokens of some ids
// become text, as the `tokenizers` library's decode_chain does it, step by
// step over the list of token strings: ByteLevel (GPT-2's byte alphabet back
// to bytes, invalid UTF-8 as U+FFFD), Replace, ByteFallback (<0xXX> runs to
// their bytes), Fuse, Strip, Metaspace ("▁" back to spaces) and Sequence of
// these; null joins the tokens with spaces, as the library does. Anything else
// is an error naming the key.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata {

class Decoder {
 public:
  // `node` is the decoder value; `where` names it in errors.
  Decoder(const nlohmann::json& node, std::string_view where);
  ~Decoder();
  Decoder(Decoder&&) noexcept;
  Decoder& operator=(Decoder&&) noexcept;

  std::string decode(std::vector<std::string> tokens) const;

  struct Step;  // one decoder of the sequence, defined in decoder.cpp

 private:
  std::vector<std::unique_ptr<const Step>> steps_;
  bool joins_with_spaces_ = false;
};

}  // namespace strata
