#pragma once
// The regular expressions of HuggingFace pre-tokenizers, run by PCRE2 in UTF
// and UCP mode, which reads \p{L}, \p{N}, \s, (?i:...) and lookahead such as
// `\s+(?!\S)` as HuggingFace's Oniguruma does (std::regex has no Unicode
// classes). Text must be valid UTF-8 (the caller checks it once).
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata {

class UnicodeRegex {
 public:
  enum class Syntax { kRegex, kLiteral };
  // `what` names the pattern in errors, e.g. "'tokenizer.json': pre_tokenizer.pattern.Regex".
  UnicodeRegex(std::string_view pattern, Syntax syntax, std::string_view what);
  ~UnicodeRegex();
  UnicodeRegex(UnicodeRegex&& other) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&& other) noexcept;
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // The non-overlapping matches, left to right, as [begin, end) byte offsets.
  // After an empty match the search resumes one character on, as Perl's does.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  // Whether a match starts at `pos` (a character boundary of `text`).
  bool matches_at(std::string_view text, size_t pos) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8, kept out of this header
  std::string what_;
};

// The "pattern" of a tokenizer.json step (Split, Replace): {"Regex": ...} or {"String": ...} (literal).
// `where` names the step in errors.
UnicodeRegex read_pattern(const nlohmann::json& step, std::string_view where);

}  // namespace strata
