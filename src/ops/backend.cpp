#include "ops/backend.h"

namespace strata {

void Backend::add_kernel(const std::string& op, DType dtype, KernelFn kernel) {
  STRATA_CHECK(OpRegistry::global().contains(op), "backend '{}' registers a kernel for unknown op '{}'", name_, op);
  bool inserted = kernels_.emplace(std::make_pair(op, dtype), std::move(kernel)).second;
  STRATA_CHECK(inserted, "backend '{}' registers {} {} twice", name_, op, dtype_name(dtype));
}

void Backend::add_emulated_kernel(const std::string& op, DType dtype, KernelFn kernel) {
  add_kernel(op, dtype, std::move(kernel));
  emulated_.insert({op, dtype});
}

void Backend::remove_kernel(const std::string& op, DType dtype) {
  STRATA_CHECK(kernels_.erase({op, dtype}) == 1, "backend '{}' has no {} kernel for '{}' to remove", name_,
               dtype_name(dtype), op);
  emulated_.erase({op, dtype});
}

bool Backend::is_emulated(const std::string& op, DType dtype) const { return emulated_.count({op, dtype}) != 0; }

const KernelFn* Backend::find(const std::string& op, DType dtype) const {
  auto found = kernels_.find({op, dtype});
  return found == kernels_.end() ? nullptr : &found->second;
}

std::vector<std::pair<std::string, DType>> Backend::kernels() const {
  std::vector<std::pair<std::string, DType>> keys;
  for (const auto& entry : kernels_) keys.push_back(entry.first);
  return keys;
}

}  // namespace strata
