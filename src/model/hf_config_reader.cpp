#include "model/hf_config_reader.h"

#include "core/error.h"

namespace strata {

HfConfigReader::HfConfigReader(const nlohmann::json& config, std::string source)
    : config_(config), source_(std::move(source)) {
  if (!config_.is_object()) fail("{}: a HuggingFace config must be a JSON object", source_);
}

void HfConfigReader::expect_model_type(const std::string& type) const {
  const std::string found = string_or("model_type", type);
  if (found != type) fail("{}: model_type is \"{}\", expected \"{}\" for this model family", source_, found, type);
}

bool HfConfigReader::has(const std::string& key) const { return config_.contains(key) && !config_[key].is_null(); }

const nlohmann::json& HfConfigReader::at(const std::string& key) const {
  if (!has(key)) fail("{}: key '{}' is missing", source_, key);
  return config_[key];
}

int64_t HfConfigReader::integer(const std::string& key) const {
  const nlohmann::json& value = at(key);
  if (!value.is_number_integer()) fail("{}: key '{}' must be an integer, got {}", source_, key, value.dump());
  return value.get<int64_t>();
}

int64_t HfConfigReader::integer_or(const std::string& key, int64_t otherwise) const {
  return has(key) ? integer(key) : otherwise;
}

double HfConfigReader::number_or(const std::string& key, double otherwise) const {
  if (!has(key)) return otherwise;
  const nlohmann::json& value = at(key);
  if (!value.is_number()) fail("{}: key '{}' must be a number, got {}", source_, key, value.dump());
  return value.get<double>();
}

bool HfConfigReader::boolean_or(const std::string& key, bool otherwise) const {
  if (!has(key)) return otherwise;
  const nlohmann::json& value = at(key);
  if (!value.is_boolean()) fail("{}: key '{}' must be true or false, got {}", source_, key, value.dump());
  return value.get<bool>();
}

std::string HfConfigReader::string_or(const std::string& key, const std::string& otherwise) const {
  if (!has(key)) return otherwise;
  const nlohmann::json& value = at(key);
  if (!value.is_string()) fail("{}: key '{}' must be a string, got {}", source_, key, value.dump());
  return value.get<std::string>();
}

HfConfigReader HfConfigReader::object(const std::string& key) const {
  const nlohmann::json& value = at(key);
  if (!value.is_object()) fail("{}: key '{}' must be an object, got {}", source_, key, value.dump());
  return HfConfigReader(value, source_ + " " + key);
}

}  // namespace strata
