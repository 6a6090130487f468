#include "data/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"

namespace strata {

Normalizer::Normalizer(const nlohmann::json& node, std::string_view where) {
  if (node.is_null()) return;
  const std::string type = json_string(node, "type", where);
  if (type != "NFC") fail("{} is \"{}\": this build reads no normalizer or NFC", json_member(where, "type"), type);
  nfc_ = true;
}

std::string Normalizer::apply(std::string_view text) const {
  if (!nfc_) return std::string(text);
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

}  // namespace strata
