#include "backends/opencl/opencl_device.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "backends/opencl/program_cache.h"

namespace strata::opencl {

namespace {

std::string device_string(cl_device_id device, cl_device_info what) {
  size_t size = 0;
  check(clGetDeviceInfo(device, what, 0, nullptr, &size), "clGetDeviceInfo");
  std::string text(size, '\0');
  check(clGetDeviceInfo(device, what, size, text.data(), nullptr), "clGetDeviceInfo");
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

template <typename T>
T device_value(cl_device_id device, cl_device_info what) {
  T value{};
  check(clGetDeviceInfo(device, what, sizeof(T), &value, nullptr), "clGetDeviceInfo");
  return value;
}

std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  size_t size = 0;
  check(clGetPlatformInfo(platform, what, 0, nullptr, &size), "clGetPlatformInfo");
  std::string text(size, '\0');
  check(clGetPlatformInfo(platform, what, size, text.data(), nullptr), "clGetPlatformInfo");
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

bool has_extension(const std::string& extensions, std::string_view name) {
  size_t at = 0;
  while ((at = extensions.find(name, at)) != std::string::npos) {
    size_t end = at + name.size();
    if ((at == 0 || extensions[at - 1] == ' ') && (end == extensions.size() || extensions[end] == ' ')) return true;
    at = end;
  }
  return false;
}

class OpenCLEvent final : public DeviceEvent {
 public:
  explicit OpenCLEvent(cl_event event) : event_(event) {}
  ~OpenCLEvent() override { clReleaseEvent(event_); }
  void wait() const override { check(clWaitForEvents(1, &event_), "clWaitForEvents"); }
  bool done() const override {
    cl_int status = CL_QUEUED;
    check(clGetEventInfo(event_, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, nullptr),
          "clGetEventInfo");
    if (status < 0) fail("OpenCL: a queued command failed: {} ({})", status_name(status), status);
    return status == CL_COMPLETE;
  }
  double seconds_since(const DeviceEvent& earlier) const override {
    const auto& other = static_cast<const OpenCLEvent&>(earlier);
    return static_cast<double>(other.end_ns() > end_ns() ? 0 : end_ns() - other.end_ns()) * 1e-9;
  }

 private:
  cl_ulong end_ns() const {
    wait();
    cl_ulong time = 0;
    check(clGetEventProfilingInfo(event_, CL_PROFILING_COMMAND_END, sizeof(time), &time, nullptr),
          "clGetEventProfilingInfo");
    return time;
  }
  cl_event event_;
};

void release_memory(void* handle) { clReleaseMemObject(static_cast<cl_mem>(handle)); }

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

std::vector<DeviceInfo> list_devices() {
  cl_uint platform_count = 0;
  if (clGetPlatformIDs(0, nullptr, &platform_count) != CL_SUCCESS || platform_count == 0) return {};
  std::vector<cl_platform_id> platforms(platform_count);
  check(clGetPlatformIDs(platform_count, platforms.data(), nullptr), "clGetPlatformIDs");
  std::vector<DeviceInfo> devices;
  for (cl_platform_id platform : platforms) {
    cl_uint count = 0;
    if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &count) != CL_SUCCESS || count == 0) continue;
    std::vector<cl_device_id> ids(count);
    check(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, count, ids.data(), nullptr), "clGetDeviceIDs");
    for (cl_device_id id : ids) {
      DeviceInfo info;
      info.index = static_cast<int>(devices.size());
      info.platform = platform_string(platform, CL_PLATFORM_NAME);
      info.name = device_string(id, CL_DEVICE_NAME);
      info.vendor = device_string(id, CL_DEVICE_VENDOR);
      info.version = device_string(id, CL_DEVICE_VERSION);
      info.driver_version = device_string(id, CL_DRIVER_VERSION);
      info.memory_bytes = device_value<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE);
      info.max_allocation = device_value<cl_ulong>(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
      info.compute_units = static_cast<int>(device_value<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS));
      const std::string extensions = device_string(id, CL_DEVICE_EXTENSIONS);
      info.fp16 = has_extension(extensions, "cl_khr_fp16");
      info.fp64 = has_extension(extensions, "cl_khr_fp64");
      info.platform_id = platform;
      info.device_id = id;
      devices.push_back(std::move(info));
    }
  }
  return devices;
}

