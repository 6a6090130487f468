#include "model/hf_model_dir.h"

#include <type_traits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_file.h"
#include "model/family.h"

namespace strata {

namespace {

// A value as a TOML file spells it, for messages.
template <typename T>
std::string toml_value_text(const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    return "\"" + value + "\"";
  } else if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else {
    return fmt::format("{}", value);
  }
}

}  // namespace

void adopt_hf_model_config(ModelConfig& config, const std::set<std::string>& given, const std::filesystem::path& dir) {
  const std::filesystem::path hf_path = dir / "config.json";
  ModelConfig from_hf = model_config_of_hf(read_json_file(hf_path), hf_path.string());
  std::vector<ModelField> here = model_fields(config), there = model_fields(from_hf);
  for (size_t i = 0; i < here.size(); ++i) {
    const std::string key = here[i].key;
    if (!given.count(key)) {
      std::visit([&](auto* target) { *target = *std::get<decltype(target)>(there[i].value); }, here[i].value);
      continue;
    }
    if (key == "block_size") continue;
    std::visit(
        [&](auto* value) {
          const auto& theirs = *std::get<decltype(value)>(there[i].value);
          if (*value != theirs) {
            fail("key 'model.{}' is {} here but {} in {}: leave it out to take the model directory's value", key,
                 toml_value_text(*value), toml_value_text(theirs), hf_path.string());
          }
        },
        here[i].value);
  }
}

}  // namespace strata
