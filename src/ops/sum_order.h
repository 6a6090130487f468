#pragma once
// The order kernels add their long sums in. `Permuted` is a diagnostic: a kernel that honours it computes
// the same sums in another order, so a correct run moves by rounding alone; `strata compare` re-runs a
// side with it to measure how far correct runs spread. Process-wide, like the thread count, and set by
// each run from its config (`ops.sum_order`).
#include <cstdint>
#include <string_view>

namespace strata {

enum class SumOrder { Natural, Permuted };

void set_sum_order(SumOrder order);
SumOrder sum_order();

// Where a permuted sum of `terms` terms (at least 2) starts: the terms from this point on are added first,
// then those before it. An odd point near the middle shifts every term's SIMD lane and block; halves of an
// even count could match a GEMM's own k blocks, and two block sums added the other way round give the same
// bits.
constexpr int64_t permuted_sum_start(int64_t terms) { return (terms / 2) | 1; }

// "natural" or "permuted"; anything else fails naming `key`.
SumOrder parse_sum_order(std::string_view text, std::string_view key);

}  // namespace strata
