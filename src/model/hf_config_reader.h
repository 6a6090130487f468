#pragma once
// Reads a HuggingFace config.json strictly: a key of the wrong type, or a
// required key that is missing, is an error naming the file and the key.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace strata {

class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& config, std::string source);

  // model_type must be `type` (when the file has one).
  void expect_model_type(const std::string& type) const;
  bool has(const std::string& key) const;  // present and not null
  int64_t integer(const std::string& key) const;
  int64_t integer_or(const std::string& key, int64_t otherwise) const;
  double number_or(const std::string& key, double otherwise) const;
  bool boolean_or(const std::string& key, bool otherwise) const;
  std::string string_or(const std::string& key, const std::string& otherwise) const;
  // A nested object (rope_scaling, rope_parameters), read the same way.
  HfConfigReader object(const std::string& key) const;
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& at(const std::string& key) const;

  const nlohmann::json& config_;
  std::string source_;
};

}  // namespace strata
