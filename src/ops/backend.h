#pragma once
// A backend is a named table of kernels keyed by (op, dtype), on one device
// (core/device.h): its kernels read and write tensors in that device's memory.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ops/schema.h"

namespace strata {

class Backend {
 public:
  explicit Backend(std::string name, const Device& device = host_device()) : name_(std::move(name)), device_(&device) {}
  const std::string& name() const { return name_; }
  const Device& device() const { return *device_; }

  void add_kernel(const std::string& op, DType dtype, KernelFn kernel);
  // A kernel that computes `dtype` in a wider type (e.g. f16 through f32 on a
  // CPU without f16 arithmetic): correct, but the dispatcher reports it like a
  // fallback so a migration sees that the hardware lacks the dtype.
  void add_emulated_kernel(const std::string& op, DType dtype, KernelFn kernel);
  // Takes a kernel out of the table (tests: a device that lacks one op, to see its fallback and transfers).
  void remove_kernel(const std::string& op, DType dtype);
  const KernelFn* find(const std::string& op, DType dtype) const;  // nullptr when absent
  bool is_emulated(const std::string& op, DType dtype) const;
  std::vector<std::pair<std::string, DType>> kernels() const;

 private:
  std::string name_;
  const Device* device_;
  std::map<std::pair<std::string, DType>, KernelFn> kernels_;
  std::set<std::pair<std::string, DType>> emulated_;
};

}  // namespace strata
