#include "data/pre_tokenizer.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"
#include "data/byte_level.h"
#include "core/json_fields.h"
#include "data/step_list.h"
#include "data/unicode_regex.h"

namespace strata {

namespace {

// GPT-2's pattern, which ByteLevel splits with when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// What happens to the text a pattern matches (HuggingFace's SplitDelimiterBehavior).
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const nlohmann::json& node, std::string_view where) {
  const std::string name = json_string(node, "behavior", where);
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  fail("{} is \"{}\", expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous",
       json_member(where, "behavior"), name);
}

struct Span {
  size_t begin, end;
  bool flag;  // a match (before the behavior), to be removed (after)
};

// HuggingFace's NormalizedString::split: the matches and the gaps between them
// cover the piece; the behavior decides which become pieces of their own.
void split_piece(const UnicodeRegex& regex, Behavior behavior, bool invert, std::string_view piece,
                 std::vector<std::string>& out) {
  std::vector<Span> spans;
  size_t previous = 0;
  for (auto [begin, end] : regex.find_all(piece)) {
    if (previous != begin) spans.push_back({previous, begin, invert});
    spans.push_back({begin, end, !invert});
    previous = end;
  }
  if (previous != piece.size()) spans.push_back({previous, piece.size(), invert});

  std::vector<Span> kept;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Span& span : spans) kept.push_back({span.begin, span.end, false});
      break;
    case Behavior::kRemoved:
      kept = spans;
      break;
    case Behavior::kContiguous:
      for (const Span& span : spans) {
        if (span.flag == previous_match && !kept.empty()) {
          kept.back().end = span.end;
        } else {
          kept.push_back({span.begin, span.end, false});
        }
        previous_match = span.flag;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Span& span : spans) {
        if (span.flag && !previous_match && !kept.empty()) {
          kept.back().end = span.end;
        } else {
          kept.push_back({span.begin, span.end, false});
        }
        previous_match = span.flag;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto span = spans.rbegin(); span != spans.rend(); ++span) {
        if (span->flag && !previous_match && !kept.empty()) {
          kept.back().begin = span->begin;
        } else {
          kept.push_back({span->begin, span->end, false});
        }
        previous_match = span->flag;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& span : kept) {
    if (!span.flag && span.end > span.begin) out.emplace_back(piece.substr(span.begin, span.end - span.begin));
  }
}

}  // namespace

struct PreTokenizer::Step {
  virtual ~Step() = default;
  // Replaces every piece by what this step makes of it; `at_text_start`: the first piece begins the text.
  virtual std::vector<std::string> apply(const std::vector<std::string>& pieces, bool at_text_start) const = 0;
};

namespace {

class SplitStep : public PreTokenizer::Step {
 public:
  SplitStep(UnicodeRegex regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}

  std::vector<std::string> apply(const std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& piece : pieces) split_piece(regex_, behavior_, invert_, piece, out);
    return out;
  }

 private:
  UnicodeRegex regex_;
  Behavior behavior_;
  bool invert_;
};

class ByteLevelStep : public PreTokenizer::Step {
 public:
  ByteLevelStep(bool add_prefix_space, bool use_regex, std::string_view where) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_.emplace(kGpt2Pattern, UnicodeRegex::Syntax::kRegex, where);
  }

  std::vector<std::string> apply(const std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    std::vector<std::string> parts;
    for (const std::string& piece : pieces) {
      std::string text = add_prefix_space_ && piece.front() != ' ' ? " " + piece : piece;
      parts.clear();
      if (regex_) {
        split_piece(*regex_, Behavior::kIsolated, false, text, parts);
      } else {
        parts.push_back(std::move(text));
      }
      for (const std::string& part : parts) out.push_back(byte_level_encode(part));
    }
    return out;
  }

 private:
  bool add_prefix_space_;
  std::optional<UnicodeRegex> regex_;
};

