#include "backends/backends.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cpu/cpu_kernels.h"
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
    return built;
  }();
  return backends;
}

}  // namespace

const Backend& get_backend(const std::string& name) {
  for (const auto& backend : all_backends()) {
    if (backend->name() == name) return *backend;
  }
  fail("unknown backend '{}' (known: {})", name, fmt::join(backend_names(), ", "));
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& backend : all_backends()) names.push_back(backend->name());
  return names;
}

void register_backend(std::unique_ptr<Backend> backend) {
  for (const auto& known : all_backends()) {
    if (known->name() == backend->name()) fail("a backend named '{}' is already registered", backend->name());
  }
  all_backends().push_back(std::move(backend));
}

std::unique_ptr<Dispatcher> make_dispatcher(const std::string& name, FallbackPolicy policy) {
  return std::make_unique<Dispatcher>(get_backend(name), get_backend("ref"), policy);
}

}  // namespace strata
