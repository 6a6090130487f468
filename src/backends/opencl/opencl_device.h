#pragma once
// An OpenCL device on the device seam (core/device.h): its buffers are cl_mem objects, its queue
// one in-order command queue with profiling on (events time kernels by the device's clock), and
// its kernels OpenCL C programs built once per device and kept on disk (program_cache.h).
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/opencl/opencl_api.h"
#include "core/device.h"
#include "core/tensor.h"

namespace strata::opencl {

// What `strata topo` lists and `ops.device` chooses among: every device of every platform, numbered
// in the order the platforms report them.
struct DeviceInfo {
  int index = 0;
  std::string platform;
  std::string name;
  std::string vendor;
  std::string version;         // the device's OpenCL version
  std::string driver_version;
  size_t memory_bytes = 0;
  size_t max_allocation = 0;
  int compute_units = 0;
  bool fp16 = false;  // cl_khr_fp16
  bool fp64 = false;  // cl_khr_fp64
  cl_platform_id platform_id = nullptr;
  cl_device_id device_id = nullptr;
};

std::vector<DeviceInfo> list_devices();  // empty when no OpenCL driver is installed

class OpenCLDevice final : public Device {
 public:
  // `cache_dir`: where compiled programs are kept (program_cache.h's default when empty).
  explicit OpenCLDevice(DeviceInfo info, std::filesystem::path cache_dir = {});
  ~OpenCLDevice() override;
  OpenCLDevice(const OpenCLDevice&) = delete;
  OpenCLDevice& operator=(const OpenCLDevice&) = delete;

  std::string name() const override;
  DeviceCapabilities capabilities() const override;
  std::shared_ptr<Buffer> allocate(size_t bytes) const override;
  void copy_to_host(const Buffer& source, size_t offset, void* target, size_t bytes) const override;
  void copy_from_host(const void* source, const Buffer& target, size_t offset, size_t bytes) const override;
  std::shared_ptr<DeviceEvent> copy_to_host_async(const Buffer& source, size_t offset, void* target,
                                                  size_t bytes) const override;
  void copy(const Buffer& source, size_t source_offset, const Buffer& target, size_t target_offset,
            size_t bytes) const override;
  void fill_zero(const Buffer& target, size_t offset, size_t bytes) const override;
  std::shared_ptr<DeviceEvent> record() const override;
  void synchronize() const override;

  const DeviceInfo& info() const { return info_; }
  cl_context context() const { return context_; }
  cl_command_queue queue() const { return queue_; }
  // Kernel `kernel_name` of the program `source` (OpenCL C), built for this device on first use:
  // from the disk cache when it holds this source for this device and driver, else compiled and
  // stored there. Thread-safe; the kernel object is shared, so set its arguments under launch_mutex().
  cl_kernel kernel(const std::string& source, const std::string& kernel_name) const;
  std::mutex& launch_mutex() const { return launch_mutex_; }
  // Programs this device object compiled from source and loaded from the disk cache.
  int programs_compiled() const { return compiled_; }
  int programs_loaded() const { return loaded_; }

 private:
  struct Program {
    cl_program program = nullptr;
    std::map<std::string, cl_kernel> kernels;
  };
  Program& program_for(const std::string& source) const;

  DeviceInfo info_;
  std::filesystem::path cache_dir_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  mutable std::mutex programs_mutex_;
  mutable std::map<std::string, Program> programs_;  // by source text
  mutable std::mutex launch_mutex_;
  mutable int compiled_ = 0;
  mutable int loaded_ = 0;
};

// The device `selector` names: "" for the first, an index into list_devices(), or a substring of
// a device's name or platform (case-insensitive). One object per device for the whole process.
const OpenCLDevice& open_device(const std::string& selector);

// The device and the memory object behind an OpenCL tensor (an error naming `what` otherwise).
const OpenCLDevice& device_of(const Tensor& tensor);
cl_mem memory_of(const Buffer& buffer);

}  // namespace strata::opencl
