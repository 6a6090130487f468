#include "backends/backends.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <mutex>

#include "backends/cpu/cpu_kernels.h"
#include "backends/opencl/opencl_device.h"
#include "backends/opencl/opencl_kernels.h"
#include "backends/planted_fault.h"
#include "backends/ref/ref_kernels.h"

namespace strata {

namespace {

std::vector<std::unique_ptr<Backend>>& all_backends() {
  static std::vector<std::unique_ptr<Backend>> backends = [] {
    std::vector<std::unique_ptr<Backend>> built;
    built.push_back(std::make_unique<Backend>("ref"));
    register_ref_kernels(*built.back());
    built.push_back(std::make_unique<Backend>("cpu"));
    register_cpu_kernels(*built.back());
    plant_test_fault(*built.back());  // a test-only switch: nothing unless STRATA_TEST_PLANT_FAULT is set
    return built;
  }();
  return backends;
}

constexpr const char* kOpenCL = "opencl";

// One opencl backend per device, by the device's index.
const Backend& opencl_backend(const std::string& selector) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<Backend>> by_device;
  const opencl::OpenCLDevice& device = opencl::open_device(selector);
  std::lock_guard lock(mutex);
  auto& backend = by_device[device.info().index];
  if (!backend) {
    backend = std::make_unique<Backend>(kOpenCL, device);
    register_opencl_kernels(*backend);
  }
  return *backend;
}

}  // namespace

const Backend& get_backend(const std::string& name, const std::string& device) {
  if (name == kOpenCL) return opencl_backend(device);
  for (const auto& backend : all_backends()) {
    if (backend->name() != name) continue;
    if (!device.empty()) fail("ops.device = \"{}\": backend '{}' runs on the host and has no device to choose", device, name);
    return *backend;
  }
  fail("unknown backend '{}' (known: {})", name, fmt::join(backend_names(), ", "));
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& backend : all_backends()) names.push_back(backend->name());
  names.push_back(kOpenCL);
  return names;
}

void register_backend(std::unique_ptr<Backend> backend) {
  for (const std::string& known : backend_names()) {
    if (known == backend->name()) fail("a backend named '{}' is already registered", backend->name());
  }
  all_backends().push_back(std::move(backend));
}

std::unique_ptr<Dispatcher> make_dispatcher(const std::string& name, FallbackPolicy policy,
                                            const std::string& device) {
  return std::make_unique<Dispatcher>(get_backend(name, device), get_backend("ref"), policy);
}

}  // namespace strata
