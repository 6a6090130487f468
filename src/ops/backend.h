#pragma once
// A backend is a named table of kernels keyed by (op, dtype).
#include <map>
#include <set>
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
  // A kernel that computes `dtype` in a wider type (e.g. f16 through f32 on a
  // CPU without f16 arithmetic): correct, but the dispatcher reports it like a
  // fallback so a migration sees that the hardware lacks the dtype.
  void add_emulated_kernel(const std::string& op, DType dtype, KernelFn kernel);
  const KernelFn* find(const std::string& op, DType dtype) const;  // nullptr when absent
  bool is_emulated(const std::string& op, DType dtype) const;
  std::vector<std::pair<std::string, DType>> kernels() const;

 private:
  std::string name_;
  std::map<std::pair<std::string, DType>, KernelFn> kernels_;
  std::set<std::pair<std::string, DType>> emulated_;
};

}  // namespace strata
