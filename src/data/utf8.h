#pragma once
// UTF-8 helpers for tokenizers: HuggingFace's pipeline works on Rust strings,
// which are valid UTF-8 by construction, so text is checked once on the way in
// and bytes are repaired the way Rust repairs them on the way out.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

// Byte length of the character starting at text[pos]; text must be valid UTF-8.
size_t utf8_char_length(std::string_view text, size_t pos);

// The offset of the first byte that is not part of a valid UTF-8 sequence, or nullopt.
std::optional<size_t> first_invalid_utf8(std::string_view text);

// `bytes` with each maximal invalid subsequence replaced by U+FFFD, as Rust's
// String::from_utf8_lossy (and so HuggingFace's byte-level decoder) does.
std::string utf8_lossy(std::string_view bytes);

}  // namespace strata
