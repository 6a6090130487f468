#pragma once
// The router's discrete decisions, written once for every backend's kernels: which k experts a token
// picks from its scores, and the dispatch plan that sorts the assignments by expert (moe_route's
// summary, ops/moe_ops.cpp).
#include <cstdint>

namespace strata {

// experts[0..k) = the indices of the k highest of scores[0..count), highest first, a tie going to the
// lower index (a NaN score counts as lowest). Insertion into a short sorted list: k is small.
template <typename Score>
void choose_top_k(const Score* scores, int64_t count, int64_t k, int32_t* experts) {
  int64_t chosen = 0;
  for (int64_t e = 0; e < count; ++e) {
    const Score score = scores[e];
    if (score != score) continue;  // NaN
    int64_t at = chosen < k ? chosen : k;
    while (at > 0 && scores[experts[at - 1]] < score) --at;  // strict: an equal score stays ahead
    if (at >= k) continue;
    for (int64_t i = (chosen < k ? chosen : k - 1); i > at; --i) experts[i] = experts[i - 1];
    experts[at] = static_cast<int32_t>(e);
    if (chosen < k) ++chosen;
  }
  // Only NaN scores left: take the lowest unchosen indices, so every token still has k experts.
  for (int32_t e = 0; chosen < k; ++e) {
    bool taken = false;
    for (int64_t i = 0; i < chosen; ++i) taken = taken || experts[i] == e;
    if (!taken) experts[chosen++] = e;
  }
}

// From experts [assignments] (token t's j-th choice at t*k + j, each in [0, num_experts)): rows
// [assignments] = each assignment's row in the buffer sorted by expert then assignment, -1 past
// `capacity` per expert (0: no limit); group_sizes [num_experts] = rows kept per expert; routed
// [num_experts] = assignments per expert before dropping. Returns the number of dropped assignments.
int64_t plan_dispatch(const int32_t* experts, int64_t assignments, int64_t num_experts, int64_t capacity,
                      int32_t* rows, int32_t* group_sizes, int64_t* routed);

}  // namespace strata
