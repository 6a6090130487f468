#pragma once
// The built-in backends: `ref` (plain loops, wide accumulation: the golden
// model) and `cpu` (the fast one), on the host, and `opencl`, on an OpenCL
// device (one backend object per device, made when first asked for).
#include <memory>
#include <string>
#include <vector>

#include "ops/dispatcher.h"

namespace strata {

// `device` chooses among the devices of a backend that has several (ops.device: for opencl an index
// or a name substring, "" the first); host backends take "" only. Throws listing the known names.
const Backend& get_backend(const std::string& name, const std::string& device = "");
std::vector<std::string> backend_names();
// Adds a backend beside the built-in ones under its own (new) name, for `ops.backend` and every
// lookup after it (a test's instrumented backend; register before any thread looks one up).
void register_backend(std::unique_ptr<Backend> backend);

// A dispatcher for `name` (on `device`) that falls back to `ref`.
std::unique_ptr<Dispatcher> make_dispatcher(const std::string& name, FallbackPolicy policy,
                                            const std::string& device = "");

}  // namespace strata
