#pragma once
#include <cstdint>

namespace strata {

struct LrSchedule {
  double lr;
  double lr_min;
  int64_t warmup_steps;
  int64_t total_steps;

  // Step s (from 0) < warmup: lr * (s + 1) / warmup; then cosine from lr down to
  // lr_min, reached at the last step.
  double at(int64_t step) const;
};

}  // namespace strata
