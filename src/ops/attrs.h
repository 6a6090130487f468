#pragma once
// Op attributes: small named constants fixed when a node is built.
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace strata {

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, AttrValue>> values) : values_(values) {}

  void set(const std::string& name, AttrValue value) { values_[name] = std::move(value); }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::map<std::string, AttrValue>& values() const { return values_; }
  std::string str() const;  // "{n_head=4, trans_b=true}" for reports

 private:
  const AttrValue& get(const std::string& name) const;
  std::map<std::string, AttrValue> values_;
};

}  // namespace strata
