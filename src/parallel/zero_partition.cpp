#include "parallel/zero_partition.h"

#include <algorithm>
#include <cstring>

namespace strata {

std::vector<ParameterRange> ZeroPartition::whole(const std::vector<Shape>& shapes) {
  std::vector<ParameterRange> ranges;
  for (size_t p = 0; p < shapes.size(); ++p) ranges.push_back({p, 0, shape_numel(shapes[p])});
  return ranges;
}

ZeroPartition::ZeroPartition(const GradientBuckets& buckets, const std::vector<Shape>& shapes, int rank, int degree)
    : rank_(rank), degree_(degree) {
  for (const Shape& shape : shapes) sizes_.push_back(shape_numel(shape));
  int64_t largest_block = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket bucket;
    bucket.members = buckets.parameters_of(b);
    int64_t total = 0;
    for (size_t p : bucket.members) {
      bucket.member_offsets.push_back(total);
      total += sizes_[p];
    }
    bucket.block = (total + degree - 1) / degree;
    largest_block = std::max(largest_block, bucket.block);
    const int64_t own_begin = rank * bucket.block, own_end = std::min(total, own_begin + bucket.block);
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      const int64_t begin = std::max(own_begin, bucket.member_offsets[i]);
      const int64_t end = std::min(own_end, bucket.member_offsets[i] + sizes_[bucket.members[i]]);
      if (begin < end) owned_.push_back({bucket.members[i], begin - bucket.member_offsets[i], end - begin});
    }
    buckets_.push_back(std::move(bucket));
  }
  send_ = Tensor::zeros({largest_block}, DType::F32);
  receive_ = Tensor::zeros({largest_block * degree}, DType::F32);
}

void ZeroPartition::all_gather_parameters(DataParallel& parallel, std::vector<Tensor>& parameters) {
  for (const Bucket& bucket : buckets_) {
    float* send = send_.data<float>();
    float* receive = receive_.data<float>();
    const int64_t own_begin = rank_ * bucket.block;
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      const int64_t offset = bucket.member_offsets[i], size = sizes_[bucket.members[i]];
      const int64_t begin = std::max(own_begin, offset), end = std::min(own_begin + bucket.block, offset + size);
      if (begin >= end) continue;
      std::memcpy(send + (begin - own_begin), parameters[bucket.members[i]].data<float>() + (begin - offset),
                  static_cast<size_t>(end - begin) * sizeof(float));
    }
    parallel.all_gather(send, receive, static_cast<size_t>(bucket.block));
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      std::memcpy(parameters[bucket.members[i]].data<float>(), receive + bucket.member_offsets[i],
                  static_cast<size_t>(sizes_[bucket.members[i]]) * sizeof(float));
    }
  }
}

}  // namespace strata
