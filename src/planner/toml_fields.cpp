#include "planner/toml_fields.h"

#include <cmath>

#include "core/error.h"

namespace strata {

namespace {

const toml::table& empty_table() {
  static const toml::table empty;
  return empty;
}

}  // namespace

TomlFields::TomlFields(const toml::table& table, std::string source, std::string prefix)
    : table_(&table), source_(std::move(source)), prefix_(std::move(prefix)) {}

std::string TomlFields::path(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

bool TomlFields::has(const std::string& key) const { return table_->contains(key); }

const toml::node& TomlFields::get(const std::string& key) const {
  const toml::node* node = table_->get(key);
  if (node == nullptr) fail("{}: missing key '{}'", source_, path(key));
  return *node;
}

TomlFields TomlFields::table(const std::string& key, bool required) const {
  const toml::node* node = table_->get(key);
  if (node == nullptr) {
    if (required) fail("{}: missing table [{}]", source_, path(key));
    return TomlFields(empty_table(), source_, path(key));
  }
  const toml::table* child = node->as_table();
  if (child == nullptr) fail("{}: '{}' must be a table", source_, path(key));
  return TomlFields(*child, source_, path(key));
}

std::string TomlFields::string(const std::string& key) const {
  auto value = get(key).value_exact<std::string>();
  if (!value) fail("{}: key '{}' must be a string", source_, path(key));
  if (value->empty()) fail("{}: key '{}' must not be empty", source_, path(key));
  return *value;
}

int64_t TomlFields::integer(const std::string& key, int64_t at_least) const {
  auto value = get(key).value_exact<int64_t>();
  if (!value) fail("{}: key '{}' must be an integer", source_, path(key));
  if (*value < at_least) fail("{}: key '{}' must be at least {}, got {}", source_, path(key), at_least, *value);
  return *value;
}

double TomlFields::number(const std::string& key) const {
  const toml::node& node = get(key);
  double result;
  if (auto value = node.value_exact<double>()) {
    result = *value;
  } else if (auto integer = node.value_exact<int64_t>()) {
    result = static_cast<double>(*integer);
  } else {
    fail("{}: key '{}' must be a number", source_, path(key));
  }
  if (!std::isfinite(result)) fail("{}: key '{}' must be finite, got {}", source_, path(key), result);
  return result;
}

double TomlFields::positive(const std::string& key) const {
  double value = number(key);
  if (!(value > 0)) fail("{}: key '{}' must be positive, got {}", source_, path(key), value);
  return value;
}

double TomlFields::non_negative(const std::string& key) const {
  double value = number(key);
  if (value < 0) fail("{}: key '{}' must not be negative, got {}", source_, path(key), value);
  return value;
}

double TomlFields::fraction(const std::string& key) const {
  double value = number(key);
  if (!(value > 0 && value <= 1)) fail("{}: key '{}' must be in (0, 1], got {}", source_, path(key), value);
  return value;
}

const toml::array& TomlFields::array(const std::string& key) const {
  const toml::array* value = get(key).as_array();
  if (value == nullptr) fail("{}: key '{}' must be an array", source_, path(key));
  return *value;
}

void TomlFields::only(const std::set<std::string>& allowed) const {
  for (const auto& [key, node] : *table_) {
    std::string name(key.str());
    if (!allowed.count(name)) {
      std::string known;
      for (const std::string& k : allowed) known += (known.empty() ? "" : ", ") + k;
      fail("{}: unknown key '{}' (known here: {})", source_, path(name), known);
    }
  }
}

toml::table parse_toml_text(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& error) {
    fail("{}:{}:{}: invalid TOML: {}", source, error.source().begin.line, error.source().begin.column,
         error.description());
  }
}

}  // namespace strata
