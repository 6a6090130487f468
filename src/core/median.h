#pragma once
// The figure Strata reports for per-step timings: the median of the steps after the first (the
// first pays first-touch costs and warm-up), the upper one of an even count.
#include <vector>

namespace strata {

// `values` must hold at least two.
double median_after_first(const std::vector<double>& values);

}  // namespace strata
