#pragma once
// A tokenizer as a HuggingFace model directory holds it, so that
// transformers' AutoTokenizer loads it as a fast tokenizer (no sentencepiece,
// no protobuf) and decodes as Strata does:
//   - tokenizer.json: the tokenizer's own, or converted from a SentencePiece
//     tokenizer.model (sentencepiece_to_hf.h), which is copied too;
//   - tokenizer_config.json: the tokenizer's own when it has one, else
//     PreTrainedTokenizerFast's; keys it lacks are filled in: the special
//     tokens (bos, eos, unk, pad) the tokenizer has, model_max_length, and
//     clean_up_tokenization_spaces = false (transformers' clean-up would
//     change the decoded text, e.g. " ." to ".");
//   - special_tokens_map.json: those special tokens.
#include <cstdint>
#include <filesystem>

#include "data/tokenizer.h"

namespace strata {

inline constexpr std::string_view kHfSpecialTokensMapFile = "special_tokens_map.json";

// Writes the files into the existing directory `out`, atomically each.
void write_hf_tokenizer_files(const Tokenizer& tokenizer, const std::filesystem::path& out, int64_t model_max_length);

}  // namespace strata
