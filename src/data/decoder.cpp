#include "data/decoder.h"

#include <cctype>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/json_file.h"
#include "data/byte_level.h"
#include "data/step_list.h"
#include "data/unicode_regex.h"
#include "data/utf8.h"

namespace strata {

using Tokens = std::vector<std::string>;

struct Decoder::Step {
  virtual ~Step() = default;
  virtual Tokens apply(Tokens tokens) const = 0;
};

namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

class ByteLevelStep : public Decoder::Step {
 public:
  Tokens apply(Tokens tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) byte_level_decode(token, bytes);
    return {utf8_lossy(bytes)};
  }
};

class ReplaceStep : public Decoder::Step {
 public:
  ReplaceStep(UnicodeRegex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Tokens apply(Tokens tokens) const override {
    for (std::string& token : tokens) {
      std::string replaced;
      size_t kept = 0;
      for (auto [begin, end] : pattern_.find_all(token)) {
        replaced.append(token, kept, begin - kept).append(content_);
        kept = end;
      }
      token = replaced.append(token, kept);
    }
    return tokens;
  }

 private:
  UnicodeRegex pattern_;
  std::string content_;
};

// A run of <0xXX> tokens becomes its bytes as one token when they are UTF-8, else one U+FFFD per byte.
class ByteFallbackStep : public Decoder::Step {
 public:
  Tokens apply(Tokens tokens) const override {
    Tokens out;
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (first_invalid_utf8(run)) {
        for (size_t i = 0; i < run.size(); ++i) out.emplace_back(kReplacementCharacter);
      } else {
        out.push_back(run);
      }
      run.clear();
    };
    for (std::string& token : tokens) {
      if (std::optional<char> byte = byte_of(token)) {
        run += *byte;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    return out;
  }

 private:
  static std::optional<char> byte_of(const std::string& token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
    auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
    if (!hex(token[3]) || !hex(token[4])) return std::nullopt;
    return static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16));
  }
};

class FuseStep : public Decoder::Step {
 public:
  Tokens apply(Tokens tokens) const override {
    std::string fused;
    for (const std::string& token : tokens) fused += token;
    return {fused};
  }
};

// Up to `start` leading and `stop` trailing copies of `content` (one character) off every token.
class StripStep : public Decoder::Step {
 public:
  StripStep(std::string content, size_t start, size_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  Tokens apply(Tokens tokens) const override {
    for (std::string& token : tokens) {
      std::string_view rest = token;
      for (size_t i = 0; i < start_ && rest.starts_with(content_); ++i) rest.remove_prefix(content_.size());
      for (size_t i = 0; i < stop_ && rest.ends_with(content_); ++i) rest.remove_suffix(content_.size());
      token = std::string(rest);
    }
    return tokens;
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

// "▁" back to a space, except in the first token, where (unless prepend_scheme is "never") every "▁" is
// dropped: the library's rule, which assumes the first is the one the pre-tokenizer prepended.
class MetaspaceStep : public Decoder::Step {
 public:
  MetaspaceStep(std::string replacement, bool drop_in_first)
      : replacement_(std::move(replacement)), drop_in_first_(drop_in_first) {}
  Tokens apply(Tokens tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string decoded;
      const std::string_view token = tokens[i];
      for (size_t pos = 0; pos < token.size();) {
        if (token.substr(pos).starts_with(replacement_)) {
          if (i != 0 || !drop_in_first_) decoded += ' ';
          pos += replacement_.size();
        } else {
          decoded += token[pos++];
        }
      }
      tokens[i] = std::move(decoded);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

// One character, as the library's `char` fields are.
std::string json_character(const nlohmann::json& node, std::string_view key, std::string_view where) {
  std::string text = json_string(node, key, where);
  if (text.empty() || first_invalid_utf8(text) || utf8_char_length(text, 0) != text.size()) {
    fail("{} is {}, expected one character", json_member(where, key), nlohmann::json(text).dump());
  }
  return text;
}

size_t json_count(const nlohmann::json& node, std::string_view key, std::string_view where) {
  const nlohmann::json& value = json_required(node, key, where);
  if (!value.is_number_unsigned()) fail("{} is {}, expected a count", json_member(where, key), json_excerpt(value));
  return value.get<size_t>();
}

template <typename StepType>
StepReader<Decoder::Step> without_settings() {
  return [](const nlohmann::json&, const std::string&, const auto&) { return std::make_unique<StepType>(); };
}

const StepTypes<Decoder::Step> kDecoders{
    "decoders",
    "decoders",
    {{"ByteLevel", without_settings<ByteLevelStep>()},
     {"Replace",
      [](const nlohmann::json& node, const std::string& where, const auto&) {
        return std::make_unique<ReplaceStep>(read_pattern(node, where), json_string(node, "content", where));
      }},
     {"ByteFallback", without_settings<ByteFallbackStep>()},
     {"Fuse", without_settings<FuseStep>()},
     {"Strip",
      [](const nlohmann::json& node, const std::string& where, const auto&) {
        return std::make_unique<StripStep>(json_character(node, "content", where), json_count(node, "start", where),
                                           json_count(node, "stop", where));
      }},
     {"Metaspace", [](const nlohmann::json& node, const std::string& where, const auto&) {
        // prepend_scheme "never" (or the older add_prefix_space false) keeps the first token's "▁" as spaces.
        const bool never = !json_bool(node, "add_prefix_space", true, where) ||
                           (node.contains("prepend_scheme") && json_string(node, "prepend_scheme", where) == "never");
        return std::make_unique<MetaspaceStep>(json_character(node, "replacement", where), !never);
      }}}};

}  // namespace

Decoder::Decoder(const nlohmann::json& node, std::string_view where) {
  if (node.is_null()) {
    joins_with_spaces_ = true;
    return;
  }
  read_steps(node, std::string(where), kDecoders, steps_);
}

Decoder::~Decoder() = default;
Decoder::Decoder(Decoder&&) noexcept = default;
Decoder& Decoder::operator=(Decoder&&) noexcept = default;

std::string Decoder::decode(std::vector<std::string> tokens) const {
  for (const auto& step : steps_) tokens = step->apply(std::move(tokens));
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (joins_with_spaces_ && i > 0) text += ' ';
    text += tokens[i];
  }
  return text;
}

}  // namespace strata
