#include "parallel/zero_partition.h"

#include <algorithm>
#include <cstring>

namespace strata {

std::vector<ParameterRange> ZeroPartition::whole(const std::vector<Shape>& shapes) {
  std::vector<ParameterRange> ranges;
  for (size_t p = 0; p < shapes.size(); ++p) ranges.push_back({p, 0, shape_numel(shapes[p])});
  return ranges;
}

std::vector<Tensor> ZeroPartition::gradients_of(const std::vector<Tensor>& grads,
                                                const std::vector<ParameterRange>& ranges) {
  std::vector<Tensor> views;
  for (const ParameterRange& range : ranges) {
    const Tensor& grad = grads.at(range.parameter);
    views.push_back(grad.reshape({grad.numel()}).narrow(0, range.begin, range.length));
  }
  return views;
}

ZeroPartition::ZeroPartition(GradientBuckets& buckets, int rank) : buckets_(buckets), rank_(rank) {
  int64_t largest_block = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int64_t block = buckets.block(b);
    largest_block = std::max(largest_block, block);
    const int64_t own_begin = rank * block, own_end = std::min(buckets.elements(b), own_begin + block);
    for (size_t p : buckets.parameters_of(b)) {
      const int64_t offset = buckets.offset_of(p);
      const int64_t begin = std::max(own_begin, offset);
      const int64_t end = std::min(own_end, offset + buckets.elements_of(p));
      if (begin >= end) continue;
      owned_.push_back({p, begin - offset, end - begin});
      gradients_.push_back(buckets.shard(b).narrow(0, begin - own_begin, end - begin));
    }
  }
  send_ = Tensor::zeros({largest_block}, DType::F32);
  receive_ = Tensor::zeros({largest_block * buckets.ranks()}, DType::F32);
}

void ZeroPartition::all_gather_parameters(DataParallel& parallel, std::vector<Tensor>& parameters) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const int64_t block = buckets_.block(b), own_begin = rank_ * block;
    float* send = send_.data<float>();
    float* receive = receive_.data<float>();
    for (size_t p : buckets_.parameters_of(b)) {
      const int64_t offset = buckets_.offset_of(p), size = parameters[p].numel();
      const int64_t begin = std::max(own_begin, offset), end = std::min(own_begin + block, offset + size);
      if (begin >= end) continue;
      std::memcpy(send + (begin - own_begin), parameters[p].data<float>() + (begin - offset),
                  static_cast<size_t>(end - begin) * sizeof(float));
    }
    parallel.all_gather(send, receive, static_cast<size_t>(block));
    for (size_t p : buckets_.parameters_of(b)) {
      std::memcpy(parameters[p].data<float>(), receive + buckets_.offset_of(p),
                  static_cast<size_t>(parameters[p].numel()) * sizeof(float));
    }
  }
}

}  // namespace strata
