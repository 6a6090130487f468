#pragma once
// A `strata scan --format json` document as the report's scan section: what the project holds that
// will not move (counts by category and severity, the files with most findings), the model it
// builds, and the verdict with its reasons and the APIs to change. The file is read as untrusted:
// a missing or mistyped key fails naming the file and the key.
#include <filesystem>

#include <nlohmann/json.hpp>

namespace strata {

nlohmann::json scan_section(const std::filesystem::path& scan_json);

}  // namespace strata
