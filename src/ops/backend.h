#pragma once
// A backend is a named table of kernels keyed by (op, dtype).
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ops/schema.h"

namespace strata {

class Backend {
 public:
  explicit Backend(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  void add_kernel(const std::string& op, DType dtype, KernelFn kernel);
  const KernelFn* find(const std::string& op, DType dtype) const;  // nullptr when absent
  std::vector<std::pair<std::string, DType>> kernels() const;

 private:
  std::string name_;
  std::map<std::pair<std::string, DType>, KernelFn> kernels_;
};

}  // namespace strata
