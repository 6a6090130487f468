#include "data/unicode_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/json_file.h"
#include "data/utf8.h"

namespace strata {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  int length = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return length < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buffer), length);
}

pcre2_code* as_code(void* code) { return static_cast<pcre2_code*>(code); }

// Match data holding only the whole match's offsets, freed on scope exit.
struct MatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(data); }
};

}  // namespace

UnicodeRegex::UnicodeRegex(std::string_view pattern, Syntax syntax, std::string_view what) : what_(what) {
  // UCP gives \p, \s and \w their Unicode meaning; PCRE2 refuses it beside LITERAL, which has no classes.
  uint32_t options = PCRE2_UTF | (syntax == Syntax::kLiteral ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (code == nullptr) {
    fail("{}: cannot compile the regular expression: {} at offset {}", what_, pcre2_message(error), offset);
  }
  // Where the platform has PCRE2's JIT it is several times faster; where not, pcre2_match interprets.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

UnicodeRegex::~UnicodeRegex() { pcre2_code_free(as_code(code_)); }

UnicodeRegex::UnicodeRegex(UnicodeRegex&& other) noexcept
    : code_(std::exchange(other.code_, nullptr)), what_(std::move(other.what_)) {}

UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&& other) noexcept {
  std::swap(code_, other.code_);
  std::swap(what_, other.what_);
  return *this;
}

std::vector<std::pair<size_t, size_t>> UnicodeRegex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  MatchData match;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  uint32_t options = PCRE2_NO_UTF_CHECK;
  while (start <= text.size()) {
    int result = pcre2_match(as_code(code_), subject, text.size(), start, options, match.data, nullptr);
    if (result == PCRE2_ERROR_NOMATCH) {
      // After an empty match only a non-empty one may start at the same place; failing that, move on a character.
      if (!(options & PCRE2_NOTEMPTY_ATSTART) || start == text.size()) break;
      start += utf8_char_length(text, start);
      options = PCRE2_NO_UTF_CHECK;
      continue;
    }
    if (result < 0) fail("{}: matching failed: {}", what_, pcre2_message(result));
    const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(match.data);
    matches.emplace_back(offsets[0], offsets[1]);
    start = offsets[1];
    options = PCRE2_NO_UTF_CHECK | (offsets[0] == offsets[1] ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0u);
  }
  return matches;
}

bool UnicodeRegex::matches_at(std::string_view text, size_t pos) const {
  MatchData match;
  int result = pcre2_match(as_code(code_), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos,
                           PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, match.data, nullptr);
  if (result == PCRE2_ERROR_NOMATCH) return false;
  if (result < 0) fail("{}: matching failed: {}", what_, pcre2_message(result));
  return true;
}

UnicodeRegex read_pattern(const nlohmann::json& step, std::string_view where) {
  const nlohmann::json& pattern = json_required(step, "pattern", where);
  const std::string pattern_where = json_member(where, "pattern");
  expect_json_object(pattern, pattern_where);
  if (pattern.contains("Regex")) {
    return UnicodeRegex(json_string(pattern, "Regex", pattern_where), UnicodeRegex::Syntax::kRegex,
                        json_member(pattern_where, "Regex"));
  }
  if (pattern.contains("String")) {
    return UnicodeRegex(json_string(pattern, "String", pattern_where), UnicodeRegex::Syntax::kLiteral,
                        json_member(pattern_where, "String"));
  }
  fail("{} is {}, expected {{\"Regex\": ...}} or {{\"String\": ...}}", pattern_where, json_excerpt(pattern));
}

}  // namespace strata
