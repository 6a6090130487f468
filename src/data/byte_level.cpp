#include "data/byte_level.h"

#include <array>
#include <cstdint>

namespace strata {

namespace {

constexpr char32_t kFirstShifted = 0x100;
constexpr size_t kAlphabetEnd = kFirstShifted + 68;  // one past the highest character of the alphabet

bool stands_for_itself(unsigned byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

struct Alphabet {
  std::array<char32_t, 256> character{};
  std::array<int16_t, kAlphabetEnd> byte{};  // -1: not a character of the alphabet

  Alphabet() {
    byte.fill(-1);
    char32_t next = kFirstShifted;
    for (unsigned b = 0; b < 256; ++b) {
      character[b] = stands_for_itself(b) ? b : next++;
      byte[character[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet table;
  return table;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const Alphabet& table = alphabet();
  std::string text;
  text.reserve(bytes.size() * 2);
  for (char b : bytes) {
    char32_t c = table.character[static_cast<unsigned char>(b)];
    if (c < 0x80) {
      text += static_cast<char>(c);
    } else {  // every character of the alphabet is below U+0800: two bytes
      text += static_cast<char>(0xC0 | (c >> 6));
      text += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return text;
}

void byte_level_decode(std::string_view token, std::string& out) {
  const Alphabet& table = alphabet();
  const size_t start = out.size();
  for (size_t i = 0; i < token.size();) {
    const auto lead = static_cast<unsigned char>(token[i]);
    char32_t c = 0;
    if (lead < 0x80) {
      c = lead, i += 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < token.size()) {
      c = ((lead & 0x1Fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3Fu), i += 2;
    } else {
      c = kAlphabetEnd;  // three or more bytes: outside the alphabet
    }
    if (c >= kAlphabetEnd || table.byte[c] < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out += static_cast<char>(table.byte[c]);
  }
}

}  // namespace strata
