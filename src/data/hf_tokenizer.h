#pragma once
// HuggingFace tokenizer.json (byte-level BPE: GPT-2, SmolLM, LLaMA 3, Qwen2;
// SentencePiece-style BPE and Unigram: LLaMA 2, Mistral, T5), encoding as the
// `tokenizers` library does with add_special_tokens=False: added tokens are
// cut out first (added_tokens.h), the rest normalized (normalizer.h),
// pre-tokenized (pre_tokenizer.h) and encoded piece by piece by the model
// (token_model.h); bytes that are not UTF-8 are read as U+FFFD. Decoding runs
// the decoder (decoder.h) and keeps special tokens. The post-processor is not
// applied. bos/eos come from tokenizer_config.json beside the file
// ("bos_token", "eos_token"), when it is there.
#include <filesystem>
#include <memory>
#include <string_view>

#include "data/tokenizer.h"

namespace strata {

inline constexpr std::string_view kHfTokenizerFile = "tokenizer.json";
inline constexpr std::string_view kHfTokenizerConfigFile = "tokenizer_config.json";

std::unique_ptr<TokenizerBackend> load_hf_tokenizer(const std::filesystem::path& tokenizer_json);

}  // namespace strata
