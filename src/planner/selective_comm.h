#pragma once
// The tensor-parallel collectives of a layer's forward pass that selective recomputation runs
// again in backward.
//
// Megatron's policy (the attention core) redoes no collective. torchtitan's per-op policy saves
// the outputs of the ops in its save list and redoes every other op of the block, collectives
// included: the list names the reduce-scatter ("communication ops whose outputs should be saved
// to avoid re-communication") but not the all-gather or all-reduce, so sequence parallelism's
// all-gathers in front of attention and the MLP run again (torchtitan
// torchtitan/models/llama3/parallelize_llama.py `_save_list` at 820504e; the compiled path too:
// PyTorch's partitioner treats PREFER_RECOMPUTE as must_recompute).
#include <vector>

#include "planner/model_comm.h"
#include "planner/workload.h"

namespace strata {

std::vector<CommWork> recomputed_collectives(const SegmentComm& layer, SelectivePolicy policy);

}  // namespace strata
