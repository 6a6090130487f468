#pragma once
// One kernel launch: arguments in the kernel's order, then the NDRange. A tensor is two
// arguments, its memory object and its offset in elements (kernels add it to the pointer), as
// views into an arena start anywhere and OpenCL sub-buffers need aligned origins.
#include <mutex>
#include <string>

#include "backends/opencl/opencl_device.h"

namespace strata::opencl {

class Launch {
 public:
  // The device is the one `first` lives on; every tensor argument must live there too.
  Launch(const Tensor& first, const std::string& source, const std::string& kernel_name);
  Launch(const OpenCLDevice& device, const std::string& source, const std::string& kernel_name);

  Launch& tensor(const Tensor& tensor);
  template <typename T>
  Launch& value(T scalar) {
    check(clSetKernelArg(kernel_, next_++, sizeof(T), &scalar), "clSetKernelArg");
    return *this;
  }
  // Work-items over `global` (rounded up to a multiple of `local`; kernels check their bound),
  // in groups of `local` (0: the driver's choice).
  void run(size_t global, size_t local = 0);
  void run(size_t global0, size_t global1, size_t local0, size_t local1);

  const OpenCLDevice& device() const { return device_; }

 private:
  const OpenCLDevice& device_;
  std::unique_lock<std::mutex> lock_;
  cl_kernel kernel_;
  cl_uint next_ = 0;
};

inline size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace strata::opencl
