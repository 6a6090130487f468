#include "core/median.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

double median_after_first(const std::vector<double>& values) {
  STRATA_CHECK(values.size() > 1, "{} values: nothing after the first", values.size());
  std::vector<double> steady(values.begin() + 1, values.end());
  std::nth_element(steady.begin(), steady.begin() + static_cast<std::ptrdiff_t>(steady.size() / 2), steady.end());
  return steady[steady.size() / 2];
}

}  // namespace strata
