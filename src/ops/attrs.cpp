#include "ops/attrs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace strata {

const AttrValue& Attrs::get(const std::string& name) const {
  auto found = values_.find(name);
  if (found == values_.end()) fail("missing op attribute '{}'", name);
  return found->second;
}

int64_t Attrs::get_int(const std::string& name) const {
  const AttrValue& value = get(name);
  if (const auto* integer = std::get_if<int64_t>(&value)) return *integer;
  fail("op attribute '{}' is not an integer", name);
}

double Attrs::get_float(const std::string& name) const {
  const AttrValue& value = get(name);
  if (const auto* real = std::get_if<double>(&value)) return *real;
  if (const auto* integer = std::get_if<int64_t>(&value)) return static_cast<double>(*integer);
  fail("op attribute '{}' is not a number", name);
}

bool Attrs::get_bool(const std::string& name) const {
  const AttrValue& value = get(name);
  if (const auto* flag = std::get_if<bool>(&value)) return *flag;
  fail("op attribute '{}' is not a boolean", name);
}

const std::string& Attrs::get_string(const std::string& name) const {
  const AttrValue& value = get(name);
  if (const auto* text = std::get_if<std::string>(&value)) return *text;
  fail("op attribute '{}' is not a string", name);
}

const std::vector<int64_t>& Attrs::get_ints(const std::string& name) const {
  const AttrValue& value = get(name);
  if (const auto* list = std::get_if<std::vector<int64_t>>(&value)) return *list;
  fail("op attribute '{}' is not an integer list", name);
}

std::string Attrs::str() const {
  std::vector<std::string> parts;
  for (const auto& [name, value] : values_) {
    std::string text = std::visit(
        [](const auto& v) -> std::string {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) return v ? "true" : "false";
          else if constexpr (std::is_same_v<V, std::vector<int64_t>>) return fmt::format("[{}]", fmt::join(v, ","));
          else return fmt::format("{}", v);
        },
        value);
    parts.push_back(name + "=" + text);
  }
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

}  // namespace strata
