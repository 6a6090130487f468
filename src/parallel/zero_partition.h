#pragma once
// ZeRO-1's split of the optimizer's work over the data-parallel ranks. Each
// gradient bucket is cut into `degree` equal blocks (padded at the end); rank
// r owns block r: it keeps AdamW's moments and updates the parameters for
// those elements only, then the ranks all-gather the updated parameters. A
// bucket's block may cut through a parameter: the owned part of each
// parameter is one contiguous range of its elements.
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
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

  ZeroPartition(const GradientBuckets& buckets, const std::vector<Shape>& shapes, int rank, int degree);

  // The ranges this rank updates, bucket by bucket.
  const std::vector<ParameterRange>& owned() const { return owned_; }
  // Copies every rank's updated ranges into every rank's parameters.
  void all_gather_parameters(DataParallel& parallel, std::vector<Tensor>& parameters);

 private:
  struct Bucket {
    std::vector<size_t> members;  // parameters in bucket order
    int64_t block = 0;            // elements per rank (the bucket padded to degree * block)
    std::vector<int64_t> member_offsets;
  };
  std::vector<Bucket> buckets_;
  std::vector<int64_t> sizes_;
  std::vector<ParameterRange> owned_;
  int rank_ = 0, degree_ = 1;
  Tensor send_, receive_;  // reused across steps: the largest block and bucket
};

}  // namespace strata
