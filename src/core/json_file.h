#pragma once
// Untrusted JSON (checkpoint manifests, corpus descriptions, safetensors
// headers, profiles and plan records may be damaged or hostile). Syntax
// errors, numbers out of range (1e400) and nesting deeper than kMaxJsonDepth
// fail with strata::Error naming the source, before anything formats the
// value; messages quote values only through json_excerpt, never whole.
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace strata {

// Every format Strata reads is a few levels deep; recursion over deeper values (dump, comparisons)
// could exhaust the stack.
inline constexpr int kMaxJsonDepth = 32;

// `also` (optional) sees every parse event as nlohmann's callback does and may throw.
nlohmann::json parse_json(std::string_view text, const std::string& source,
                          const nlohmann::json::parser_callback_t& also = nullptr);
nlohmann::json read_json_file(const std::filesystem::path& path);

// At most `limit` characters of the value's JSON text.
std::string json_excerpt(const nlohmann::json& value, size_t limit = 80);

}  // namespace strata
