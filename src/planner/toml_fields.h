#pragma once
// Strict reading of the planner's TOML files: every lookup names the file and
// the dotted key when the value is missing, of the wrong type or out of range,
// and tables reject keys nobody reads.
#include <toml++/toml.h>

#include <set>
#include <string>

namespace strata {

class TomlFields {
 public:
  TomlFields(const toml::table& table, std::string source, std::string prefix = "");

  // A sub-table; `required` false returns an empty reader when it is absent.
  TomlFields table(const std::string& key, bool required = true) const;
  bool has(const std::string& key) const;

  std::string string(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t at_least) const;
  double number(const std::string& key) const;        // finite
  double positive(const std::string& key) const;      // > 0
  double non_negative(const std::string& key) const;  // >= 0
  double fraction(const std::string& key) const;      // in (0, 1]
  const toml::array& array(const std::string& key) const;

  // Fails naming the first key outside `allowed`.
  void only(const std::set<std::string>& allowed) const;
  std::string path(const std::string& key) const;  // "file: key 'a.b'"
  const toml::table& raw() const { return *table_; }
  const std::string& source() const { return source_; }

 private:
  const toml::node& get(const std::string& key) const;

  const toml::table* table_;
  std::string source_;
  std::string prefix_;
};

// Parses TOML text, failing with the file, line and column of a syntax error.
toml::table parse_toml_text(const std::string& text, const std::string& source);

}  // namespace strata
