#include "ops/moe_dispatch.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace strata {

int64_t plan_dispatch(const int32_t* experts, int64_t assignments, int64_t num_experts, int64_t capacity,
                      int32_t* rows, int32_t* group_sizes, int64_t* routed) {
  std::fill(routed, routed + num_experts, int64_t{0});
  for (int64_t a = 0; a < assignments; ++a) {
    STRATA_CHECK(experts[a] >= 0 && experts[a] < num_experts, "expert {} of assignment {} is outside [0, {})",
                 experts[a], a, num_experts);
    ++routed[experts[a]];
  }
  // A counting sort, stable in the assignment order: expert e's rows are [next_row[e], end_row[e]).
  std::vector<int64_t> next_row(static_cast<size_t>(num_experts)), end_row(static_cast<size_t>(num_experts));
  int64_t offset = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t kept = capacity > 0 ? std::min(routed[e], capacity) : routed[e];
    group_sizes[e] = static_cast<int32_t>(kept);
    next_row[static_cast<size_t>(e)] = offset;
    offset += kept;
    end_row[static_cast<size_t>(e)] = offset;
  }
  int64_t dropped = 0;
  for (int64_t a = 0; a < assignments; ++a) {
    const auto e = static_cast<size_t>(experts[a]);
    if (next_row[e] == end_row[e]) {
      rows[a] = -1;
      ++dropped;
      continue;
    }
    rows[a] = static_cast<int32_t>(next_row[e]++);
  }
  return dropped;
}

}  // namespace strata
