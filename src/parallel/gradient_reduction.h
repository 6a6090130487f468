#pragma once
// How a step's gradients are combined over the data-parallel ranks, and so
// which gradient buffers a rank keeps, from the ZeRO stage, the degree and
// the micro-batches each rank runs per step.
//
// ZeRO-1 and ZeRO-2 reduce-scatter each bucket: rank r receives the sum of
// block r only. Every ZeRO stage must give the same bits, but with three or
// more ranks the order in which contributions are added depends on the
// collective's algorithm, so ZeRO-0 then sums with the same reduce-scatter
// and all-gathers the blocks; two contributions add in one rounding either
// way, so two ranks keep the plain all-reduce. ZeRO-2 keeps no whole
// gradient buffers when a rank runs one micro-batch per step (buckets pass
// through two reused staging buffers), unless two buffers of the largest
// bucket would not be smaller than all of them; with more micro-batches,
// whole buffers accumulate them, since summing over ranks every micro-batch
// would add in another order than ZeRO-0 and ZeRO-1 do.
#include <cstdint>
#include <string>

#include "parallel/gradient_buckets.h"

namespace strata {

enum class GradientCollective { None, AllReduce, ReduceScatter, ReduceScatterThenAllGather };

struct GradientReduction {
  GradientCollective collective = GradientCollective::None;
  GradientStorage storage;
  bool sharded_optimizer = false;  // the optimizer updates this rank's blocks only (ZeRO-1, ZeRO-2)

  // `layout`: the buckets' layout for `degree` ranks (its storage does not matter).
  static GradientReduction choose(int degree, int64_t zero_stage, int64_t micro_batches_per_rank,
                                  const GradientBuckets& layout);
  std::string describe() const;  // for the start-up line
};

}  // namespace strata