OpenCLDevice::OpenCLDevice(DeviceInfo info, std::filesystem::path cache_dir)
    : info_(std::move(info)), cache_dir_(cache_dir.empty() ? default_program_cache_dir() : std::move(cache_dir)) {
  cl_int status = CL_SUCCESS;
  const cl_context_properties properties[] = {CL_CONTEXT_PLATFORM,
                                              reinterpret_cast<cl_context_properties>(info_.platform_id), 0};
  context_ = clCreateContext(properties, 1, &info_.device_id, nullptr, nullptr, &status);
  check(status, fmt::format("clCreateContext for {}", info_.name));
  queue_ = clCreateCommandQueue(context_, info_.device_id, CL_QUEUE_PROFILING_ENABLE, &status);
  check(status, fmt::format("clCreateCommandQueue for {}", info_.name));
}

OpenCLDevice::~OpenCLDevice() {
  for (auto& [source, program] : programs_) {
    for (auto& [name, kernel] : program.kernels) clReleaseKernel(kernel);
    clReleaseProgram(program.program);
  }
  if (queue_) clReleaseCommandQueue(queue_);
  if (context_) clReleaseContext(context_);
}

std::string OpenCLDevice::name() const { return fmt::format("opencl:{} {}", info_.index, info_.name); }

DeviceCapabilities OpenCLDevice::capabilities() const {
  DeviceCapabilities capabilities;
  capabilities.native_dtypes.push_back(DType::F32);
  if (info_.fp16) capabilities.native_dtypes.push_back(DType::F16);
  if (info_.fp64) capabilities.native_dtypes.push_back(DType::F64);
  capabilities.max_allocation = info_.max_allocation;
  capabilities.memory_bytes = info_.memory_bytes;
  return capabilities;
}

std::shared_ptr<Buffer> OpenCLDevice::allocate(size_t bytes) const {
  if (bytes > info_.max_allocation) {
    fail("{}: a buffer of {} bytes is over the device's largest allocation, {} bytes", name(), bytes,
         info_.max_allocation);
  }
  cl_int status = CL_SUCCESS;
  cl_mem memory = clCreateBuffer(context_, CL_MEM_READ_WRITE, std::max<size_t>(bytes, kTensorAlignment), nullptr,
                                 &status);
  check(status, fmt::format("clCreateBuffer of {} bytes on {}", bytes, name()));
  return Buffer::on_device(*this, memory, bytes, release_memory);
}

cl_mem memory_of(const Buffer& buffer) { return static_cast<cl_mem>(buffer.handle()); }

void OpenCLDevice::copy_to_host(const Buffer& source, size_t offset, void* target, size_t bytes) const {
  if (bytes == 0) return;
  check(clEnqueueReadBuffer(queue_, memory_of(source), CL_TRUE, offset, bytes, target, 0, nullptr, nullptr),
        "clEnqueueReadBuffer");
}

void OpenCLDevice::copy_from_host(const void* source, const Buffer& target, size_t offset, size_t bytes) const {
  if (bytes == 0) return;
  check(clEnqueueWriteBuffer(queue_, memory_of(target), CL_TRUE, offset, bytes, source, 0, nullptr, nullptr),
        "clEnqueueWriteBuffer");
}

std::shared_ptr<DeviceEvent> OpenCLDevice::copy_to_host_async(const Buffer& source, size_t offset, void* target,
                                                              size_t bytes) const {
  if (bytes == 0) return record();
  cl_event event = nullptr;
  check(clEnqueueReadBuffer(queue_, memory_of(source), CL_FALSE, offset, bytes, target, 0, nullptr, &event),
        "clEnqueueReadBuffer");
  check(clFlush(queue_), "clFlush");  // submitted now, so that done() can become true while the host goes on
  return std::make_shared<OpenCLEvent>(event);
}

