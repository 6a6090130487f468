#pragma once
// Checks of a configured value that fail naming its key: the config reader's, and the parallel
// dimensions' for the parallel.* keys they declare.
#include <cmath>
#include <type_traits>

#include "core/error.h"

namespace strata {

template <typename T>
void check_finite(const char* key, T value) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) fail("key '{}' must be a finite number, got {}", key, value);
  }
}

template <typename T>
void check_positive(const char* key, T value) {
  check_finite(key, value);
  if (!(value > 0)) fail("key '{}' must be positive, got {}", key, value);
}

template <typename T>
void check_non_negative(const char* key, T value) {
  check_finite(key, value);
  if (value < 0) fail("key '{}' must be at least 0, got {}", key, value);
}

}  // namespace strata
