#pragma once
// GPT-2's byte-level alphabet, in which byte-level BPE vocabularies (GPT-2,
// SmolLM, LLaMA 3, Qwen2) are spelled: every byte has a printable character
// standing for it. The printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ')
// stand for themselves; the other 68 bytes, in order, for U+0100 onwards
// (so a space is 'Ġ', U+0120, and a newline 'Ċ', U+010A).
#include <string>
#include <string_view>

namespace strata {

// The characters standing for `bytes`, as UTF-8.
std::string byte_level_encode(std::string_view bytes);

// HuggingFace's ByteLevel decoder for one token, appended to `out`: the bytes
// its characters stand for, or the token's own text when one of its characters
// is outside the alphabet (an added token such as "<|end of text|>" with a space).
void byte_level_decode(std::string_view token, std::string& out);

}  // namespace strata
