#pragma once
// ZeRO's split of the optimizer's work over the data-parallel ranks: rank r
// owns block r of every gradient bucket (GradientBuckets' layout, padded at
// the end). It keeps AdamW's moments and updates the parameters for those
// elements only, reading the gradients the reduce-scatter left in its shard
// buffers, then the ranks all-gather the updated parameters. A block may cut
// through a parameter: the owned part of each parameter is one contiguous
// range of its elements.
#include <cstdint>
#include <vector>

#include "parallel/data_parallel.h"
#include "parallel/gradient_buckets.h"

namespace strata {

// Elements [begin, begin + length) of parameter `parameter` (flattened).
struct ParameterRange {
  size_t parameter = 0;
  int64_t begin = 0;
  int64_t length = 0;
};

class ZeroPartition {
 public:
  // Every element owned by the single rank of a one-rank layout (ZeRO-0 too).
  static std::vector<ParameterRange> whole(const std::vector<Shape>& shapes);
  // Flat views of `grads` (one per parameter) over `ranges`.
  static std::vector<Tensor> gradients_of(const std::vector<Tensor>& grads, const std::vector<ParameterRange>& ranges);

  ZeroPartition(GradientBuckets& buckets, int rank);

  // The ranges this rank updates, bucket by bucket.
  const std::vector<ParameterRange>& owned() const { return owned_; }
  // Their summed gradients: flat views into the buckets' shard buffers, one per owned range.
  const std::vector<Tensor>& gradients() const { return gradients_; }
  // Copies every rank's updated ranges into every rank's parameters.
  void all_gather_parameters(DataParallel& parallel, std::vector<Tensor>& parameters);

 private:
  const GradientBuckets& buckets_;
  std::vector<ParameterRange> owned_;
  std::vector<Tensor> gradients_;
  int rank_ = 0;
  Tensor send_, receive_;  // reused across steps: the largest block and padded bucket
};

}  // namespace strata
