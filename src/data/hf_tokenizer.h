#pragma once
// HuggingFace tokenizer.json with a byte-level BPE model (GPT-2, SmolLM,
// LLaMA 3, Qwen2), encoding as the `tokenizers` library does with
// add_special_tokens=False: added tokens are cut out first (added_tokens.h),
// the rest normalized (normalizer.h), pre-tokenized (pre_tokenizer.h) and
// BPE-encoded piece by piece (bpe_model.h). The decoder must be ByteLevel
// (byte_level.h); decoding keeps special tokens and, like the library,
// replaces bytes that are not UTF-8 with U+FFFD. The post-processor is not
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
