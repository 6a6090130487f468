#include "planner/selective_comm.h"

namespace strata {

std::vector<CommWork> recomputed_collectives(const SegmentComm& layer, SelectivePolicy policy) {
  std::vector<CommWork> redone;
  if (policy != SelectivePolicy::AlternateGemms) return redone;
  for (const CommWork& call : layer.forward) {
    if (call.pattern != CommPattern::ReduceScatter) redone.push_back(call);
  }
  return redone;
}

}  // namespace strata
