#pragma once
// The message of the strata::Error an action throws, for tests of bad input.
#include <functional>
#include <string>

#include "core/error.h"

namespace strata::testing {

// "(no error)" when the action does not throw.
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace strata::testing