void OpenCLDevice::copy(const Buffer& source, size_t source_offset, const Buffer& target, size_t target_offset,
                        size_t bytes) const {
  if (bytes == 0) return;
  check(clEnqueueCopyBuffer(queue_, memory_of(source), memory_of(target), source_offset, target_offset, bytes, 0,
                            nullptr, nullptr),
        "clEnqueueCopyBuffer");
}

void OpenCLDevice::fill_zero(const Buffer& target, size_t offset, size_t bytes) const {
  if (bytes == 0) return;
  const cl_uchar zero = 0;
  check(clEnqueueFillBuffer(queue_, memory_of(target), &zero, 1, offset, bytes, 0, nullptr, nullptr),
        "clEnqueueFillBuffer");
}

std::shared_ptr<DeviceEvent> OpenCLDevice::record() const {
  cl_event event = nullptr;
  check(clEnqueueMarkerWithWaitList(queue_, 0, nullptr, &event), "clEnqueueMarkerWithWaitList");
  return std::make_shared<OpenCLEvent>(event);
}

void OpenCLDevice::synchronize() const { check(clFinish(queue_), "clFinish"); }

OpenCLDevice::Program& OpenCLDevice::program_for(const std::string& source) const {
  auto found = programs_.find(source);
  if (found != programs_.end()) return found->second;
  ProgramBuild build = build_program(context_, info_, source, cache_dir_);
  (build.from_cache ? loaded_ : compiled_) += 1;
  return programs_.emplace(source, Program{build.program, {}}).first->second;
}

cl_kernel OpenCLDevice::kernel(const std::string& source, const std::string& kernel_name) const {
  std::lock_guard lock(programs_mutex_);
  Program& program = program_for(source);
  auto found = program.kernels.find(kernel_name);
  if (found != program.kernels.end()) return found->second;
  cl_int status = CL_SUCCESS;
  cl_kernel kernel = clCreateKernel(program.program, kernel_name.c_str(), &status);
  check(status, fmt::format("clCreateKernel '{}'", kernel_name));
  return program.kernels.emplace(kernel_name, kernel).first->second;
}

const OpenCLDevice& open_device(const std::string& selector) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<OpenCLDevice>> opened;
  std::lock_guard lock(mutex);
  const std::vector<DeviceInfo> devices = list_devices();
  if (devices.empty()) {
    fail("ops.backend = \"opencl\": no OpenCL device found (no platform reports one; on a CPU, Debian's "
         "pocl-opencl-icd provides one)");
  }
  const DeviceInfo* chosen = nullptr;
  if (selector.empty()) {
    chosen = &devices.front();
  } else if (std::all_of(selector.begin(), selector.end(), [](unsigned char c) { return std::isdigit(c); })) {
    const size_t index = std::stoul(selector);
    if (index >= devices.size()) {
      fail("ops.device = \"{}\": there are {} OpenCL devices (0 to {}; `strata topo` lists them)", selector,
           devices.size(), devices.size() - 1);
    }
    chosen = &devices[index];
  } else {
    for (const DeviceInfo& info : devices) {
      if (lower(info.name).find(lower(selector)) != std::string::npos ||
          lower(info.platform).find(lower(selector)) != std::string::npos) {
        chosen = &info;
        break;
      }
    }
    if (chosen == nullptr) {
      std::string known;
      for (const DeviceInfo& info : devices) known += fmt::format("{}{}: {}", known.empty() ? "" : ", ", info.index, info.name);
      fail("ops.device = \"{}\" names no OpenCL device (found {})", selector, known);
    }
  }
  auto& device = opened[chosen->index];
  if (!device) device = std::make_unique<OpenCLDevice>(*chosen);
  return *device;
}

const OpenCLDevice& device_of(const Tensor& tensor) {
  const auto* device = dynamic_cast<const OpenCLDevice*>(&tensor.device());
  if (device == nullptr) fail("an OpenCL kernel was given a tensor on device '{}'", tensor.device().name());
  return *device;
}

}  // namespace strata::opencl
