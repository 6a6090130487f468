// GPT-2's byte-level alphabet and the UTF-8 repair of decoded bytes, checked
// against values worked out from their definitions (the golden tests in
// hf_tokenizer_test.cpp check them again through the `tokenizers` library).
#include "data/byte_level.h"

#include <gtest/gtest.h>

#include <set>

#include "data/utf8.h"

namespace strata {
namespace {

TEST(ByteLevel, EveryByteHasItsOwnPrintableCharacter) {
  EXPECT_EQ(byte_level_encode("Hello"), "Hello");             // printable ASCII stands for itself
  EXPECT_EQ(byte_level_encode(" the\n"), "\u0120the\u010A");  // space is 'Ġ', newline 'Ċ'
  EXPECT_EQ(byte_level_encode("\t"), "\u0109");
  EXPECT_EQ(byte_level_encode("\xE9"), "\u00E9");  // printable Latin-1 stands for itself
  EXPECT_EQ(byte_level_encode("\xAD"), "\u0143");  // the soft hyphen is the last one moved
  EXPECT_EQ(byte_level_encode("\x7F"), "\u0121");

  std::set<std::string> characters;
  for (int byte = 0; byte < 256; ++byte) {
    const std::string one(1, static_cast<char>(byte));
    const std::string character = byte_level_encode(one);
    characters.insert(character);
    std::string decoded;
    byte_level_decode(character, decoded);
    EXPECT_EQ(decoded, one) << "byte " << byte;
  }
  EXPECT_EQ(characters.size(), 256u);
}

TEST(ByteLevel, TokensOutsideTheAlphabetDecodeAsTheirOwnText) {
  std::string out = "x";
  byte_level_decode("\u0120is", out);
  EXPECT_EQ(out, "x is");
  byte_level_decode("<|end of text|>", out);  // a space is not a character of the alphabet
  EXPECT_EQ(out, "x is<|end of text|>");
  out.clear();
  byte_level_decode("\u65E5", out);  // three UTF-8 bytes: outside too
  EXPECT_EQ(out, "\u65E5");
}

TEST(Utf8, InvalidBytesBecomeOneReplacementEachMaximalSubpart) {
  const std::string replacement = "\uFFFD";
  EXPECT_EQ(utf8_lossy("plain \u00E9\u65E5\U0001F642"), "plain \u00E9\u65E5\U0001F642");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x99"), replacement);  // a truncated emoji: one
  EXPECT_EQ(utf8_lossy("a\xE6\x97z"), "a" + replacement + "z");
  EXPECT_EQ(utf8_lossy("\xE0\x80"), replacement + replacement);                    // E0 needs A0..BF next
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), replacement + replacement + replacement);  // a surrogate
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), replacement + replacement);                    // overlong
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), replacement + replacement + replacement + replacement);  // > U+10FFFF
  EXPECT_EQ(utf8_lossy("\xFF"), replacement);

  EXPECT_EQ(first_invalid_utf8("fine \u00E9"), std::nullopt);
  EXPECT_EQ(first_invalid_utf8("ab\xC3"), 2u);
  EXPECT_EQ(first_invalid_utf8("\u00E9\x80"), 2u);
}

}  // namespace
}  // namespace strata
