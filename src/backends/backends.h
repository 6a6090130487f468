#pragma once
// The built-in backends: `ref` (plain loops, wide accumulation: the golden
// model) and `cpu` (the fast one). Registered once, on first use.
#include <memory>
#include <string>
#include <vector>

#include "ops/dispatcher.h"

namespace strata {

const Backend& get_backend(const std::string& name);  // throws listing the known names
std::vector<std::string> backend_names();
// Adds a backend beside the built-in ones under its own (new) name, for `ops.backend` and every
// lookup after it (a test's instrumented backend; register before any thread looks one up).
void register_backend(std::unique_ptr<Backend> backend);

// A dispatcher for `name` that falls back to `ref`.
std::unique_ptr<Dispatcher> make_dispatcher(const std::string& name, FallbackPolicy policy);

}  // namespace strata
