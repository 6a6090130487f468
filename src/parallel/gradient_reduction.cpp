#include "parallel/gradient_reduction.h"

#include "core/error.h"

namespace strata {

GradientReduction GradientReduction::choose(int degree, int64_t zero_stage, int64_t micro_batches_per_rank,
                                            const GradientBuckets& layout) {
  STRATA_CHECK(zero_stage >= 0 && zero_stage <= 2, "ZeRO stage {}", zero_stage);
  STRATA_CHECK(layout.ranks() == degree, "a bucket layout for {} ranks at degree {}", layout.ranks(), degree);
  GradientReduction reduction;
  if (degree == 1) return reduction;
  reduction.storage.shards = true;
  if (zero_stage == 0) {
    reduction.collective =
        degree == 2 ? GradientCollective::AllReduce : GradientCollective::ReduceScatterThenAllGather;
    reduction.storage.shards = degree > 2;
    return reduction;
  }
  reduction.collective = GradientCollective::ReduceScatter;
  reduction.sharded_optimizer = true;
  constexpr int kStagingBuffers = 2;
  if (zero_stage == 2 && micro_batches_per_rank == 1 &&
      kStagingBuffers * layout.largest_padded_bucket() < layout.padded_elements()) {
    reduction.storage.whole = false;
    reduction.storage.staging = kStagingBuffers;
  }
  return reduction;
}

std::string GradientReduction::describe() const {
  switch (collective) {
    case GradientCollective::None: return "gradients kept whole";
    case GradientCollective::AllReduce: return "gradients all-reduced, kept whole";
    case GradientCollective::ReduceScatterThenAllGather:
      return "gradients reduce-scattered then all-gathered (the sums ZeRO-1/2 make), kept whole";
    case GradientCollective::ReduceScatter:
      return storage.whole ? "gradients reduce-scattered; whole local accumulators, reduced blocks kept"
                           : "gradients reduce-scattered through 2 staging buckets; only this rank's blocks kept";
  }
  return "";
}

}  // namespace strata
