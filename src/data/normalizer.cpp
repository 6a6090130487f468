#include "data/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/json_file.h"
#include "data/step_list.h"
#include "data/unicode_regex.h"

namespace strata {

struct Normalizer::Step {
  virtual ~Step() = default;
  virtual std::string apply(std::string_view text) const = 0;
};

namespace {

class NfcStep : public Normalizer::Step {
 public:
  std::string apply(std::string_view text) const override {
    if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      fail("NFC normalization takes at most 2 GiB of text at once (ICU's limit), not {} bytes", text.size());
    }
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
    std::string normalized;
    icu::StringByteSink<std::string> sink(&normalized, static_cast<int32_t>(text.size()));
    if (U_SUCCESS(status)) {
      nfc->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr, status);
    }
    if (U_FAILURE(status)) fail("NFC normalization failed: {}", u_errorName(status));
    return normalized;
  }
};

// The library prepends to non-empty text only.
class PrependStep : public Normalizer::Step {
 public:
  explicit PrependStep(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string apply(std::string_view text) const override {
    return text.empty() ? std::string() : prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class ReplaceStep : public Normalizer::Step {
 public:
  ReplaceStep(UnicodeRegex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string apply(std::string_view text) const override {
    std::string replaced;
    size_t kept = 0;
    for (auto [begin, end] : pattern_.find_all(text)) {
      replaced.append(text.substr(kept, begin - kept)).append(content_);
      kept = end;
    }
    return replaced.append(text.substr(kept));
  }

 private:
  UnicodeRegex pattern_;
  std::string content_;
};

const StepTypes<Normalizer::Step> kNormalizers{
    "normalizers",
    "normalizers",
    {{"NFC", [](const nlohmann::json&, const std::string&, const auto&) { return std::make_unique<NfcStep>(); }},
     {"Prepend",
      [](const nlohmann::json& node, const std::string& where, const auto&) {
        return std::make_unique<PrependStep>(json_string(node, "prepend", where));
      }},
     {"Replace", [](const nlohmann::json& node, const std::string& where, const auto&) {
        return std::make_unique<ReplaceStep>(read_pattern(node, where), json_string(node, "content", where));
      }}}};

}  // namespace

Normalizer::Normalizer(const nlohmann::json& node, std::string_view where) {
  if (!node.is_null()) read_steps(node, std::string(where), kNormalizers, steps_);
}

Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;
Normalizer& Normalizer::operator=(Normalizer&&) noexcept = default;

std::string Normalizer::apply(std::string_view text) const {
  std::string normalized(text);
  for (const auto& step : steps_) normalized = step->apply(normalized);
  return normalized;
}

}  // namespace strata
