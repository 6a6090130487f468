#pragma once
// Gradient accumulators laid out in a few flat f32 buffers ("buckets") of
// about `bucket_bytes` each, so that one collective reduces many small
// tensors at once (as PyTorch DDP's buckets). Parameters are assigned in
// reverse order, the order the backward pass finishes their gradients, so
// the first bucket is the first one complete. A parameter larger than the
// bucket size gets a bucket of its own.
#include <cstddef>
#include <vector>

#include "core/tensor.h"

namespace strata {

class GradientBuckets {
 public:
  GradientBuckets(const std::vector<Shape>& parameter_shapes, size_t bucket_bytes);

  // One view per parameter (its shape, f32) into its bucket; in parameter order.
  std::vector<Tensor>& grads() { return grads_; }
  size_t size() const { return buckets_.size(); }
  Tensor& bucket(size_t index) { return buckets_.at(index); }  // flat [n] f32
  // The parameters of a bucket, in the order they lie in it.
  const std::vector<size_t>& parameters_of(size_t index) const { return members_.at(index); }

 private:
  std::vector<Tensor> buckets_;
  std::vector<std::vector<size_t>> members_;
  std::vector<Tensor> grads_;
};

}  // namespace strata
