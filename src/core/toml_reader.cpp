#include "core/toml_reader.h"

#include <cmath>
#include <optional>
#include <sstream>
#include <type_traits>

#include <fmt/ranges.h>

#include "core/error.h"

namespace strata {

namespace {

const toml::table& empty_table() {
  static const toml::table empty;
  return empty;
}

const char* type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

// Integers count as numbers: `lr = 1` means 1.0.
std::optional<double> as_number(const toml::node& node) {
  if (auto value = node.value_exact<double>()) return *value;
  if (auto value = node.value_exact<int64_t>()) return static_cast<double>(*value);
  return std::nullopt;
}

}  // namespace

namespace {

void collect_leaf_texts(const toml::table& table, const std::string& prefix, std::map<std::string, std::string>& out) {
  for (const auto& [key, node] : table) {
    const std::string dotted = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
    if (const toml::table* inner = node.as_table()) {
      collect_leaf_texts(*inner, dotted, out);
      continue;
    }
    std::ostringstream text;
    node.visit([&](const auto& leaf) { text << toml::toml_formatter(leaf, toml::format_flags::none); });
    out[dotted] = text.str();
  }
}

}  // namespace

std::map<std::string, std::string> TomlReader::leaf_texts() const {
  std::map<std::string, std::string> texts;
  collect_leaf_texts(*table_, prefix_, texts);
  return texts;
}

TomlReader TomlReader::parse(std::string_view text, const std::string& source) {
  try {
    return TomlReader(toml::parse(text, source), source);
  } catch (const toml::parse_error& error) {
    fail("{}:{}:{}: invalid TOML: {}", source, error.source().begin.line, error.source().begin.column,
         error.description());
  }
}

TomlReader::TomlReader(toml::table table, std::string source)
    : document_(std::make_shared<const toml::table>(std::move(table))),
      table_(document_.get()),
      source_(std::move(source)) {}

TomlReader::TomlReader(std::shared_ptr<const toml::table> document, const toml::table& table, std::string source,
                       std::string prefix)
    : document_(std::move(document)), table_(&table), source_(std::move(source)), prefix_(std::move(prefix)) {}

std::string TomlReader::path(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

bool TomlReader::has(const std::string& key) const { return table_->contains(key); }

bool TomlReader::has_table(const std::string& key) const {
  const toml::node* node = table_->get(key);
  return node != nullptr && node->is_table();
}

std::vector<std::string> TomlReader::keys() const {
  std::vector<std::string> names;
  for (const auto& [key, node] : *table_) names.emplace_back(key.str());
  return names;
}

void TomlReader::fail_key(const std::string& key, const std::string& problem) const {
  fail("{}: key '{}' {}", source_, path(key), problem);
}

void TomlReader::fail_type(const std::string& key, const toml::node& node, const std::string& expected) const {
  fail_key(key, fmt::format("must be {}, got {}", expected, type_name(node)));
}

const toml::node& TomlReader::get(const std::string& key) const {
  const toml::node* node = table_->get(key);
  if (node == nullptr) fail("{}: missing key '{}'", source_, path(key));
  return *node;
}

TomlReader TomlReader::table(const std::string& key, bool required) const {
  const toml::node* node = table_->get(key);
  if (node == nullptr) {
    if (required) fail("{}: missing table [{}]", source_, path(key));
    return TomlReader(document_, empty_table(), source_, path(key));
  }
  const toml::table* child = node->as_table();
  if (child == nullptr) fail_type(key, *node, "a table");
  return TomlReader(document_, *child, source_, path(key));
}

std::string TomlReader::string(const std::string& key) const {
  const toml::node& node = get(key);
  auto value = node.value_exact<std::string>();
  if (!value) fail_type(key, node, "a string");
  return *value;
}

std::string TomlReader::non_empty_string(const std::string& key) const {
  std::string value = string(key);
  if (value.empty()) fail_key(key, "must not be empty");
  return value;
}

std::vector<std::string> TomlReader::strings(const std::string& key) const {
  const toml::node& node = get(key);
  const toml::array* array = node.as_array();
  if (array == nullptr) fail_type(key, node, "an array of strings");
  std::vector<std::string> values;
  for (size_t i = 0; i < array->size(); ++i) {
    auto value = (*array)[i].value_exact<std::string>();
    if (!value) fail_key(key, fmt::format("entry {} must be a string, got {}", i, type_name((*array)[i])));
    values.push_back(*value);
  }
  return values;
}

std::vector<int64_t> TomlReader::integers(const std::string& key) const {
  const toml::node& node = get(key);
  const toml::array* array = node.as_array();
  if (array == nullptr) fail_type(key, node, "an array of integers");
  std::vector<int64_t> values;
  for (size_t i = 0; i < array->size(); ++i) {
    auto value = (*array)[i].value_exact<int64_t>();
    if (!value) fail_key(key, fmt::format("entry {} must be an integer, got {}", i, type_name((*array)[i])));
    values.push_back(*value);
  }
  return values;
}

bool TomlReader::boolean(const std::string& key) const {
  const toml::node& node = get(key);
  auto value = node.value_exact<bool>();
  if (!value) fail_type(key, node, "a boolean");
  return *value;
}

void TomlReader::read_into(const std::string& key, const Target& target) const {
  std::visit(
      [&](auto* field) {
        using T = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<T, int64_t>) *field = integer(key);
        else if constexpr (std::is_same_v<T, double>) *field = number(key);
        else if constexpr (std::is_same_v<T, std::string>) *field = string(key);
        else if constexpr (std::is_same_v<T, bool>) *field = boolean(key);
        else *field = strings(key);
      },
      target);
}

int64_t TomlReader::integer(const std::string& key, int64_t at_least, int64_t at_most) const {
  const toml::node& node = get(key);
  auto value = node.value_exact<int64_t>();
  if (!value) fail_type(key, node, "an integer");
  if (*value < at_least || *value > at_most) {
    if (at_most == std::numeric_limits<int64_t>::max()) fail_range(key, fmt::format("at least {}", at_least), *value);
    fail_range(key, fmt::format("in [{}, {}]", at_least, at_most), *value);
  }
  return *value;
}

double TomlReader::number(const std::string& key) const {
  const toml::node& node = get(key);
  std::optional<double> value = as_number(node);
  if (!value) fail_type(key, node, "a number");
  if (!std::isfinite(*value)) fail_range(key, "finite", *value);
  return *value;
}

double TomlReader::positive(const std::string& key) const {
  double value = number(key);
  if (!(value > 0)) fail_range(key, "positive", value);
  return value;
}

double TomlReader::non_negative(const std::string& key) const {
  double value = number(key);
  if (value < 0) fail_range(key, "at least 0", value);
  return value;
}

double TomlReader::fraction(const std::string& key) const {
  double value = number(key);
  if (!(value > 0 && value <= 1)) fail_range(key, "in (0, 1]", value);
  return value;
}

std::vector<std::pair<double, double>> TomlReader::curve(const std::string& key, const std::string& x_name,
                                                         const std::string& y_name) const {
  const toml::node& node = get(key);
  const toml::array* rows = node.as_array();
  if (rows == nullptr) fail_type(key, node, fmt::format("an array of [{}, {}] pairs", x_name, y_name));
  std::vector<std::pair<double, double>> points;
  for (size_t i = 0; i < rows->size(); ++i) {
    const toml::array* row = (*rows)[i].as_array();
    std::optional<double> x, y;
    if (row != nullptr && row->size() == 2) {
      x = as_number((*row)[0]);
      y = as_number((*row)[1]);
    }
    if (!x || !y || !std::isfinite(*x) || !std::isfinite(*y)) {
      fail_key(key, fmt::format("entry {} must be a pair [{}, {}] of finite numbers", i, x_name, y_name));
    }
    if (!(*x > 0)) fail_key(key, fmt::format("entry {}: {} must be positive, got {}", i, x_name, *x));
    if (!points.empty() && !(*x > points.back().first)) {
      fail_key(key, fmt::format("entry {}: {} must increase from entry to entry, got {} after {}", i, x_name, *x,
                                points.back().first));
    }
    points.emplace_back(*x, *y);
  }
  return points;
}

std::vector<std::vector<double>> TomlReader::rows(const std::string& key,
                                                  const std::vector<std::string>& columns) const {
  const std::string shape = fmt::format("[{}]", fmt::join(columns, ", "));
  const toml::node& node = get(key);
  const toml::array* list = node.as_array();
  if (list == nullptr) fail_type(key, node, "an array of " + shape + " rows");
  std::vector<std::vector<double>> result;
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::array* row = (*list)[i].as_array();
    std::vector<double> values;
    for (size_t j = 0; row != nullptr && row->size() == columns.size() && j < row->size(); ++j) {
      std::optional<double> value = as_number((*row)[j]);
      if (!value || !std::isfinite(*value)) break;
      values.push_back(*value);
    }
    if (values.size() != columns.size()) fail_key(key, fmt::format("entry {} must be {} (finite numbers)", i, shape));
    result.push_back(std::move(values));
  }
  return result;
}

void TomlReader::only(const std::set<std::string>& allowed) const {
  for (const auto& [key, node] : *table_) {
    std::string name(key.str());
    if (!allowed.count(name)) {
      fail("{}: unknown key '{}' (expected one of: {})", source_, path(name), fmt::join(allowed, ", "));
    }
  }
}

}  // namespace strata
