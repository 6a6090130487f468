#pragma once
// How the keys and values of context parallelism's attention reach every rank of its group, per layer and
// micro-batch, priced beside the attention blocks they run with (context_parallel_planning.cpp's dimension):
// Transformer Engine's point-to-point ring, as Megatron-Core runs it, and the two rotations of PyTorch's
// context_parallel (torch.distributed.tensor.experimental, as torchtitan runs it): one all-gather of K/V, or a
// K/V permutation per step; both send the K/V gradients home one rank per step in fp32.
#include "planner/plan_dimension.h"

namespace strata {

// One layer's exchange in a micro-batch: what runs past the attention blocks (`exposed`), all its transfers'
// time, and whether selective recomputation redoes the forward's (it redoes the attention core).
struct KeyValueExchange {
  CommSeconds exposed;
  double forward_transfers = 0, backward_transfers = 0;
  bool redone_selectively = false;
};

KeyValueExchange key_value_exchange(const CommInput& input, ContextParallelExchange exchange);

}  // namespace strata
