#pragma once
// Strict reading of TOML: every lookup names the source (a file, or e.g.
// "--set") and the full dotted key when the value is missing, of the wrong type
// or out of range, and tables reject keys nobody reads. One wording for all:
//   <source>:<line>:<column>: invalid TOML: <what>
//   <source>: unknown key 'a.b' (expected one of: c, d)
//   <source>: missing key 'a.b'            <source>: missing table [a]
//   <source>: key 'a.b' must be an integer, got a string
//   <source>: key 'a.b' must be positive, got -1
#include <toml++/toml.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

namespace strata {

class TomlReader {
 public:
  // Fails with the source, line and column of a syntax error.
  static TomlReader parse(std::string_view text, const std::string& source);
  TomlReader(toml::table table, std::string source);

  // A sub-table; `required` false gives an empty reader when it is absent.
  TomlReader table(const std::string& key, bool required = true) const;
  bool has(const std::string& key) const;
  bool has_table(const std::string& key) const;  // present and a table
  std::vector<std::string> keys() const;
  // Every value below this table (inner tables walked), under its full dotted key, as TOML text:
  // {"model.n_layer": "4", "ops.backend": "'cpu'"}. For showing what two configs set differently.
  std::map<std::string, std::string> leaf_texts() const;

  std::string string(const std::string& key) const;
  std::string non_empty_string(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;  // an array of strings
  std::vector<int64_t> integers(const std::string& key) const;     // an array of integers
  bool boolean(const std::string& key) const;
  // `key` into the field `target` points at, read as that field's type (a config's list of typed fields).
  using Target = std::variant<int64_t*, double*, std::string*, bool*, std::vector<std::string>*>;
  void read_into(const std::string& key, const Target& target) const;
  int64_t integer(const std::string& key, int64_t at_least = std::numeric_limits<int64_t>::min(),
                  int64_t at_most = std::numeric_limits<int64_t>::max()) const;
  double number(const std::string& key) const;        // finite; integers are accepted
  double positive(const std::string& key) const;      // > 0
  double non_negative(const std::string& key) const;  // >= 0
  double fraction(const std::string& key) const;      // in (0, 1]
  // `key = [[x, y], ...]`: finite numbers, x positive and increasing from entry
  // to entry (a figure sampled at growing sizes); `x_name` and `y_name` name
  // them in messages.
  std::vector<std::pair<double, double>> curve(const std::string& key, const std::string& x_name,
                                               const std::string& y_name) const;

  // `key = [[a, b, ...], ...]`: rows of finite numbers, each as long as
  // `columns`, which name the fields in messages (a table of measurements).
  std::vector<std::vector<double>> rows(const std::string& key, const std::vector<std::string>& columns) const;

  // Fails naming the first key outside `allowed` and listing `allowed`.
  void only(const std::set<std::string>& allowed) const;

  // "<source>: key 'a.b' <problem>": for checks only the caller knows.
  [[noreturn]] void fail_key(const std::string& key, const std::string& problem) const;
  template <typename Value>
  [[noreturn]] void fail_range(const std::string& key, const std::string& requirement, const Value& value) const {
    fail_key(key, fmt::format("must be {}, got {}", requirement, value));
  }

  std::string path(const std::string& key) const;  // the full dotted key
  const std::string& source() const { return source_; }

 private:
  TomlReader(std::shared_ptr<const toml::table> document, const toml::table& table, std::string source,
             std::string prefix);
  const toml::node& get(const std::string& key) const;
  [[noreturn]] void fail_type(const std::string& key, const toml::node& node, const std::string& expected) const;

  std::shared_ptr<const toml::table> document_;  // keeps table_ alive
  const toml::table* table_;
  std::string source_;
  std::string prefix_;
};

}  // namespace strata
