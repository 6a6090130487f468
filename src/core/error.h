#pragma once
// One exception type for every user-facing failure: the message must name the
// file, key or tensor at fault, so callers only add context, never rephrase.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Internal invariants (programming errors), distinct from bad user input.
#define STRATA_CHECK(cond, ...)                                                   \
  do {                                                                            \
    if (!(cond)) ::strata::fail("internal check failed: {} ({}:{}): {}", #cond, \
                                __FILE__, __LINE__, fmt::format(__VA_ARGS__));  \
  } while (0)

}  // namespace strata
