#include "backends/opencl/launch.h"

namespace strata::opencl {

Launch::Launch(const Tensor& first, const std::string& source, const std::string& kernel_name)
    : Launch(device_of(first), source, kernel_name) {}

Launch::Launch(const OpenCLDevice& device, const std::string& source, const std::string& kernel_name)
    : device_(device), kernel_(device.kernel(source, kernel_name)) {
  lock_ = std::unique_lock(device.launch_mutex());
}

Launch& Launch::tensor(const Tensor& tensor) {
  STRATA_CHECK(&device_of(tensor) == &device_, "kernel argument on {}, the launch is on {}", tensor.device().name(),
               device_.name());
  const cl_mem memory = memory_of(tensor.buffer());
  const cl_ulong offset = tensor.offset_bytes() / dtype_size(tensor.dtype());
  check(clSetKernelArg(kernel_, next_++, sizeof(cl_mem), &memory), "clSetKernelArg");
  check(clSetKernelArg(kernel_, next_++, sizeof(cl_ulong), &offset), "clSetKernelArg");
  return *this;
}

void Launch::run(size_t global, size_t local) {
  if (global == 0) return;
  if (local > 0) global = round_up(global, local);
  check(clEnqueueNDRangeKernel(device_.queue(), kernel_, 1, nullptr, &global, local > 0 ? &local : nullptr, 0, nullptr,
                               nullptr),
        "clEnqueueNDRangeKernel");
}

void Launch::run(size_t global0, size_t global1, size_t local0, size_t local1) {
  if (global0 == 0 || global1 == 0) return;
  const size_t global[2] = {round_up(global0, local0), round_up(global1, local1)};
  const size_t local[2] = {local0, local1};
  check(clEnqueueNDRangeKernel(device_.queue(), kernel_, 2, nullptr, global, local, 0, nullptr, nullptr),
        "clEnqueueNDRangeKernel");
}

}  // namespace strata::opencl
