#include "data/utf8.h"

namespace strata {

namespace {

struct Sequence {
  size_t length;  // of the character, or of the maximal invalid subpart
  bool valid;
};

// The well-formed byte sequences of Unicode's table 3-7: the second byte's
// range depends on the first, the others are 80..BF.
Sequence scan(std::string_view text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) return {1, true};
  size_t trailing = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    trailing = 1;
  } else if (lead == 0xE0) {
    trailing = 2, low = 0xA0;
  } else if (lead == 0xED) {
    trailing = 2, high = 0x9F;  // no surrogates
  } else if (lead >= 0xE1 && lead <= 0xEF) {
    trailing = 2;
  } else if (lead == 0xF0) {
    trailing = 3, low = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    trailing = 3;
  } else if (lead == 0xF4) {
    trailing = 3, high = 0x8F;  // nothing above U+10FFFF
  } else {
    return {1, false};
  }
  for (size_t i = 1; i <= trailing; ++i) {
    if (pos + i >= text.size()) return {i, false};
    const auto byte = static_cast<unsigned char>(text[pos + i]);
    if (byte < (i == 1 ? low : 0x80) || byte > (i == 1 ? high : 0xBF)) return {i, false};
  }
  return {trailing + 1, true};
}

}  // namespace

size_t utf8_char_length(std::string_view text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    Sequence sequence = scan(text, pos);
    if (!sequence.valid) return pos;
    pos += sequence.length;
  }
  return std::nullopt;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string text;
  text.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    Sequence sequence = scan(bytes, pos);
    if (sequence.valid) {
      text.append(bytes.substr(pos, sequence.length));
    } else {
      text.append("\xEF\xBF\xBD");  // U+FFFD
    }
    pos += sequence.length;
  }
  return text;
}

}  // namespace strata
