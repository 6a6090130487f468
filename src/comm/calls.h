#pragma once
// Internal: the coroutine behind each public collective call. It runs the
// call check (before or alongside the call, see CallCheck), prepares fp32 working buffers for
// reductions, then runs the chosen algorithm.
#include <memory>

#include "comm/algorithms.h"
#include "comm/group_state.h"

namespace strata::comm {

struct CallSpec {
  Collective op = Collective::AllReduce;
  size_t count = 0;  // per the public call's own convention
  DType dtype = DType::F32;
  ReduceOp reduce = ReduceOp::Sum;
  int root = 0;
  Algorithm algorithm = Algorithm::Ring;
  Algorithm across = Algorithm::Ring;  // hierarchical: the all-reduce between nodes
  bool barrier = false;
  // all_to_all(_v): the blocks (count is all_to_all's block; 0 for all_to_all_v,
  // whose counts differ by rank and are checked by the data paths instead).
  std::shared_ptr<const ExchangeLayout> layout;
};

std::string describe_call(const CallSpec& spec);

// Whether the call runs a one-host algorithm over the group's shared segment
// (shm, the direct reads, the one-host pairwise exchange): it then takes its
// turn on the segment and compares the call's fingerprint there, beside its
// data. A barrier, or a call that moves nothing, runs no such algorithm.
bool runs_on_segment(const GroupState& group, const CallSpec& spec);  // "all_reduce(count 10, f32, sum, ring)"

Task collective_call(Context ctx, GroupState* group, CallSpec spec, const void* in, void* out);

}  // namespace strata::comm
