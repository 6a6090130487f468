#include "core/json_file.h"

#include "core/error.h"
#include "core/file_io.h"

namespace strata {

nlohmann::json parse_json(std::string_view text, const std::string& source,
                          const nlohmann::json::parser_callback_t& also) {
  auto guard = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if ((event == nlohmann::json::parse_event_t::object_start || event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      fail("'{}': JSON nested deeper than {} levels", source, kMaxJsonDepth);
    }
    return also ? also(depth, event, parsed) : true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), guard);
  } catch (const nlohmann::json::exception& error) {
    // parse_error, and out_of_range for numbers no double holds.
    fail("'{}': not valid JSON: {}", source, error.what());
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  return parse_json(read_text_file(path), path.string());
}

std::string json_excerpt(const nlohmann::json& value, size_t limit) {
  std::string text = value.dump();
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

}  // namespace strata