// SentencePiece's spaces: each piece's spaces become `replacement` ("▁"), which is prepended to every piece
// (prepend_scheme "always"), to the text's first ("first") or to none ("never"), unless the piece starts
// with it; with `split`, each "▁" then starts a new piece.
class MetaspaceStep : public PreTokenizer::Step {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspaceStep(std::string replacement, Prepend prepend, bool split, std::string_view where)
      : replacement_(std::move(replacement)),
        prepend_(prepend),
        split_(split),
        space_(" ", UnicodeRegex::Syntax::kLiteral, where),
        marker_(replacement_, UnicodeRegex::Syntax::kLiteral, where) {}

  std::vector<std::string> apply(const std::vector<std::string>& pieces, bool at_text_start) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string piece;
      size_t kept = 0;
      for (auto [begin, end] : space_.find_all(pieces[i])) {
        piece.append(pieces[i], kept, begin - kept).append(replacement_);
        kept = end;
      }
      piece.append(pieces[i], kept);
      const bool prepend = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && i == 0 && at_text_start);
      if (prepend && !piece.starts_with(replacement_)) piece.insert(0, replacement_);
      if (split_) {
        split_piece(marker_, Behavior::kMergedWithNext, false, piece, out);
      } else {
        out.push_back(std::move(piece));
      }
    }
    return out;
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
  UnicodeRegex space_, marker_;
};

// Metaspace's prepend_scheme, or the older add_prefix_space (false: "never").
MetaspaceStep::Prepend parse_prepend_scheme(const nlohmann::json& node, std::string_view where) {
  if (!json_bool(node, "add_prefix_space", true, where)) return MetaspaceStep::Prepend::kNever;
  if (!node.contains("prepend_scheme")) return MetaspaceStep::Prepend::kAlways;
  const std::string scheme = json_string(node, "prepend_scheme", where);
  if (scheme == "always") return MetaspaceStep::Prepend::kAlways;
  if (scheme == "first") return MetaspaceStep::Prepend::kFirst;
  if (scheme == "never") return MetaspaceStep::Prepend::kNever;
  fail("{} is \"{}\", expected always, first or never", json_member(where, "prepend_scheme"), scheme);
}

const StepTypes<PreTokenizer::Step> kPreTokenizers{
    "pretokenizers",
    "pre-tokenizers",
    {{"ByteLevel",
      [](const nlohmann::json& node, const std::string& where, const auto&) {
        // HuggingFace's defaults for keys a file leaves out.
        return std::make_unique<ByteLevelStep>(json_bool(node, "add_prefix_space", true, where),
                                               json_bool(node, "use_regex", true, where), where);
      }},
     {"Split",
      [](const nlohmann::json& node, const std::string& where, const auto&) {
        return std::make_unique<SplitStep>(read_pattern(node, where), parse_behavior(node, where),
                                           json_bool(node, "invert", false, where));
      }},
     {"Digits",
      [](const nlohmann::json& node, const std::string& where, const auto&) {
        // Rust's char::is_numeric is the N category; alone or in runs.
        const bool individual = json_bool(node, "individual_digits", false, where);
        return std::make_unique<SplitStep>(UnicodeRegex(R"(\p{N})", UnicodeRegex::Syntax::kRegex, where),
                                           individual ? Behavior::kIsolated : Behavior::kContiguous, false);
      }},
     {"Metaspace", [](const nlohmann::json& node, const std::string& where, const auto& before) {
        const MetaspaceStep::Prepend prepend = parse_prepend_scheme(node, where);
        // Only the text's first piece can start it: after another step, which piece that is is not tracked.
        if (prepend == MetaspaceStep::Prepend::kFirst && !before.empty()) {
          fail("{}: Metaspace with prepend_scheme \"first\" after another pre-tokenizer is not read by this build",
               where);
        }
        return std::make_unique<MetaspaceStep>(json_string(node, "replacement", where), prepend,
                                               json_bool(node, "split", true, where), where);
      }}}};

}  // namespace

PreTokenizer::PreTokenizer(const nlohmann::json& node, std::string_view where) {
  if (!node.is_null()) read_steps(node, std::string(where), kPreTokenizers, steps_);
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string> PreTokenizer::split(std::string_view text, bool at_text_start) const {
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.emplace_back(text);
  for (const auto& step : steps_) pieces = step->apply(pieces, at_text_start);
  return pieces;
}

}  // namespace strata
