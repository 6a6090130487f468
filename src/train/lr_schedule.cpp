#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace strata {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  int64_t decay_steps = total_steps - warmup_steps - 1;
  if (decay_steps <= 0) return lr;
  double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  return lr_min + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - lr_min);
}

}  // namespace strata
