#pragma once
// Typed reads of an untrusted JSON object's members (tokenizer.json, run records). `where`
// names the object read, as "'FILE'" or "'FILE': KEY.PATH", so every error
// names the file and the key at fault ("'t.json': model.merges[3] is 7, ...").
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace strata {

// "WHERE.KEY", the name of a member of the object `where` names ("'FILE': KEY"
// when `where` is the quoted file itself).
std::string json_member(std::string_view where, std::string_view key);

// object[key], which must exist; `object` must be a JSON object.
const nlohmann::json& json_required(const nlohmann::json& object, std::string_view key, std::string_view where);

std::string json_string(const nlohmann::json& object, std::string_view key, std::string_view where);

// object[key] as a bool; missing or null gives `fallback`, as HuggingFace's defaults do.
bool json_bool(const nlohmann::json& object, std::string_view key, bool fallback, std::string_view where);

// object[key] as a finite number (integers accepted).
double json_number(const nlohmann::json& object, std::string_view key, std::string_view where);

// object[key], which must be a list, item by item with each item's name ("WHERE.KEY[i]").
void json_for_each_item(const nlohmann::json& object, std::string_view key, std::string_view where,
                        const std::function<void(const nlohmann::json& item, const std::string& item_where)>& visit);

// Fails unless `value` is an object, naming it.
void expect_json_object(const nlohmann::json& value, std::string_view where);

}  // namespace strata
