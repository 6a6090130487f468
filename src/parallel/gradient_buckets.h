#pragma once
// Where a rank keeps a step's gradients. Parameters are laid out in a few
// flat f32 buckets of about `bucket_bytes` each, so that one collective
// reduces many small tensors at once (as PyTorch DDP's buckets), in reverse
// order, the order the backward pass finishes them, so the first bucket is
// the first complete. A parameter larger than the bucket size gets a bucket
// of its own. Each bucket is padded with zeros to a multiple of the ranks,
// and rank r's block of bucket b is [r * block(b), (r + 1) * block(b)): what a
// reduce-scatter leaves on rank r, and what ZeRO's rank r updates.
#include <cstddef>
#include <vector>

#include "core/tensor.h"

namespace strata {

// Which buffers a rank needs (GradientReduction decides); none at all is the
// layout alone.
struct GradientStorage {
  bool whole = true;    // every gradient, in whole buckets (accumulated over micro-batches)
  bool shards = false;  // this rank's block of every bucket, as summed over the ranks
  int staging = 0;      // without whole buckets: buffers of the largest bucket, reused, that buckets pass through
  const Device* device = &host_device();  // where the buffers live: the backend's device
  static GradientStorage layout_only() { return {.whole = false}; }
};

class GradientBuckets {
 public:
  // `alone`: parameters that get a bucket of their own (the tied embedding on
  // two pipeline stages, so its ZeRO blocks lie alike on both).
  GradientBuckets(const std::vector<Shape>& parameter_shapes, size_t bucket_bytes, int ranks = 1,
                  GradientStorage storage = {}, const std::vector<size_t>& alone = {});

  size_t size() const { return members_.size(); }
  int ranks() const { return ranks_; }
  // The parameters of a bucket, in the order they lie in it.
  const std::vector<size_t>& parameters_of(size_t bucket) const { return members_.at(bucket); }
  int64_t elements(size_t bucket) const { return elements_.at(bucket); }  // without the padding
  int64_t block(size_t bucket) const { return blocks_.at(bucket); }       // padded size / ranks
  int64_t padded_elements() const;  // of all buckets together
  int64_t largest_padded_bucket() const;
  bool whole() const { return !buckets_.empty(); }
  int64_t offset_of(size_t parameter) const { return offsets_.at(parameter); }  // within its bucket
  int64_t elements_of(size_t parameter) const { return shape_numel(shapes_.at(parameter)); }

  // Whole storage: one view per parameter (its shape) into its bucket, and the buckets (flat, padded).
  std::vector<Tensor>& grads() { return grads_; }
  Tensor& bucket(size_t index) { return buckets_.at(index); }
  // Shard storage: this rank's block of a bucket, flat [block(b)].
  Tensor& shard(size_t index) { return shards_.at(index); }
  // Staging storage: a buffer holding any one padded bucket.
  Tensor& staging(int slot) { return staging_.at(static_cast<size_t>(slot)); }
  int staging_slots() const { return static_cast<int>(staging_.size()); }
  // Parameter p's gradient inside `buffer`, a whole or staged copy of p's bucket.
  Tensor view(const Tensor& buffer, size_t parameter) const;

  size_t bytes() const;  // every buffer this rank holds

 private:
  int ranks_ = 1;
  std::vector<Shape> shapes_;
  std::vector<std::vector<size_t>> members_;
  std::vector<int64_t> elements_, blocks_, offsets_;
  std::vector<Tensor> buckets_, grads_, shards_, staging_;
};

}  // namespace strata
