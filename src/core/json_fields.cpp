#include "core/json_fields.h"

#include "core/error.h"
#include "core/json_file.h"

namespace strata {

std::string json_member(std::string_view where, std::string_view key) {
  // A top-level key follows the quoted file name: "'FILE': key".
  return where.ends_with('\'') ? fmt::format("{}: {}", where, key) : fmt::format("{}.{}", where, key);
}

void expect_json_object(const nlohmann::json& value, std::string_view where) {
  if (!value.is_object()) fail("{} is {}, expected an object", where, json_excerpt(value));
}

const nlohmann::json& json_required(const nlohmann::json& object, std::string_view key, std::string_view where) {
  expect_json_object(object, where);
  auto found = object.find(key);
  if (found == object.end()) fail("{} is missing", json_member(where, key));
  return *found;
}

std::string json_string(const nlohmann::json& object, std::string_view key, std::string_view where) {
  const nlohmann::json& value = json_required(object, key, where);
  if (!value.is_string()) fail("{} is {}, expected a string", json_member(where, key), json_excerpt(value));
  return value.get<std::string>();
}

double json_number(const nlohmann::json& object, std::string_view key, std::string_view where) {
  const nlohmann::json& value = json_required(object, key, where);
  if (!value.is_number()) fail("{} is {}, expected a number", json_member(where, key), json_excerpt(value));
  return value.get<double>();
}

bool json_bool(const nlohmann::json& object, std::string_view key, bool fallback, std::string_view where) {
  expect_json_object(object, where);
  auto found = object.find(key);
  if (found == object.end() || found->is_null()) return fallback;
  if (!found->is_boolean()) fail("{} is {}, expected true or false", json_member(where, key), json_excerpt(*found));
  return found->get<bool>();
}

void json_for_each_item(const nlohmann::json& object, std::string_view key, std::string_view where,
                        const std::function<void(const nlohmann::json& item, const std::string& item_where)>& visit) {
  const nlohmann::json& list = json_required(object, key, where);
  const std::string list_where = json_member(where, key);
  if (!list.is_array()) fail("{} is {}, expected a list", list_where, json_excerpt(list));
  for (size_t i = 0; i < list.size(); ++i) visit(list[i], fmt::format("{}[{}]", list_where, i));
}

}  // namespace strata
