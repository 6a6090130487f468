#include "compare/adamw_reach.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata {

double adamw_step_reach(double beta1, double beta2, int64_t update) {
  STRATA_CHECK(update >= 1, "AdamW's updates count from 1, got {}", update);
  STRATA_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "AdamW's betas must lie in [0, 1)");
  // beta1 = 0 keeps no history (the sum is its first term); beta2 = 0 forgets the second moment at once, so an
  // update of a small gradient after large ones is unbounded (the ratio, and the reach past the first, infinite).
  const double ratio = beta1 == 0 ? 0 : beta1 * beta1 / beta2;
  double sum = 0, power = 1, reach = 0;
  for (int64_t t = 1; t <= update; ++t) {
    sum += power;
    power *= ratio;
    const double corrected = (1 - beta1) * std::sqrt(1 - std::pow(beta2, static_cast<double>(t))) /
                             ((1 - std::pow(beta1, static_cast<double>(t))) * std::sqrt(1 - beta2));
    reach = std::max(reach, corrected * std::sqrt(sum));
  }
  return reach;
}

}  // namespace strata
