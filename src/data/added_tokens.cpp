#include "data/added_tokens.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"
#include "data/token_model.h"
#include "core/json_fields.h"
#include "data/normalizer.h"
#include "data/utf8.h"

namespace strata {

namespace {

// Rust's regex classes, which the library's lstrip, rstrip and single_word use.
constexpr std::string_view kRustWhitespace = R"(\p{White_Space})";
constexpr std::string_view kRustWordChar = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])";

bool is_continuation(char byte) { return (static_cast<unsigned char>(byte) & 0xC0u) == 0x80u; }

}  // namespace

AddedTokens::AddedTokens(const nlohmann::json& list, const TokenModel& model, const Normalizer& normalizer,
                         std::string_view where)
    : whitespace_(kRustWhitespace, UnicodeRegex::Syntax::kRegex, "Rust's \\s"),
      word_char_(kRustWordChar, UnicodeRegex::Syntax::kRegex, "Rust's \\w") {
  if (list.is_null()) return;
  if (!list.is_array()) fail("{} is {}, expected a list", where, json_excerpt(list));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string entry = fmt::format("{}[{}]", where, i);
    const nlohmann::json& token = list[i];
    const nlohmann::json& id_value = json_required(token, "id", entry);
    if (!id_value.is_number_integer() || id_value.get<int64_t>() < 0 ||
        id_value.get<int64_t>() >= std::numeric_limits<int32_t>::max()) {
      fail("{} is {}, expected an id in [0, 2^31 - 1)", json_member(entry, "id"), json_excerpt(id_value));
    }
    const auto id = static_cast<int32_t>(id_value.get<int64_t>());
    const std::string content = json_string(token, "content", entry);
    if (content.empty()) continue;  // the library ignores empty tokens
    if (std::optional<int32_t> vocab_id = model.id_of(content); vocab_id && *vocab_id != id) {
      fail("{}: {} has id {} here but {} in the model's vocab", entry, nlohmann::json(content).dump(), id, *vocab_id);
    }
    if (const std::string* vocab_token = model.token_of(id); vocab_token && *vocab_token != content) {
      fail("{}: id {} is {} here but {} in the model's vocab", entry, id, nlohmann::json(content).dump(),
           nlohmann::json(*vocab_token).dump());
    }
    if (!by_content_.emplace(content, id).second || by_id_.contains(id)) {
      fail("{}: {} (id {}) is listed twice", entry, nlohmann::json(content).dump(), id);
    }
    // HuggingFace's AddedToken defaults for keys a file leaves out.
    Token added{content,
                id,
                json_bool(token, "normalized", true, entry),
                json_bool(token, "single_word", false, entry),
                json_bool(token, "lstrip", false, entry),
                json_bool(token, "rstrip", false, entry)};
    if (added.normalized && normalizer.changes_text()) added.match = normalizer.apply(content);
    by_id_.emplace(id, tokens_.size());
    tokens_.push_back(std::move(added));
    id_limit_ = std::max(id_limit_, id + 1);
  }
  for (size_t index = 0; index < tokens_.size(); ++index) {
    const Token& token = tokens_[index];
    by_first_byte_[token.normalized ? 1 : 0][static_cast<unsigned char>(token.match[0])].push_back(index);
  }
  for (auto& pass : by_first_byte_) {
    for (auto& candidates : pass) {
      std::stable_sort(candidates.begin(), candidates.end(),
                       [&](size_t a, size_t b) { return tokens_[a].match.size() > tokens_[b].match.size(); });
    }
  }
}

bool AddedTokens::is_single_word(std::string_view text, size_t begin, size_t end) const {
  if (begin > 0) {
    size_t previous = begin - 1;
    while (previous > 0 && is_continuation(text[previous])) --previous;
    if (word_char_.matches_at(text, previous)) return false;
  }
  return end == text.size() || !word_char_.matches_at(text, end);
}

std::vector<AddedTokens::Segment> AddedTokens::split(std::string_view text, bool normalized) const {
  std::vector<Segment> segments;
  const auto& table = by_first_byte_[normalized ? 1 : 0];
  size_t covered = 0;  // the end of the last token taken
  size_t pos = 0;
  while (pos < text.size()) {
    const Token* found = nullptr;
    for (size_t index : table[static_cast<unsigned char>(text[pos])]) {
      if (text.substr(pos).starts_with(tokens_[index].match)) {
        found = &tokens_[index];
        break;
      }
    }
    if (found == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos;
    size_t end = pos + found->match.size();
    pos = end;  // the search goes on after the match, whether it is taken or not, as the library's does
    if (found->single_word && !is_single_word(text, begin, end)) continue;
    if (found->lstrip) {
      while (begin > covered) {
        size_t previous = begin - 1;
        while (previous > 0 && is_continuation(text[previous])) --previous;
        if (!whitespace_.matches_at(text, previous)) break;
        begin = previous;
      }
    }
    if (found->rstrip) {
      while (end < text.size() && whitespace_.matches_at(text, end)) end += utf8_char_length(text, end);
    }
    if (covered < begin) segments.push_back({text.substr(covered, begin - covered), std::nullopt});
    segments.push_back({text.substr(begin, end - begin), found->id});
    covered = end;
  }
  if (covered < text.size()) segments.push_back({text.substr(covered), std::nullopt});
  return segments;
}

const std::string* AddedTokens::token_of(int32_t id) const {
  auto found = by_id_.find(id);
  return found == by_id_.end() ? nullptr : &tokens_[found->second].match;
}

std::optional<int32_t> AddedTokens::id_of(const std::string& content) const {
  auto found = by_content_.find(content);
  if (found == by_content_.end()) return std::nullopt;
  return found->second;
}

}  // namespace strata
